"""Legal edge cases across the field's methods: all-correct and all-wrong batches, single-rollout groups,
lengths beyond the caps. Each expectation follows the method's formula, worked by hand."""

import torch

from dynashape.core.groups import Groups
from dynashape.methods import (
    aalc_reward,
    adlp_reward,
    alp_reward,
    dler_advantages,
    dler_reward,
    gfpo_advantages,
    l1_exact_reward,
    l1_max_reward,
    laser_d_reward,
    laser_reward,
    saw_advantages,
    thinkprune_reward,
)

LENGTHS = torch.tensor([100, 5000, 300, 8000])  # two groups of two; rows 1 and 3 beyond every cap below
IDS = torch.tensor([0, 0, 1, 1])
ALL_RIGHT = torch.ones(4, dtype=torch.bool)
ALL_WRONG = torch.zeros(4, dtype=torch.bool)
F64 = torch.float64


def test_all_wrong_batch():
    g = Groups.from_ids(IDS)
    zeros = torch.zeros(4, dtype=F64)
    assert torch.equal(thinkprune_reward(ALL_WRONG, LENGTHS, max_length=4000), zeros)
    assert torch.equal(dler_reward(ALL_WRONG, LENGTHS), zeros)
    assert torch.equal(laser_reward(ALL_WRONG, LENGTHS, target_length=4096), zeros)
    assert torch.equal(l1_max_reward(ALL_WRONG, LENGTHS, torch.full((4,), 1000)), zeros)
    # Exact still pays the distance: -3e-4 * |1000 - l| = -.27, -1.2, -.21, -2.1
    torch.testing.assert_close(
        l1_exact_reward(ALL_WRONG, LENGTHS, torch.full((4,), 1000)), torch.tensor([-0.27, -1.2, -0.21, -2.1], dtype=F64)
    )
    # ALP: p = 0, the floor 1/K = 1/2: -1e-4 * l / 2
    torch.testing.assert_close(
        alp_reward(ALL_WRONG, LENGTHS, g, beta=1e-4), torch.tensor([-0.005, -0.25, -0.015, -0.4], dtype=F64)
    )
    torch.testing.assert_close(
        adlp_reward(ALL_WRONG, LENGTHS, lam=1e-4), torch.tensor([-0.01, -0.5, -0.03, -0.8]).double()
    )
    # AALC at A_val = 1: 1e-6 * (1 - min(1, l / 1024)) = 1e-6 * (924/1024), 0, 1e-6 * (724/1024), 0
    torch.testing.assert_close(
        aalc_reward(ALL_WRONG, LENGTHS, val_accuracy=1.0, precision="float64"),
        torch.tensor([1e-6 * 924 / 1024, 0.0, 1e-6 * 724 / 1024, 0.0], dtype=F64),
        rtol=0,
        atol=1e-18,
    )
    # the official float32 arithmetic (the default) rounds them to float32: relative 6e-8 near 1e-6
    torch.testing.assert_close(
        aalc_reward(ALL_WRONG, LENGTHS, val_accuracy=1.0),
        torch.tensor([1e-6 * 924 / 1024, 0.0, 1e-6 * 724 / 1024, 0.0], dtype=F64),
        rtol=6e-8,
        atol=0,
    )
    # every normalised advantage of a constant batch is 0
    assert torch.equal(dler_advantages(zeros, g, LENGTHS), zeros)
    assert torch.equal(gfpo_advantages(zeros, LENGTHS, g, keep=1).advantages, zeros)
    assert torch.equal(saw_advantages(torch.zeros(4, 2), g).advantages, zeros)


def test_all_correct_batch_beyond_the_caps():
    g = Groups.from_ids(IDS)
    # capped rewards: rows within the cap 1, beyond 0 (the cut answer has no parsed answer)
    assert thinkprune_reward(ALL_RIGHT, LENGTHS, max_length=4000).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert laser_reward(ALL_RIGHT, LENGTHS, target_length=4096).tolist() == [1.5, 1.0, 1.5, 1.0]
    # p = 1 everywhere: LASER-D's high bucket target applies to every row
    assert laser_d_reward(ALL_RIGHT, LENGTHS, g, targets=(1, 1, 200)).tolist() == [1.5, 1.0, 1.0, 1.0]
    # ALP: p = 1: 1 - 1e-4 * l
    torch.testing.assert_close(
        alp_reward(ALL_RIGHT, LENGTHS, g, beta=1e-4), torch.tensor([0.99, 0.5, 0.97, 0.2]).double()
    )
    # DLER: rewards 1, 0 | 1, 0 -> centred .5, -.5 | .5, -.5; token-whitened with weights 100, 5000, 300, 8000
    a = dler_advantages(dler_reward(ALL_RIGHT, LENGTHS), g, LENGTHS)
    assert bool((a[[0, 2]] > 0).all()) and bool((a[[1, 3]] < 0).all())


def test_single_rollout_groups():
    ids = torch.tensor([0, 1, 2, 3])
    g = Groups.from_ids(ids)
    correct = torch.tensor([1, 0, 1, 0])
    # K = 1: the penalty rate is 1 whatever the verdict
    torch.testing.assert_close(
        alp_reward(correct, LENGTHS, g, beta=1e-4), torch.tensor([0.99, -0.5, 0.97, -0.8], dtype=F64)
    )
    # LASER-D: p = 1 (high) or 0 (low)
    assert laser_d_reward(correct, LENGTHS, g, targets=(10, 10, 400)).tolist() == [1.5, 0.0, 1.5, 0.0]
    # DLER: lone rollouts are not centred, so the raw rewards 1, 0, 1, 0 are whitened: +-1 / sqrt(1/3 + 1e-8)
    a = dler_advantages(torch.tensor([1.0, 0, 1, 0]), g)
    torch.testing.assert_close(
        a, torch.tensor([0.866025, -0.866025, 0.866025, -0.866025], dtype=F64), atol=2e-6, rtol=0
    )
    # GFPO and SAW (library GRPO): a group of one gets advantage 0
    assert torch.equal(gfpo_advantages(correct.double(), LENGTHS, g, keep=2).advantages, torch.zeros(4, dtype=F64))
    rewards = torch.stack([correct.double(), torch.tensor([1.0, 1, 0, 1])], 1)
    assert torch.equal(saw_advantages(rewards, g, mode="grpo").advantages, torch.zeros(4, dtype=F64))
