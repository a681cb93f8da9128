"""The study engine on a local Ray (``dynashape.study.scheduler``): a worker killed mid-run, SIGTERM to a real
``dynashape compare``, a second compare on the same folder, the progress bar, and results equal to serial runs.

The fault tests with stand-in runners (module-level functions sent to Ray by value) take a second or two each;
the ones that train for real use the tiny config of ``test_compare``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray.cloudpickle
from test_compare import TINY_TRAIN, _template, tiny_set_args

from dynashape.io import state
from dynashape.study.compare import RunSpec, run_comparison, spec_config
from dynashape.study.ray_tasks import Placement
from dynashape.study.scheduler import Job, run_jobs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the stand-in runners below run on workers

_FAKE_EVAL = {"base": {"accuracy": 0.25, "mean_length": 10.0}, "final": {"accuracy": 0.5, "mean_length": 8.0}}


def _count_attempt(run_dir: Path) -> int:
    """Append one line to run_dir/attempts (one per time a runner starts) and return how many there are now."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "attempts", "a") as f:
        f.write(f"{os.getpid()}\n")
    return len((run_dir / "attempts").read_text().split())


def _evaluated(run_dir):
    """What a finished train() leaves: an eval.json, and its outcome."""
    state.write_json(run_dir / "eval.json", _FAKE_EVAL)
    return {"eval": _FAKE_EVAL, "resumed_from": None}


def _finishes(cfg, run_dir):
    """A run that ends at once."""
    _count_attempt(run_dir)
    return _evaluated(run_dir)


def _dies_first_time(cfg, run_dir):
    """A worker killed (SIGKILL) the first time it runs this job; the retry finishes."""
    if _count_attempt(run_dir) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return _evaluated(run_dir)


def _always_dies(cfg, run_dir):
    _count_attempt(run_dir)
    os.kill(os.getpid(), signal.SIGKILL)


def _raises(cfg, run_dir):
    _count_attempt(run_dir)
    raise ValueError(f"the run at {run_dir.name} refuses")


def _by_name(cfg, run_dir):
    """Each job's behaviour by its folder's name."""
    return {"dies": _dies_first_time, "always": _always_dies, "raises": _raises}.get(run_dir.name, _finishes)(
        cfg, run_dir
    )


def _jobs(tmp_path, base_cache, names):
    cfg = _template(base_cache)
    return [Job(name, cfg, tmp_path / name) for name in names]


def test_a_dead_worker_is_retried_once_then_recorded_failed_and_the_others_finish(local_ray, tmp_path, base_cache):
    jobs = _jobs(tmp_path, base_cache, ["ok1", "dies", "always", "raises", "ok2"])
    lines: list[str] = []
    outcomes = run_jobs(jobs, workers=2, log=lines.append, runner=_by_name)
    by = {o.job.label: o for o in outcomes}
    attempts = {name: len((tmp_path / name / "attempts").read_text().split()) for name in by}
    assert attempts == {"ok1": 1, "dies": 2, "always": 2, "raises": 1, "ok2": 1}  # Ray retries dead workers only
    assert {n: o.status for n, o in by.items()} == {
        "ok1": "trained", "dies": "trained", "always": "failed", "raises": "failed", "ok2": "trained",
    }  # fmt: skip
    assert by["always"].error.startswith("WorkerCrashedError (retried once): ")
    assert by["raises"].error == "ValueError: the run at raises refuses"  # the run's own exception, as text
    assert by["dies"].eval == _FAKE_EVAL
    assert sum(x.startswith("[") for x in lines) == 5


def test_results_travel_back_to_the_drivers_folder(local_ray, tmp_path, base_cache):
    """A task's summary files are written by the driver: on a cluster the run folder lives on a worker's disk."""
    jobs = _jobs(tmp_path, base_cache, ["a"])

    outcomes = run_jobs(jobs, workers=1, runner=_writes_elsewhere)
    assert outcomes[0].status == "trained"
    assert state.read_json(tmp_path / "a" / "eval.json") == _FAKE_EVAL  # written by the driver, not the task
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert not (tmp_path / "a" / "checkpoints").exists()  # checkpoints stay where the run trained


def _writes_elsewhere(cfg, run_dir):
    """A worker whose disk is not the driver's: it trains into run_dir, which then vanishes from this disk."""
    import shutil

    run_dir.mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    state.write_json(run_dir / "eval.json", _FAKE_EVAL)
    state.write_text(run_dir / "metrics.jsonl", '{"step": 1}\n')
    out = {"eval": _FAKE_EVAL, "resumed_from": None}
    # run_task reads the folder after this returns: hand it a copy, as if the disk were elsewhere
    shutil.move(run_dir, run_dir.with_name("elsewhere"))
    shutil.copytree(run_dir.with_name("elsewhere"), run_dir, ignore=shutil.ignore_patterns("checkpoints"))
    return out


def test_the_study_bar_counts_done_failed_and_running_in_plain_lines(local_ray, tmp_path, base_cache, capsys):
    jobs = _jobs(tmp_path, base_cache, ["ok1", "raises", "ok2"])
    run_jobs(jobs, workers=2, runner=_by_name, progress=True)
    err = capsys.readouterr().err
    last = [x for x in err.splitlines() if x.startswith("study: ")][-1]
    assert last.startswith("study: 3/3 runs (100%)") and "failed=1" in last and "running=0" in last
    assert "\r" not in err


def test_a_killed_training_worker_resumes_from_its_checkpoint_on_the_retry(local_ray, tmp_path, base_cache):
    """SIGKILL to the process training one run, once it has saved a checkpoint: Ray runs the task again, the
    retry resumes from the checkpoint, and the run next to it finishes untouched."""
    out = tmp_path / "cmp"
    victim = out / "runs" / "tight" / "lead-seed0"
    killed: list[int] = []

    def kill_when_checkpointed() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if (victim / "checkpoints" / "step_2").exists() and (victim / ".lock.pid").exists():
                pid = int((victim / ".lock.pid").read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_checkpointed, daemon=True)
    killer.start()
    overrides = {**TINY_TRAIN, "steps": 8}
    result = run_comparison(
        out, rows={"tight": ("grpo", "lead")}, seeds=[0], template=_template(base_cache),
        train_overrides=overrides, workers=2,
    )  # fmt: skip
    killer.join()
    assert killed, "the run finished before it could be killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    status = {r["method"]: r["status"] for r in result["runs"]}
    assert status == {"grpo": "trained", "lead": "resumed"} and not result["failed"]
    resumed = state.read_json(victim / "eval.json")
    assert resumed["resumed_from"] >= 2 and resumed["steps"] == 8


def test_runs_on_ray_equal_the_same_runs_trained_serially(compared_on_ray, tmp_path, load_script):
    """Every number of a Ray run equals the same RunConfig trained in this process with the same threads."""
    import torch

    from dynashape.train.run import train

    differences = load_script("same_run_numbers").differences
    out, template = compared_on_ray
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what each of the two Ray workers had (2 cores / 2 jobs)
    try:
        for method in ("grpo", "lead"):
            spec = RunSpec(method=method, regime="tight", seed=1)
            serial = train(spec_config(spec, template, TINY_TRAIN), tmp_path / method, progress=False, report=False)
            on_ray = state.read_json(out / spec.folder() / "eval.json")
            assert differences(serial.eval, on_ray) == [], method
            ray_metrics = [json.loads(x) for x in (out / spec.folder() / "metrics.jsonl").read_text().splitlines()]
            assert differences(serial.metrics, ray_metrics) == [], method
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def compared_on_ray(tmp_path_factory, base_cache, local_ray):
    from test_compare import _tiny_comparison

    out = tmp_path_factory.mktemp("compare-ray")
    template = _template(base_cache)
    assert not _tiny_comparison(out, template)["failed"]
    return out, template


# ------------------------------------------------------------------------- the command, as a user runs it
def _tiny_argv(out: Path, base_cache: Path, *, seeds: int, steps: int) -> list[str]:
    argv = [sys.executable, "-m", "dynashape.cli", "compare", "--methods", "grpo,lead", "--seeds", str(seeds)]
    argv += ["--jobs", "2", "--out", str(out), "--cache-dir", str(base_cache), "--no-tuning"]
    return argv + tiny_set_args(steps=steps)


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc: Ray's raylet, GCS, agents and workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended while we read
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        status = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return status != "Z"


def test_sigterm_cancels_every_run_leaves_no_process_and_the_rerun_resumes(base_cache, tmp_path):
    """A real `dynashape compare --jobs 2` (its own local Ray): a second compare on its folder is refused naming
    it; SIGTERM once a run has finished ends it within 30 s, with every process it started gone; the rerun
    reuses the finished runs and completes the others."""
    from lock_holder import child_env

    out = tmp_path / "c"
    argv = _tiny_argv(out, base_cache, seeds=3, steps=10)
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (list(out.glob("runs/tight/*/eval.json")) and len(list(out.glob("runs/tight/*/.lock.pid"))) >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "the compare ended before the test's point"
            time.sleep(0.1)
        second = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert f"{out} is in use by another process (pid {proc.pid}) running a comparison" in second.stderr
        started = _descendants(proc.pid)
        assert started, "the compare runs its trainers in processes of its own Ray"
        finished = {p: p.stat().st_mtime_ns for p in out.glob("runs/tight/*/eval.json")}
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        log, _ = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 30
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, log[-3000:]
    assert "SIGTERM received: cancelled" in log
    time.sleep(1.0)  # Ray's processes exit as their parent goes: give the last one a moment
    assert [p for p in started if _alive(p)] == [], "processes left behind by the compare"
    # a run in its last moments may still finish within the cancel grace: what the rerun reuses is every run
    # finished when it starts, and at least those finished before the signal
    done = list(out.glob("runs/tight/*/eval.json"))
    assert set(finished) <= set(done)
    rerun = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert len(list(out.glob("runs/tight/*/eval.json"))) == 6
    assert {p: p.stat().st_mtime_ns for p in finished} == finished, "finished runs are kept, not trained again"
    assert rerun.stdout.count(" reused ") == len(done) < 6
    meta = state.read_json(out / "comparison.json")
    assert len(meta["invocations"]) == 2 and all(i["wall_seconds"] > 0 for i in meta["invocations"])
    assert meta["ray"] == {"address": "local", "cpus_per_run": None, "gpus_per_run": 0.0}


def test_a_second_comparison_on_a_locked_folder_is_refused_naming_the_holder(tmp_path, base_cache):
    from lock_holder import held_by_another_process

    with held_by_another_process(tmp_path / "cmp") as holder:
        with pytest.raises(state.FolderBusyError, match=f"pid {holder}"):
            run_comparison(tmp_path / "cmp", rows={"tight": ("grpo",)}, seeds=[0], template=_template(base_cache))
    assert not (tmp_path / "cmp" / "comparison.json").exists() and not (tmp_path / "cmp" / "runs.json").exists()


def test_placement_checks_and_sizes():
    with pytest.raises(ValueError, match="cpus_per_run must be > 0, got 0"):
        Placement(cpus_per_run=0)
    with pytest.raises(ValueError, match="gpus_per_run must be >= 0, got -1"):
        Placement(gpus_per_run=-1)
    assert Placement(cpus_per_run=0.5).cpus(4) == 0.5
    assert Placement(address="auto").cpus(4) == 1.0
    from dynashape.study.ray_tasks import default_jobs

    assert Placement().cpus(1) == default_jobs() and Placement().cpus(10**6) == 1.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compare_joins_a_running_cluster_and_leaves_it_running(base_cache, tmp_path):
    """`ray start --head` (a one-node cluster of its own), then `dynashape compare --ray-address HOST:PORT`: the
    runs are the cluster's tasks, the results land in --out, and the cluster outlives the command."""
    from lock_holder import child_env

    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
         "--disable-usage-stats"],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out = tmp_path / "c"
        argv = _tiny_argv(out, base_cache, seeds=1, steps=2)
        argv[argv.index("--jobs") : argv.index("--jobs") + 2] = ["--ray-address", f"127.0.0.1:{port}"]
        deadline = time.monotonic() + 120
        while True:  # the head takes a few seconds to accept drivers
            run = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=300)
            if run.returncode == 0 or time.monotonic() > deadline or "cannot join a Ray cluster" not in run.stderr:
                break
            time.sleep(1.0)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert f"on Ray at 127.0.0.1:{port}" in run.stdout
        assert sorted(p.parent.name for p in out.glob("runs/tight/*/eval.json")) == ["grpo-seed0", "lead-seed0"]
        meta = state.read_json(out / "comparison.json")
        assert meta["ray"]["address"] == f"127.0.0.1:{port}" and meta["jobs"] is None
        assert head.poll() is None, "the cluster outlives the command that joined it"
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
