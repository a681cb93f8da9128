"""GFPO: the keep mask and advantages by hand, ties, adaptive k across steps, and properties."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.core.groups import Groups
from dynashape.methods.gfpo import AdaptiveKeep, GfpoConfig, gfpo_advantages, gfpo_keep_mask
from strategies import batches

IDS = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1])
REWARDS = torch.tensor([1.0, 1, 0, 1, 0, 1, 1, 0, 0])
LENGTHS = torch.tensor([300, 100, 50, 200, 400, 100, 500, 10, 20])


def test_shortest_k_hand_worked():
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=3, by="length")
    # g0 keeps the 3 shortest: rows 2 (50), 1 (100), 5 (100); rewards 0, 1, 1: mean 2/3, Bessel var 1/3,
    # std .577350 -> -2/3 / (.577350 + 1e-4) = -1.154501, 1/3 / .577450 = .577250.
    # g1 has 3 rows: all kept; rewards 1, 0, 0 -> 1.154501, -.577250, -.577250.
    assert out.keep.tolist() == [False, True, True, False, False, True, True, True, True]
    expected = torch.tensor([0, 0.577250, -1.154501, 0, 0, 0.577250, 1.154501, -0.577250, -0.577250])
    torch.testing.assert_close(out.advantages, expected.double(), atol=2e-6, rtol=0)
    assert out.keep_per_group.tolist() == [3, 3]
    assert out.metrics == {"gfpo/kept_fraction": pytest.approx(6 / 9)}


def test_ties_go_to_the_earlier_row():
    # k = 2 in g0: row 2 (50), then rows 1 and 5 tie at 100: row 1 comes first in the batch and is kept
    mask = gfpo_keep_mask(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=2)
    assert mask.tolist() == [False, True, True, False, False, False, False, True, True]


def test_reward_per_token_hand_worked():
    # g0 r / |y|: 1/300, 1/100, 0, 1/200, 0, 1/100 -> the best two are rows 1 and 5 (both reward 1: advantage 0)
    # g1: 1/500, 0, 0 -> row 6, then row 7 (tie with 8 at 0: the earlier wins)
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=2, by="reward_per_token")
    assert out.keep.tolist() == [False, True, False, False, False, True, True, True, False]
    # g1 kept rewards 1, 0: mean .5, std sqrt(.5) = .707107 -> +-.5 / .707207 = +-.707007
    expected = torch.tensor([0, 0, 0, 0, 0, 0, 0.707007, -0.707007, 0])
    torch.testing.assert_close(out.advantages, expected.double(), atol=2e-6, rtol=0)


def test_per_group_k_and_single_kept_row():
    # Groups are numbered by sorted id: g0 keeps 1 (advantage 0, a set of one), g1 keeps 5 > size 3 (all)
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=torch.tensor([1, 5]))
    assert out.keep.tolist() == [False, False, True, False, False, False, True, True, True]
    assert out.advantages[:6].abs().max() == 0


def test_zero_length_rows_are_not_divided_by_zero():
    out = gfpo_advantages(
        torch.tensor([1.0, 1.0]),
        torch.tensor([0, 5]),
        Groups.from_ids(torch.tensor([0, 0])),
        keep=1,
        by="reward_per_token",
    )
    assert out.keep.tolist() == [True, False]  # 1 / max(0, 1) = 1 beats 1 / 5


def test_validation():
    g = Groups.from_ids(IDS)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(REWARDS, LENGTHS, g, keep=0)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(REWARDS, LENGTHS, g, keep=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="by"):
        GfpoConfig(by="random")
    with pytest.raises(ValueError, match="adaptive_keep"):
        GfpoConfig(adaptive_keep=(4, 6, 8))
    with pytest.raises(ValueError, match=r"rewards\[0\]"):
        gfpo_keep_mask(torch.tensor([float("nan")] * 9), LENGTHS, g, keep=2)
    with pytest.raises(ValueError, match="adaptive_keep"):
        AdaptiveKeep(GfpoConfig())


def test_adaptive_keep_quartiles_hand_worked():
    part = AdaptiveKeep(GfpoConfig(adaptive_keep=(4, 6, 8, 8)))
    # 4 groups with mean rewards 0, 1/2, 3/4, 1 (ids 0..3, two rows each)
    ids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    r = torch.tensor([0.0, 0, 0, 1, 0.5, 1, 1, 1])
    k = part.keep_for(r, Groups.from_ids(ids))
    # history 0, .5, .75, 1: quantiles (linear) q25 = .375, q50 = .625, q75 = .8125
    # 0 <= q25 -> hardest (8); .5 in (q25, q50] -> 8; .75 in (q50, q75] -> 6; 1 > q75 -> easiest (4)
    assert k.tolist() == [8, 8, 6, 4]
    assert part.state_dict() == {"history": [0.0, 0.5, 0.75, 1.0]}


def test_adaptive_keep_restored_equals_uninterrupted():
    cfg = GfpoConfig(adaptive_keep=(4, 6, 8, 8), history=6)
    steps = [
        (torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 0, 1, 1])),
        (torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0.0, 0, 1, 0, 1, 1])),
        (torch.tensor([5, 5, 6, 6]), torch.tensor([0.0, 1, 1, 1])),
    ]
    straight = AdaptiveKeep(cfg)
    want = [straight.keep_for(r, Groups.from_ids(i)) for i, r in steps]
    first = AdaptiveKeep(cfg)
    got = [first.keep_for(steps[0][1], Groups.from_ids(steps[0][0]))]
    resumed = AdaptiveKeep(cfg)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.keep_for(r, Groups.from_ids(i)) for i, r in steps[1:]]
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert len(resumed.history_) == 6  # 2 + 3 + 2 = 7 means, the window keeps the last 6
    assert resumed.state_dict() == straight.state_dict()
    with pytest.raises(ValueError, match="more than history"):
        resumed.load_state_dict({"history": [0.0] * 7})


@given(batches(max_len=3000, with_rewards=1), st.integers(1, 7), st.sampled_from(["length", "reward_per_token"]))
def test_properties(batch, k, by):
    g = Groups.from_ids(batch.group_ids)
    r = batch.rewards[:, 0]
    out = gfpo_advantages(r, batch.lengths, g, keep=k, by=by)
    kept_per_group = g.sum(out.keep.long())
    assert torch.equal(kept_per_group, g.counts.clamp_max(k))  # keep count = min(k, group size)
    assert torch.equal(out.advantages[~out.keep], torch.zeros(int((~out.keep).sum()), dtype=torch.float64))
    kept_mean = g.sum(torch.where(out.keep, out.advantages, 0.0)) / kept_per_group.double()
    assert bool((kept_mean.abs() < 1e-6).all())  # zero mean over each group's kept rows


@given(batches(max_len=3000, with_rewards=1), st.integers(1, 5), st.randoms(use_true_random=False))
def test_permutation_equivariance(batch, k, rnd):
    n = batch.lengths.shape[0]
    # distinct lengths: with ties the earlier row wins, which a permutation may change
    lengths = torch.randperm(n, generator=torch.Generator().manual_seed(rnd.randint(0, 2**31))) * 7
    perm = list(range(n))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    r = batch.rewards[:, 0]
    base = gfpo_advantages(r, lengths, Groups.from_ids(batch.group_ids), keep=k)
    moved = gfpo_advantages(r[p], lengths[p], Groups.from_ids(batch.group_ids[p]), keep=k)
    assert torch.equal(moved.keep, base.keep[p])
    torch.testing.assert_close(moved.advantages, base.advantages[p], atol=1e-12, rtol=0)
