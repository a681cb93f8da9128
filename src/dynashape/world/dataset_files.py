"""Loading math benchmark files: problems and their gold answers.

Reads JSONL or parquet with

* the problem in ``problem``, ``question`` or ``prompt`` (verl's chat layout: a list of ``{"role", "content"}``
  messages, of which the last user message is the problem);
* the gold answer in verl's ``reward_model.ground_truth``, else ``answer`` (GSM8K's ``... #### 72`` is reduced
  to ``72``), else the boxed answer of ``solution``.

Pure I/O: no network, no tokenisation, no prompt templates (the trainer adds its own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.rewards.answers import extract_answer

__all__ = ["MathProblem", "load_math_problems"]

_PROBLEM_KEYS = ("problem", "question", "prompt")


@dataclass(frozen=True)
class MathProblem:
    """One benchmark item.

    Attributes:
        problem: the problem statement.
        answer: the gold final answer (e.g. ``"\\frac{1}{2}"``), as ``MathVerifier`` expects it.
        level: the first integer of a ``difficulty`` / ``level`` column (MATH's "Level 3" -> 3), if any.
        split: the row's ``split`` column (e.g. "train" / "test"), if any.
    """

    problem: str
    answer: str
    level: int | None = None
    split: str | None = None


def _problem_text(row: Mapping[str, Any]) -> str | None:
    for key in _PROBLEM_KEYS:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
        messages = value.tolist() if hasattr(value, "tolist") else value
        if isinstance(messages, list) and messages:  # verl: [{"role": "user", "content": ...}, ...]
            users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
            chosen = users[-1] if users else messages[-1]
            if isinstance(chosen, Mapping) and isinstance(chosen.get("content"), str):
                return chosen["content"]
    return None


def _as_text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _gold_answer(row: Mapping[str, Any]) -> str | None:
    reward_model = row.get("reward_model")
    if isinstance(reward_model, Mapping):
        gold = _as_text(reward_model.get("ground_truth"))
        if gold is not None:
            return gold
    answer = _as_text(row.get("answer"))
    if answer is not None:
        if "####" in answer:  # GSM8K: the worked solution, then "#### <answer>"
            answer = answer.rsplit("####", 1)[1].strip().replace(",", "")
        return answer or None
    solution = _as_text(row.get("solution"))
    if solution is not None:
        return extract_answer(solution) or None
    return None


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) of each line; ``where`` is its 1-based line number, as an editor shows it."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {number} must be a JSON object, got {type(row).__name__}")
            yield f"line {number}", row


def _json_array_rows(path: Path) -> list[Mapping[str, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: item {index + 1} must be a JSON object, got {type(row).__name__}")
    return rows


def _numbered(rows: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) with the row's 1-based number, as a user counts."""
    for number, row in enumerate(rows, start=1):
        yield f"row {number}", row


def _parquet_rows(path: Path) -> Iterable[Mapping[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading parquet needs pyarrow: pip install pyarrow") from exc
    return pq.read_table(path).to_pylist()


def load_math_problems(
    path: str | Path, *, limit: int | None = None, skip_unanswered: bool = False
) -> list[MathProblem]:
    """Read a math benchmark file.

    Args:
        path: a ``.jsonl`` file, a ``.json`` file (an array of objects, or one object per line) or a
            ``.parquet`` file.
        limit: keep only the first ``limit`` problems (None = all).
        skip_unanswered: leave out rows without a gold answer instead of refusing the file (MATH's train split
            has a few multiple-choice solutions whose answer is not boxed).

    Returns:
        The problems in file order.

    Raises:
        ValueError: unknown extension, a bad ``limit``, a malformed line, or a row without a problem or a
            gold answer (the message names the row).
    """
    path = Path(path)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")
    suffix = path.suffix.lower()
    if suffix == ".json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
        rows: Iterable[tuple[str, Mapping[str, Any]]] = _numbered(_json_array_rows(path))
    elif suffix in (".jsonl", ".json"):
        rows = _jsonl_rows(path)
    elif suffix == ".parquet":
        rows = _numbered(_parquet_rows(path))
    else:
        raise ValueError(f"path must end in .jsonl, .json or .parquet, got {str(path)!r}")
    problems: list[MathProblem] = []
    for where, row in rows:
        if limit is not None and len(problems) >= limit:
            break
        problem = _problem_text(row)
        if problem is None:
            raise ValueError(f"{path}: {where} has no problem text in {list(_PROBLEM_KEYS)}; keys: {sorted(row)}")
        answer = _gold_answer(row)
        if answer is None and skip_unanswered:
            continue
        if answer is None:
            raise ValueError(
                f"{path}: {where} has no gold answer (reward_model.ground_truth, answer, or a boxed "
                f"solution); keys: {sorted(row)}"
            )
        split = row.get("split")
        problems.append(
            MathProblem(problem=problem, answer=answer, level=_level(row), split=None if split is None else str(split))
        )
    return problems


def _level(row: Mapping[str, Any]) -> int | None:
    for key in ("difficulty", "level"):
        match = re.search(r"\d+", str(row.get(key, "")))
        if match:
            return int(match.group())
    return None
