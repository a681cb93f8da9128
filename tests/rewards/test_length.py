"""Tests for dynashape.rewards.length.overlong_penalty (DAPO Eq. 13)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynashape.rewards.length import overlong_penalty


def _piecewise(length: float, max_len: int, buffer: int, factor: float) -> float:
    """Eq. 13 written branch by branch."""
    start = max_len - buffer
    if length <= start:
        return 0.0
    if length <= max_len:
        return factor * (start - length) / buffer
    return -factor


def test_overlong_penalty_by_hand():
    # L_max = 30, L_cache = 10: penalty starts after 30 - 10 = 20 tokens
    lengths = torch.tensor([0, 20, 21, 25, 30, 31, 100])
    # 0 -> 0; 20 -> 0; 21 -> (20 - 21)/10 = -0.1; 25 -> -5/10 = -0.5; 30 -> -10/10 = -1; 31, 100 -> -1
    expected = torch.tensor([0.0, 0.0, -0.1, -0.5, -1.0, -1.0, -1.0])
    out = overlong_penalty(lengths, max_len=30, buffer=10)
    assert out.dtype == torch.float32 and out.shape == (7,)
    torch.testing.assert_close(out, expected)
    # factor scales every piece: 25 -> 0.5 * -0.5 = -0.25, 40 -> -0.5
    torch.testing.assert_close(
        overlong_penalty(torch.tensor([25, 40]), max_len=30, buffer=10, factor=0.5), torch.tensor([-0.25, -0.5])
    )
    # buffer == max_len: the ramp starts at 0 tokens; 3 of 4 -> -3/4
    torch.testing.assert_close(overlong_penalty([0, 3, 4], max_len=4, buffer=4), torch.tensor([0.0, -0.75, -1.0]))


def test_overlong_penalty_accepts_float_lengths_and_sequences():
    # a float response_mask.sum(-1) works like integer lengths
    torch.testing.assert_close(
        overlong_penalty(torch.tensor([25.0, 18.0]), 30, 10), overlong_penalty(torch.tensor([25, 18]), 30, 10)
    )
    assert overlong_penalty([25], 30, 10).item() == pytest.approx(-0.5)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    max_len=st.integers(1, 5000),
    factor=st.floats(0.0, 4.0),
)
def test_overlong_penalty_matches_piecewise_definition(data, max_len, factor):
    buffer = data.draw(st.integers(1, max_len))
    lengths = data.draw(st.lists(st.integers(0, 2 * max_len + 5), min_size=1, max_size=20))
    out = overlong_penalty(torch.tensor(lengths), max_len=max_len, buffer=buffer, factor=factor)
    expected = torch.tensor([_piecewise(x, max_len, buffer, factor) for x in lengths], dtype=torch.float32)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    max_len=st.integers(2, 5000),
    factor=st.floats(0.01, 4.0),
    h=st.floats(1e-6, 0.5),
)
def test_overlong_penalty_is_continuous_and_monotone_at_the_boundaries(data, max_len, factor, h):
    buffer = data.draw(st.integers(1, max_len))
    for boundary in (max_len - buffer, max_len):
        pts = torch.tensor([boundary - h, boundary, boundary + h], dtype=torch.float64).clamp(min=0)
        left, mid, right = overlong_penalty(pts, max_len=max_len, buffer=buffer, factor=factor).tolist()
        # Lipschitz with constant factor / buffer on each side, and never increasing with length
        slope = factor / buffer
        assert abs(mid - left) <= slope * h + 1e-6
        assert abs(right - mid) <= slope * h + 1e-6
        assert left >= mid - 1e-7 >= right - 2e-7
    # value at the start of the buffer is 0, at max_len it is -factor
    ends = overlong_penalty(torch.tensor([max_len - buffer, max_len]), max_len, buffer, factor).tolist()
    assert ends == pytest.approx([0.0, -factor], abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"buffer": 0}, "buffer must be in"),
        ({"buffer": 31}, "buffer must be in"),
        ({"max_len": 0, "buffer": 1}, "max_len must be > 0"),
        ({"lengths": torch.tensor([3, -2])}, "lengths must be finite and >= 0, got -2.0 at index 1"),
        ({"lengths": torch.tensor([3.0, math.inf])}, "index 1"),
        ({"lengths": torch.ones(2, 2, dtype=torch.long)}, "1-D"),
        ({"lengths": torch.tensor([True])}, "dtype"),
        ({"factor": -1.0}, "factor"),
        ({"buffer": 2.5}, "buffer must be an int"),
    ],
)
def test_overlong_penalty_rejects_bad_input(kwargs, match):
    args = {"lengths": torch.tensor([1, 2]), "max_len": 30, "buffer": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        overlong_penalty(**args)
