"""Tests for dynashape.core.metrics: pass@k, AES, top-1 eigen ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynashape.core.metrics import AES, aes, pass_at_k, pass_at_k_curve, top1_eigen_ratio


# ==========================================================================================================
# pass@k
# ==========================================================================================================
def test_pass_at_k_by_hand():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7;  product form 1 - (1 - 2/4)(1 - 2/5) = 1 - 0.3
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=4, c=1, k=3: 1 - C(3,3)/C(4,3) = 1 - 1/4 = 0.75;  product 1 - (1 - 3/4) = 0.75
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    # n - c = 2 < k = 3: every 3-subset holds a correct sample -> 1
    assert pass_at_k(4, 2, 3) == 1.0
    # c = 0 -> 0 exactly (and not -0.0); c = n -> 1
    assert pass_at_k(8, 0, 4) == 0.0 and math.copysign(1.0, pass_at_k(8, 0, 4)) == 1.0
    assert pass_at_k(8, 8, 1) == 1.0
    # n=10, c=3, k=1: c/n = 0.3
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_arrays_per_problem():
    # problems (n, c) = (5, 2), (4, 1), (4, 2) at k = 2:
    # 0.7;  1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5;  1 - C(2,2)/C(4,2) = 1 - 1/6 = 0.833333
    out = pass_at_k(np.array([5, 4, 4]), np.array([2, 1, 2]), 2)
    assert isinstance(out, np.ndarray) and out.shape == (3,)
    np.testing.assert_allclose(out, [0.7, 0.5, 5 / 6])
    # scalar n broadcast against per-problem c, torch tensors and lists accepted
    np.testing.assert_allclose(pass_at_k(4, torch.tensor([1, 2]), 2), [0.5, 5 / 6])
    np.testing.assert_allclose(pass_at_k([4, 4], [1.0, 2.0], 2), [0.5, 5 / 6])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_pass_at_k_equals_combinatorial_formula(data):
    n = data.draw(st.integers(1, 40))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)  # math.comb(m, k) = 0 when m < k
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12, abs=1e-14)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_pass_at_k_is_monotone_in_k_and_c_and_pass1_is_c_over_n(data):
    n = data.draw(st.integers(1, 300))
    c = data.draw(st.integers(0, n))
    ks = np.arange(1, n + 1)
    by_k = np.array([pass_at_k(n, c, int(k)) for k in ks])
    assert np.all(np.diff(by_k) >= -1e-12)
    assert np.all((by_k >= 0) & (by_k <= 1))
    k = data.draw(st.integers(1, n))
    by_c = pass_at_k(np.full(n + 1, n), np.arange(n + 1), k)
    assert np.all(np.diff(by_c) >= -1e-12)
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, rel=1e-12, abs=1e-15)


def test_pass_at_k_large_n_is_finite_and_accurate():
    # n = 1024, c = 1, k = 128: 1 - C(1023, 128) / C(1024, 128) = 1 - (1024 - 128) / 1024 = 0.125
    assert pass_at_k(1024, 1, 128) == pytest.approx(0.125, rel=1e-12)
    # c = 2: 1 - (896 * 895) / (1024 * 1023) = 0.234394
    assert pass_at_k(1024, 2, 128) == pytest.approx(1 - 896 * 895 / (1024 * 1023), rel=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (5, 6, 1, "c must be <= n, got c=6 > n=5"),
        (5, -1, 1, "c must be >= 0, got -1"),
        (5, 2, 0, "k must be >= 1, got 0"),
        (5, 2, 6, "k must be <= n, got k=6 > n=5"),
        (0, 0, 1, "n must be >= 1, got 0"),
        ([4, 4, 3], [1, 2, 1], 4, "k must be <= n, got k=4 > n=3 at index 2"),
        ([4, 4], [1, 5], 1, "c must be <= n, got c=5 > n=4 at index 1"),
        (5, 2.5, 1, "c must hold integers, got 2.5"),
        (5, 2, 1.0, "k must be an int"),
        ([4, 4], [1, 2, 3], 1, "n and c must broadcast"),
    ],
)
def test_pass_at_k_rejects_bad_input(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_curve_by_hand():
    # problems (4, 1) and (4, 2); default ks = 1, 2, 4
    # k=1: (1/4 + 2/4) / 2 = 0.375;  k=2: (0.5 + 5/6) / 2 = 0.666667;  k=4: (1 + 1) / 2 = 1
    curve = pass_at_k_curve([4, 4], [1, 2])
    assert curve.ks.tolist() == [1, 2, 4]
    np.testing.assert_allclose(curve.values, [0.375, 2 / 3, 1.0])
    # n = 6 is not a power of two: ks = 1, 2, 4, 6; explicit ks are honoured
    assert pass_at_k_curve(6, [0, 3]).ks.tolist() == [1, 2, 4, 6]
    assert pass_at_k_curve(6, [0, 3], ks=[3]).ks.tolist() == [3]
    # the curve stops at the smallest n
    assert pass_at_k_curve([8, 5], [1, 1]).ks.tolist() == [1, 2, 4, 5]
    with pytest.raises(ValueError, match="ks"):
        pass_at_k_curve(4, 1, ks=[])


# ==========================================================================================================
# AES
# ==========================================================================================================
def test_aes_by_hand():
    # L: 200 -> 150: dL = 50/200 = 0.25; A: 0.60 -> 0.66: dA = 0.06/0.60 = 0.1 >= 0
    # AES = 1 * 0.25 + 3 * 0.1 = 0.55
    out = aes(0.66, 150, 0.60, 200)
    assert isinstance(out, AES)
    assert out.value == pytest.approx(0.55)
    assert out.delta_length == pytest.approx(0.25) and out.delta_acc == pytest.approx(0.1)
    assert (out.alpha, out.beta, out.gamma) == (1.0, 3.0, 5.0)
    # A: 0.60 -> 0.54: dA = -0.1 < 0 -> AES = 0.25 - 5 * 0.1 = -0.25
    assert aes(0.54, 150, 0.60, 200).value == pytest.approx(-0.25)
    # longer and no change in accuracy: L 200 -> 300, dL = -0.5, dA = 0 (beta branch, adds 0) -> -0.5
    assert aes(0.6, 300, 0.6, 200).value == pytest.approx(-0.5)
    # custom constants travel with the result: 2 * 0.25 + 4 * 0.1 = 0.9
    custom = aes(66.0, 150, 60.0, 200, alpha=2.0, beta=4.0, gamma=6.0)  # percent works the same
    assert custom.value == pytest.approx(0.9) and custom._asdict()["gamma"] == 6.0


@settings(max_examples=100, deadline=None)
@given(
    acc=st.floats(0.0, 1.0), length=st.floats(0.0, 1e4), base_acc=st.floats(0.01, 1.0),
    base_length=st.floats(1.0, 1e4),
)  # fmt: skip
def test_aes_penalises_losses_more_than_equal_gains(acc, length, base_acc, base_length):
    out = aes(acc, length, base_acc, base_length)
    d_acc = (acc - base_acc) / base_acc
    assert out.value == pytest.approx(out.delta_length + (3 * d_acc if d_acc >= 0 else 5 * d_acc), abs=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_acc": 0.0}, "base_acc"),
        ({"base_length": 0.0}, "base_length"),
        ({"acc": -0.1}, "acc"),
        ({"length": math.nan}, "length"),
        ({"gamma": -1.0}, "gamma"),
    ],
)
def test_aes_rejects_bad_input(kwargs, field):
    args = {"acc": 0.5, "length": 100.0, "base_acc": 0.5, "base_length": 100.0, **kwargs}
    with pytest.raises(ValueError, match=field):
        aes(**args)


# ==========================================================================================================
# top-1 eigen ratio
# ==========================================================================================================
def test_top1_eigen_ratio_by_hand():
    # rows (1,0), (-1,0), (0,0.5), (0,-0.5): mean 0; sum x^2 = 2, sum y^2 = 0.5, sum xy = 0
    # covariance diag(2, 0.5) / 3 -> lambda_1 / (lambda_1 + lambda_2) = 2 / 2.5 = 0.8
    assert top1_eigen_ratio(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.5], [0.0, -0.5]])) == pytest.approx(0.8)
    # square corners (+-1, +-1): covariance 4/3 I -> 0.5
    assert top1_eigen_ratio(np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=float)) == pytest.approx(0.5)
    # collinear points: one direction holds all variance -> 1
    assert top1_eigen_ratio([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]) == pytest.approx(1.0)


def test_top1_eigen_ratio_undefined_cases_are_nan():
    assert math.isnan(top1_eigen_ratio(torch.ones(1, 4)))  # one row
    assert math.isnan(top1_eigen_ratio(torch.zeros(0, 4)))  # no row
    assert math.isnan(top1_eigen_ratio(torch.full((5, 3), 7.0)))  # zero variance
    # equal rows whose mean is not exactly representable (0.1 * 3 / 3 != 0.1) still count as zero variance
    assert math.isnan(top1_eigen_ratio([[0.1, 0.7, 1e3]] * 3))


def test_top1_eigen_ratio_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        top1_eigen_ratio(torch.ones(4))
    bad = torch.ones(3, 2)
    bad[2, 1] = math.nan
    with pytest.raises(ValueError, match="row 2"):
        top1_eigen_ratio(bad)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(2, 30), d=st.integers(1, 12))
def test_top1_eigen_ratio_matches_covariance_eigenvalues(seed, m, d):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(m, d)) * rng.uniform(0.1, 3.0, size=d) + rng.normal(size=d)
    eig = np.linalg.eigvalsh(np.atleast_2d(np.cov(x, rowvar=False)))
    expected = eig.max() / eig.sum()
    ratio = top1_eigen_ratio(x)
    assert ratio == pytest.approx(expected, rel=1e-9)
    # invariant to translation and to a global scale; bounded by [1 / min(m - 1, d), 1]
    assert top1_eigen_ratio(x * 7.5 - 3.0) == pytest.approx(ratio, rel=1e-9)
    assert 1 / min(m - 1, d) - 1e-12 <= ratio <= 1 + 1e-12
