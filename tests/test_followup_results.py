"""The follow-up's results (results-v2.json and its page) from a hand-made folder of the v2 plan: the verdicts are
``followup.decide_claims``'s, every part carries its per-seed differences, the pre-registration is kept verbatim."""

from __future__ import annotations

import json

import pytest

from dynashape.study import followup
from dynashape.study.results import write_results
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


@pytest.fixture
def v2_folder(tmp_path):
    out = tmp_path / "cmp"
    records = []
    for method, values in ROWS.items():
        for i, (aes, acc) in enumerate(values):
            run_dir = out / "runs" / "tight" / f"{method}-seed{5 + i}"
            run_dir.mkdir(parents=True)
            (run_dir / "eval.json").write_text(json.dumps(_ev(aes, acc)))
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

    again = followup.decide_claims(runs_by_row(load_runs(v2_folder)))
    assert [p["verdict"] for c in again for p in c["parts"]] == [
        p["verdict"] for c in data["claims"] for p in c["parts"]
    ]
    assert data["best_global"] == {"tight": "grpo_length", "loose": "gdpo"}
    assert data["plan"]["passk_keys"] == followup.load_plan()["subset"]["keys"]
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
