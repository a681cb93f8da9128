"""The comparison's statistics worked by hand: mean ± sd, Student's t-interval, the hierarchical bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynashape.study.stats import (
    bootstrap_means,
    hierarchical_bootstrap,
    mean_sd,
    paired_values,
    t_interval,
)

# Student's t quantiles from a printed table (not computed by the package): t_{0.975, 4}, t_{0.95, 4}, t_{0.975, 1}
T975_4 = 2.7764451051977987
T95_4 = 2.1318467863266495
T975_1 = 12.706204736174698


def test_mean_sd_uses_the_bessel_correction():
    m = mean_sd([1.0, 2.0, 3.0, 4.0])
    assert m.mean == 2.5 and m.n == 4
    assert m.sd == pytest.approx(math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 3))
    assert math.isnan(mean_sd([7.0]).sd)


def test_t_interval_by_hand():
    # 1..5: mean 3, sample variance (4 + 1 + 0 + 1 + 4) / 4 = 2.5
    half = T975_4 * math.sqrt(2.5) / math.sqrt(5)
    ti = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert ti.estimate == 3.0 and ti.n == 5
    assert ti.low == pytest.approx(3 - half, rel=1e-9) and ti.high == pytest.approx(3 + half, rel=1e-9)
    ti90 = t_interval([1.0, 2.0, 3.0, 4.0, 5.0], level=0.90)
    assert ti90.high - 3 == pytest.approx(T95_4 * math.sqrt(2.5 / 5), rel=1e-9)
    # two seeds: one degree of freedom, a wide interval; |0.1 - 0.3| / sqrt(2) is the sd
    two = t_interval([0.1, 0.3])
    assert two.high - two.estimate == pytest.approx(T975_1 * (0.2 / math.sqrt(2)) / math.sqrt(2), rel=1e-9)


def test_paired_difference_is_the_t_interval_of_per_seed_differences():
    a = {0: 0.60, 1: 0.70, 2: 0.65, 3: None, 4: 0.62}
    b = {0: 0.50, 1: 0.55, 2: 0.60, 3: 0.40, 5: 0.9}
    diffs = paired_values(a, b)
    assert diffs == pytest.approx({0: 0.10, 1: 0.15, 2: 0.05})  # seed 3 has no value for a, 4 and 5 unpaired
    ti = t_interval(list(diffs.values()))
    sd = math.sqrt(((0.10 - 0.10) ** 2 + 0.05**2 + 0.05**2) / 2)
    t_2 = 4.302652729911275  # t_{0.975, 2} from the table
    assert ti.estimate == pytest.approx(0.10) and ti.low == pytest.approx(0.10 - t_2 * sd / math.sqrt(3))


def test_a_single_value_has_no_interval():
    ti = t_interval([0.5])
    assert ti.estimate == 0.5 and math.isnan(ti.low) and math.isnan(ti.high)


@pytest.mark.parametrize("bad", [[1.0, float("nan")], [float("inf")], []])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError, match="values"):
        mean_sd(bad)


def test_bootstrap_refuses_bad_shapes_and_values():
    with pytest.raises(ValueError, match="shape"):
        hierarchical_bootstrap([1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        hierarchical_bootstrap([[1.0, float("nan")]])
    with pytest.raises(ValueError, match="n_boot"):
        hierarchical_bootstrap([[1.0]], n_boot=0)


def test_constant_data_gives_a_zero_width_interval():
    boot = hierarchical_bootstrap(np.full((4, 7), 0.3), n_boot=500)
    assert boot.low == boot.high == pytest.approx(0.3) and boot.estimate == pytest.approx(0.3)


def test_zero_within_seed_variance_leaves_only_the_seed_level():
    # seed 0 scores 0 on every problem, seed 1 scores 1: resampling problems changes nothing, so a replicate
    # mean is the mean of two drawn seeds: 0 (prob 1/4), 0.5 (1/2) or 1 (1/4)
    values = np.array([[0.0] * 6, [1.0] * 6])
    means = bootstrap_means(values, n_boot=8000, seed=3)
    assert set(np.round(means, 12)) <= {0.0, 0.5, 1.0}
    for value, prob in ((0.0, 0.25), (0.5, 0.5), (1.0, 0.25)):
        assert np.mean(np.isclose(means, value)) == pytest.approx(prob, abs=0.02)
    boot = hierarchical_bootstrap(values, n_boot=8000, seed=3)
    assert (boot.low, boot.high) == (0.0, 1.0)  # each end has probability 1/4 > 2.5 %


def test_one_seed_leaves_only_the_problem_level():
    # one seed, problems 0 and 1: a replicate draws 2 problems, mean 0 (1/4), 0.5 (1/2), 1 (1/4)
    means = bootstrap_means(np.array([[0.0, 1.0]]), n_boot=8000, seed=1)
    for value, prob in ((0.0, 0.25), (0.5, 0.5), (1.0, 0.25)):
        assert np.mean(np.isclose(means, value)) == pytest.approx(prob, abs=0.02)


def test_the_problem_level_widens_the_interval():
    rng = np.random.default_rng(0)
    seed_means = np.array([0.4, 0.5, 0.6, 0.45, 0.55])
    flat = np.repeat(seed_means[:, None], 50, axis=1)  # no within-seed spread
    noisy = flat + rng.choice([-0.3, 0.3], size=flat.shape)  # within-seed spread, same seed means
    noisy -= noisy.mean(axis=1, keepdims=True) - seed_means[:, None]
    a = hierarchical_bootstrap(flat, n_boot=4000)
    b = hierarchical_bootstrap(noisy, n_boot=4000)
    assert a.estimate == pytest.approx(b.estimate)
    assert b.high - b.low > a.high - a.low


def test_the_interval_covers_the_mean_and_is_reproducible():
    values = np.random.default_rng(5).random((5, 40))
    boot = hierarchical_bootstrap(values, n_boot=2000, seed=11)
    assert boot.low < values.mean() < boot.high
    assert boot == hierarchical_bootstrap(values, n_boot=2000, seed=11)
    assert boot != hierarchical_bootstrap(values, n_boot=2000, seed=12)


@given(
    st.integers(1, 4).flatmap(
        lambda s: st.lists(
            st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=3), min_size=s, max_size=s
        )
    ),
    st.floats(-5, 5, allow_nan=False),
)
def test_bootstrap_stays_in_the_data_range_and_moves_with_a_shift(rows, shift):
    x = np.array(rows)
    boot = hierarchical_bootstrap(x, n_boot=200, seed=0)
    assert x.min() - 1e-9 <= boot.low <= boot.high <= x.max() + 1e-9
    moved = hierarchical_bootstrap(x + shift, n_boot=200, seed=0)
    assert moved.low == pytest.approx(boot.low + shift, abs=1e-9)
    assert moved.high == pytest.approx(boot.high + shift, abs=1e-9)
