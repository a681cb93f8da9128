"""examples/prepare_math_data.py: JSONL math records -> verl RL parquet rows (hand-worked records)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "prepare_math_data.py"


@pytest.fixture(scope="module")
def prep():
    spec = importlib.util.spec_from_file_location("prepare_math_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_last_boxed_keeps_nested_braces(prep):
    assert prep.last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert prep.last_boxed("no box") is None
    assert prep.last_boxed("\\boxed{unclosed") is None


def test_levels_and_rows(prep, tmp_path):
    records = [
        {"problem": "What is 1/2?", "solution": "Half: $\\boxed{\\frac{1}{2}}$.", "level": "Level 3"},
        {"problem": "Easy one", "answer": "4", "level": "Level 2"},
        {"question": "Hard one", "answer": "\\boxed{7}", "level": 5},
        {"problem": "No answer here", "level": "Level 4"},
    ]
    source = tmp_path / "math.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    test_source = tmp_path / "math500.jsonl"
    test_source.write_text(json.dumps({"problem": "Test q", "answer": "9", "level": "Level 1"}) + "\n")
    prep.main(
        [
            "--input",
            str(source),
            "--test-input",
            str(test_source),
            "--levels",
            "3",
            "4",
            "5",
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [row["reward_model"]["ground_truth"] for row in train] == ["\\frac{1}{2}", "7"]  # level 2 and no-answer out
    assert train[0]["prompt"] == [{"role": "user", "content": f"What is 1/2? {prep.INSTRUCTION}"}]
    assert train[0]["data_source"] == "math" and train[0]["ability"] == "math"
    assert train[1]["extra_info"] == {"split": "train", "index": 1, "question": "Hard one", "level": 5}
    assert [row["reward_model"]["ground_truth"] for row in test] == ["9"]  # --levels filters training only


def test_random_test_split_is_seeded(prep, tmp_path):
    source = tmp_path / "d.jsonl"
    source.write_text("\n".join(json.dumps({"problem": f"q{i}", "answer": str(i)}) for i in range(10)) + "\n")
    for run in ("a", "b"):
        prep.main(["--input", str(source), "--test-size", "3", "--output-dir", str(tmp_path / run)])
    a = pq.read_table(tmp_path / "a" / "test.parquet").to_pylist()
    b = pq.read_table(tmp_path / "b" / "test.parquet").to_pylist()
    assert a == b and len(a) == 3
    assert [row["extra_info"]["index"] for row in a] == [0, 1, 2]
    assert len(pq.read_table(tmp_path / "a" / "train.parquet")) == 7
