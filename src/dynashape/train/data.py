"""Real datasets as ``Problem`` lists: JSONL or parquet with a question and an answer column (verl layout too).

Columns read: the question from ``prompt`` / ``problem`` / ``question`` (verl's ``prompt`` is a chat list:
the last user message's content is used), the gold from ``answer`` / ``solution`` /
``reward_model.ground_truth`` (verl); an optional ``level`` / ``difficulty`` column becomes the difficulty
(an int, else 0). The held-out split is a seeded 10 % (at most 500 problems) unless the file has a ``split``
column with ``test`` rows.
"""

from __future__ import annotations

import random
from pathlib import Path

from dynashape.datasets import load_math_problems
from dynashape.meds.keys import prompt_key
from dynashape.train.task import Problem

__all__ = ["load_dataset_problems"]


def load_dataset_problems(path: str | Path, *, seed: int = 0) -> tuple[list[Problem], list[Problem]]:
    """(train, test) problems from a dataset file read by `dynashape.datasets.load_math_problems`; prompts end
    with a newline like the toy's; the difficulty is the file's level (0 when absent)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data_path {str(path)!r} is not a file")
    items = load_math_problems(path)
    if not items:
        raise ValueError(f"data_path {str(path)!r} holds no records")
    problems = []
    for item in items:
        q = item.problem.rstrip() + "\n"
        problems.append(Problem(q, item.answer, item.level or 0, prompt_key(q)))
    test = [p for p, item in zip(problems, items, strict=True) if item.split == "test"]
    train = [p for p, item in zip(problems, items, strict=True) if item.split != "test"]
    if test and train:
        return train, test
    order = random.Random(f"data-split-{seed}").sample(range(len(problems)), len(problems))
    n_test = max(1, min(500, len(problems) // 10))
    test = [problems[i] for i in sorted(order[:n_test])]
    train = [problems[i] for i in sorted(order[n_test:])] or test
    return train, test
