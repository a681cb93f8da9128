"""Hand-worked values for grpo, grpo_length, gdpo and shorterbetter (baselines.md)."""

import math

import pytest
import torch

from dynashape import RolloutBatch, get_shaper
from dynashape.core.groups import Groups, group_normalize, whiten

F = torch.float64
EPS = 1e-6


def b(ids, correct, lengths, rewards=None):
    return RolloutBatch(
        group_ids=torch.tensor(ids),
        correct=torch.tensor(correct),
        lengths=torch.tensor(lengths),
        rewards=rewards,
    )


def test_grpo_on_correctness():
    out = get_shaper("grpo")(b([0, 0, 0, 1, 1], [1, 1, 0, 0, 0], [5, 5, 5, 5, 5]))
    sd = math.sqrt(1 / 3)  # {1, 1, 0}: mean 2/3, unbiased var 1/3
    expected = [(1 / 3) / (sd + EPS), (1 / 3) / (sd + EPS), (-2 / 3) / (sd + EPS), 0.0, 0.0]
    assert torch.allclose(out.advantages.double(), torch.tensor(expected, dtype=F), atol=1e-6)
    assert out.advantages.dtype == torch.float32 and out.rewards.shape == (5, 1)


def test_grpo_eps_sits_outside_the_square_root():
    # float64 all the way (group_normalize): inside vs outside the root differ by ~2e-7 here, far above 1e-12
    g = Groups.from_ids(torch.tensor([0, 0, 0]))
    got = group_normalize(torch.tensor([1.0, 1.0, 0.0], dtype=F), g, eps=EPS)
    sd = math.sqrt(1 / 3)
    outside = [(1 / 3) / (sd + EPS), (1 / 3) / (sd + EPS), (-2 / 3) / (sd + EPS)]
    inside = [(1 / 3) / math.sqrt(1 / 3 + EPS), (1 / 3) / math.sqrt(1 / 3 + EPS), (-2 / 3) / math.sqrt(1 / 3 + EPS)]
    assert got.tolist() == pytest.approx(outside, abs=1e-12)
    assert got.tolist() != pytest.approx(inside, abs=1e-12)
    # through the shaper (float32 output) with a large eps, where the two placements differ in the 2nd digit
    out = get_shaper("grpo", eps=0.1)(b([0, 0, 0], [1, 1, 0], [5, 5, 5]))
    assert out.advantages.double().tolist() == pytest.approx([(1 / 3) / (sd + 0.1)] * 2 + [(-2 / 3) / (sd + 0.1)])


def test_grpo_uses_the_single_reward_column_and_dr_grpo_only_centres():
    rewards = torch.tensor([[1.0], [-1.0], [0.5], [0.5]])
    out = get_shaper("grpo", std="none")(b([0, 0, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1], rewards))
    assert out.advantages.tolist() == [1.0, -1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="one reward column"):
        get_shaper("grpo")(b([0, 0], [1, 0], [1, 1], torch.zeros(2, 2)))


def test_grpo_length_classic_and_conditioned():
    ids, correct, lengths = [0, 0, 0], [1, 1, 0], [100, 300, 100]
    # classic T=200: r_len = [1, 0, 1]; r = [2, 1, 1]: mean 4/3, unbiased var 1/3
    out = get_shaper("grpo_length", threshold=200)(b(ids, correct, lengths))
    sd = math.sqrt(1 / 3)
    assert out.advantages.double().tolist() == pytest.approx(
        [(2 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS)], rel=1e-6
    )
    # conditioned: r_len = [1, 0, 0]; weights (0.5, 0.5): r = [1, 0.5, 0]: mean 0.5, unbiased std 0.5
    out = get_shaper("grpo_length", threshold=200, mode="conditioned", weights=(0.5, 0.5))(b(ids, correct, lengths))
    assert out.advantages.double().tolist() == pytest.approx([0.5 / (0.5 + EPS), 0.0, -0.5 / (0.5 + EPS)], rel=1e-6)


def test_gdpo_normalises_each_column_then_whitens():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 3.0]])
    ids, lengths = [0, 0, 1, 1], [2, 1, 1, 4]
    out = get_shaper("gdpo", weights=(1.0, 2.0), whiten="none")(b(ids, [1, 0, 1, 1], lengths, rewards))
    s2 = math.sqrt(2)  # any pair {x, y} has unbiased std |x - y| / sqrt(2)
    col0 = [0.5 / (s2 / 2 + EPS), -0.5 / (s2 / 2 + EPS), 0.0, 0.0]
    col1 = [-0.5 / (s2 / 2 + EPS), 0.5 / (s2 / 2 + EPS), -1.0 / (s2 + EPS), 1.0 / (s2 + EPS)]
    raw = torch.tensor([a + 2 * c for a, c in zip(col0, col1)], dtype=F)
    assert torch.allclose(out.advantages.double(), raw, atol=1e-6)
    tok = get_shaper("gdpo", weights=(1.0, 2.0))(b(ids, [1, 0, 1, 1], lengths, rewards))
    assert torch.allclose(tok.advantages.double(), whiten(raw, torch.tensor(lengths)), atol=1e-5)


def test_gdpo_needs_rewards_and_matching_weights():
    with pytest.raises(ValueError, match="needs rewards"):
        get_shaper("gdpo")(b([0, 0], [1, 0], [1, 1]))
    with pytest.raises(ValueError, match="weights has 1 entries but rewards has 2 columns"):
        get_shaper("gdpo", weights=(1.0,))(b([0, 0], [1, 0], [1, 1], torch.zeros(2, 2)))


def test_shorterbetter_hand_worked():
    # group 0: SOL = shortest correct = 100; r = [2, 2 - 0.1, 0 - 0.2] = [2, 1.9, -0.2]
    # group 1: none correct -> SOL = mean length 200; r = [-0.1, -0.1] constant -> 0
    out = get_shaper("shorterbetter")(b([0, 0, 0, 1, 1], [1, 1, 0, 0, 0], [100, 200, 300, 100, 300]))
    r = [2.0, 1.9, -0.2]
    m = sum(r) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in r) / 2)
    expected = [(x - m) / (sd + EPS) for x in r] + [0.0, 0.0]
    assert out.advantages.double().tolist() == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert out.rewards[:, 0].double().tolist() == pytest.approx([2.0, 1.9, -0.2, -0.1, -0.1])


@pytest.mark.parametrize("name", ["grpo_length", "shorterbetter"])
def test_shapers_refuse_rewards_they_would_ignore(name):
    with pytest.raises(ValueError, match="does not use rewards"):
        get_shaper(name)(b([0, 0], [1, 0], [1, 1], torch.zeros(2, 1)))


@pytest.mark.parametrize("name", ["grpo", "grpo_length", "shorterbetter"])
def test_stateless_shapers_have_empty_state(name):
    s = get_shaper(name)
    assert s.state_dict() == {}
    with pytest.raises(ValueError, match="stateless"):
        s.load_state_dict({"ema": 1})
