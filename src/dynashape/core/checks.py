"""Small validation helpers shared by configs and batches.

Every error names the field and the offending value (or index), and says what is allowed, so that a user who
typed `+algorithm.lead.beta=1.5` knows at once what to change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def require_choice(field: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ValueError unless `value` is one of `allowed`."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")


def require_range(
    field: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError unless `value` is a finite real number in the given (possibly open) interval."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field}={value!r} must be a finite number")
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    span = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{field}={value!r} is out of range; allowed: {span}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{field}={value!r} is out of range; allowed: {span}")
