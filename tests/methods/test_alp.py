"""ALP: the solve-rate-scaled penalty by hand, its floor, and its monotonicity."""

import pytest
import torch
from hypothesis import given

from dynashape.core.groups import Groups
from dynashape.methods.alp import AlpConfig, alp_reward
from strategies import batches


def test_hand_worked():
    # g0: 4 rollouts, 3 correct: p = 3/4, K = 4 -> scale 0.75; g1: 2 rollouts, none correct: scale max(0, 1/2)
    ids = torch.tensor([0, 0, 0, 0, 1, 1])
    correct = torch.tensor([1, 1, 1, 0, 0, 0])
    lengths = torch.tensor([1000, 2000, 0, 4000, 1000, 3000])
    r = alp_reward(correct, lengths, Groups.from_ids(ids), beta=1e-4)
    expected = torch.tensor(
        [
            1 - 1e-4 * 1000 * 0.75,  # 0.925
            1 - 1e-4 * 2000 * 0.75,  # 0.85
            1.0,  # no tokens, no penalty
            0 - 1e-4 * 4000 * 0.75,  # -0.3
            0 - 1e-4 * 1000 * 0.5,  # -0.05: the floor 1/K for an unsolved prompt
            0 - 1e-4 * 3000 * 0.5,  # -0.15
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(r, expected)


def test_single_rollout_group_pays_the_full_rate():
    # K = 1: the floor 1/K = 1, so a lone rollout pays beta per token whether right or wrong
    r = alp_reward(torch.tensor([0, 1]), torch.tensor([100, 100]), Groups.from_ids(torch.tensor([0, 1])), beta=1e-3)
    torch.testing.assert_close(r, torch.tensor([-0.1, 0.9], dtype=torch.float64))


def test_validation():
    with pytest.raises(ValueError, match="beta"):
        AlpConfig(beta=-1.0)
    with pytest.raises(ValueError, match="rollout counts differ"):
        alp_reward(torch.ones(3), torch.ones(2), Groups.from_ids(torch.zeros(3, dtype=torch.long)))


@given(batches(max_len=8000))
def test_penalty_between_floor_and_full_rate(batch):
    g = Groups.from_ids(batch.group_ids)
    r = alp_reward(batch.correct, batch.lengths, g, beta=1e-5)
    penalty = batch.correct.double() - r
    length = batch.lengths.double()
    k = g.gather(g.counts).double()
    # beta * |y| / K <= penalty <= beta * |y|
    assert bool((penalty >= 1e-5 * length / k - 1e-12).all())
    assert bool((penalty <= 1e-5 * length + 1e-12).all())
