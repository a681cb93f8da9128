"""Reading state files safely: every failure is a ``StateFileError`` naming the file and what is wrong.

``read_json`` / ``read_yaml`` / ``torch_load`` refuse a file that is missing, empty, truncated, corrupt or not the
format, in one line a user can act on. ``torch_load`` uses ``weights_only=True``: plain values and tensors only,
never code run on load. ``dynashape.io.state`` re-exports all of them beside the atomic writes.

No torch or yaml at import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["StateFileError", "read_json", "read_yaml", "torch_load"]


class StateFileError(ValueError):
    """A state file is missing, truncated, corrupt, foreign or unsafe; ``path`` names it.

    ``path`` is None for a state that never was a file (a state dict handed to ``load_state_dict``); the
    message is then the problem alone.
    """

    def __init__(self, path: str | os.PathLike[str] | None, problem: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(problem if self.path is None else f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its fields, not from the message, so that it survives pickling (a Ray task, a process
        # pool): the default would call __init__ with the message alone
        return type(self), (self.path, self.problem)


def _read_text(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise StateFileError(path, f"cannot be read ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise StateFileError(path, f"is not UTF-8 text (corrupt or binary: {err.reason} at byte {err.start})") from err


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in ``path``; a ``StateFileError`` naming it when it is missing or not JSON."""
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        what = "is empty" if not text.strip() else f"is not JSON (truncated or corrupt: {err})"
        raise StateFileError(path, what) from err


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The YAML value in ``path`` (``yaml.safe_load``: plain values only); ``StateFileError`` when unreadable.

    An empty file is the YAML value None."""
    import yaml

    text = _read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise StateFileError(path, f"is not valid YAML (truncated or corrupt: {str(err).splitlines()[0]})") from err


def _torch_load_problem(err: Exception) -> str:
    """What a failed ``torch.load(weights_only=True)`` says, in one line (torch's own advice left out)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        # torch's text suggests weights_only=False: exactly what must not be done with a foreign file
        detail = [
            line.removeprefix("WeightsUnpickler error:").strip()
            for line in lines[1:]
            if not line.startswith(("Please file an issue", "Check the documentation"))
        ]
        detail = [d for d in detail if d]
        reason = detail[0] if detail else "no reason given"
        if "GLOBAL" in reason:  # a class or function to import and call: code the file wants run
            return (
                f"holds more than plain values and tensors; loading it would need arbitrary unpickling (refused: "
                f"{reason})"
            )
        return (
            f"is corrupt or not a plain file of values and tensors (the weights-only unpickler refused it: {reason}; "
            "arbitrary unpickling is never done)"
        )
    first = lines[0] if lines else ""
    if len(first) > 200:
        first = first[:200] + "..."
    return f"is not a readable torch file (truncated or corrupt: {type(err).__name__}: {first})"


def torch_load(path: str | os.PathLike[str], *, map_location: Any = "cpu", expect: type | None = None) -> Any:
    """``torch.load(path, weights_only=True)``: plain values and tensors only.

    Args:
        expect: the type the top-level value must have (``dict`` for every state file we write).

    Raises:
        StateFileError: the file is missing, empty, truncated, corrupt, needs arbitrary unpickling (refused,
            never run), or its top-level value is not ``expect``.
    """
    import torch

    p = os.fspath(path)
    if not os.path.isfile(p):
        raise StateFileError(p, "is a folder, not a file" if os.path.isdir(p) else "does not exist")
    if os.path.getsize(p) == 0:
        raise StateFileError(p, "is empty (a write that never finished?)")
    try:
        value = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for a truncated, garbled or unsafe file
        raise StateFileError(p, _torch_load_problem(err)) from err
    if expect is not None and not isinstance(value, expect):
        raise StateFileError(p, f"holds a {type(value).__name__}, expected a {expect.__name__}")
    return value
