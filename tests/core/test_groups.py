"""Hand-worked values for the group statistics, and their equivalence to slow loops."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.core.groups import (
    Groups,
    group_count,
    group_max,
    group_mean,
    group_median,
    group_min,
    group_normalize,
    group_var,
    total_variance_stats,
    whiten,
)
from dynashape.testing.loop_reference import grpo_loop, whiten_loop

F = torch.float64
IDS = torch.tensor([7, 3, 7, 5, 7, 3, 7])  # groups 3: [1, 5], 5: [3], 7: [0, 2, 4, 6]
VALS = torch.tensor([4.0, 10.0, 1.0, 2.0, 3.0, 20.0, 8.0], dtype=F)
MASK = torch.tensor([True, False, True, True, False, True, True])


def test_dense_numbering_sorted_by_id():
    g = Groups.from_ids(IDS)
    assert g.index.tolist() == [2, 0, 2, 1, 2, 0, 2]
    assert g.counts.tolist() == [2, 1, 4]


def test_hand_worked_statistics():
    g = Groups.from_ids(IDS)
    # group 3: {10, 20}; group 5: {2}; group 7: {4, 1, 3, 8}
    assert group_mean(VALS, g).tolist() == [15.0, 2.0, 4.0]
    # unbiased: group 3 (25 + 25) / 1 = 50; group 7 (0 + 9 + 1 + 16) / 3 = 26/3; group of one 0
    assert torch.allclose(group_var(VALS, g, unbiased=True), torch.tensor([50.0, 0.0, 26 / 3], dtype=F))
    assert torch.allclose(group_var(VALS, g, unbiased=False), torch.tensor([25.0, 0.0, 26 / 4], dtype=F))
    assert group_min(VALS, g).tolist() == [10.0, 2.0, 1.0]
    assert group_max(VALS, g).tolist() == [20.0, 2.0, 8.0]
    # median of {1, 3, 4, 8} is (3 + 4) / 2
    assert group_median(VALS, g).tolist() == [15.0, 2.0, 3.5]


def test_hand_worked_masked_statistics():
    g = Groups.from_ids(IDS)
    # selected: group 3: {20}; group 5: {2}; group 7: {4, 1, 8}
    assert group_count(g, MASK).tolist() == [1, 1, 3]
    assert group_mean(VALS, g, MASK).tolist() == [20.0, 2.0, 13 / 3]
    assert group_median(VALS, g, MASK).tolist() == [20.0, 2.0, 4.0]
    assert group_min(VALS, g, MASK).tolist() == [20.0, 2.0, 1.0]
    empty = torch.zeros(7, dtype=torch.bool)
    assert group_mean(VALS, g, empty).tolist() == [0.0, 0.0, 0.0]
    assert group_median(VALS, g, empty).tolist() == [0.0, 0.0, 0.0]


def test_grpo_normalisation_hand_worked():
    g = Groups.from_ids(torch.tensor([0, 0, 0, 1, 1, 2]))
    r = torch.tensor([1.0, 1.0, 0.0, 0.5, 0.5, 3.0], dtype=F)
    # group 0: mean 2/3, unbiased std sqrt(1/3); group 1 constant -> 0; group of one -> 0
    sd = math.sqrt(1 / 3)
    expected = [(1 / 3) / (sd + 1e-6), (1 / 3) / (sd + 1e-6), (-2 / 3) / (sd + 1e-6), 0.0, 0.0, 0.0]
    assert torch.allclose(group_normalize(r, g), torch.tensor(expected, dtype=F), atol=1e-12)
    assert torch.allclose(group_normalize(r, g, std="none"), torch.tensor([1 / 3, 1 / 3, -2 / 3, 0, 0, 0], dtype=F))


def test_constant_group_is_exactly_zero_even_when_the_mean_rounds():
    g = Groups.from_ids(torch.zeros(3, dtype=torch.long))
    r = torch.full((3,), 0.1, dtype=F)  # 0.1 + 0.1 + 0.1 != 0.3 in floating point
    assert group_normalize(r, g).tolist() == [0.0, 0.0, 0.0]


def test_token_and_sequence_whitening_hand_worked():
    a = torch.tensor([1.0, -1.0, 2.0], dtype=F)
    lengths = torch.tensor([1, 2, 1])
    # token: mu = (1 - 2 + 2) / 4 = 0.25; var = (0.75^2 + 2 * 1.25^2 + 1.75^2) / 3 = 2.25
    assert torch.allclose(whiten(a, lengths, eps=0.0), torch.tensor([0.5, -1.25 / 1.5, 1.75 / 1.5], dtype=F))
    # sequence: mu = 2/3; var = ((1/3)^2 + (5/3)^2 + (4/3)^2) / 2 = 7/3
    sd = math.sqrt(7 / 3)
    assert torch.allclose(whiten(a, eps=0.0), torch.tensor([1 / 3 / sd, -5 / 3 / sd, 4 / 3 / sd], dtype=F))


def test_whiten_single_rollout_gives_zero():
    assert whiten(torch.tensor([3.0], dtype=F), torch.tensor([5])).tolist() == [0.0]


def test_total_variance_hand_worked():
    g = Groups.from_ids(torch.tensor([0, 0, 0, 0, 1, 1, 2]))
    r = torch.tensor([1, 1, 1, 0, 0, 0, 1], dtype=F)
    # means [3/4, 0, 1], population vars [3/16, 0, 0]; mu = 7/12; Var(m) = 13/72; sigma^2 = 1/16 + 13/72
    mu, sigma = total_variance_stats(r, g, eps=0.0)
    assert math.isclose(mu.item(), 7 / 12, rel_tol=1e-12)
    assert math.isclose(sigma.item(), math.sqrt(35) / 12, rel_tol=1e-12)
    # masked to nothing: both zero
    mu0, sigma0 = total_variance_stats(r, g, torch.zeros(7, dtype=torch.bool))
    assert mu0.item() == 0.0 and sigma0.item() == 0.0


ids_and_values = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 6), min_size=n, max_size=n),
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.integers(0, 50), min_size=n, max_size=n),
    )
)


@given(ids_and_values)
def test_group_normalize_equals_loop(data):
    ids, vals, _ = data
    got = group_normalize(torch.tensor(vals, dtype=F), Groups.from_ids(torch.tensor(ids)))
    assert torch.allclose(got, torch.tensor(grpo_loop(vals, ids), dtype=F), atol=1e-9, rtol=1e-9)


@given(ids_and_values)
def test_whiten_equals_loop(data):
    _, vals, weights = data
    got = whiten(torch.tensor(vals, dtype=F), torch.tensor(weights))
    ref = whiten_loop(vals, [float(w) for w in weights])
    assert torch.allclose(got, torch.tensor(ref, dtype=F), atol=1e-6, rtol=1e-9)


@given(ids_and_values, st.lists(st.booleans(), min_size=40, max_size=40))
def test_masked_min_median_mean_equal_loop(data, mask_bits):
    ids, vals, _ = data
    mask = mask_bits[: len(ids)]
    g = Groups.from_ids(torch.tensor(ids))
    t_vals, t_mask = torch.tensor(vals, dtype=F), torch.tensor(mask)
    for pos, gid in enumerate(sorted(set(ids))):
        sel = sorted(v for v, i, m in zip(vals, ids, mask) if i == gid and m)
        if not sel:
            continue
        n = len(sel)
        med = sel[n // 2] if n % 2 else 0.5 * (sel[n // 2 - 1] + sel[n // 2])
        assert math.isclose(group_median(t_vals, g, t_mask)[pos].item(), med, abs_tol=1e-12)
        assert group_min(t_vals, g, t_mask)[pos].item() == sel[0]
        assert math.isclose(group_mean(t_vals, g, t_mask)[pos].item(), sum(sel) / n, rel_tol=1e-9, abs_tol=1e-9)


@given(ids_and_values, st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=7, max_size=7))
def test_normalize_zero_mean_and_shift_invariant(data, shifts):
    ids, vals, _ = data
    g = Groups.from_ids(torch.tensor(ids))
    r = torch.tensor(vals, dtype=F)
    adv = group_normalize(r, g)
    assert torch.allclose(group_mean(adv, g), torch.zeros(g.num_groups, dtype=F), atol=1e-8)
    shifted = r + torch.tensor([shifts[i] for i in ids], dtype=F)
    assert torch.allclose(group_normalize(shifted, g), adv, atol=1e-5)
