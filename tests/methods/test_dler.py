"""DLER: capped reward and REINFORCE++-baseline advantages, by hand; whitening properties."""

import pytest
import torch
from hypothesis import given

from dynashape.core.groups import Groups
from dynashape.methods.dler import DlerConfig, dler_advantages, dler_reward
from strategies import batches


def test_reward_hand_worked():
    r = dler_reward(torch.tensor([1, 1, 0, 1]), torch.tensor([4000, 4001, 10, 0]), max_length=4000)
    assert r.tolist() == [1.0, 0.0, 0.0, 1.0]  # at the cap passes; over the cap and wrong score 0


def test_advantages_hand_worked_sequence_whitening():
    # g0 r = 1,0,0,0 (mean 1/4): .75, -.25, -.25, -.25; g1 r = 1,1: 0, 0; g2 a single rollout r = 1 keeps 1.
    # Values .75, -.25 x3, 0 x2, 1: mu = 1/7; deviations .607143, -.392857 x3, -.142857 x2, .857143;
    # sum of squares 1.607143, / 6 = .267857; sqrt(.267857 + 1e-8) = .517549.
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1])
    a = dler_advantages(r, Groups.from_ids(ids))
    expected = torch.tensor([1.173111, -0.759072, -0.759072, -0.759072, -0.276026, -0.276026, 1.656157])
    torch.testing.assert_close(a, expected.double(), atol=2e-6, rtol=0)


def test_advantages_hand_worked_token_whitening():
    # g0 r = 1, 0 centred .5, -.5 with 1 and 3 tokens; g1 r = 1, 1 centred 0, 0 with 2 and 2 tokens.
    # 8 tokens: mu = (.5 - 1.5) / 8 = -1/8; deviations .625, -.375, .125, .125;
    # var = (1 * .390625 + 3 * .140625 + 4 * .015625) / 7 = .125; sqrt = .353553.
    ids = torch.tensor([0, 0, 1, 1])
    a = dler_advantages(torch.tensor([1.0, 0, 1, 1]), Groups.from_ids(ids), torch.tensor([1, 3, 2, 2]))
    torch.testing.assert_close(a, torch.tensor([1.767767, -1.06066, 0.353553, 0.353553]).double(), atol=2e-6, rtol=0)


def test_all_correct_batch_gives_zero():
    ids = torch.tensor([0, 0, 1, 1])
    a = dler_advantages(torch.ones(4), Groups.from_ids(ids), torch.tensor([5, 6, 7, 8]))
    assert torch.equal(a, torch.zeros(4, dtype=torch.float64))


def test_bad_inputs_raise():
    g = Groups.from_ids(torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"rewards\[1\]"):
        dler_advantages(torch.tensor([1.0, float("inf")]), g)
    with pytest.raises(ValueError, match="rollout counts differ"):
        dler_advantages(torch.tensor([1.0, 0.0]), g, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="max_length"):
        DlerConfig(max_length=0)
    with pytest.raises(ValueError, match="whiten"):
        DlerConfig(whiten="batch")


@given(batches(max_len=6000))
def test_whitened_advantages_have_zero_mean_and_unit_std(batch):
    r = dler_reward(batch.correct, batch.lengths, max_length=4000)
    g = Groups.from_ids(batch.group_ids)
    a = dler_advantages(r, g)
    assert torch.isfinite(a).all()
    if bool(a.abs().max() > 0):  # a non-constant batch of 0/1 rewards has variance >> eps
        assert abs(float(a.mean())) < 1e-9
        assert float(a.std()) == pytest.approx(1.0, abs=1e-4)
    # token whitening: zero mean over tokens (rollouts of 0 tokens get exactly 0)
    w = batch.lengths.double()
    a_tok = dler_advantages(r, g, batch.lengths)
    assert torch.equal(a_tok[w == 0], torch.zeros(int((w == 0).sum()), dtype=torch.float64))
    if float(w.sum()) > 1:
        assert abs(float((w * a_tok).sum() / w.sum())) < 1e-9
