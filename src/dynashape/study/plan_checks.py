"""The checks every part of a study file shares: its error, which names the file, the key and the value, and the
scalar values (a name, an integer) its keys take."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NAME", "StudyFileError", "as_int", "as_name", "fail"]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A study's, a row's or a label's name: it becomes part of a folder's name."""


class StudyFileError(ValueError):
    """A study file that cannot be a plan: the message names the file, the key and the value."""


def fail(where: str, key: str, value: Any, why: str) -> StudyFileError:
    """The error for ``key = value`` in the file ``where``."""
    return StudyFileError(f"{where}: {key} = {value!r}: {why}")


def as_int(where: str, key: str, value: Any, *, low: int) -> int:
    """``value``, an integer >= ``low`` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise fail(where, key, value, f"must be an integer >= {low}")
    return value


def as_name(where: str, key: str, value: Any) -> str:
    """``value``, a name (``NAME``)."""
    if not isinstance(value, str) or not NAME.match(value):
        raise fail(where, key, value, "must be a name (letters, digits, _ . -)")
    return value
