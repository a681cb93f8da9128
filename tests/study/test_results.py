"""results.md / results.json / plots from a comparison folder's files (hand-made runs, no training)."""

from __future__ import annotations

import json

import pytest

from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.results import write_results
from dynashape.study.results_page import CLAIMS_BEGIN, CLAIMS_END

CLAIMS = COMPARISON_PLAN["full"].claims  # studies/v1.toml's


def _ev(acc, length, aes, lam=False):
    n_correct = [round(acc * 4)] * 4
    final = {
        "accuracy": acc,
        "mean_length": length,
        "n_samples": 4,
        "pass_at_k": {"1": acc, "2": min(1.0, acc + 0.1), "4": min(1.0, acc + 0.2)},
        "per_difficulty": {
            "1": {"accuracy": acc, "mean_length": length},
            "2": {"accuracy": acc, "mean_length": length},
        },
        "per_problem": {
            "difficulty": [1, 1, 2, 2],
            "is_trap": [False, True, False, True],
            "n_correct": n_correct,
            "mean_length": [length] * 4,
        },
        "pass_at_k_hard": {"1": 0.1, "2": 0.2, "4": 0.3},
        "per_problem_hard": {"difficulty": [2, 2], "is_trap": [True, False], "n_correct": [1, 0], "n_samples": 4},
    }
    ev = {"aes": aes, "base": {"accuracy": 0.5, "mean_length": 40.0}, "final": final, "wall_seconds": 3.0}
    if lam:
        ev["lambda_trajectory"] = {"step": [1, 2], "lambda_c": [0.9, 0.8], "lambda_l": [0.1, 0.2]}
    return ev


ACC = {"grpo": [0.5, 0.5, 0.75], "lead": [0.75, 0.75, 0.75], "gdpo": [0.5, 0.25, 0.5], "grpo_length": [0.5] * 3}
LEN = {"grpo": [40.0, 42.0, 44.0], "lead": [30.0, 31.0, 29.0], "gdpo": [35.0] * 3, "grpo_length": [36.0] * 3}
AES = {"grpo": [0.0, 0.01, 0.02], "lead": [0.3, 0.35, 0.4], "gdpo": [0.1, 0.12, 0.1], "grpo_length": [0.05] * 3}


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "comparison"
    out.mkdir()
    records = []
    for method in ACC:
        for s in range(3):
            records.append(
                {
                    "method": method,
                    "regime": "tight",
                    "seed": s,
                    "split": "test",
                    "point": "",
                    "run_dir": f"runs/tight/{method}-seed{s}",
                    "status": "trained",
                    "eval": _ev(ACC[method][s], LEN[method][s], AES[method][s], lam=method == "lead"),
                }
            )
    (out / "runs.json").write_text(json.dumps(records))
    tuning = {
        "tight": {
            m: {"key": "k", "grid": [1, 2, 3], "chosen": 2, "chosen_mean_aes": score, "values": []}
            for m, score in (("gdpo", 0.2), ("grpo_length", 0.1))
        }
    }
    tuning["tight"]["best_global"] = "gdpo"
    (out / "tuning.json").write_text(json.dumps(tuning))
    (out / "comparison.json").write_text(
        json.dumps(
            {"command": "dynashape compare --plan full", "wall_seconds": 3723.0, "jobs": 2, "machine": {"cpus": 2}}
        )
    )
    return out


def test_results_json_has_the_issues_shape_and_the_numbers(folder, tmp_path):
    report = tmp_path / "docs" / "results.md"
    written = write_results(folder, report, n_boot=200, claims=CLAIMS)
    data = json.loads(report.with_suffix(".json").read_text())
    assert report.with_suffix(".json") in written and report in written
    run = next(r for r in data["runs"] if r["method"] == "lead" and r["seed"] == 2)
    assert run["regime"] == "tight" and run["base"] == {"accuracy": 0.5, "mean_length": 40.0}
    assert {"accuracy", "mean_length", "pass_at_k", "per_difficulty"} <= set(run["final"]) and run["aes"] == 0.4
    assert {c["id"] for c in data["claims"]} == {"a", "b", "c", "d", "e"}
    for c in data["claims"]:
        assert c["verdict"] in ("holds", "fails", "inconclusive") and len(c["interval"]) == 2 and "estimate" in c
    # three seeds so far: every claim waits for five
    assert all(c["verdict"] == "inconclusive" for c in data["claims"])
    (a,) = [c for c in data["claims"] if c["id"] == "a"]
    assert a["parts"][0]["control"] == "gdpo" and a["estimate"] == pytest.approx((0.2 + 0.23 + 0.3) / 3)
    lead = next(r for r in data["summary"] if r["method"] == "lead")
    assert lead["n"] == 3 and lead["mean_length"]["mean"] == pytest.approx(30.0)
    assert lead["mean_length"]["sd"] == pytest.approx(1.0)  # 30, 31, 29
    # paired differences against grpo and against the best tuned baseline (gdpo: higher validation AES)
    d = next(x for x in data["differences"] if x["method"] == "lead" and x["versus"] == "grpo" and x["metric"] == "aes")
    assert d["estimate"] == pytest.approx((0.3 + 0.34 + 0.38) / 3) and d["n"] == 3
    assert any(x["versus"] == "gdpo" and x["role"] == "best tuned baseline" for x in data["differences"])
    assert data["wall_seconds"] == 3723.0 and data["command"] == "dynashape compare --plan full"
    # per difficulty: lead's accuracy on difficulty 2 is 0.75 on every seed; grpo's 0.5, 0.5, 0.75
    d2 = next(x for x in data["per_difficulty"] if x["method"] == "lead" and x["difficulty"] == 2)
    assert d2["accuracy"]["mean"] == pytest.approx(0.75) and d2["accuracy"]["sd"] == 0.0
    assert d2["accuracy"]["bootstrap_interval"] == pytest.approx([0.75, 0.75])  # every problem 3 of 4
    assert d2["accuracy"]["vs_grpo"]["estimate"] == pytest.approx((0.25 + 0.25 + 0.0) / 3)
    lo, hi = d2["accuracy"]["vs_grpo"]["bootstrap_interval"]
    assert 0.0 <= lo <= hi <= 0.25  # the paired per-problem differences are 0.25 or 0


def test_markdown_keeps_the_claims_verbatim_and_says_partial(folder, tmp_path):
    report = tmp_path / "results.md"
    mine = "## Claims (pre-registered)\n\nOur own words, committed before the runs: 1 < 2.\n"
    report.write_text(f"# old page\n\n{CLAIMS_BEGIN}\n{mine}{CLAIMS_END}\n\nold numbers\n")
    write_results(folder, report, n_boot=200, claims=CLAIMS)
    text = report.read_text()
    assert f"{CLAIMS_BEGIN}\n{mine}{CLAIMS_END}" in text and "old numbers" not in text
    assert "3 seeds so far" in text and "inconclusive (n < 5)" in text
    assert "1 h 02 min" in text  # 3723 s
    # the runs' own times: 12 runs of 3 s each (their eval.json wall_seconds), 2 at a time
    assert "the runs' own time summed: 0 min 36 s over 12 finished runs (test and tuning), 2 at a time" in text
    assert "Published" in text or "published" in text
    # regenerating is stable: the claims stay, once
    write_results(folder, report, n_boot=200, claims=CLAIMS)
    assert report.read_text().count(CLAIMS_BEGIN) == 1 and mine in report.read_text()


def test_plots_are_written_beside_the_page(folder, tmp_path):
    pytest.importorskip("matplotlib")
    report = tmp_path / "results.md"
    write_results(folder, report, n_boot=200, claims=CLAIMS)
    names = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert names == ["frontier_tight.png", "lambdas_tight.png", "passk_tight.png"]
    assert "](results/frontier_tight.png)" in report.read_text()


def test_an_empty_folder_gives_a_page_without_numbers(tmp_path):
    report = tmp_path / "results.md"
    write_results(tmp_path, report, n_boot=10, claims=CLAIMS)
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["runs"] == [] and all(c["n"] == 0 for c in data["claims"])
    assert "## Claims (pre-registered)" in report.read_text()


def test_every_method_gets_a_colour_and_marker_of_its_own():
    pytest.importorskip("matplotlib")
    from dynashape.study.results_plots import method_styles

    methods = [f"m{i}" for i in range(25)]
    styles = method_styles(methods)
    pairs = {(s["color"], s["marker"]) for s in styles.values()}
    assert len(pairs) == 25  # no two methods share both
    assert len({s["color"] for s in list(styles.values())[:20]}) == 20  # up to 20 methods, not even a colour
    assert method_styles(["b", "a"])["a"] == method_styles(["a", "c", "b"])["a"]  # stable across a page's plots


def test_an_adhoc_comparison_gets_a_page_of_what_ran_without_claims_or_tuning(folder, tmp_path):
    """`dynashape compare --methods grpo,lead` (no plan): the page names its methods and seeds, reports intervals,
    and has no claims, verdicts, tuning lines or link that would not resolve from where it is written."""
    import yaml

    from dynashape.study.pages import write_page

    meta = {"command": "dynashape compare --methods grpo,lead", "seeds": [0, 1, 2]}
    (folder / "comparison.json").write_text(json.dumps(meta))
    (folder / "tuning.json").unlink()
    for r in json.loads((folder / "runs.json").read_text()):
        run_dir = folder / r["run_dir"]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump({"eval": {"n_samples": 4}}))
    report = folder / "results.md"
    write_page(folder, report)
    text = report.read_text()
    assert text.startswith("# Results of an ad-hoc comparison")
    assert "4 methods (gdpo, grpo, grpo_length, lead) in the tight regime, seeds 0, 1, 2." in text
    for absent in ("pre-registered", "Verdicts", CLAIMS_BEGIN, "best_global not chosen", "Tuning", "comparison.md"):
        assert absent not in text, absent
    # lead - grpo accuracy per seed: 0.25, 0.25, 0; mean 1/6, sd 0.1443, t(0.975, 2) 4.303 * 0.0833 = 0.359
    assert "| lead | grpo | +0.167 [-0.192, 0.525] |" in text
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["claims"] == [] and data["evaluation"]["plan"] is None and not data["evaluation"]["deviations"]
    # an ad-hoc folder whose runs disagree on their evaluation is refused, naming the odd run
    (folder / "runs/tight/lead-seed1/config.yaml").write_text(yaml.safe_dump({"eval": {"n_samples": 16}}))
    with pytest.raises(ValueError, match="n_samples 16 where most runs have 4: 1 runs \\(runs/tight/lead-seed1\\)"):
        write_page(folder, report)


def test_the_frontier_limits_pad_the_methods_span_by_15_percent_with_a_floor():
    from dynashape.study.results_plots import frontier_limits

    # span 10 tokens and 0.1 accuracy: 1.5 and 0.015 on each side
    (x0, x1), (y0, y1) = frontier_limits([50.0, 60.0, 55.0], [0.7, 0.8])
    assert (x0, x1) == pytest.approx((48.5, 61.5)) and (y0, y1) == pytest.approx((0.685, 0.815))
    # span 1 token and 0.01 accuracy: the floors, 0.5 token and 0.005 accuracy
    (x0, x1), (y0, y1) = frontier_limits([50.0, 51.0], [0.70, 0.71])
    assert (x0, x1) == pytest.approx((49.5, 51.5)) and (y0, y1) == pytest.approx((0.695, 0.715))
