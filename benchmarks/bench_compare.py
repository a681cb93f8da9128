"""Runs per hour of ``dynashape compare`` on Ray (``--jobs N``) against serial, on tiny runs; Ray's own costs.

The same comparison (methods x seeds, a small toy model, a few RL steps, a small evaluation) is run in one process
into fresh folders: serially (each run's ``train()`` called in this process, one after the other, with every
core's torch threads, then with each Ray run's thread count) and through ``run_comparison`` on a local Ray of
``--jobs`` runs at once (``cores // jobs`` threads each; the Ray time includes starting and stopping that Ray).
The base model and base evaluations are prepared once before any of them is timed (all would share them), so
the timings are of the runs. Apart, it measures Ray's start-up (``ray.init`` to a first task's result, and
``ray.shutdown``) and its per-task overhead (the round trip of an empty task). Runs of a few steps measure
mostly the start-up of each worker (it imports torch and loads the base model), so the default is 24 steps.

    python benchmarks/bench_compare.py                    # 2 methods x 4 seeds, 24 steps, jobs 2: ~4 minutes
    python benchmarks/bench_compare.py --methods grpo,lead,gdpo --seeds 4 --steps 10 --jobs 2 [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from dynashape.runtime.policy import ModelConfig
from dynashape.study.compare import RunSpec, run_comparison, spec_config
from dynashape.study.scheduler import default_jobs, prepare
from dynashape.train.config import EvalConfig, RunConfig
from dynashape.train.run import train
from dynashape.train.warmup import WarmupConfig
from dynashape.world.chain import ChainTaskConfig


def template(cache: Path, warmup_steps: int) -> RunConfig:
    return RunConfig(
        task=ChainTaskConfig(n_train=2000, n_validation_per_difficulty=4, n_test_per_difficulty=4),
        model=ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128),
        warmup=WarmupConfig(steps=warmup_steps, batch_size=16),
        eval=EvalConfig(n_samples=4, max_new_tokens=64, passk_samples=8, passk_hard=2, passk_trap=2),
        cache_dir=str(cache),
    )


def _timed(res: dict, name: str, runs: int, seconds: float) -> None:
    res[f"{name}_seconds"] = seconds
    res[f"{name}_runs_per_hour"] = runs / seconds * 3600


def _empty() -> None:
    return None


def ray_costs(jobs: int, tasks: int = 200) -> dict[str, float]:
    """Seconds of a local Ray's start (to a first task's result) and stop, and of one empty task's round trip
    (the mean of ``tasks`` submitted at once, after the workers are warm)."""
    import ray

    start = time.perf_counter()
    ray.init(
        address="local", num_cpus=jobs, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False
    )
    empty = ray.remote(_empty)
    ray.get([empty.remote() for _ in range(jobs)])
    started = time.perf_counter() - start
    start = time.perf_counter()
    ray.get([empty.remote() for _ in range(tasks)])
    per_task = (time.perf_counter() - start) / tasks
    start = time.perf_counter()
    ray.shutdown()
    return {"ray_start_seconds": started, "ray_task_seconds": per_task, "ray_stop_seconds": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="grpo,lead")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    methods = tuple(m.strip() for m in args.methods.split(","))
    seeds = list(range(args.seeds))
    train_kw = {"steps": args.steps, "prompts_per_step": 8, "group_size": 4, "checkpoint_every": 0}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tpl = template(root / "cache", args.warmup_steps)
        specs = [RunSpec(method=m, regime="tight", seed=s) for m in methods for s in seeds]
        prepare(spec_config(s, tpl, train_kw) for s in specs)  # shared by both: not timed
        res = {"runs": len(specs), "jobs": args.jobs, "cores": default_jobs(), "steps": args.steps}
        threads = torch.get_num_threads()
        per_job = max(1, default_jobs() // args.jobs)
        for name, n_threads in (("serial", threads), ("serial_few_threads", per_job)):
            torch.set_num_threads(n_threads)  # the serial runs train in this process
            start = time.perf_counter()
            for spec in specs:
                train(spec_config(spec, tpl, train_kw), root / name / spec.folder(), progress=False, report=False)
            _timed(res, name, len(specs), time.perf_counter() - start)
        torch.set_num_threads(threads)
        start = time.perf_counter()
        out = run_comparison(
            root / "ray", rows={"tight": methods}, seeds=seeds, template=tpl, train_overrides=train_kw,
            workers=args.jobs, tune=False,
        )  # fmt: skip
        assert not out["failed"], out["failed"]
        _timed(res, "parallel", len(specs), time.perf_counter() - start)
    res.update(ray_costs(args.jobs))
    res["ratio"] = res["parallel_runs_per_hour"] / res["serial_runs_per_hour"]
    res["ratio_vs_few_threads"] = res["parallel_runs_per_hour"] / res["serial_few_threads_runs_per_hour"]
    if args.json:
        print(json.dumps(res))
        return
    print(f"{res['runs']} tiny runs ({args.methods} x {args.seeds} seeds, {args.steps} steps), {res['cores']} cores")
    rows = (
        ("serial (1 process, all threads)", "serial"),
        (f"serial (1 process, {per_job} thread(s))", "serial_few_threads"),
        (f"--jobs {args.jobs} (a local Ray)", "parallel"),
    )
    for label, key in rows:
        print(f"{label:36s}: {res[key + '_runs_per_hour']:8.1f} runs/hour ({res[key + '_seconds']:.1f} s)")
    print(f"{'ratio --jobs / serial':36s}: {res['ratio']:8.2f}x")
    print(f"{'ratio --jobs / serial, same threads':36s}: {res['ratio_vs_few_threads']:8.2f}x")
    print(
        f"Ray: start {res['ray_start_seconds']:.1f} s (to a first result), stop {res['ray_stop_seconds']:.1f} s, "
        f"{res['ray_task_seconds'] * 1e3:.2f} ms per empty task"
    )


if __name__ == "__main__":
    main()
