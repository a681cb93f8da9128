"""The field comparison's page (``dynashape results`` on a folder of plan field) from a hand-made field folder and a
hand-made follow-up folder holding its controls: hand-worked paired differences and t-intervals, the plan block
kept byte for byte, the refusals (a missing control, a control evaluated otherwise or not paired, a page without
the plan's markers), the plots, and a JSON whose every difference recomputes from the run files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.controls_page import PLAN_BEGIN, PLAN_END
from dynashape.study.controls_results import FIELD_MEASURES, measure_value
from dynashape.study.controls_runs import ControlsError
from dynashape.study.evaluation_check import EvaluationMismatchError
from dynashape.study.pages import write_page
from dynashape.study.results_page import NOTES_BEGIN, NOTES_END
from dynashape.study.roles import roles_of

REPO = Path(__file__).resolve().parents[2]
SEEDS = (5, 6, 7)
BUDGET = {"tight": 101, "loose": 164}
T_975_2 = 4.302652729911275  # Student's t, 97.5 % quantile, 2 degrees of freedom (tables: 4.303)

# accuracy per seed 5, 6, 7 (tight); the loose regime adds 0.01 to every run
ACCURACY = {
    "adlp": (0.70, 0.74, 0.72),
    "laser_d": (0.66, 0.69, 0.70),
    "l1_exact": (0.60, 0.62, 0.61),
    "grpo": (0.68, 0.70, 0.71),
    "lead": (0.69, 0.73, 0.70),
}
LENGTH = {"adlp": 50.0, "laser_d": 45.0, "l1_exact": 40.0, "grpo": 60.0, "lead": 58.0}
FIELD = ("adlp", "laser_d", "l1_exact")


def _evaluation(acc: float, length: float, trap_correct: tuple[int, int], truncated: float) -> dict:
    return {
        "accuracy": acc,
        "mean_length": length,
        "truncated_frac": truncated,
        "truncated_at_budget": 2 * truncated,
        "n_samples": 16,
        "per_difficulty": {"1": {"accuracy": acc, "mean_length": length}},
        # pass@32 of 64 samples: 0 correct -> 0, 33 or more -> 1 (C(31, 32) = 0)
        "per_problem_hard": {"difficulty": [8, 8], "is_trap": [True, True], "n_correct": list(trap_correct),
                             "n_samples": 64},
    }  # fmt: skip


def _write_run(run_dir: Path, method: str, regime: str, i: int, seed: int) -> None:
    run_dir.mkdir(parents=True)
    bump = 0.01 if regime == "loose" else 0.0
    acc = ACCURACY[method][i] + bump
    length = LENGTH[method] + i
    ev = {
        "method": method,
        "base": _evaluation(0.5, 67.0 + i, (0, 0), 0.0),
        "final": _evaluation(acc, length, (0, 40) if method != "grpo" else (0, 0), 0.01 * i),
        "aes": 1.0 + acc,
        "base_model": {"sha256": "feed"},
        "wall_seconds": 100.0,
        "seed": seed,
    }
    if method == "l1_exact":
        ev["at_budget"] = {
            str(b): {"accuracy": 0.5 + 0.01 * i, "mean_length": b + i, "following_error": 0.1 * (i + 1),
                     "truncated_frac": 0.0}
            for b in (13, 25)
        }  # fmt: skip
    (run_dir / "eval.json").write_text(json.dumps(ev))
    eval_section = {k: list(v) if isinstance(v, tuple) else v for k, v in COMPARISON_PLAN["v2"].eval.items()}
    config = {
        "train": {"method": method, "shaper": method, "regime": regime, "seed": seed, "max_new_tokens": BUDGET[regime]},
        "eval": {**eval_section, "seed": 6234 + 1000 * seed},
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = []
    for step in (1, 2, 3):
        line = {"step": float(step), "accuracy": 0.5}
        if method == "adlp":
            line["adlp/lambda"] = 0.08 + 0.01 * step + 0.001 * i
        if method == "laser_d":
            line |= {"laser_d/target_low": 25.0, "laser_d/target_medium": 50.0 + i, "laser_d/target_high": 0.0}
        if method == "lead":
            line["lead/lambda_l"] = 0.5 - 0.1 * step
        metrics.append(json.dumps(line))
    (run_dir / "metrics.jsonl").write_text("\n".join(metrics) + "\n")
    commit = "99d910dfaa3da6028949a7d8be22c40e88a25bc2" if method in ("grpo", "lead") else "f" * 40
    history = [{"started": "2026-12-05T00:00:00Z", "from_step": 0, "commit": commit, "dirty": False}]
    if method == "laser_d" and seed == 6:  # killed and resumed once
        history.append({"started": "2026-12-05T01:00:00Z", "from_step": 20, "commit": commit, "dirty": False})
    (run_dir / "history.jsonl").write_text("\n".join(json.dumps(h) for h in history) + "\n")


@pytest.fixture
def folders(tmp_path):
    """results/comparison-field (3 field methods x 2 regimes x 3 seeds) and its sibling results/comparison-v2 with
    the grpo and lead runs of those seeds; docs/results-field.md, the committed page (plan block and all)."""
    field, controls = tmp_path / "results" / "comparison-field", tmp_path / "results" / "comparison-v2"
    records = []
    for regime in BUDGET:
        for i, seed in enumerate(SEEDS):
            for method in FIELD:
                rel = f"runs/{regime}/{method}-seed{seed}"
                _write_run(field / rel, method, regime, i, seed)
                records.append({"method": method, "regime": regime, "seed": seed, "split": "test", "point": "",
                                "run_dir": rel, "status": "trained"})  # fmt: skip
            for method in ("grpo", "lead"):
                _write_run(controls / f"runs/{regime}/{method}-seed{seed}", method, regime, i, seed)
    records.append({"method": "saw", "regime": "tight", "seed": 5, "split": "test", "point": "",
                    "run_dir": "runs/tight/saw-seed5", "status": "failed"})  # fmt: skip
    (field / "runs.json").write_text(json.dumps(records))
    meta = {"plan": "field", "command": "dynashape compare --plan field --jobs 2 --out results/comparison-field",
            "rows": {"tight": [*FIELD, "saw"], "loose": list(FIELD)}, "seeds": [5, 6, 7, 8, 9], "jobs": 2}  # fmt: skip
    (field / "comparison.json").write_text(json.dumps(meta))
    page = tmp_path / "docs" / "results-field.md"
    page.parent.mkdir()
    page.write_bytes((REPO / "docs" / "results-field.md").read_bytes())
    return field, controls, page


@pytest.fixture
def no_plots(monkeypatch):
    """Tables only, for the tests that read numbers (the plots have their own test): seconds saved."""
    from dynashape.study import controls_plots

    monkeypatch.setattr(controls_plots, "plot_controls", lambda results, folder, rows=(), roles=None: [])


def _head(data: bytes) -> bytes:
    end = data.index(PLAN_END.encode()) + len(PLAN_END)
    return data[:end]


def _difference(data, regime, method, versus, metric):
    (entry,) = [d for d in data["differences"] if (d["regime"], d["method"], d["versus"], d["metric"]) ==
                (regime, method, versus, metric)]  # fmt: skip
    return entry


def test_the_paired_difference_and_its_t_interval_are_the_hand_worked_ones(folders, no_plots):
    field, _, page = folders
    write_page(field, page)
    data = json.loads(page.with_suffix(".json").read_text())
    d = _difference(data, "tight", "adlp", "grpo", "accuracy")
    # 0.70 - 0.68, 0.74 - 0.70, 0.72 - 0.71 = 0.02, 0.04, 0.01: mean 0.07 / 3, sd sqrt(0.00046667 / 2)
    assert d["seeds"] == [5, 6, 7] and d["n"] == 3
    assert d["differences"] == pytest.approx([0.02, 0.04, 0.01])
    mean = 0.07 / 3
    sd = math.sqrt(((0.02 - mean) ** 2 + (0.04 - mean) ** 2 + (0.01 - mean) ** 2) / 2)
    assert sd == pytest.approx(0.0152753, abs=1e-7)
    half = T_975_2 * sd / math.sqrt(3)
    assert d["estimate"] == pytest.approx(mean)
    assert d["interval"] == pytest.approx([mean - half, mean + half])
    assert d["interval"] == pytest.approx([-0.014613, 0.061279], abs=1e-6)
    # trap pass@32: every field run 0.5 (one trap prompt never solved, one solved 40 of 64), grpo 0
    assert _difference(data, "loose", "laser_d", "grpo", "trap_pass@32")["estimate"] == pytest.approx(0.5)
    assert _difference(data, "loose", "laser_d", "lead", "trap_pass@32")["interval"] == pytest.approx([0.0, 0.0])
    # the rows: mean over seeds with its t-interval; the base beside them, its AES 0 by definition
    (row,) = [r for r in data["summary"] if (r["regime"], r["method"]) == ("tight", "lead")]
    assert row["source"] == "controls" and row["accuracy"]["mean"] == pytest.approx(0.70 + 0.02 / 3)
    assert row["base"] == pytest.approx({"accuracy": 0.5, "mean_length": 68.0})
    assert row["truncated_frac"]["mean"] == pytest.approx(0.01) and row["truncated_at_budget"]["mean"] == 0.02
    assert row["mean_length"]["interval"] == pytest.approx(
        [59.0 - T_975_2 / math.sqrt(3), 59.0 + T_975_2 / math.sqrt(3)]
    )
    assert data["base"]["tight"]["mean_length"]["mean"] == pytest.approx(68.0)
    assert data["base"]["tight"]["aes"]["mean"] == 0.0
    text = page.read_text()
    assert "| adlp | 3 | +0.023 [-0.015, +0.061] |" in text
    assert "significant" not in text.split(PLAN_END)[1].lower()


def test_the_plan_block_is_kept_byte_for_byte_and_only_what_follows_is_rewritten(folders, no_plots):
    field, _, page = folders
    text = page.read_text()  # the committed page, with its hand-written notes (if any) taken out
    if NOTES_BEGIN in text:
        text = text[: text.index(NOTES_BEGIN) + len(NOTES_BEGIN) + 1] + text[text.index(NOTES_END) :]
        page.write_text(text)
    original = page.read_bytes()
    page.write_bytes(original + b"\nstale text of an earlier write\n")
    write_page(field, page)
    written = page.read_bytes()
    assert _head(written) == _head(original) and PLAN_BEGIN.encode() in _head(written)
    assert b"stale text" not in written and b"## What this world can and cannot say" in written
    write_page(field, page)  # a second write keeps the same head again
    assert _head(page.read_bytes()) == _head(original)
    # hand-written notes between their markers survive a rewrite; the commits differ, so the page asks for them
    assert "same_run_numbers.py" in page.read_text() and "none is recorded there yet" in page.read_text()
    note = "scripts/same_run_numbers.py: grpo seed 5 at 99d910d and at the field's commit, every number equal."
    page.write_text(page.read_text().replace(f"{NOTES_BEGIN}\n", f"{NOTES_BEGIN}\n{note}\n"))
    write_page(field, page)
    assert f"{NOTES_BEGIN}\n{note}\n{NOTES_END}" in page.read_text()
    assert "none is recorded there yet" not in page.read_text()
    assert _head(page.read_bytes()) == _head(original)


def test_a_page_without_the_plan_markers_is_refused_and_nothing_is_written(folders):
    field, _, page = folders
    page.write_text("# The field\n\n## Results\n\nold numbers\n")
    with pytest.raises(ValueError, match="plan:begin"):
        write_page(field, page)
    assert page.read_text() == "# The field\n\n## Results\n\nold numbers\n"
    assert not page.with_suffix(".json").exists() and not page.with_suffix("").exists()
    page.write_text(f"# The field\n\n{PLAN_END}\n\n{PLAN_BEGIN}\n")  # end before begin: no block
    with pytest.raises(ValueError, match="no plan block"):
        write_page(field, page)


def test_a_missing_control_seed_is_refused_naming_the_run(folders):
    field, controls, page = folders
    before = page.read_bytes()
    (controls / "runs/loose/lead-seed6/eval.json").unlink()  # unfinished
    with pytest.raises(ControlsError, match="runs/loose/lead-seed6"):
        write_page(field, page)
    assert page.read_bytes() == before and not page.with_suffix(".json").exists()


def test_a_control_evaluated_otherwise_is_refused_naming_the_field(folders):
    field, controls, page = folders
    path = controls / "runs/tight/grpo-seed7/config.yaml"
    config = yaml.safe_load(path.read_text())
    config["eval"]["n_samples"] = 4
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(EvaluationMismatchError, match=r"n_samples 4 .*runs/tight/grpo-seed7"):
        write_page(field, page)


def test_a_control_not_paired_with_its_seed_is_refused(folders):
    field, controls, page = folders
    path = controls / "runs/tight/lead-seed5/config.yaml"
    config = yaml.safe_load(path.read_text())
    config["eval"]["seed"] += 1  # another evaluation draw: not the field run's pair
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ControlsError, match=r"tight/lead-seed5 .*eval\.seed"):
        write_page(field, page)


def test_the_controls_folder_defaults_to_the_sibling_and_an_option_names_another(folders, no_plots, tmp_path):
    field, controls, page = folders
    moved = controls.rename(tmp_path / "elsewhere")
    with pytest.raises(ControlsError, match="comparison-v2 does not exist"):
        write_page(field, page)
    from dynashape.cli import main

    assert main(["results", str(field), "--report", str(page), "--controls", str(moved)]) == 0
    data = json.loads(page.with_suffix(".json").read_text())
    assert data["controls"]["folder"] == str(moved) and data["controls"]["default"] is False
    assert data["controls"]["commits"] == ["99d910dfaa3da6028949a7d8be22c40e88a25bc2"]
    assert data["controls"]["field_commits"] == ["f" * 40]
    assert f"--controls {moved}" in page.read_text()


def test_plots_are_written_per_regime_and_linked_from_the_page(folders):
    field, _, page = folders
    written = write_page(field, page)
    names = sorted(p.name for p in written if p.suffix == ".png")
    assert names == ["controllers_loose.png", "controllers_tight.png", "differences.png", "frontier_loose.png",
                     "frontier_tight.png"]  # fmt: skip
    for p in written:
        assert p.stat().st_size > 0
    assert "![frontier_tight](results-field/frontier_tight.png)" in page.read_text()
    assert "![differences](results-field/differences.png)" in page.read_text()
    assert "0: the batch's longest response" not in page.read_text()  # a LASER-D target is never 0


def test_every_difference_in_the_json_recomputes_from_the_run_files(folders, no_plots):
    field, controls, page = folders
    write_page(field, page)
    data = json.loads(page.with_suffix(".json").read_text())
    assert {d["versus"] for d in data["differences"]} == {"grpo", "lead"}
    assert len(data["differences"]) == 2 * len(FIELD) * 2 * len(FIELD_MEASURES)
    for d in data["differences"]:
        diffs = []
        for seed in d["seeds"]:
            mine = json.loads((field / f"runs/{d['regime']}/{d['method']}-seed{seed}/eval.json").read_text())
            theirs = json.loads((controls / f"runs/{d['regime']}/{d['versus']}-seed{seed}/eval.json").read_text())
            diffs.append(measure_value(mine, d["metric"]) - measure_value(theirs, d["metric"]))
        assert d["differences"] == pytest.approx(diffs)
        assert d["estimate"] == pytest.approx(sum(diffs) / len(diffs))


def test_trajectories_at_budget_failures_and_resumes(folders, no_plots):
    field, _, page = folders
    write_page(field, page)
    data = json.loads(page.with_suffix(".json").read_text())
    (lam,) = [t for t in data["trajectories"] if (t["regime"], t["metric"]) == ("tight", "adlp/lambda")]
    assert lam["steps"] == [1, 2, 3] and lam["n"] == [3, 3, 3]
    assert lam["mean"] == pytest.approx([0.091, 0.101, 0.111])  # 0.08 + 0.01 step + 0.001 (0 + 1 + 2) / 3
    half = T_975_2 * 0.001 / math.sqrt(3)  # sd of 0.080, 0.081, 0.082 is 0.001
    assert lam["interval"][0] == pytest.approx([0.091 - half, 0.091 + half])
    metrics = {t["metric"] for t in data["trajectories"] if t["regime"] == "loose"}
    assert metrics == {"adlp/lambda", "laser_d/target_low", "laser_d/target_medium", "laser_d/target_high",
                       "lead/lambda_l"}  # fmt: skip
    (b13,) = [r for r in data["at_budget"] if (r["regime"], r["method"], r["budget"]) == ("tight", "l1_exact", 13)]
    assert b13["following_error"]["mean"] == pytest.approx(0.2) and b13["mean_length"]["mean"] == pytest.approx(14)
    assert data["failed"] == ["runs/tight/saw-seed5"] and data["finished_runs"] == 18
    resumed = {r["run_dir"]: r["resumes"] for r in data["runs"] if r["resumes"]}
    assert resumed == {"runs/loose/laser_d-seed6": [20], "runs/tight/laser_d-seed6": [20]}
    text = page.read_text()
    assert "| tight | l1_exact | 13 | 3 |" in text and "runs/tight/saw-seed5" in text
    assert "Partial results: 18 of the 35 planned field runs so far." in text
    assert "| saw | 0 (no finished run) | n/a |" in text  # every planned method is reported


def test_before_any_run_the_page_keeps_its_plan_and_says_so(folders, no_plots):
    field, controls, page = folders
    (field / "runs.json").write_text("[]")
    controls.rename(controls.with_name("not-yet"))
    write_page(field, page)  # no field seed, so no control is needed yet
    text = page.read_text()
    assert _head(text.encode()) == _head((REPO / "docs" / "results-field.md").read_bytes())
    assert "Partial results: 0 of the 35 planned field runs so far." in text
    assert "No L1 run has finished its fixed-budget evaluation yet." in text
    assert json.loads(page.with_suffix(".json").read_text())["differences"] == []


def test_controls_are_refused_for_another_plan(tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "comparison.json").write_text(json.dumps({"plan": "v2"}))
    with pytest.raises(ValueError, match="field comparison's page only"):
        write_page(out, tmp_path / "page.md", controls=tmp_path)


def test_a_field_compare_names_the_page_command_and_a_refusal_does_not_fail_its_runs(folders, monkeypatch, capsys):
    field, controls, page = folders
    from dynashape import cli
    from dynashape.cli import commands as cli_commands
    from dynashape.study import compare

    monkeypatch.setattr(compare, "run_comparison", lambda out, **kw: {"failed": []})  # the runs are done
    monkeypatch.setattr(cli_commands, "_check_rows", lambda *args, **kw: None)
    assert cli.main(["compare", "--plan", "field", "--out", str(field), "--no-progress"]) == 0
    assert f"dynashape results {field} --report docs/results-field.md" in capsys.readouterr().out
    (controls / "runs/tight/grpo-seed5/eval.json").unlink()
    assert cli.main(["compare", "--plan", "field", "--out", str(field), "--report", str(page), "--no-progress"]) == 0
    assert "the controls page was not written" in capsys.readouterr().out


def test_the_trajectory_names_are_the_ones_the_shapers_log():
    """A run's trajectory is read from metrics.jsonl by the keys its shaper declares (``trajectory_keys``): each
    controller's shaper, at the field table's values, logs them."""
    import torch

    from dynashape import RolloutBatch, get_shaper
    from dynashape.shapers import shaper_trajectory
    from dynashape.study.controls_results import TRAJECTORIES, trajectory_keys
    from dynashape.train.field_presets import field_table

    batch = RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]),
                         lengths=torch.tensor([30, 90, 20, 60]), budgets=torch.tensor([50, 50, 50, 50]),
                         truncated=torch.tensor([0, 1, 0, 0]), formatted=torch.tensor([1, 0, 1, 1]))  # fmt: skip
    table = field_table(101)
    controllers = [m for m in (*table, "lead") if shaper_trajectory(table.get(m, {"shaper": m})["shaper"])]
    assert controllers == ["thinkprune", "laser_d", "adlp", "aalc", "lead"] and len(TRAJECTORIES) == 5
    for method in controllers:
        names = trajectory_keys({"config": {"train": {"shaper": method}}})  # type: ignore[typeddict-item]
        assert TRAJECTORIES[method] == names  # the built-in declarations, by shaper
        kwargs = {"b_max": 101, "l_min": 25} if method == "lead" else table[method]["shaper_kwargs"]
        shaper = get_shaper(method, **kwargs)
        if method == "aalc":  # alpha_t is logged once a validation accuracy is known
            shaper.observe(validation_accuracy=0.7)
        assert set(names) <= set(shaper(batch).metrics), method


def test_the_thirteen_styles_are_distinct_and_a_method_keeps_its_own_in_every_regime():
    pytest.importorskip("matplotlib")
    from dynashape.study.controls_plots import CONTROL_STYLES, _styles
    from dynashape.train.field_presets import FIELD_METHODS

    controls = {"methods": ["grpo", "lead"]}  # the field study's controls.rows, in order
    only_two = _styles(
        {"summary": [{"method": "laser", "source": "field"}, {"method": "saw", "source": "field"}],
         "controls": controls}, FIELD_METHODS,
    )  # fmt: skip
    styles = _styles(
        {"summary": [{"method": m, "source": "field"} for m in FIELD_METHODS], "controls": controls}, FIELD_METHODS
    )
    assert only_two == styles  # the same style whichever methods a regime has finished
    field_colours = {styles[m]["color"] for m in FIELD_METHODS}
    assert len(field_colours) == len(FIELD_METHODS) == 11  # no two field methods share a colour
    assert not field_colours & {s["color"] for s in CONTROL_STYLES}
    assert styles["grpo"] == CONTROL_STYLES[0] and styles["lead"] == CONTROL_STYLES[1]  # by their order
    assert len({(s["color"], s["marker"]) for s in styles.values()}) == 14  # 11 + grpo, lead, base


def test_the_base_is_on_the_frontiers_axes_however_far_from_the_methods(folders):
    """The base (accuracy 0.5 at length 68 here, below and right of every method) is a point within the axes'
    limits, with the methods' intervals, never an arrow at the edge."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dynashape.study.controls_plots import _frontier, _styles
    from dynashape.study.controls_results import build_controls_results

    field, _, _ = folders
    results = build_controls_results(field, COMPARISON_PLAN["field"])
    base = results["base"]["tight"]
    fig, ax = plt.subplots()
    assert _frontier(ax, results, "tight", _styles(results))
    assert "base (n=3)" in ax.get_legend_handles_labels()[1]
    assert not ax.texts  # no arrow
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < base["mean_length"]["interval"][0] and base["mean_length"]["interval"][1] < x1
    assert y0 < base["accuracy"]["mean"] < y1
    l1 = next(r for r in results["summary"] if (r["regime"], r["method"]) == ("tight", "l1_exact"))
    assert x0 < l1["mean_length"]["interval"][0] and y0 < l1["accuracy"]["interval"][0]
    plt.close(fig)


def test_the_differences_plot_draws_each_method_minus_grpo_with_its_interval(folders):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from dynashape.study.controls_plots import _styles, plot_differences
    from dynashape.study.controls_results import build_controls_results

    field, _, _ = folders
    results = build_controls_results(field, COMPARISON_PLAN["field"])
    fig = plt.figure()
    assert plot_differences(fig, results, _styles(results))
    axes = fig.axes
    assert [a.get_title() for a in axes] == [
        "tight: accuracy minus GRPO's",
        "tight: mean length minus GRPO's (tokens)",
        "loose: accuracy minus GRPO's",
        "loose: mean length minus GRPO's (tokens)",
    ]
    drawn = [c for c in axes[0].containers if isinstance(c, ErrorbarContainer)]
    xs = sorted(round(float(c.lines[0].get_xdata()[0]), 4) for c in drawn)
    # tight accuracy minus grpo: adlp 0.07 / 3, laser_d (-0.02 - 0.01 - 0.01) / 3, l1_exact (-0.08 - 0.08 - 0.10) / 3
    assert xs == [-0.0867, -0.0133, 0.0233]
    plt.close(fig)


def _paired(regime: str, method: str, versus: str, metric: str, estimate: float, low: float, high: float,
                n: int) -> dict:  # fmt: skip
    return {"regime": regime, "method": method, "versus": versus, "metric": metric, "estimate": estimate,
            "interval": [low, high], "n": n}  # fmt: skip


def test_this_worlds_cell_prints_the_paired_differences_against_grpo_by_hand():
    from dynashape.study.controls_page import this_world_cell

    results = {
        "summary": [{"regime": "loose"}, {"regime": "tight"}],
        "caveats": {"holm": {"versus": "grpo"}},  # the page's control, the reference of its Holm family
        "differences": [
            _paired("tight", "laser", "grpo", "accuracy", -0.0183, -0.04249, 0.0061, 5),
            _paired("tight", "laser", "grpo", "mean_length", -0.64, -4.44, 3.06, 5),
            _paired("loose", "laser", "grpo", "accuracy", 0.0004, -0.014, 0.017, 5),
            _paired("loose", "laser", "grpo", "mean_length", -5.1, -6.04, -4.16, 5),
            # against LEAD: never in the cell, which is against GRPO
            _paired("tight", "laser", "lead", "accuracy", 0.5, 0.4, 0.6, 5),
            # seeds missing in one regime: the count goes with each regime
            _paired("tight", "aalc", "grpo", "accuracy", 0.0, -0.001, 0.002, 5),
            _paired("tight", "aalc", "grpo", "mean_length", 0.2, -0.6, 0.9, 5),
            _paired("loose", "aalc", "grpo", "accuracy", -0.003, -0.045, 0.038, 4),
            _paired("loose", "aalc", "grpo", "mean_length", 0.04, -0.6, 0.5, 4),
        ],
    }
    assert this_world_cell(results, ["laser"]) == (
        "`laser` (n = 5): tight accuracy -0.018 [-0.042, +0.006], length -0.6 [-4.4, +3.1]; "
        "loose accuracy +0.000 [-0.014, +0.017], length -5.1 [-6.0, -4.2]"
    )
    assert this_world_cell(results, ["aalc", "gfpo"]) == (
        "`aalc`: tight (n = 5) accuracy +0.000 [-0.001, +0.002], length +0.2 [-0.6, +0.9]; "
        "loose (n = 4) accuracy -0.003 [-0.045, +0.038], length +0.0 [-0.6, +0.5]<br>`gfpo`: no finished run"
    )
    assert this_world_cell(results, ["laser"], versus="lead").startswith("`laser` (n = 5): tight accuracy +0.500")


WHICH_METHOD_WHEN_ROWS = {  # docs/algorithms.md's row name -> the field methods its last column reports
    "L1 / LCPO": ("l1_exact", "l1_max"),
    "ThinkPrune": ("thinkprune",),
    "LASER / LASER-D": ("laser", "laser_d"),
    "DLER": ("dler",),
    "ALP": ("alp",),
    "A-DLP": ("adlp",),
    "AALC": ("aalc",),
    "SAW": ("saw",),
    "GFPO": ("gfpo",),
}


def test_the_which_method_when_table_carries_this_worlds_figures_from_the_committed_page():
    """docs/algorithms.md's table beside each paper's headline: its last column is the committed field page's
    JSON, every field method once; a page regenerated without the table fails here."""
    from dynashape.study.controls_page import this_world_cell
    from dynashape.train.field_presets import FIELD_METHODS

    assert sorted(m for ms in WHICH_METHOD_WHEN_ROWS.values() for m in ms) == sorted(FIELD_METHODS)
    results = json.loads((REPO / "docs" / "results-field.json").read_text())
    section = (REPO / "docs" / "algorithms.md").read_text().split("### Which method when")[1].split("\n## ")[0]
    for name, methods in WHICH_METHOD_WHEN_ROWS.items():
        (row,) = [line for line in section.splitlines() if line.startswith(f"| {name} (")]
        assert row.endswith(f"| {this_world_cell(results, methods)} |"), name


def test_the_readmes_paragraph_on_the_field_comparison_says_what_the_committed_page_says():
    """README's hand-written summary of the field comparison: every interval it quotes is a paired difference
    against GRPO on the committed page, or DLER minus DAPO from its caveats, and its words hold on the page's
    numbers: the Holm survivors it names (ALP and A-DLP shorter at a cost, ThinkPrune loose shorter, L1's accuracy)
    and DLER's Holm p; DLER's rollouts and DLER minus DAPO; the loose methods 3-8 tokens shorter with accuracy
    intervals covering 0 and the lowest end; L1's first batch; AALC's equal runs; the runs trained again."""

    from dynashape.study.controls_page import NAMES, _cell

    results = json.loads((REPO / "docs" / "results-field.json").read_text())
    readme = (REPO / "README.md").read_text()
    paragraph = " ".join(readme.split("The field comparison (")[1].split("![the field's methods")[0].split())
    assert paragraph.startswith(f"{results['finished_runs']} runs") and results["finished_runs"] == 110
    grpo = {(d["regime"], d["method"], d["metric"]): d for d in results["differences"] if d["versus"] == "grpo"}
    caveats = results["caveats"]
    (dapo,) = caveats["sampling_control"]
    cells = {_cell(d, NAMES[metric][1], sign=True) for (_, _, metric), d in grpo.items()}
    cells.add(_cell(dapo["accuracy"], 3, sign=True))
    quoted = re.findall(r"[+-]\d+\.\d+ \[[+-]\d+\.\d+, [+-]\d+\.\d+\]", paragraph)
    assert len(quoted) == 5 and set(quoted) <= cells
    assert (
        f"DLER minus DAPO, which samples the same way without a length term, is {_cell(dapo['accuracy'], 3, True)}"
        in (paragraph)
    )
    # the Holm survivors named, and DLER's p that does not survive
    assert caveats["holm"]["family"] == 44
    held = {tuple(k) for k in caveats["holm"]["below_0.05"]}
    named = {(r, m, x) for r in ("tight", "loose") for m in ("alp", "adlp") for x in ("accuracy", "mean_length")}
    named = named - {("tight", "adlp", "mean_length")} | {("loose", "thinkprune", "mean_length")}
    assert named <= held
    assert {(r, m, "accuracy") for r in ("tight", "loose") for m in ("l1_exact", "l1_max")} <= held
    assert "44 accuracy and length intervals" in paragraph
    p = [grpo[(r, "dler", "accuracy")]["p_holm"] for r in ("tight", "loose")]
    assert p[0] > 0.05 and p[1] > 0.05 and f"(Holm p {p[0]:.3f} tight, {p[1]:.2f} loose)" in paragraph
    assert f"{grpo[('loose', 'adlp', 'mean_length')]['estimate']:+.1f} tokens" in paragraph
    assert f"{grpo[('loose', 'adlp', 'accuracy')]['estimate']:+.3f} accuracy" in paragraph
    l1 = [round(grpo[("tight", m, "accuracy")]["estimate"], 2) for m in ("l1_exact", "l1_max")]
    assert f"({l1[0]:+.2f} and {l1[1]:+.2f} accuracy, tight)".replace("+", "") in paragraph.replace("+", "")
    # compute
    (dler,) = [m for m in caveats["compute"]["methods"] if (m["regime"], m["method"]) == ("tight", "dler")]
    assert f"draws {dler['ratio']['mean']:.2f}x GRPO's rollouts" in paragraph
    assert all(m["ratio"]["mean"] == 2.0 for m in caveats["compute"]["methods"] if m["method"] == "gfpo")
    assert caveats["compute"]["runs_with_tokens"] == 0 and "no run records the tokens" in paragraph
    # the loose methods shorter with accuracy intervals covering 0, and the lowest end
    covering = [c for c in caveats["covering"] if c["regime"] == "loose"]
    assert sorted(c["method"] for c in covering) == ["gfpo", "laser", "laser_d", "saw", "thinkprune"]
    assert all(-8 <= c["length"] <= -3 for c in covering)
    worst = min(covering, key=lambda c: c["low"])
    assert worst["method"] == "thinkprune" and f"reach down to {worst['low']:+.3f} (ThinkPrune)" in paragraph
    # L1's first batch, AALC, the runs trained again
    (l1e,) = [r for r in caveats["l1"] if (r["regime"], r["method"]) == ("tight", "l1_exact")]
    assert (
        f"{l1e['first_batch_accuracy']['mean']:.3f} correct, GRPO's {l1e['grpo_first_batch_accuracy']['mean']:.3f}"
        in (paragraph)
    )
    equal = sum(len(a["equal"]) for a in caveats["aalc"])
    assert equal == 6 and f"over all 50 steps in {equal} of 10 runs" in paragraph
    assert len(caveats["restarted"]) == 4 and "Four runs were trained again from step 0" in paragraph
    assert sorted(f["method"] for f in caveats["forms"]) == ["aalc", "dler", "gfpo", "laser", "laser_d", "saw"]


def test_the_zoom_panel_holds_the_rows_near_grpos_accuracy_and_only_when_a_row_lies_outside(folders):
    """The 13 rows sit on one another near GRPO in the full frontier: the zoom below it shows the rows within
    ZOOM_ACCURACY of GRPO's mean accuracy (here GRPO 0.697; adlp 0.72, laser_d 0.683, lead 0.707 are near,
    l1_exact 0.61 is not), and is left out when no row lies outside it."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from dynashape.study.controls_plots import ZOOM_ACCURACY, _styles, _zoom
    from dynashape.study.controls_results import build_controls_results

    field, _, _ = folders
    results = build_controls_results(field, COMPARISON_PLAN["field"])
    styles = _styles(results)
    fig, ax = plt.subplots()
    assert _zoom(ax, results, "tight", styles, roles_of(COMPARISON_PLAN["field"]))
    drawn = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    means = sorted(round(float(c.lines[0].get_ydata()[0]), 4) for c in drawn)
    assert means == [0.6833, 0.6967, 0.7067, 0.72]  # laser_d, grpo, lead, adlp: l1_exact (0.61) left out
    assert "the 4 rows within 0.05" in ax.get_title() and ZOOM_ACCURACY == 0.05
    plt.close(fig)

    l1 = next(r for r in results["summary"] if (r["regime"], r["method"]) == ("tight", "l1_exact"))
    l1["accuracy"]["mean"] = 0.70  # now every row is near GRPO: the full panel says it all
    fig, ax = plt.subplots()
    assert not _zoom(ax, results, "tight", styles, roles_of(COMPARISON_PLAN["field"]))
    plt.close(fig)


def test_holm_p_restarts_and_generation_are_computed_from_the_runs(folders, no_plots):
    """The caveats the page states, by hand: the paired t-test's p (df 2: p = 1 - t / sqrt(t^2 + 2)) and Holm's
    step-down over the 12 accuracy and length differences against GRPO; a run whose history.jsonl starts at step 0
    a second time is "trained again from step 0"; generation per step from config.yaml and sampling_rounds."""
    field, controls, page = folders
    run = field / "runs/tight/adlp-seed7"
    with (run / "history.jsonl").open("a") as f:
        f.write(json.dumps({"started": "2026-12-05T02:00:00Z", "from_step": 0, "commit": "f" * 40}) + "\n")
    for seed in SEEDS:  # adlp tight: 2, 3, 2 rounds of 16 x 8 against grpo's one round of 16 x 8
        for folder, method in ((field, "adlp"), (controls, "grpo")):
            d = folder / f"runs/tight/{method}-seed{seed}"
            config = yaml.safe_load((d / "config.yaml").read_text())
            config["train"] |= {"group_size": 8, "prompts_per_step": 16}
            (d / "config.yaml").write_text(yaml.safe_dump(config))
            if method == "adlp":
                lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
                for line, rounds in zip(lines, (2.0, 3.0, 2.0)):
                    line["sampling_rounds"] = rounds
                (d / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    write_page(field, page)
    data = json.loads(page.with_suffix(".json").read_text())
    d = _difference(data, "tight", "adlp", "grpo", "accuracy")  # differences 0.02, 0.04, 0.01: t^2 = 7 exactly
    assert d["p"] == pytest.approx(1 - math.sqrt(7) / 3)
    family = [x for x in data["differences"] if x["versus"] == "grpo" and x["metric"] in ("accuracy", "mean_length")]
    assert len(family) == 12 == data["caveats"]["holm"]["family"]
    assert all("p_holm" not in x for x in data["differences"] if x not in family)
    ordered = sorted(family, key=lambda x: x["p"])
    running = 0.0
    for i, x in enumerate(ordered):  # Holm: max over j <= i of min(1, (m - j) p_(j))
        running = max(running, min(1.0, (12 - i) * x["p"]))
        assert x["p_holm"] == pytest.approx(running)
    (restarted,) = data["caveats"]["restarted"]
    assert restarted["run_dir"] == "runs/tight/adlp-seed7" and restarted["restarts"] == ["2026-12-05T02:00:00Z"]
    (gen,) = data["caveats"]["compute"]["methods"]
    assert (gen["regime"], gen["method"], gen["group_size"]) == ("tight", "adlp", [8])
    assert gen["ratio"]["mean"] == pytest.approx(7 / 3) and gen["rounds"]["max"] == pytest.approx(7 / 3)
    text = page.read_text()
    assert "Trained again from step 0 after an earlier start (history.jsonl): runs/tight/adlp-seed7." in text
    assert "**Trained again from step 0: 1 runs.**" in text and "2.33x GRPO's rollouts" in text
    assert "| Holm p: accuracy, length |" in text


def test_aalcs_rollouts_are_compared_with_grpos_value_for_value():
    from dynashape.study.caveats import _same_rollouts

    grpo = [{"step": 1.0, "accuracy": 0.5, "length/mean": 60.0, "loss": 0.1, "grpo/reward_mean": 0.5},
            {"step": 2.0, "accuracy": 0.6, "length/d1/mean": 20.0, "truncated_frac": 0.0}]  # fmt: skip
    aalc = [{"step": 1.0, "accuracy": 0.5, "length/mean": 60.0, "loss": 0.2, "aalc/alpha": 0.9},
            {"step": 2.0, "accuracy": 0.6, "length/d1/mean": 20.0, "truncated_frac": 0.0}]  # fmt: skip
    assert _same_rollouts(aalc, grpo) is None  # the update's own numbers may differ; the rollouts do not
    aalc[1]["length/d1/mean"] = 21.0
    assert _same_rollouts(aalc, grpo) == 2
    assert _same_rollouts(aalc[:1], grpo) == 2  # a step missing is a difference
