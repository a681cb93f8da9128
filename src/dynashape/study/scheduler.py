"""Many training runs at once: a shared base model and base evaluation, parallel processes, resume, progress.

``run_jobs`` is the engine under ``dynashape compare``:

1. *prepare* (in this process, all cores): build or load each distinct base model once (the warm-up is never
   raced by N processes) and compute each distinct base evaluation once into the base-model cache, where every
   run's ``train()`` then finds it (one per seed and split: the evaluation seed is part of its key);
2. *run*: each unfinished job in its own spawned process (``jobs`` at a time, ``max(1, cores // jobs)`` torch
   threads each); a job is ``train(cfg, run_dir)``, which resumes from the folder's last checkpoint;
3. *report*: one line when a job starts and one when it ends (wall time, headline numbers, jobs left and an
   estimate of the time left), plain lines that read well in a log file.

A job is finished when its folder's ``eval.json`` exists for the same config, step count and split; finished
jobs are reused, not run again. ``train()`` holds its run folder's lock (``dynashape.state.FolderLock``) for the
whole run, so a restarted runner never trains a folder that an orphaned process of a killed one is still
writing: that job fails with ``FolderBusyError`` naming the orphan's pid, and the others go on.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape import state
from dynashape.train.config import RunConfig

__all__ = ["Job", "Outcome", "default_jobs", "finished_eval", "prepare", "run_jobs"]


@dataclass(frozen=True)
class Job:
    """One training run: its label (for the log), config and folder."""

    label: str
    cfg: RunConfig
    run_dir: Path


@dataclass
class Outcome:
    """How a job ended: ``reused`` (finished before), ``trained`` (from scratch), ``resumed`` (from a
    checkpoint), or ``failed`` (``error`` says why); ``eval`` is its eval.json, ``seconds`` its wall time here."""

    job: Job
    status: str
    eval: dict[str, Any] | None = None
    seconds: float = 0.0
    error: str | None = None


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{max(0.0, seconds):.1f} s"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def finished_eval(job: Job) -> dict[str, Any] | None:
    """The job's eval.json when its folder holds a finished run of exactly this job, else None."""
    from dynashape.train import checkpoint as ckpt

    done, config = job.run_dir / "eval.json", job.run_dir / "config.yaml"
    if not (done.exists() and config.exists()):
        return None
    try:
        ev = state.read_json(done)
        old = state.read_yaml(config) or {}
    except state.StateFileError:
        return None
    if not (isinstance(ev, dict) and isinstance(old, dict)):
        return None
    try:  # read through RunConfig, so that a folder written with an older config layout still counts
        same_config = ckpt.config_hash(RunConfig.from_dict(old).to_dict()) == ckpt.config_hash(job.cfg.to_dict())
    except (TypeError, ValueError):  # a config this version cannot read is not this job's
        return None
    if same_config and ev.get("steps") == job.cfg.train.steps and ev.get("split", "test") == job.cfg.eval.split:
        return ev
    return None


def _identity(cfg: RunConfig) -> str:
    """Everything but the training section: runs that share it share the base model and base evaluation."""
    return json.dumps({k: v for k, v in cfg.to_dict().items() if k != "train"}, sort_keys=True, default=str)


def prepare(configs: Iterable[RunConfig], *, log: Callable[[str], None] = lambda _: None) -> int:
    """Build each distinct base model and base evaluation of ``configs`` once, in this process; returns how many
    base evaluations were prepared. A pretrained model (``model_path``) has no cache: its runs evaluate it."""
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import evaluate_base, load_base, prompt_format

    _quiet_loading()
    seen: dict[str, RunConfig] = {}
    for cfg in configs:
        seen.setdefault(_identity(cfg), cfg)
    if not seen:
        return 0
    count = 0
    with MathVerifier(timeout=5.0, workers=1) as verifier:
        for cfg in seen.values():
            start = time.perf_counter()
            base = load_base(cfg)
            if not base.meta.get("cache"):
                continue
            evaluate_base(cfg, base, verifier, fmt=prompt_format(cfg, base.tokenizer, base.world))
            count += 1
            origin = "trained now" if base.meta["trained_now"] else base.meta["source"]
            log(
                f"base evaluation ready: {cfg.eval.split} split, eval seed {cfg.eval.seed} "
                f"({time.perf_counter() - start:.0f} s; base model {origin})"
            )
    return count


def _quiet_loading() -> None:
    """No transformers progress bars ("Loading weights") in a log of plain lines."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is optional for the toy's helpers; runs need it anyway
        pass


def _init_worker(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    _quiet_loading()


def _run_one(cfg: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Train (or resume) one run; ``train`` holds the folder's lock (a busy folder: ``FolderBusyError``).

    The lock is taken there and only there: a second lock object on the same folder in this process would be
    refused by the first."""
    from dynashape.train.run import train

    start = time.perf_counter()
    result = train(cfg, run_dir, progress=False, report=False)
    return {"eval": result.eval, "resumed_from": result.resumed_from, "seconds": time.perf_counter() - start}


def _headline(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "no evaluation"
    b, f = ev["base"], ev["final"]
    aes = "n/a" if ev.get("aes") is None else f"{ev['aes']:+.3f}"
    return (
        f"accuracy {b['accuracy']:.3f} -> {f['accuracy']:.3f}, length {b['mean_length']:.1f} -> "
        f"{f['mean_length']:.1f}, AES {aes}"
    )


def run_jobs(
    jobs: Sequence[Job],
    *,
    workers: int,
    log: Callable[[str], None] = lambda _: None,
    then: Callable[[Outcome], Sequence[Job]] = lambda _: (),
    expected: int | None = None,
) -> list[Outcome]:
    """Run ``jobs`` (and the jobs ``then`` returns as each one ends) ``workers`` at a time; finished ones are
    reused. ``expected``: how many jobs there will be in all, for the estimate of time left.

    ``workers == 1`` runs in this process (all its threads); more use spawned processes. Jobs returned by
    ``then`` must share the base models and evaluations of ``prepare``'s configs (callers prepare them first).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    outcomes: list[Outcome] = []
    queue = list(jobs)
    total = expected if expected is not None else len(queue)
    started_at = time.perf_counter()
    durations: list[float] = []
    running: dict[cf.Future, tuple[Job, float]] = {}
    threads = max(1, default_jobs() // workers)
    pool = None
    if workers > 1:
        pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(threads,),
        )

    def finish(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if outcome.status in ("trained", "resumed"):
            durations.append(outcome.seconds)
        left = total - len(outcomes)
        eta = "unknown"
        if durations and left > 0:  # mean wall time of this invocation's runs, `workers` of them at a time
            eta = _clock(sum(durations) / len(durations) * left / min(workers, max(left, 1)))
        elif left <= 0:
            eta = _clock(0.0)
        what = outcome.error if outcome.status == "failed" else _headline(outcome.eval)
        log(
            f"[{len(outcomes)}/{total}] {outcome.status} {outcome.job.label} in {_clock(outcome.seconds)}: {what}; "
            f"elapsed {_clock(time.perf_counter() - started_at)}, {left} left, ETA {eta}"
        )
        queue.extend(then(outcome))

    def launch(job: Job) -> None:
        done = finished_eval(job)
        if done is not None:
            finish(Outcome(job, "reused", done))
            return
        partial = (job.run_dir / "checkpoints").exists()
        log(f"start {job.label} ({'resuming' if partial else 'new'}) -> {job.run_dir}")
        if pool is None:
            start = time.perf_counter()
            try:
                out = _run_one(job.cfg, job.run_dir)
            except Exception as err:  # one failed run is reported; the others go on
                finish(
                    Outcome(job, "failed", seconds=time.perf_counter() - start, error=f"{type(err).__name__}: {err}")
                )
                return
            finish(_outcome(job, out))
            return
        running[pool.submit(_run_one, job.cfg, job.run_dir)] = (job, time.perf_counter())

    try:
        while queue or running:
            while queue and len(running) < workers:
                launch(queue.pop(0))
            if not running:
                continue
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in done:
                job, start = running.pop(future)
                try:
                    finish(_outcome(job, future.result()))
                except Exception as err:  # the run's own error, or a worker that died
                    seconds = time.perf_counter() - start
                    finish(Outcome(job, "failed", seconds=seconds, error=f"{type(err).__name__}: {err}"))
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _outcome(job: Job, out: dict[str, Any]) -> Outcome:
    status = "resumed" if out["resumed_from"] is not None else "trained"
    if out["eval"] is None:
        return Outcome(job, "failed", seconds=out["seconds"], error="the run stopped before its evaluation")
    return Outcome(job, status, out["eval"], out["seconds"])
