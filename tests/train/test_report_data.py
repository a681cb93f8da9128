"""Comparison tables, the report writer, dataset loading and the CLI's argument handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynashape.cli import build_parser
from dynashape.cli.commands import _overrides
from dynashape.study.tables import compare_markdown, summarise_runs
from dynashape.train.report import summarise_lambda, write_report
from dynashape.world.datasets import load_dataset_problems


def _eval(acc, length, aes, seed_shift=0.0):
    base = {
        "accuracy": 0.5,
        "mean_length": 100.0,
        "pass_at_k": {"1": 0.5, "2": 0.6, "4": 0.7},
        "n_samples": 4,
        "n_problems": 10,
        "max_new_tokens": 256,
        "temperature": 1.0,
        "per_difficulty": {"2": {"accuracy": 0.9, "mean_length": 50.0}, "3": {"accuracy": 0.1, "mean_length": 150.0}},
    }
    final = dict(
        base, accuracy=acc + seed_shift, mean_length=length, pass_at_k={"1": acc + seed_shift, "2": 0.8, "4": 0.9}
    )
    return {
        "method": "lead",
        "steps": 5,
        "base": base,
        "final": final,
        "aes": aes,
        "aes_constants": {"alpha": 1.0, "beta": 3.0, "gamma": 5.0, "on": "averages"},
        "length_ratio": length / 100.0,
        "accuracy_delta": acc - 0.5,
        "wall_seconds": 12.0,
    }


def test_compare_table_mean_and_sd():
    results = {"lead": [_eval(0.5, 60.0, 0.4), _eval(0.5, 80.0, 0.2, 0.1)], "grpo": [_eval(0.4, 90.0, None)]}
    summary = summarise_runs(results)
    assert summary["lead"]["length"] == [60.0, 80.0]
    assert summary["lead"]["pass@n"] == [0.9, 0.9]
    text = compare_markdown(results)
    # mean 70, sample sd sqrt(((60-70)^2 + (80-70)^2) / 1) = 14.142
    assert "| lead | 0.550 ± 0.071 | 70.000 ± 14.142 | 0.700 ± 0.141 | 0.300 ± 0.141 |" in text
    assert "| grpo | 0.400 | 90.000 | 0.900 | nan |" in text
    assert "53.36" in text and "66.72" in text  # the papers' rows travel with the table
    with pytest.raises(ValueError, match="results"):
        compare_markdown({})


def test_write_report(tmp_path):
    metrics = [
        {
            "step": float(i),
            "accuracy": 0.5,
            "length/mean": 50.0 - i,
            "lead/lambda_l": 0.5 - 0.02 * i,
            "lead/lambda_c": 0.5 + 0.02 * i,
            "lead/target_len_mean": 40.0,
            "lead/efficiency_correct_mean": 0.7,
        }
        for i in range(1, 13)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (tmp_path / "eval.json").write_text(json.dumps(_eval(0.55, 60.0, 0.7)))
    path = write_report(tmp_path)
    text = path.read_text()
    assert "| base | 0.500 | 100.0 |" in text and "| final | 0.550 | 60.0 |" in text
    assert "60.0%" in text  # length ratio
    for png in ("accuracy_length.png", "lambdas.png", "lead_targets.png", "per_difficulty.png", "pass_at_k.png"):
        assert (tmp_path / png).stat().st_size > 1000, png
    assert "(mean over the last 10 steps: " in text
    lam = summarise_lambda(metrics)
    assert lam["first"] == pytest.approx(0.48) and lam["last"] == pytest.approx(0.26) and lam["tail_steps"] == 10
    assert lam["last10_mean"] == pytest.approx(sum(0.5 - 0.02 * i for i in range(3, 13)) / 10)


def test_dataset_loader_jsonl_and_verl(tmp_path):
    rows = [{"problem": f"What is {i}+1?", "answer": str(i + 1), "level": f"Level {i % 5 + 1}"} for i in range(30)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, test = load_dataset_problems(path, seed=0)
    assert len(test) == 3 and len(train) == 27
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert test[0].prompt.endswith("?\n") and test[0].difficulty in range(1, 6)
    verl = [
        {"prompt": [{"role": "user", "content": "2+2?"}], "reward_model": {"ground_truth": "4"}, "split": "test"},
        {"prompt": [{"role": "user", "content": "3+3?"}], "reward_model": {"ground_truth": "6"}, "split": "train"},
    ]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(verl), tmp_path / "v.parquet")
    train, test = load_dataset_problems(tmp_path / "v.parquet")
    assert [(p.prompt, p.answer) for p in test] == [("2+2?\n", "4")]
    assert [(p.prompt, p.answer) for p in train] == [("3+3?\n", "6")]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match="line 1 has no problem text"):
        load_dataset_problems(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="--data"):
        load_dataset_problems(tmp_path / "missing.csv")


def test_cli_overrides_and_defaults():
    assert _overrides(["lr=5e-4", "shaper_kwargs.b_max=80", "dynamic_sampling=true", "eval.n_samples=2"]) == {
        "train": {"lr": 5e-4, "shaper_kwargs": {"b_max": 80}, "dynamic_sampling": True},
        "eval": {"n_samples": 2},
    }
    with pytest.raises(ValueError, match="key=value"):
        _overrides(["lr"])
    args = build_parser().parse_args(["train"])
    assert args.method == "lead" and args.device == "cpu" and args.model is None


def test_report_names_plain_grpo_from_a_comparison_or_says_it_has_none(tmp_path):
    from dynashape.train.grpo_reference import load_reference, reference_line

    results = tmp_path / "results.json"
    lead = {"method": "lead", "regime": "tight", "steps": 3}
    results.write_text(json.dumps({"runs": []}))
    assert "holds no `grpo` run in the tight regime" in reference_line(lead, load_reference(results))
    runs = [
        {"method": "grpo", "regime": "tight", "seed": s, "base": {"mean_length": 60.0},
         "final": {"accuracy": acc, "mean_length": length}}
        for s, acc, length in ((0, 0.5, 54.0), (1, 0.6, 48.0))
    ] + [{"method": "grpo", "regime": "loose", "seed": 0, "base": {"mean_length": 60.0},
          "final": {"accuracy": 0.9, "mean_length": 90.0}}]  # fmt: skip
    results.write_text(json.dumps({"runs": runs}))
    text = reference_line(lead, load_reference(results))
    # mean over the tight seeds only: accuracy (0.5 + 0.6) / 2, length (54 + 48) / 2 = 51 = 85 % of 60
    assert "seeds 0, 1" in text and "accuracy 0.550" in text and "mean length 51.0 tokens (85% of base)" in text
    assert "steps not recorded there" in text and "not a like-for-like" not in text  # a results.json has no steps
    loose = reference_line({"method": "lead", "regime": "loose"}, load_reference(results))
    assert "seeds 0;" in loose and "accuracy 0.900" in loose and "--regime loose" in loose


def test_the_shipped_grpo_reference_is_the_comparisons_and_names_its_steps(tmp_path):
    """The package's reference equals what ``summarise_results`` makes of docs/results.json (the full plan's runs
    train the preset's steps); beside a shorter run, report.md says so."""
    from dynashape.train.grpo_reference import SHIPPED, load_reference, reference_line, summarise_results
    from dynashape.train.presets import make_train_config

    docs = Path(__file__).resolve().parents[2] / "docs" / "results.json"
    made = summarise_results(
        json.loads(docs.read_text()),
        source="the pre-registered comparison (docs/results.json)",
        steps=make_train_config("grpo").steps,
    )
    assert json.loads(SHIPPED.read_text()) == made == load_reference()
    text = reference_line({"method": "lead", "regime": "tight", "steps": 3}, load_reference())
    assert "(the pre-registered comparison (docs/results.json): 50 steps, seeds 0, 1, 2, 3, 4;" in text
    assert "This run trained 3 steps, not 50" in text
    assert "This run trained" not in reference_line({"method": "lead", "regime": "tight", "steps": 50}, made)


def test_a_short_run_says_over_how_many_steps_lambda_was_averaged(tmp_path):
    metrics = [{"step": float(i), "accuracy": 0.5, "length/mean": 50.0, "lead/lambda_l": 0.5} for i in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (tmp_path / "eval.json").write_text(json.dumps(_eval(0.55, 60.0, 0.7) | {"steps": 1}))
    text = write_report(tmp_path).read_text()
    assert "(mean over all 3 steps: 0.500)" in text and "1 RL step," in text and "last 10" not in text
