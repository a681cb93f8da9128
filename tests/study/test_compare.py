"""``dynashape compare`` end to end on tiny runs: paired seeds, the parallel path, resume after a kill, tuning on
the validation split, the plan of the issue, and the selection rule."""

from __future__ import annotations

import json
import shutil

import pytest

from dynashape.study.compare import (
    COMPARISON_PLAN,
    TUNING_SEED_OFFSET,
    RunSpec,
    choose,
    eval_seed,
    run_comparison,
    spec_config,
)
from dynashape.study.results import load_runs
from dynashape.train.presets import tuning_grids
from dynashape.train.run import read_metrics
from dynashape.world.chain import world_splits

TINY_TRAIN = {
    "steps": 2,
    "prompts_per_step": 4,
    "group_size": 4,
    "max_new_tokens": 24,
    "overlong": {"buffer": 4},
    "mini_batches": 2,
    "checkpoint_every": 1,
}


# _template(...) and TINY_TRAIN as the command's --set KEY=VALUE pairs (a train section's key as SECTION.KEY)
TINY_SET = {
    "model.hidden_size": 32, "model.num_layers": 2, "model.num_heads": 2, "model.num_kv_heads": 2,
    "model.intermediate_size": 64, "warmup.steps": 40, "warmup.batch_size": 16, "warmup.lr": 0.01,
    "task.n_train": 100, "task.n_validation_per_difficulty": 1, "task.n_test_per_difficulty": 1,
    "task.max_ops": 3, "eval.n_samples": 2, "eval.max_new_tokens": 24, "eval.passk_samples": 4,
    "eval.passk_hard": 1, "eval.passk_trap": 1, **{k: v for k, v in TINY_TRAIN.items() if k != "overlong"},
    "overlong.buffer": TINY_TRAIN["overlong"]["buffer"],
}  # fmt: skip


def tiny_set_args(**changes) -> list[str]:
    """``--set`` arguments of TINY_SET with ``changes`` on top."""
    return [a for k, v in {**TINY_SET, **changes}.items() for a in ("--set", f"{k}={v}")]


@pytest.fixture(scope="module")
def compared(tmp_path_factory, base_cache, local_ray):
    """2 methods x 2 seeds x 2 steps through the parallel path (2 spawned workers)."""
    out = tmp_path_factory.mktemp("compare")
    template = _template(base_cache)
    lines: list[str] = []
    result = _tiny_comparison(out, template, log=lines.append)
    return out, template, result, lines


def _tiny_comparison(out, template, **kw):
    """grpo and lead x seeds 0, 1 x TINY_TRAIN's steps, two spawned workers."""
    rows = {"tight": ("grpo", "lead")}
    return run_comparison(out, rows=rows, seeds=[0, 1], template=template, train_overrides=TINY_TRAIN, workers=2, **kw)


def _template(base_cache):
    """conftest's tiny_config without its training section (the same base model, so the same cache entry)."""
    from dynashape.runtime.policy import ModelConfig
    from dynashape.train.config import EvalConfig, RunConfig
    from dynashape.train.warmup import WarmupConfig
    from dynashape.world.chain import ChainTaskConfig

    tiny_model = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)
    return RunConfig(
        task=ChainTaskConfig(n_train=100, n_validation_per_difficulty=1, n_test_per_difficulty=1, max_ops=3),
        model=tiny_model,
        warmup=WarmupConfig(steps=40, batch_size=16, lr=1e-2),
        eval=EvalConfig(n_samples=2, max_new_tokens=24, passk_samples=4, passk_hard=1, passk_trap=1),
        cache_dir=str(base_cache),
    )


def _eval(out, method, seed):
    return json.loads((out / "runs" / "tight" / f"{method}-seed{seed}" / "eval.json").read_text())


def test_paired_seeds_share_prompts_sampling_and_the_base_evaluation(compared):
    out, template, result, lines = compared
    assert not result["failed"]
    assert sorted((r["method"], r["seed"], r["status"]) for r in result["runs"]) == [
        ("grpo", 0, "trained"),
        ("grpo", 1, "trained"),
        ("lead", 0, "trained"),
        ("lead", 1, "trained"),
    ]
    for seed in (0, 1):
        grpo, lead = _eval(out, "grpo", seed), _eval(out, "lead", seed)
        assert grpo["base"] == lead["base"], "one base evaluation per seed, shared by every method"
        # step 1 samples before any update: the same prompts and generator give the same rollouts
        first = [read_metrics(out / "runs" / "tight" / f"{m}-seed{seed}")[0] for m in ("grpo", "lead")]
        for key in ("length/mean", "truncated_frac", "length/d1/mean", "length/d3/mean"):
            assert first[0][key] == first[1][key], key
    seed0, seed1 = (read_metrics(out / "runs" / "tight" / f"lead-seed{s}")[0] for s in (0, 1))
    assert seed0["length/mean"] != seed1["length/mean"], "another seed draws other prompts and samples"
    assert _eval(out, "grpo", 0)["base"] != _eval(out, "grpo", 1)["base"], "seeds draw their own evaluation"
    # seed s evaluates with seed EvalConfig.seed + 1000 s, prepared once before the runs in the shared cache
    import yaml

    for seed in (0, 1):
        cfg = yaml.safe_load((out / "runs" / "tight" / f"lead-seed{seed}" / "config.yaml").read_text())
        assert cfg["eval"]["seed"] == eval_seed(template.eval.seed, seed) == 1234 + 1000 * seed
    assert sum("base evaluation ready: test split" in line for line in lines) == 2
    assert lines.index(next(x for x in lines if x.startswith("start "))) > max(
        i for i, x in enumerate(lines) if x.startswith("base evaluation ready")
    )


def test_progress_lines_and_the_record(compared):
    out, _, _, lines = compared
    done = [x for x in lines if x.startswith("[")]
    assert len(done) == 4 and done[-1].startswith("[4/4]") and "0 left, ETA 0.0 s" in done[-1]
    assert "3 left, ETA" in done[0] and "ETA unknown" not in done[0]
    assert all("\r" not in x for x in lines)
    index = json.loads((out / "runs.json").read_text())
    assert {(r["method"], r["seed"]) for r in index} == {("grpo", 0), ("grpo", 1), ("lead", 0), ("lead", 1)}
    assert all("eval" not in r for r in index), "runs.json is an index; the numbers stay in each eval.json"
    records = load_runs(out)
    assert all(r["eval"]["final"]["per_problem"]["n_correct"] for r in records)
    meta = json.loads((out / "comparison.json").read_text())
    assert meta["seeds"] == [0, 1] and meta["wall_seconds"] > 0 and meta["machine"]["cpus"] >= 1


def test_a_killed_comparison_resumes_without_retraining_finished_runs(compared, tmp_path):
    out, template, _, _ = compared
    again = tmp_path / "again"
    shutil.copytree(out, again)
    # what a kill between lead seed 1's first and second checkpoint leaves behind
    killed = again / "runs" / "tight" / "lead-seed1"
    original = json.loads((killed / "eval.json").read_text())
    (killed / "eval.json").unlink()
    shutil.rmtree(killed / "checkpoints" / "step_2")
    kept = {p: p.stat().st_mtime_ns for p in again.glob("runs/tight/*/eval.json")}
    result = _tiny_comparison(again, template)
    status = {(r["method"], r["seed"]): r["status"] for r in result["runs"]}
    assert status == {("grpo", 0): "reused", ("grpo", 1): "reused", ("lead", 0): "reused", ("lead", 1): "resumed"}
    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "finished runs are not trained again"
    resumed = json.loads((killed / "eval.json").read_text())
    assert resumed["resumed_from"] == 1 and [m["step"] for m in read_metrics(killed)] == [1.0, 2.0]
    assert resumed["final"] == original["final"], "the resumed run ends where the uninterrupted one did"


def test_tuning_reads_the_validation_split_only_and_feeds_the_test_rows(base_cache, tmp_path, local_ray):
    from lock_holder import held_by_another_process

    template = _template(base_cache)

    def compare():
        return run_comparison(
            tmp_path,
            rows={"tight": ("shorterbetter",)},
            seeds=[0],
            template=template,
            train_overrides=TINY_TRAIN,
            tuning_seeds=1,
            workers=1,  # one run at a time, with both cores
        )

    # a tuning run held by another process (an orphan of a killed compare): reported, and no value is chosen
    busy = tmp_path / "tuning" / "tight" / "shorterbetter" / f"beta=0.03-seed{TUNING_SEED_OFFSET}"
    with held_by_another_process(busy) as orphan:
        first = compare()
    assert any(f"FolderBusyError: {busy} is in use by another process (pid {orphan})" in f for f in first["failed"])
    assert any(f.startswith("shorterbetter tight seeds [0]: not run") for f in first["failed"])
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tuning.json").exists()
    # the rerun trains only the missing grid value, then the test row at the chosen value
    result = compare()
    status = sorted((r["split"], r["point"], r["status"]) for r in result["runs"])
    assert status == [
        ("test", "beta=0.06", "trained"),
        ("validation", "beta=0.03", "trained"),
        ("validation", "beta=0.06", "reused"),
        ("validation", "beta=0.12", "reused"),
    ]
    assert not result["failed"]
    tuned = json.loads((tmp_path / "tuning.json").read_text())["tight"]["shorterbetter"]
    assert tuned["grid"] == [0.03, 0.06, 0.12] and len(tuned["values"]) == 3
    # the tiny model solves nothing: no AES anywhere, an exact tie, which goes to the preset's own value
    assert tuned["chosen"] == tuned["preset_value"] == 0.06
    splits = world_splits(template.task)
    validation = {p.prompt.strip() for p in splits.validation}
    test = {p.prompt.strip() for p in splits.test}
    for r in result["runs"]:
        ev = r["eval"]
        assert ev["split"] == r["split"]
        prompts = set(ev["final"]["pass_at_k_hard_problems"])
        assert prompts <= (validation if r["split"] == "validation" else test)
        if r["split"] == "validation":
            assert r["seed"] == TUNING_SEED_OFFSET
    (test_run,) = [r for r in result["runs"] if r["split"] == "test"]
    import yaml

    cfg = yaml.safe_load((tmp_path / test_run["run_dir"] / "config.yaml").read_text())
    assert cfg["train"]["shaper_kwargs"]["beta"] == 0.06 and cfg["eval"]["split"] == "test"


def test_choose_by_hand():
    values = [10, 20, 30]
    # mean AES 0.15, 0.25, 0.2: the middle one
    assert choose(values, [[0.1, 0.2], [0.2, 0.3], [0.2, 0.2]], preset_value=10) == 1
    # a tie between 10 and 30 (0.3) goes to the preset's own value, else to the earlier grid value
    assert choose(values, [[0.3], [0.1], [0.3]], preset_value=30) == 2
    assert choose(values, [[0.3], [0.1], [0.3]], preset_value=20) == 0
    # an undefined AES on any seed makes that value's mean -inf
    assert choose(values, [[0.9, None], [0.1, 0.1], [0.0, 0.0]], preset_value=10) == 1
    with pytest.raises(ValueError, match="one length"):
        choose(values, [[0.1]], preset_value=10)


def test_the_full_plan_is_the_issues_rows():
    plan = COMPARISON_PLAN["full"]
    tight, loose = plan.rows["tight"], plan.rows["loose"]
    lead_family = {"grpo", "grpo_length", "gdpo", "shorterbetter", "drpo", "lead", "lead_static"}
    lead_family |= {"lead_min_correct", "lead_mean_all", "lead_upper_only"}
    length_shapers = {"cosine", "kimi_length", "pass_rate_linear", "length_zscore"}
    meds_family = {"dapo", "meds", "meds_single_cluster", "lead_meds"}
    assert set(tight) == lead_family | length_shapers | meds_family and len(tight) == 18
    assert set(loose) == {"grpo", "lead", "lead_static", "shorterbetter", "best_global"}
    assert plan.seeds == (0, 1, 2, 3, 4)
    from dynashape.cli import build_parser

    (plan_help,) = [a.help for p in build_parser()._subparsers._group_actions[0].choices.values()
                    for a in p._actions if "--plan" in a.option_strings]  # fmt: skip
    assert all(f"{name} (" in plan_help or f"{name}, " in plan_help for name in COMPARISON_PLAN)  # the help names each
    lines: list[str] = []
    plan_out = run_comparison(
        "unused",
        rows=plan.rows,
        seeds=plan.seeds,
        template=None,  # type: ignore[arg-type]
        workers=2,
        log=lines.append,
        dry_run=True,
        best_global_among=plan.roles.best_global_among,
    )
    grids = set(tuning_grids(64))
    tuned_tight = len(set(tight) & grids)  # 8: 4 of the issue + 4 length shapers
    tuned_loose = len({"lead_static", "shorterbetter", "grpo_length", "gdpo"})
    expected = 18 * 5 + 5 * 5 + (tuned_tight + tuned_loose) * 3 * 2
    assert tuned_tight == 8 and plan_out["expected"] == expected == 187
    assert lines[-1].startswith(f"{expected} runs in all")


def test_spec_config_pairs_the_evaluation_seed_and_puts_the_grid_point_on_top(base_cache):
    template = _template(base_cache)
    spec = RunSpec(method="gdpo", regime="tight", seed=3, split="validation", overrides={"length_threshold": 40})
    cfg = spec_config(spec, template, {"steps": 5, "lr": 1e-4})
    assert cfg.train.seed == 3 and cfg.train.length_threshold == 40 and cfg.train.steps == 5 and cfg.train.lr == 1e-4
    assert cfg.eval.seed == template.eval.seed + 3000 and cfg.eval.split == "validation"
    assert cfg.task == template.task and cfg.model == template.model
    assert spec.folder().as_posix() == "tuning/tight/gdpo/length_threshold=40-seed3"


def test_the_command_line_runs_resumes_and_writes_results(base_cache, tmp_path, capsys, local_ray):
    from dynashape.cli import main

    argv = ["compare", "--methods", "grpo", "--seeds", "1", "--jobs", "1", "--out", str(tmp_path / "c")]
    argv += ["--cache-dir", str(base_cache), *tiny_set_args()]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "[1/1] trained grpo tight seed 0" in first and "results:" in first
    assert main(argv) == 0  # again: nothing to train
    assert "[1/1] reused grpo tight seed 0" in capsys.readouterr().out
    data = json.loads((tmp_path / "c" / "results.json").read_text())
    assert [(r["method"], r["seed"]) for r in data["runs"]] == [("grpo", 0)]
    assert data["command"].startswith("dynashape compare --methods grpo --seeds 1")
    assert (tmp_path / "c" / "results.md").read_text().startswith("# Results")


@pytest.mark.parametrize(("text", "seeds"), [("0,1,2", [0, 1, 2]), ("5", [0, 1, 2, 3, 4]), ("7,", [7]), (None, [9])])
def test_seeds_are_a_list_or_a_count(text, seeds):
    from dynashape.cli.commands import _seeds

    assert _seeds(text, (9,)) == seeds
    with pytest.raises(ValueError, match="--seeds"):
        _seeds("a,b", (0,))
    with pytest.raises(ValueError, match="a count"):
        _seeds("0", (0,))


def test_best_global_waits_for_both_tunings_and_takes_the_higher_validation_aes():
    from dynashape.study.tuning import RunOrder

    with pytest.raises(ValueError, match="a best_global row needs its candidates"):
        RunOrder({"loose": ("grpo", "best_global")}, [0, 1], 1, True, {})
    plan = RunOrder({"loose": ("grpo", "best_global")}, [0, 1], 1, True, {}, best_global_among=("grpo_length", "gdpo"))
    assert sorted({s.method for s in plan.ready}) == ["gdpo", "grpo", "grpo_length"]
    assert plan.expected == 2 + 3 + 3 + 2 and list(plan.waiting) == [("loose", "best_global")]
    aes = {"grpo_length": [0.1, 0.2, 0.15], "gdpo": [0.3, 0.1, 0.1]}
    released = []
    for spec in [s for s in plan.ready if s.split == "validation"]:
        i = [p.overrides for p in plan.groups[(spec.regime, spec.method)]].index(spec.overrides)
        record = {"status": "trained", "seed": spec.seed, "eval": {"aes": aes[spec.method][i], "final": {}}}
        record["eval"]["final"] = {"accuracy": 0.5, "mean_length": 30.0}
        released += plan.finished(spec, record, lambda _: None)
        if spec.method == "grpo_length":
            assert not released, "best_global waits for gdpo's tuning too"
    gdpo_points = [p.overrides for p in plan.groups[("loose", "gdpo")]]
    assert [(s.method, s.seed, s.overrides) for s in released] == [
        ("gdpo", 0, gdpo_points[0]),
        ("gdpo", 1, gdpo_points[0]),
    ]
    assert plan.out["loose"]["best_global"] == "gdpo" and not plan.waiting
    assert (
        plan.results[("loose", "grpo_length")]["chosen_overrides"] == plan.groups[("loose", "grpo_length")][1].overrides
    )


@pytest.mark.slow
def test_the_command_killed_for_real_resumes(base_cache, tmp_path):
    """SIGKILL to the whole `dynashape compare --jobs 2` process group once a run has finished, then rerun."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "c"
    argv = [sys.executable, "-m", "dynashape.cli", "compare", "--methods", "grpo,lead", "--seeds", "3"]
    argv += ["--jobs", "2", "--out", str(out), "--cache-dir", str(base_cache), *tiny_set_args(steps=6)]
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(out.glob("runs/tight/*/eval.json")):
        assert proc.poll() is None and time.monotonic() < deadline, "the compare ended before any run finished"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the command and its Ray: the group this test started
    proc.wait()
    # Ray's workers run in sessions of their own: each exits once it sees its raylet gone, and one may finish the
    # run it was writing first; a finished run is what the rerun must reuse, so count them once all have exited
    from dynashape.io.state import FolderBusyError, FolderLock

    deadline = time.monotonic() + 60
    for folder in out.glob("runs/tight/*"):
        while True:
            try:
                with FolderLock(folder):
                    break
            except FolderBusyError:
                assert time.monotonic() < deadline, f"{folder} is still trained a minute after the kill"
                time.sleep(0.2)
    finished = {p: p.stat().st_mtime_ns for p in out.glob("runs/tight/*/eval.json")}
    assert 1 <= len(finished) < 6
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert len(list(out.glob("runs/tight/*/eval.json"))) == 6
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    assert rerun.stdout.count(" reused ") == len(finished)


def test_runs_start_seed_major_so_a_stopped_comparison_holds_paired_seeds():
    from dynashape.study.tuning import RunOrder

    plan = RunOrder({"tight": ("grpo", "lead", "shorterbetter"), "loose": ("grpo",)}, [3, 0, 1], 2, True, {})
    ranks = [([3, 0, 1].index(s.seed) if s.split == "test" else s.seed - 100) for s in plan.ready]
    assert ranks == sorted(ranks)  # every row's first seed, then every row's second, ...
    first = [(s.regime, s.method, s.split) for s in plan.ready if s.seed in (3, 100)]
    assert ("tight", "grpo", "test") in first and ("tight", "lead", "test") in first
    assert ("loose", "grpo", "test") in first and ("tight", "shorterbetter", "validation") in first
    assert [s.seed for s in plan.ready if s.method == "lead"] == [3, 0, 1]


def test_a_superset_killed_before_it_reaches_earlier_runs_keeps_their_records(tmp_path, base_cache, monkeypatch):
    """runs.json after `--methods grpo,lead --seeds 0,` then a larger plan killed after one new run: the earlier
    records stay (the larger plan would only have reused them), so results made from runs.json lose nothing."""
    from dynashape.study import compare
    from dynashape.study.scheduler import Outcome

    template = _template(base_cache)
    out = tmp_path / "cmp"
    earlier = []
    for method in ("grpo", "lead"):  # what the first invocation recorded, with its finished run folders
        run_dir = out / "runs" / "tight" / f"{method}-seed0"
        run_dir.mkdir(parents=True)
        (run_dir / "eval.json").write_text(json.dumps({"aes": 1.0}))
        earlier.append({"method": method, "regime": "tight", "seed": 0, "split": "test", "point": "",
                        "overrides": {}, "run_dir": f"runs/tight/{method}-seed0", "status": "trained",
                        "seconds": 1.0, "eval": {"aes": 1.0}})  # fmt: skip
    (out / "runs.json").write_text(json.dumps(earlier))

    def killed_after_one_new_run(jobs, *, workers, log, then, expected, **placement):  # the runner, killed early
        new = next(j for j in jobs if "drpo" in str(j.run_dir))
        new.run_dir.mkdir(parents=True)
        (new.run_dir / "eval.json").write_text(json.dumps({"aes": 0.5}))  # what a finished run leaves
        then(Outcome(new, "trained", eval={"aes": 0.5}, seconds=2.0))
        # killed here for real, comparison.json must already count this invocation up to its finished run
        meta = json.loads((out / "comparison.json").read_text())
        assert meta["invocations"][-1]["wall_seconds"] > 0 and meta["wall_seconds"] > 0
        return []

    monkeypatch.setattr(compare, "run_jobs", killed_after_one_new_run)
    monkeypatch.setattr(compare, "prepare", lambda configs, log: 0)
    run_comparison(out, rows={"tight": ("grpo", "lead", "drpo")}, seeds=[0], template=template, workers=2)
    records = load_runs(out)
    assert sorted(r["method"] for r in records) == ["drpo", "grpo", "lead"]
    assert {r["method"]: r["eval"]["aes"] for r in records} == {"drpo": 0.5, "grpo": 1.0, "lead": 1.0}


def test_a_row_can_take_fewer_seeds_and_a_fixed_value_without_tuning():
    from dynashape.study.tuning import RunOrder

    fixed = {"tight/grpo_length": {"shaper_kwargs": {"threshold": 25}}}
    plan = RunOrder(
        {"tight": ("grpo", "grpo_length", "gdpo")}, [5, 6, 7], 2, False, {}, row_seeds={"tight/gdpo": 1}, fixed=fixed
    )
    by_row = {}
    for s in plan.ready:
        by_row.setdefault(s.method, []).append(s)
    assert [s.seed for s in by_row["grpo"]] == [5, 6, 7]
    assert [s.seed for s in by_row["gdpo"]] == [5]  # the first of the seeds: still paired with every row
    assert [s.seed for s in by_row["grpo_length"]] == [5, 6, 7]
    assert all(s.overrides == fixed["tight/grpo_length"] and s.split == "test" for s in by_row["grpo_length"])
    assert not plan.waiting and not plan.groups  # no tuning for the fixed row, none asked for the others
    # with tuning on, a fixed row is still not tuned while the other tuned row is
    tuned = RunOrder({"tight": ("grpo_length", "gdpo")}, [5], 1, True, {}, fixed=fixed)
    assert set(tuned.groups) == {("tight", "gdpo")} and set(tuned.waiting) == {("tight", "gdpo")}


def test_the_v2_plan_lists_its_runs_and_refuses_unknown_rows():
    plan = COMPARISON_PLAN["v2"]
    lines: list[str] = []
    out = run_comparison(
        "unused",
        rows=plan.rows,
        seeds=plan.seeds,
        template=None,  # type: ignore[arg-type]
        workers=2,
        tune=plan.tune,
        row_seeds=plan.row_seeds,
        fixed=plan.fixed,
        log=lines.append,
        dry_run=True,
    )
    assert out["expected"] == sum(plan.row_seeds.values())
    assert sum(line.startswith("run ") for line in lines) == out["expected"]
    assert not any(line.endswith("(tuning)") for line in lines) and "0 after tuning" in lines[-1]  # nothing tuned
    assert "run grpo_length [threshold=25] tight seed 5 -> runs/tight/grpo_length-seed5" in lines
    with pytest.raises(ValueError, match="row_seeds names rows"):
        run_comparison(
            "unused", rows={"tight": ("grpo",)}, seeds=[0], template=None, row_seeds={"tight/lead": 1}, dry_run=True
        )  # type: ignore[arg-type]
