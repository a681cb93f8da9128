"""LASER and LASER-D: rewards, buckets, the monitor's coverage and the choice of targets, all by hand."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.core.groups import Groups
from dynashape.methods.laser import (
    LaserConfig,
    LaserDConfig,
    LaserDTargets,
    choose_bucket_targets,
    difficulty_buckets,
    laser_base_score,
    laser_d_reward,
    laser_reward,
    monitor_coverage,
)


def test_laser_reward_hand_worked():
    r = laser_reward(
        torch.tensor([1, 1, 0, 1, 0]), torch.tensor([100, 5000, 100, 4096, 9000]), target_length=4096, alpha=0.5
    )
    # 1 + 0.5 (within), 1 (over), 0 (wrong, short: no bonus), 1 + 0.5 (exactly at target), 0
    assert r.tolist() == [1.5, 1.0, 0.0, 1.5, 0.0]


def test_official_base_score_hand_worked():
    # hf_math_verifier.compute_score: correct 1, wrong -0.5, unformatted -1 whatever the verdict
    correct, formatted = torch.tensor([1, 0, 1, 0]), torch.tensor([1, 1, 0, 0])
    assert laser_base_score(correct, formatted).tolist() == [1.0, -0.5, -1.0, -1.0]
    assert laser_base_score(correct).tolist() == [1.0, 0.0, 1.0, 0.0]  # no format input: the paper's 0/1
    r = laser_reward(correct, torch.tensor([100, 100, 100, 100]), target_length=4096, formatted=formatted)
    assert r.tolist() == [1.5, -0.5, -1.0, -1.0]  # the bonus only where the score is exactly 1
    with pytest.raises(ValueError, match=r"formatted\[1\]=2.0 must be 0 or 1"):
        laser_base_score(correct, torch.tensor([1, 2, 0, 0]))
    with pytest.raises(ValueError, match="base='paper' is not allowed"):
        LaserConfig(base="paper")


def test_buckets_use_the_training_comparisons():
    ids = torch.tensor([0] * 3 + [1] * 3 + [2] * 4 + [3] * 6 + [4])
    correct = torch.tensor([1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1])
    b = difficulty_buckets(correct, Groups.from_ids(ids))
    # p = 2/3 -> high (>=), 1/3 -> medium (>=), 1/4 -> low, 4/6 == 2/3 -> high, single correct rollout -> high
    assert b.tolist() == [2] * 3 + [1] * 3 + [0] * 4 + [2] * 6 + [2]


# Monitor set: A all correct (p = 1, high), B half (p = 1/2, medium), C none (p = 0, low); grid 1000/2000/3000.
MON_IDS = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
MON_CORRECT = torch.tensor([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
MON_LENGTHS = torch.tensor([500, 1500, 2500, 3500, 800, 900, 2500, 4000, 1200, 1800, 2200, 2900])
GRID = (1000, 2000, 3000)


def test_monitor_coverage_hand_worked():
    cov = monitor_coverage(MON_CORRECT, MON_LENGTHS, Groups.from_ids(MON_IDS), GRID)
    expected = torch.tensor(
        [
            [0.0, 0.5, 1.0],  # low (C): 0/4, 2/4, 4/4 responses within
            [0.5, 0.5, 0.75],  # medium (B): 2/4, 2/4, 3/4
            [0.25, 0.5, 0.75],  # high (A): 1/4, 2/4, 3/4
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(cov, expected)


def test_monitor_bands_differ_from_training_buckets_at_the_edges():
    # p = 1/3 is the monitor's low band (<= 1/3) but the training's medium bucket (>= 1/3); p = 2/3 likewise.
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    correct = torch.tensor([1, 0, 0, 1, 1, 0])
    lengths = torch.tensor([10, 10, 10, 10, 10, 10])
    cov = monitor_coverage(correct, lengths, Groups.from_ids(ids), (5, 20))
    assert cov.tolist() == [[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]  # both groups land in low and medium, none high
    assert difficulty_buckets(correct, Groups.from_ids(ids)).tolist() == [1, 1, 1, 2, 2, 2]


def test_choose_targets_floor_and_ceil():
    cov = monitor_coverage(MON_CORRECT, MON_LENGTHS, Groups.from_ids(MON_IDS), GRID)
    # n = 8: sizes low 1, medium int(8/3) = 2, high int(16/3) = 5.
    # low: int(0) = 0, int(0.5) = 0, int(1) = 1 -> 3000; medium: int(0.5 * 2) = 1 -> 1000; high: int(1.25) = 1 -> 1000
    assert choose_bucket_targets(cov, GRID) == (3000, 1000, 1000)
    # expected 2, floor: low never reaches 2 -> None; medium int(1), int(1), int(1.5) = 1 -> None;
    # high int(1.25) = 1, int(2.5) = 2 -> 2000
    assert choose_bucket_targets(cov, GRID, expected_n_correct=2) == (None, None, 2000)
    # ceil (sizes 1, ceil(8/3) = 3, ceil(16/3) = 6, no floor of the product): medium 1.5, 1.5, 2.25 -> 3000;
    # high 1.5, 3.0 -> 2000
    assert choose_bucket_targets(cov, GRID, expected_n_correct=2, round_method="ceil") == (None, 3000, 2000)


def test_laser_d_reward_hand_worked():
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0, 0])
    lengths = torch.tensor([900, 1100, 50, 2500, 10, 2999, 3001, 100, 5000])
    g = Groups.from_ids(ids)
    r = laser_d_reward(correct, lengths, g, targets=(3000, 1000, 1000), alpha=0.5)
    # g0 p = 2/3 high (T 1000): 1.5, 1, 0; g1 p = 1/2 medium (T 1000): 1 (2500 > 1000), 0;
    # g2 p = 1/2 medium too (2 of 4): 2999 and 3001 both > 1000 -> 1, 1, 0, 0
    assert r.tolist() == [1.5, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    # None = the batch's longest response (5000): every correct answer earns the bonus
    r_none = laser_d_reward(correct, lengths, g, targets=(None, None, None), alpha=0.5)
    assert r_none.tolist() == [1.5, 1.5, 0.0, 1.5, 0.0, 1.5, 1.5, 0.0, 0.0]


def test_laser_d_low_bucket_uses_its_own_target():
    ids = torch.tensor([0, 0, 0, 0])
    correct = torch.tensor([1, 0, 0, 0])  # p = 1/4: low
    r = laser_d_reward(correct, torch.tensor([2999, 1, 1, 1]), Groups.from_ids(ids), targets=(3000, 10, 10))
    assert r.tolist() == [1.5, 0.0, 0.0, 0.0]


def test_targets_part_refresh_and_restore():
    cfg = LaserDConfig(grid=GRID, initial_target=4096, refresh_every=20)
    part = LaserDTargets(cfg)
    assert part.targets_ == (4096, 4096, 4096)
    assert [part.due(s) for s in (0, 1, 19, 20, 40)] == [True, False, False, True, True]
    part.refresh(MON_CORRECT, MON_LENGTHS, MON_IDS)
    assert part.targets_ == (3000, 1000, 1000)
    assert part.state_dict() == {"targets": [3000, 1000, 1000], "refreshes": 1}
    restored = LaserDTargets(cfg)
    restored.load_state_dict(part.state_dict())
    ids = torch.tensor([0, 0, 0, 1, 1])
    correct = torch.tensor([1, 1, 0, 1, 0])
    lengths = torch.tensor([900, 1100, 50, 2500, 10])
    g = Groups.from_ids(ids)
    assert torch.equal(part.reward(correct, lengths, g), restored.reward(correct, lengths, g))
    # a second refresh where nothing qualifies falls back to None (the batch's longest response)
    part.refresh(torch.zeros(4), torch.full((4,), 9999), torch.zeros(4, dtype=torch.long))
    assert part.targets_ == (None, None, None)
    restored.load_state_dict(part.state_dict())
    assert restored.targets_ == (None, None, None) and restored.refreshes_ == 2
    part.reset()
    assert part.targets_ == (4096, 4096, 4096) and part.refreshes_ == 0


def test_bad_state_and_config_raise():
    with pytest.raises(ValueError, match="LASER-D state"):
        LaserDTargets().load_state_dict({"targets": [1, 2]})
    with pytest.raises(ValueError, match="grid"):
        LaserDConfig(grid=(2000, 1000))
    with pytest.raises(ValueError, match="round_method"):
        LaserDConfig(round_method="half")
    with pytest.raises(ValueError, match="alpha"):
        LaserConfig(alpha=-0.5)
    with pytest.raises(ValueError, match="target_length"):
        LaserConfig(target_length=0)
    with pytest.raises(ValueError, match="targets"):
        laser_d_reward(torch.ones(2), torch.ones(2), Groups.from_ids(torch.zeros(2, dtype=torch.long)), targets=(1, 2))


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 20000)), min_size=1, max_size=30), st.floats(0, 3))
def test_laser_reward_bounds(rows, alpha):
    correct = torch.tensor([c for c, _ in rows])
    lengths = torch.tensor([n for _, n in rows])
    r = laser_reward(correct, lengths, target_length=4096, alpha=alpha)
    # wrong -> exactly 0; correct -> 1 or 1 + alpha, the bonus exactly when within the target
    assert torch.equal(r[~correct], torch.zeros(int((~correct).sum()), dtype=torch.float64))
    within = correct & (lengths <= 4096)
    assert torch.allclose(r[within], torch.full((int(within.sum()),), 1 + alpha, dtype=torch.float64))
