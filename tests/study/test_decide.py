"""The follow-up's decision rules (``study.decide``) on hand-made per-seed differences: the margin's bound, the
ceiling rule, Holm's order, and the power of the t-test."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import t

from dynashape.study.decide import MIN_SEEDS, assess_part, holm, part_bound, power, seeds_for_power


def test_the_margin_sets_the_bound_of_each_relation():
    assert part_bound(">", 0.1) == 0.0 and part_bound("<", 2.0) == 0.0  # superiority: the margin is the effect
    assert part_bound(">=", 0.01) == -0.01  # non-inferiority: not worse by more than the margin
    assert part_bound("<=", 1.0) == 1.0
    with pytest.raises(ValueError, match="margin"):
        part_bound(">=", 0.0)
    with pytest.raises(ValueError, match="relation"):
        part_bound("==", 0.1)


def test_a_part_is_tested_against_its_bound_by_hand():
    # differences 0.01, 0.03, 0.00, 0.02, 0.04 (n = 5): mean 0.02, sd sqrt(0.00025) = 0.015811
    d = [0.01, 0.03, 0.00, 0.02, 0.04]
    sd = math.sqrt(sum((x - 0.02) ** 2 for x in d) / 4)
    assert sd == pytest.approx(0.0158113883)
    # non-inferiority with margin 0.01: H0 mean = -0.01, t = 0.03 / (sd / sqrt 5) = 4.2426
    res = assess_part(d, part_bound(">=", 0.01))
    stat = 0.03 / (sd / math.sqrt(5))
    assert stat == pytest.approx(4.242640687)
    assert res.p_value == pytest.approx(2 * t.sf(stat, 4))
    assert res.p_value == pytest.approx(0.013236, abs=1e-5)
    assert (res.estimate, res.n, res.reason) == (pytest.approx(0.02), 5, "")
    # the same differences against a superiority bound 0: t = 0.02 / (sd / sqrt 5) = 2.8284
    assert assess_part(d, 0.0).p_value == pytest.approx(2 * t.sf(2.828427125, 4))


def test_the_ceiling_rule_makes_identical_differences_untestable():
    # both arms at pass@k = 1 on every seed: every difference 0; a '>' part must not read that as failing
    res = assess_part([0.0] * 8, 0.0)
    assert res.p_value == 1.0 and "ceiling" in res.reason
    # a constant nonzero difference is no evidence either (sd 0, no t-statistic)
    assert assess_part([0.25] * 8, 0.0).p_value == 1.0
    # one differing seed is enough to test
    assert assess_part([0.0] * 7 + [0.1], 0.0).reason == ""


def test_too_few_seeds_are_untestable():
    res = assess_part([0.1, 0.2, 0.3, 0.4], 0.0)
    assert res.n == 4 < MIN_SEEDS and res.p_value == 1.0 and "paired seeds" in res.reason


def test_holm_by_hand():
    # p = 0.01, 0.04, 0.03, 0.005 (m = 4): sorted 0.005, 0.01, 0.03, 0.04 against 0.05/4, 0.05/3, 0.05/2, 0.05/1
    # adjusted: 4 * 0.005 = 0.02; 3 * 0.01 = 0.03; max(0.03, 2 * 0.03 = 0.06) = 0.06; max(0.06, 0.04) = 0.06
    adjusted, rejected = holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rejected.tolist() == [True, False, False, True]


def test_holm_stops_at_the_first_failure_even_when_a_later_p_would_pass_its_own_step():
    # sorted 0.001, 0.02, 0.024 (m = 3) against 0.05/3, 0.05/2, 0.05/1: each passes its step, all rejected
    _, rejected = holm([0.001, 0.02, 0.024])
    assert rejected.all()
    # sorted 0.001, 0.03, 0.031: 0.001 <= 0.0167 rejects; 0.03 > 0.025 stops; 0.031 stays accepted although it
    # is below 0.05 (its step); adjusted 3 * 0.001, 2 * 0.03, max(0.06, 0.031)
    adjusted, rejected = holm([0.031, 0.001, 0.03])
    assert rejected.tolist() == [False, True, False]
    assert adjusted == pytest.approx([0.06, 0.003, 0.06])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.floats(0.001, 0.2))
def test_holm_properties(ps, alpha):
    adjusted, rejected = holm(ps, alpha)
    p = np.array(ps)
    assert (adjusted >= p - 1e-12).all() and (adjusted <= 1).all()
    # Holm is never less powerful than Bonferroni and never more than the unadjusted test
    assert (rejected >= (p * len(p) <= alpha)).all()
    assert (rejected <= (p <= alpha)).all()
    # monotone: a smaller p-value is never accepted while a larger one is rejected
    order = np.argsort(p, kind="stable")
    assert (np.diff(rejected[order].astype(int)) <= 0).all()


def test_holm_refuses_bad_input():
    with pytest.raises(ValueError, match="p_values"):
        holm([])
    with pytest.raises(ValueError, match="p_values"):
        holm([0.5, 1.5])
    with pytest.raises(ValueError, match="alpha"):
        holm([0.5], 1.0)


def test_power_is_the_level_at_no_effect_and_grows_with_seeds_and_effect():
    assert power(10, 1.0, 0.0, 0.05) == pytest.approx(0.05)
    assert power(10, 1.0, 1.0, 0.05) < power(20, 1.0, 1.0, 0.05) < power(20, 1.0, 2.0, 0.05)
    assert power(20, 1.0, 1.0, 0.005) < power(20, 1.0, 1.0, 0.05)


def test_power_by_a_normal_approximation_and_a_large_effect():
    # n = 30, sd 1, effect 0.5, alpha 0.05: the z approximation gives Phi(0.5 sqrt 30 - 1.96) = Phi(0.7786) = 0.782;
    # the t-test is a little less powerful
    assert 0.74 < power(30, 1.0, 0.5, 0.05) < 0.782
    # a huge noncentrality: power 1 and never NaN (scipy's lower tail underflows there)
    assert power(20, 1.3627, 2.0, 0.005) == pytest.approx(0.99879, abs=1e-4)


def test_seeds_for_power_is_the_first_n_that_reaches_the_target():
    n = seeds_for_power(0.0881, 0.10, 0.005)
    assert power(n, 0.0881, 0.10, 0.005) >= 0.8 > power(n - 1, 0.0881, 0.10, 0.005)
    assert seeds_for_power(1.0, 0.001, 0.05, limit=50) is None
