"""Write verl parquet files (train.parquet, test.parquet) from any JSONL math dataset.

Each JSONL line is one problem. The question is read from the first present of ``--question-keys`` (default
problem, question, prompt), the gold answer from ``--answer-keys`` (default answer, final_answer, solution,
ground_truth; a solution text contributes its last ``\\boxed{...}``), the difficulty from ``--level-key``
(MATH's "Level 3" or a number). Rows of verl's RL dataset format::

    data_source: str                        (--data-source, default the input file's stem)
    prompt: [{"role": "user", "content": question + instruction}]
    ability: "math"
    reward_model: {"style": "rule", "ground_truth": answer}
    extra_info: {"split", "index", "question", "level"}

Usage (MATH levels 3-5 for LEAD, MATH-500 as the test split)::

    python examples/prepare_math_data.py --input math_train.jsonl --levels 3 4 5 \\
        --test-input math500.jsonl --output-dir ~/data/math_l35

Without ``--test-input``, ``--test-size`` rows (default 0) are split off the training data at random (seeded).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
QUESTION_KEYS = ("problem", "question", "prompt")
ANSWER_KEYS = ("answer", "final_answer", "solution", "ground_truth")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def parse_level(value: Any) -> int | None:
    """MATH's "Level 3" -> 3; 3 -> 3; anything else -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    match = re.search(r"\d+", str(value)) if value is not None else None
    return int(match.group()) if match else None


def first_present(record: dict[str, Any], keys: Sequence[str]) -> tuple[str, Any] | None:
    for key in keys:
        if record.get(key) not in (None, ""):
            return key, record[key]
    return None


def to_verl_row(
    record: dict[str, Any],
    *,
    index: int,
    split: str,
    data_source: str,
    question_keys: Sequence[str] = QUESTION_KEYS,
    answer_keys: Sequence[str] = ANSWER_KEYS,
    level_key: str = "level",
    instruction: str = INSTRUCTION,
) -> dict[str, Any] | None:
    """One verl RL row from one JSONL record, or None when it has no question or no usable answer."""
    question = first_present(record, question_keys)
    answer = first_present(record, answer_keys)
    if question is None or answer is None:
        return None
    key, value = answer
    gold = str(value).strip()
    if key == "solution" or "\\boxed{" in gold:
        gold = last_boxed(gold) or ("" if key == "solution" else gold)
    if not gold:
        return None
    text = str(question[1]).strip()
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{text} {instruction}".strip()}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gold},
        "extra_info": {"split": split, "index": index, "question": text, "level": parse_level(record.get(level_key))},
    }


def read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number}: not a JSON object ({err.msg})") from err


def convert(paths: Sequence[Path], split: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    skipped = 0
    for path in paths:
        source = args.data_source or path.stem
        for record in read_jsonl(path):
            level = parse_level(record.get(args.level_key))
            if args.levels and split == "train" and level not in args.levels:
                continue
            row = to_verl_row(
                record,
                index=len(rows),
                split=split,
                data_source=source,
                question_keys=args.question_keys,
                answer_keys=args.answer_keys,
                level_key=args.level_key,
                instruction=args.instruction,
            )
            if row is None:
                skipped += 1
            else:
                rows.append(row)
    print(f"{split}: {len(rows)} rows from {', '.join(map(str, paths))} ({skipped} skipped: no question/answer)")
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, action="append", required=True, help="training JSONL (repeatable)")
    parser.add_argument("--test-input", type=Path, action="append", default=[], help="test JSONL (repeatable)")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--levels", type=int, nargs="*", default=[], help="keep these training levels only")
    parser.add_argument("--test-size", type=int, default=0, help="rows split off train without --test-input")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-source", default=None)
    parser.add_argument("--question-keys", nargs="+", default=list(QUESTION_KEYS))
    parser.add_argument("--answer-keys", nargs="+", default=list(ANSWER_KEYS))
    parser.add_argument("--level-key", default="level")
    parser.add_argument("--instruction", default=INSTRUCTION)
    args = parser.parse_args(argv)

    train = convert(args.input, "train", args)
    if args.test_input:
        test = convert(args.test_input, "test", args)
    else:
        random.Random(args.seed).shuffle(train)
        test, train = train[: args.test_size], train[args.test_size :]
        for split, rows in (("train", train), ("test", test)):
            for i, row in enumerate(rows):
                row["extra_info"] = {**row["extra_info"], "split": split, "index": i}
    if not train:
        raise SystemExit("no training rows written: check --question-keys/--answer-keys/--levels")
    write_parquet(train, args.output_dir / "train.parquet")
    if test:
        write_parquet(test, args.output_dir / "test.parquet")
    print(f"wrote {len(train)} train and {len(test)} test rows to {args.output_dir}")


if __name__ == "__main__":
    main()
