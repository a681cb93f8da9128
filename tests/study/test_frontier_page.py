"""The frontier page: its arithmetic by hand, its properties, and the page of a small study folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynashape.study.frontier_math import accuracy_at, interval_record, matched_lengths, spans_everywhere
from dynashape.study.frontier_page import write_frontier_results
from dynashape.study.frontier_results import build_frontier_results, frontier_of, sweep_rows
from dynashape.study.plan_file import parse_plan


# ----------------------------------------------------------------------------------------------- arithmetic
def test_accuracy_along_a_frontier_by_hand():
    lengths, accs = [70.0, 50.0, 60.0], [0.72, 0.60, 0.70]  # in strength order, not length order
    assert accuracy_at(lengths, accs, 55.0) == pytest.approx(0.65)  # halfway between (50, .60) and (60, .70)
    assert accuracy_at(lengths, accs, 67.5) == pytest.approx(0.715)  # 3/4 of the way from (60, .70) to (70, .72)
    assert accuracy_at(lengths, accs, 50.0) == pytest.approx(0.60)  # an end is inside the span
    assert math.isnan(accuracy_at(lengths, accs, 49.9)) and math.isnan(
        accuracy_at(lengths, accs, 70.1)
    )  # no extrapolation
    # two strengths on one length: their mean accuracy there
    assert accuracy_at([50.0, 50.0, 60.0], [0.6, 0.8, 0.9], 50.0) == pytest.approx(0.7)
    assert accuracy_at([50.0, 50.0, 60.0], [0.6, 0.8, 0.9], 55.0) == pytest.approx(0.8)
    assert accuracy_at([50.0], [0.6], 50.0) == pytest.approx(0.6)  # one point spans its own length only


def test_bad_points_are_refused_by_name():
    with pytest.raises(ValueError, match=r"must be finite, got lengths \[50.0, nan\]"):
        accuracy_at([50.0, math.nan], [0.5, 0.6], 50.0)
    with pytest.raises(ValueError, match=r"must be equal 1-d shapes"):
        accuracy_at([50.0, 60.0], [0.5], 55.0)
    with pytest.raises(ValueError, match=r"must be equal 1-d shapes"):
        accuracy_at([], [], 55.0)


def test_matched_lengths_by_hand():
    """A spans [52, 68] at every seed (seed 0: 50-70, seed 1: 52-68), B [60, 80]: both enter at 60, 64, 68."""
    a = {0: ([50.0, 60.0, 70.0], [0.5, 0.6, 0.7]), 1: ([52.0, 60.0, 68.0], [0.5, 0.6, 0.7])}
    b = {0: ([60.0, 70.0, 80.0], [0.5, 0.6, 0.7]), 1: ([58.0, 75.0, 90.0], [0.5, 0.6, 0.7])}
    c = {0: ([100.0, 110.0, 120.0], [0.5, 0.6, 0.7])}  # alone up there: no matched length of its own
    assert matched_lengths({"a": a, "b": b, "c": c}) == [60, 64, 68]
    assert spans_everywhere(a, 52.0) and not spans_everywhere(a, 51.0) and not spans_everywhere({}, 60.0)
    assert matched_lengths({"a": a}) == []


@given(
    st.lists(st.tuples(st.floats(1, 200), st.floats(0, 1)), min_size=1, max_size=5),
    st.floats(0, 1),
)
def test_interpolated_accuracy_stays_between_the_points_and_meets_them(points, where):
    lengths, accs = [p[0] for p in points], [p[1] for p in points]
    at = min(lengths) + where * (max(lengths) - min(lengths))
    value = accuracy_at(lengths, accs, at)
    assert min(accs) - 1e-12 <= value <= max(accs) + 1e-12
    for x in set(lengths):  # at a point's own length: the mean of the strengths there
        same = [a for length, a in zip(lengths, accs, strict=True) if length == x]
        assert accuracy_at(lengths, accs, x) == pytest.approx(sum(same) / len(same), abs=1e-12)


def test_interval_record_by_hand():
    r = interval_record({0: -0.016, 1: -0.008, 2: None})
    assert r["estimate"] == pytest.approx(-0.012) and r["n"] == 2 and r["seeds"] == [0, 1]
    half = 12.706204736 * (0.008 / math.sqrt(2)) / math.sqrt(2)  # t(0.975, 1) sd / sqrt(n)
    assert r["low"] == pytest.approx(-0.012 - half, rel=1e-6) and r["high"] == pytest.approx(-0.012 + half, rel=1e-6)
    one = interval_record({3: 0.5})
    assert one["estimate"] == 0.5 and one["low"] is None and one["n"] == 1
    assert interval_record({})["estimate"] is None


def test_sweep_rows_and_single_rows():
    rows = ("grpo", "grpo_g16", "alp@beta=1e-05", "alp@beta=2e-05", "thinkprune@schedule=41")
    assert sweep_rows(rows) == {"alp": ["alp@beta=1e-05", "alp@beta=2e-05"], "thinkprune": ["thinkprune@schedule=41"]}
    assert frontier_of("grpo_g16") is None and frontier_of("alp@beta=1e-05") == "alp"


# -------------------------------------------------------------------------------------------- a small study
STUDY = {
    "name": "mine",
    "page": "frontiers",
    "seeds": [0, 1],
    "tune": False,
    "rows": {
        "loose": [
            "grpo",
            "lead",
            {"method": "alp", "sweep": {"shaper_kwargs.beta": [1e-5, 2e-5, 4e-5]}},
            {"method": "laser", "sweep": {"shaper_kwargs.target_length": [82, 41, 21]}},
        ]
    },
}
POINTS = {  # row -> seed -> (mean length, accuracy)
    "grpo": {0: (68.0, 0.69), 1: (70.0, 0.71)},
    "lead": {0: (90.0, 0.75)},
    "alp@beta=1e-05": {0: (70.0, 0.70), 1: (72.0, 0.72)},
    "alp@beta=2e-05": {0: (60.0, 0.66), 1: (62.0, 0.66)},
    "alp@beta=4e-05": {0: (50.0, 0.60), 1: (52.0, 0.58)},
    "laser@target_length=82": {0: (80.0, 0.74), 1: (78.0, 0.70)},
    "laser@target_length=41": {0: (66.0, 0.68), 1: (64.0, 0.66)},
    "laser@target_length=21": {0: (56.0, 0.62), 1: (54.0, 0.60)},
}


def _folder(tmp_path: Path) -> Path:
    """A comparison folder as `dynashape compare` leaves it: runs.json and each run's eval.json (+ metrics)."""
    out = tmp_path / "cmp"
    records = []
    for row, seeds in POINTS.items():
        method = row.split("@")[0]
        for seed, (length, acc) in seeds.items():
            run_dir = f"runs/loose/{row}-seed{seed}"
            (out / run_dir).mkdir(parents=True)
            ev = {
                "final": {"accuracy": acc, "mean_length": length},
                "base": {"accuracy": 0.49, "mean_length": 67.0},
                "steps": 50,
                "tokens_sampled": {"prompt": 10_000, "response": 30_000 + 1000 * seed, "sampling_rounds": 50},
            }
            (out / run_dir / "eval.json").write_text(json.dumps(ev))
            if method == "lead":
                lines = [{"step": 1, "lead/lambda_l": 0.4}, {"step": 2, "lead/lambda_l": 0.5}]
                (out / run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
            records.append({"split": "test", "regime": "loose", "method": method, "row": row, "seed": seed,
                            "run_dir": run_dir, "status": "trained"})  # fmt: skip
    (out / "runs.json").write_text(json.dumps(records))
    return out


def _history(out: Path, run_dir: str, from_steps: list[int], commit: str = "abc", dirty: bool = False) -> None:
    """A run's history.jsonl: one invocation per entry of ``from_steps``, a minute apart."""
    lines = [{"started": f"2026-12-07T00:0{i}:00Z", "from_step": step, "commit": commit, "dirty": dirty,
              "cpu": "AMD EPYC", "cpu_capability": "AVX512" if commit == "abc" else "AVX2", "torch": "2.13.0+cpu"}
             for i, step in enumerate(from_steps)]  # fmt: skip
    (out / run_dir / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_frontier_results_of_a_small_study_by_hand(tmp_path):
    plan = parse_plan(STUDY, "mine.toml")
    out = _folder(tmp_path)
    _history(out, "runs/loose/grpo-seed0", [0, 20])  # stopped after its step-20 checkpoint, resumed
    _history(out, "runs/loose/lead-seed0", [0, 0])  # cut off before any checkpoint, trained again
    _history(out, "runs/loose/alp@beta=1e-05-seed1", [0], commit="def", dirty=True)
    res = build_frontier_results(out, plan)
    assert res["finished_runs"] == 15 and res["planned_runs"] == 16 and res["failed"] == []
    assert res["invocations"] == {
        "commits": ["abc", "def+dirty"], "resumed": {"loose/grpo-seed0": [20]},
        "machines": ["AMD EPYC (AVX2, torch 2.13.0+cpu)", "AMD EPYC (AVX512, torch 2.13.0+cpu)"],
        "restarted": {"loose/lead-seed0": ["2026-12-07T00:01:00Z"]},
    }  # fmt: skip
    # the results schema's keys, as results.json has them
    schema = {"folder", "command", "wall_seconds", "jobs", "run_seconds", "finished_runs", "machine", "seeds",
              "generated", "runs"}  # fmt: skip
    assert schema <= set(res) and len(res["runs"]) == 15
    (entry,) = [r for r in res["runs"] if r["row"] == "alp@beta=2e-05" and r["seed"] == 1]
    assert entry["method"] == "alp" and entry["final"]["accuracy"] == 0.66 and entry["final"]["mean_length"] == 62.0
    assert entry["run_dir"] == "runs/loose/alp@beta=2e-05-seed1" and entry["tokens_sampled"]["response"] == 31_000
    loose = res["regimes"]["loose"]
    assert [m["length"] for m in loose["matched"]] == [56, 60, 64, 68]  # alp spans [52, 70], laser [56, 78]
    at60 = loose["matched"][1]
    # alp at 60: seed 0 on its point (.66), seed 1 8/10 of the way from (52, .58) to (62, .66): .644; mean .652
    assert at60["methods"]["alp"]["estimate"] == pytest.approx(0.652)
    # laser at 60: seed 0 .62 + .4 * .06 = .644, seed 1 .60 + .6 * .06 = .636; mean .640
    assert at60["methods"]["laser"]["estimate"] == pytest.approx(0.640)
    assert at60["best"] == "alp" and at60["methods"]["laser"]["minus_best"]["estimate"] == pytest.approx(-0.012)
    assert loose["which_when"][1] == {"length": 60, "best": "alp", "not_distinguished": ["laser"]}  # n=2: wide
    versus = {(v["row"], v["method"]): v for v in loose["versus_rows"]}
    # at GRPO's own lengths (68, 70): alp .692 and .708, minus .69 and .71: +.002, -.002
    assert versus[("grpo", "alp")]["minus_row"]["estimate"] == pytest.approx(0.0, abs=1e-12)
    # laser at 68 (seed 0): .68 + 2/14 * .06; at 70 (seed 1): .66 + 6/14 * .04
    want = ((0.68 + 2 / 14 * 0.06 - 0.69) + (0.66 + 6 / 14 * 0.04 - 0.71)) / 2
    assert versus[("grpo", "laser")]["minus_row"]["estimate"] == pytest.approx(want)
    assert versus[("lead", "alp")]["spanned"] is False  # LEAD's 90 tokens are beyond every frontier
    rows = {r["row"]: r for r in loose["rows"]}
    assert rows["grpo"]["tokens_sampled"]["estimate"] == pytest.approx(40_500)  # 40,000 and 41,000
    assert rows["grpo"]["rounds_per_step"]["estimate"] == pytest.approx(1.0)
    assert loose["frontiers"]["alp"]["seeds"] == [0, 1] and loose["base"]["accuracy"]["estimate"] == 0.49
    (traj,) = loose["trajectories"]
    assert traj == {"row": "lead", "key": "lead/lambda_l", "steps": [1, 2], "mean": [0.4, 0.5]}


def test_a_logged_zero_that_stands_for_something_else_stays_out_of_the_means(tmp_path):
    """LASER-D logs a target that is the batch's longest response as 0 (its Trajectory.zero_means): a mean over
    seeds leaves those out, counts them, and is None where every seed logged it."""
    from dynashape.study.frontier_results import _trajectories

    logged = {0: [0.0, 40.0, 41.0], 1: [0.0, 0.0, 43.0]}  # target_low per step, seeds 0 and 1
    runs = {}
    for seed, values in logged.items():
        folder = tmp_path / f"laser_d-seed{seed}"
        folder.mkdir()
        lines = [{"step": i + 1, "laser_d/target_low": v, "laser_d/target_medium": 20.0, "laser_d/target_high": 10.0}
                 for i, v in enumerate(values)]  # fmt: skip
        (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        runs[seed] = {"run_dir": folder.name}
    found = {t["key"]: t for t in _trajectories(tmp_path, ["laser_d"], {"laser_d": "laser_d"}, {"laser_d": runs})}
    low = found["laser_d/target_low"]
    assert low["mean"] == [None, 40.0, 42.0] and low["zero_seeds"] == [2, 1, 0]
    assert low["zero_means"].startswith("the batch's longest response")
    assert found["laser_d/target_medium"]["mean"] == [20.0, 20.0, 20.0]
    lead = tmp_path / "lead-seed0"
    lead.mkdir()
    (lead / "metrics.jsonl").write_text(json.dumps({"step": 1, "lead/lambda_l": 0.0}) + "\n")
    (plain,) = _trajectories(tmp_path, ["lead"], {"lead": "lead"}, {"lead": {0: {"run_dir": lead.name}}})
    assert plain == {"row": "lead", "key": "lead/lambda_l", "steps": [1], "mean": [0.0]}  # a 0 that is a value


def test_a_frontier_uses_only_the_seeds_all_its_strengths_finished(tmp_path):
    out = _folder(tmp_path)
    records = [
        r for r in json.loads((out / "runs.json").read_text()) if r["run_dir"] != "runs/loose/alp@beta=4e-05-seed1"
    ]
    (out / "runs.json").write_text(json.dumps(records))
    loose = build_frontier_results(out, parse_plan(STUDY, "mine.toml"))["regimes"]["loose"]
    assert loose["frontiers"]["alp"]["seeds"] == [0]
    assert [m["length"] for m in loose["matched"]] == [56, 60, 64, 68]  # alp seed 0 alone spans [50, 70]
    assert loose["matched"][1]["methods"]["alp"]["n"] == 1


def test_a_strengths_label_is_its_value_short():
    from dynashape.study.frontier_plots import strength_label

    assert strength_label("l1_exact@alpha=0.00374634") == "0.00375"
    assert strength_label("alp@beta=4.99512e-06") == "5e-06"
    assert strength_label("laser@target_length=82") == "82"
    assert strength_label("laser_d@grid=x0.5") == "x0.5"
    assert strength_label("thinkprune@schedule=cap25") == "cap25"


def test_no_method_wears_the_grey_of_the_field_or_the_black_of_the_single_rows():
    from dynashape.study.frontier_plots import frontier_styles
    from dynashape.train.field_presets import FIELD_METHODS

    styles = frontier_styles(list(FIELD_METHODS))
    colours = [st["color"] for st in styles.values()]
    assert len(set(colours)) == len(FIELD_METHODS)
    assert all(len({c[1:3], c[3:5], c[5:7]}) > 1 for c in colours), "no grey, no black"


def test_a_base_far_below_the_rows_is_named_in_the_legend_not_squeezed_in(tmp_path):
    from dynashape.study.frontier_plots import _base_label, _limits

    loose = build_frontier_results(_folder(tmp_path), parse_plan(STUDY, "mine.toml"))["regimes"]["loose"]
    ends = [v for r in loose["rows"] for v in (r["accuracy"]["low"], r["accuracy"]["high"]) if v is not None]
    _, ylim = _limits(loose)
    assert ylim[0] < min(ends) and ylim[1] > max(ends)  # the rows' intervals, padded
    assert ylim[0] < 0.49 and _base_label(loose) == "base model (accuracy 0.490, length 67.0)"
    loose["base"]["accuracy"]["estimate"] = ylim[0] - 0.01
    assert _limits(loose)[1] == ylim, "the base never moves the limits"
    assert _base_label(loose).endswith(", off the axes: the triangle on the edge)")


def test_the_page_its_plan_block_and_its_plots(tmp_path):
    out = _folder(tmp_path)
    _history(out, "runs/loose/grpo-seed0", [0, 20])
    _history(out, "runs/loose/lead-seed0", [0, 0])
    (out / "study.toml").write_text("# My study, registered first.\n#\n# - a line\nname = 'mine'\n")
    plan = parse_plan(STUDY, "mine.toml")
    written = write_frontier_results(out, tmp_path / "docs" / "page.md", plan)
    names = sorted(p.name for p in written)
    assert names == ["controllers_loose.png", "frontiers_loose.png", "matched_loose.png", "page.json", "page.md"]
    text = (tmp_path / "docs" / "page.md").read_text()
    assert "> My study, registered first.\n>\n> - a line\n" in text  # the file's opening comment, verbatim
    assert "| laser@target_length=21 | laser | shaper_kwargs.target_length = 21 |" in text
    assert "| 60 | alp | 0.652 [" in text and "| 60 | laser | 0.640 [" in text
    assert "| 60 | alp | laser |" in text  # which method when
    assert "15 of 16 runs finished" in text
    assert "- Trained at `abc`, on AMD EPYC (AVX512, torch 2.13.0+cpu) (every finished run's history.jsonl)." in text
    assert "- Resumed from a checkpoint after a stop: 1 run: loose/grpo-seed0 (from step 20). A resumed" in text
    assert "no checkpoint here: 1 run: loose/lead-seed0.\n" in text
    assert "![frontiers](page/frontiers_loose.png)" in text
    assert json.loads((tmp_path / "docs" / "page.json").read_text())["regimes"]["loose"]["matched"][1]["length"] == 60
    assert "Deviating" not in text
    evaluation = {"deviations": ["n_samples 1 where the plan has 16: 15 runs"], "deviating_runs": ["runs/x"]}
    write_frontier_results(out, tmp_path / "docs" / "page.md", plan, evaluation=evaluation)
    text = (tmp_path / "docs" / "page.md").read_text()
    assert "**Deviating from the plan's evaluation:** n_samples 1 where the plan has 16: 15 runs." in text
