"""The follow-up's results (results-v2.json and its page) from a hand-made folder of the v2 plan: the verdicts are
``followup.decide_claims``'s, every part carries its per-seed differences, the pre-registration is kept verbatim."""

from __future__ import annotations

import json

import pytest
import yaml

from dynashape.study import preregistration as followup
from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.evaluation_check import EvaluationMismatchError
from dynashape.study.holm_page import post_hoc_reading
from dynashape.study.pages import write_page as write_results
from dynashape.study.results_page import CLAIMS_BEGIN, CLAIMS_END


def _ev(aes, acc, length=50.0):
    final = {
        "accuracy": acc,
        "mean_length": length,
        "n_samples": 16,
        "per_difficulty": {
            "1": {"accuracy": acc, "mean_length": 20.0},
            "8": {"accuracy": acc / 2, "mean_length": 90.0},
        },
        "per_problem_hard": {"difficulty": [8, 8], "is_trap": [True, True], "n_correct": [1, 40], "n_samples": 64},
    }
    return {"aes": aes, "base": {"accuracy": 0.5, "mean_length": 60.0}, "final": final, "wall_seconds": 10.0}


# lead clearly above lead_static on AES (part c1), six seeds; grpo a little below lead on accuracy (a2)
ROWS = {
    "lead": [(0.30 + 0.01 * s, 0.74) for s in range(6)],
    "lead_static": [(0.20, 0.73) for _ in range(6)],
    "grpo": [(0.25, 0.735 + 0.001 * s) for s in range(6)],
}


def _write_eval_config(run_dir, eval_fields):
    """The eval section of the config.yaml a run writes (the check reads it, never the plan object)."""
    ev = {k: list(v) if isinstance(v, tuple) else v for k, v in eval_fields.items()}
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"eval": ev}))


@pytest.fixture
def v2_folder(tmp_path):
    out = tmp_path / "cmp"
    records = []
    for method, values in ROWS.items():
        for i, (aes, acc) in enumerate(values):
            run_dir = out / "runs" / "tight" / f"{method}-seed{5 + i}"
            run_dir.mkdir(parents=True)
            (run_dir / "eval.json").write_text(json.dumps(_ev(aes, acc)))
            _write_eval_config(run_dir, COMPARISON_PLAN["v2"].eval)
            records.append(
                {"method": method, "regime": "tight", "seed": 5 + i, "split": "test", "point": "",
                 "run_dir": str(run_dir.relative_to(out)), "status": "trained"}
            )  # fmt: skip
    (out / "runs.json").write_text(json.dumps(records))
    meta = {"command": "dynashape compare --plan v2", "plan": "v2", "row_seeds": {"tight/lead": 20}, "jobs": 2}
    (out / "comparison.json").write_text(json.dumps(meta))
    return out


def test_a_v2_folder_gets_the_followup_page_with_holm_verdicts(v2_folder, tmp_path):
    report = tmp_path / "docs" / "results-v2.md"
    written = write_results(v2_folder, report)
    data = json.loads(report.with_suffix(".json").read_text())
    claims = {c["id"]: c for c in data["claims"]}
    (c1,) = claims["c"]["parts"]
    # differences 0.10 .. 0.15 over seeds 5-10: the part's record lets a reader recompute the estimate
    assert c1["seeds"] == list(range(5, 11)) and c1["n"] == 6
    assert c1["differences"] == pytest.approx([0.10 + 0.01 * s for s in range(6)])
    assert c1["estimate"] == pytest.approx(0.125) and c1["verdict"] == "holds"
    assert c1["p_adjusted"] == pytest.approx(min(1.0, 10 * c1["p_value"]))  # the only testable part: Holm's first step
    assert claims["c"]["verdict"] == "holds" and claims["a"]["verdict"] == "inconclusive"
    # the whole decision is followup.decide_claims's on the same runs
    from dynashape.study.results import load_runs, runs_by_row

    again = followup.decide_claims(runs_by_row(load_runs(v2_folder)), COMPARISON_PLAN["v2"])
    assert [p["verdict"] for c in again for p in c["parts"]] == [
        p["verdict"] for c in data["claims"] for p in c["parts"]
    ]
    assert data["best_global"] == {"tight": "grpo_length", "loose": "gdpo"}
    assert data["plan"]["passk_keys"] == list(COMPARISON_PLAN["v2"].eval["passk_keys"])
    assert {r["method"] for r in data["runs"]} == set(ROWS) and all("trap_pass@32" in r["final"] for r in data["runs"])
    text = report.read_text()
    assert "Partial results: 18 of the 20 planned runs" in text
    assert "| c1 | tight: aes lead - lead_static >= |" in text
    # a new page gets the pre-registration as the code states it, and a rewrite keeps it verbatim
    kept = text.split(CLAIMS_BEGIN)[1].split(CLAIMS_END)[0]
    assert "### Power analysis" in kept
    report.write_text(text.replace("### Power analysis", "### Power analysis (kept)"))
    write_results(v2_folder, report)
    assert "### Power analysis (kept)" in report.read_text()
    if pytest.importorskip("matplotlib"):
        assert report.parent / "results-v2" / "paired_differences.png" in written


def test_runs_evaluated_otherwise_than_registered_are_named_and_get_no_verdict(v2_folder, tmp_path):
    """Two runs that wrote 4 samples and v1's subset (what the as-run v2 did): refused, naming the fields, values
    and runs; with deviating=True the page is written, marked, and the JSON keeps every run's own settings."""
    for name in ("lead-seed5", "grpo-seed7"):
        _write_eval_config(v2_folder / "runs" / "tight" / name, {"n_samples": 4})
    report = tmp_path / "results-v2.md"
    with pytest.raises(EvaluationMismatchError) as err:
        write_results(v2_folder, report)
    message = str(err.value)
    assert "2 runs" in message and "runs/tight/grpo-seed7" in message and "runs/tight/lead-seed5" in message
    assert "n_samples 4 where the plan has 16" in message and "passk_keys null where the plan has 40 keys" in message
    assert not report.exists()  # nothing written
    write_results(v2_folder, report, deviating=True)
    text = report.read_text()
    assert "## Deviation from the registration" in text and "marked as deviating**: 2 of the 18" in text
    # the command that rewrites the page names this page (not the re-run's) and the flag it needs
    assert f"`dynashape results {v2_folder} --report {report} --deviating`." in text
    assert f"Generated by `dynashape results {v2_folder} --report {report}`" in text
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["evaluation"]["plan"]["n_samples"] == 16 and len(data["evaluation"]["plan"]["passk_keys"]) == 40
    assert data["evaluation"]["runs"]["runs/tight/lead-seed5"]["n_samples"] == 4
    assert data["evaluation"]["runs"]["runs/tight/lead-seed6"]["n_samples"] == 16
    assert data["evaluation"]["deviating_runs"] == ["runs/tight/grpo-seed7", "runs/tight/lead-seed5"]


def test_a_matching_folder_is_not_marked_and_hand_written_notes_are_kept(v2_folder, tmp_path):
    report = tmp_path / "results-v2.md"
    write_results(v2_folder, report)
    assert "Deviation from the registration" not in report.read_text()
    text = report.read_text().replace(
        "## Verdicts",
        "## Deviation from the registration\n\n<!-- notes:begin -->\nWhy, by hand.\n<!-- notes:end -->\n\n## Verdicts",
    )
    report.write_text(text)
    write_results(v2_folder, report)
    again = report.read_text()
    assert again.count("<!-- notes:begin -->\nWhy, by hand.\n<!-- notes:end -->") == 1
    assert "Every finished run's config.yaml has the registered evaluation." in again


@pytest.mark.parametrize(
    ("relation", "bound", "margin", "interval", "power", "expected"),
    [
        # b1 as run: lead - grpo length < 0, margin 2: hoped for -2; [0.3, 1.8] lies above it, power 0.9
        ("<", 0.0, 2.0, [0.3, 1.8], 0.9, "excludes the hoped-for effect -2"),
        # d1: > 0, margin 0.05: hoped for +0.05; [-0.029, 0.017] lies below it
        (">", 0.0, 0.05, [-0.029, 0.017], 0.9, "excludes the hoped-for effect +0.05"),
        (">", 0.0, 0.05, [-0.029, 0.06], 0.9, None),  # the interval reaches the hoped-for effect
        (">", 0.0, 0.05, [-0.029, 0.017], 0.5, None),  # too little power to read anything into it
    ],
)
def test_post_hoc_reading_only_for_powered_parts_whose_interval_excludes_the_hoped_effect(
    relation, bound, margin, interval, power, expected
):
    part = {"verdict": "inconclusive", "relation": relation, "bound": bound, "margin": margin,
            "interval": interval, "power": power}  # fmt: skip
    reading = post_hoc_reading(part)
    if expected is None:
        assert reading is None
    else:
        assert reading.startswith("post hoc, not a verdict") and expected in reading
    assert post_hoc_reading({**part, "verdict": "holds"}) is None


def test_rerun_determinism_names_a_run_whose_metrics_differ_and_ignores_timings(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "rerun_determinism.py"
    step = {"step": 1, "accuracy": 0.5, "time/step": 1.0}
    for root, slow, acc in (("as-run", 1.0, 0.5), ("rerun", 9.0, 0.5)):
        for run, value in (
            ("runs/tight/grpo-seed5", acc),
            ("runs/tight/lead-seed5", 0.5 if root == "as-run" else 0.25),
        ):
            d = tmp_path / root / run
            d.mkdir(parents=True)
            (d / "metrics.jsonl").write_text(json.dumps({**step, "accuracy": value, "time/step": slow}) + "\n")
            (d / "eval.json").write_text("{}")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "rerun"), str(tmp_path / "as-run")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1
    assert "1 of 2 re-run runs log the as-run metrics value for value; 1 differ: runs/tight/lead-seed5" in done.stdout
    report = json.loads((tmp_path / "rerun" / "determinism.json").read_text())
    assert report["identical"] == ["runs/tight/grpo-seed5"]  # time/step differs there, and is not a number to match
    assert report["different"]["runs/tight/lead-seed5"] == ["metrics[0]/accuracy: 0.5 != 0.25"]
