"""Many training runs at once, on Ray: one laptop or a cluster, a shared base model, resume, faults, progress.

``run_jobs`` is the engine under ``dynashape compare``:

1. *prepare* (in this process, all cores): build or load each distinct base model once (the warm-up is never
   raced by N processes) and compute each distinct base evaluation once into the base-model cache, where every
   run's ``train()`` then finds it (one per seed and split: the evaluation seed is part of its key);
2. *run*: each unfinished job is a Ray task, placed by ``Placement`` (CPUs and GPUs per run, fractions allowed).
   With no address a local Ray of ``jobs x cpus_per_run`` CPUs is started and shut down at the end; with one
   (``auto`` or ``HOST:PORT``) the cluster is joined. At most ``jobs`` tasks are in flight, submitted in the
   plan's order, so that what the bar calls running is what runs. A task is ``train(cfg, run_dir)``, which
   resumes from the folder's last checkpoint;
3. *results travel back*: a task returns its run folder's summary files (``RESULT_FILES``) and the driver writes
   them, atomically, into its own copy of the folder; a cluster needs no shared disk for results (the
   checkpoints stay on the disk of the node that trained the run);
4. *faults*: a task whose worker died (SIGKILL, the OOM killer, a segfault) is retried once by Ray (on a disk it
   shares with the first attempt the retry resumes from the last checkpoint), then recorded failed with Ray's
   error; a run's own exception fails it at once (a deterministic error would only fail again); every other
   run goes on. The first SIGTERM / SIGINT cancels every task (their workers are killed), shuts the local Ray
   down and raises ``StudyInterrupted``: every finished run is already recorded, and a rerun resumes;
5. *report*: one line when a job starts and one when it ends (wall time, headline numbers, jobs left and an
   estimate of the time left), plain lines that read well in a log file, and one progress bar for the study.

A job is finished when its folder's ``eval.json`` exists for the same config, step count and split; finished
jobs are reused, not run again. ``train()`` holds its run folder's lock (``dynashape.io.state.FolderLock``) for the
whole run, so a restarted study never trains a folder that an orphaned trainer is still writing: that job fails
with ``FolderBusyError`` naming the orphan's pid, and the others go on.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.ray_tasks import RESULT_FILES, Cluster, Placement, failure_text, quiet_loading
from dynashape.train.config import RunConfig
from dynashape.train.signals import StudyInterrupted

__all__ = ["Job", "Outcome", "finished_eval", "prepare", "run_jobs"]

CANCEL_GRACE_SECONDS = 20.0
"""How long cancelled tasks get to end before the driver stops waiting (a stop should end within 30 s in all)."""


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


def prepare(configs: Iterable[RunConfig], *, log: Callable[[str], None] = lambda _: None, progress: bool = True) -> int:
    """Build each distinct base model and base evaluation of ``configs`` once, in this process; returns how many
    base evaluations were prepared. A pretrained model (``model_path``) has no cache: its runs evaluate it.
    ``progress``: the warm-up's and each base evaluation's progress (a line every 10 s in a log: a real model's
    base evaluation takes many minutes before the study's first run starts)."""
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import evaluate_base, load_base, prompt_format

    quiet_loading()
    seen: dict[str, RunConfig] = {}
    for cfg in configs:
        seen.setdefault(_identity(cfg), cfg)
    if not seen:
        return 0
    count = 0
    with MathVerifier(timeout=5.0, workers=1) as verifier:
        for cfg in seen.values():
            start = time.perf_counter()
            base = load_base(cfg, progress=progress)
            if not base.meta.get("cache"):
                continue
            fmt = prompt_format(cfg, base.tokenizer, base.world)
            evaluate_base(cfg, base, verifier, fmt=fmt, progress=progress)
            count += 1
            origin = "trained now" if base.meta["trained_now"] else base.meta["source"]
            log(
                f"base evaluation ready: {cfg.eval.split} split, eval seed {cfg.eval.seed} "
                f"({time.perf_counter() - start:.0f} s; base model {origin})"
            )
    return count


def _run_one(cfg: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Train (or resume) one run; ``train`` holds the folder's lock (a busy folder: ``FolderBusyError``).

    The lock is taken there and only there: a second lock object on the same folder in this process would be
    refused by the first."""
    from dynashape.train.run import train

    result = train(cfg, run_dir, progress=False, report=False)
    return {"eval": result.eval, "resumed_from": result.resumed_from}


def _keep_files(run_dir: Path, files: dict[str, bytes]) -> None:
    """Write the files a task sent back into the driver's copy of its folder, atomically, in ``RESULT_FILES``'
    order (eval.json last); a file that is already there with the same bytes (a local Ray, one disk) is left."""
    for name in sorted(files, key=lambda n: RESULT_FILES.index(n) if n in RESULT_FILES else -1):
        path = run_dir / name
        if path.is_file() and path.read_bytes() == files[name]:
            continue
        state.write_bytes(path, files[name])


def _headline(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "no evaluation"
    b, f = ev["base"], ev["final"]
    aes = "n/a" if ev.get("aes") is None else f"{ev['aes']:+.3f}"
    return (
        f"accuracy {b['accuracy']:.3f} -> {f['accuracy']:.3f}, length {b['mean_length']:.1f} -> "
        f"{f['mean_length']:.1f}, AES {aes}"
    )


class _Dispatch:
    """One ``run_jobs`` call's bookkeeping: the queue, the tasks in flight, the outcomes, the log lines and the
    bar. Submits jobs in the queue's order while fewer than ``workers`` run, so that what the bar calls running is
    what runs."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[Job],
        *,
        log: Callable[[str], None],
        then: Callable[[Outcome], Sequence[Job]],
        total: int,
        runner: Callable[[RunConfig, Path], dict[str, Any]],
    ) -> None:
        self.cluster, self.log, self.then, self.total, self.runner = cluster, log, then, total, runner
        self.queue = list(jobs)
        self.outcomes: list[Outcome] = []
        self.running: dict[Any, tuple[Job, float]] = {}  # Ray object ref -> (job, when it was submitted)
        self.durations: list[float] = []  # wall times of the runs trained in this call, for the ETA
        self.started_at = time.perf_counter()
        self.bar: Any = None

    def _eta(self, left: int) -> str:
        """The time left: the mean wall time of this call's runs, ``workers`` of them at a time."""
        if self.durations and left > 0:
            mean = sum(self.durations) / len(self.durations)
            return _clock(mean * left / min(self.cluster.jobs, max(left, 1)))
        return _clock(0.0) if left <= 0 else "unknown"

    def finish(self, outcome: Outcome) -> None:
        """Record ``outcome``, log its line, move the bar, and queue the jobs ``then`` returns for it."""
        self.outcomes.append(outcome)
        if outcome.status in ("trained", "resumed"):
            self.durations.append(outcome.seconds)
        left = self.total - len(self.outcomes)
        what = outcome.error if outcome.status == "failed" else _headline(outcome.eval)
        self.log(
            f"[{len(self.outcomes)}/{self.total}] {outcome.status} {outcome.job.label} in {_clock(outcome.seconds)}: "
            f"{what}; elapsed {_clock(time.perf_counter() - self.started_at)}, {left} left, ETA {self._eta(left)}"
        )
        if self.bar is not None:
            if outcome.status == "reused":  # the bar counts the work of this invocation: its rate gives the ETA
                self.bar.total -= 1
            else:
                self.bar.update(1)
        self.queue.extend(self.then(outcome))

    def launch(self, job: Job) -> None:
        """Reuse ``job``'s finished run, or submit it as a Ray task."""
        done = finished_eval(job)
        if done is not None:
            self.finish(Outcome(job, "reused", done))
            return
        partial = (job.run_dir / "checkpoints").exists()
        self.log(f"start {job.label} ({'resuming' if partial else 'new'}) -> {job.run_dir}")
        ref = self.cluster.remote.remote(self.runner, job.cfg, job.run_dir, self.cluster.threads)
        self.running[ref] = (job, time.perf_counter())

    def collect(self, ref: Any) -> None:
        """A finished task's outcome, its files written into the driver's copy of the run folder."""
        job, start = self.running.pop(ref)
        try:
            out = self.cluster.ray.get(ref)
        except Exception as err:  # the run's own error, or a worker that died twice
            self.finish(Outcome(job, "failed", seconds=time.perf_counter() - start, error=failure_text(err)))
            return
        _keep_files(job.run_dir, out.pop("files"))
        self.finish(_outcome(job, out))

    def show(self) -> None:
        if self.bar is not None:
            failed = sum(o.status == "failed" for o in self.outcomes)
            self.bar.set_postfix(failed=failed, running=len(self.running))
            self.bar.update(0)  # a line when the last one is old enough (a log), a redraw on a terminal

    def step(self, stop: list[int]) -> None:
        """Fill the free slots from the queue, then wait up to half a second for a task to end."""
        while self.queue and len(self.running) < self.cluster.jobs and not stop:
            self.launch(self.queue.pop(0))
        self.show()
        if self.running:
            ready, _ = self.cluster.ray.wait(list(self.running), num_returns=1, timeout=0.5)
            for ref in ready:
                self.collect(ref)

    def cancel(self) -> int:
        """Cancel every task in flight; returns how many there were."""
        cancelled = len(self.running)
        if self.running:
            self.cluster.cancel(self.running, CANCEL_GRACE_SECONDS)
            self.running.clear()
        return cancelled


def run_jobs(
    jobs: Sequence[Job],
    *,
    workers: int | None,
    log: Callable[[str], None] = lambda _: None,
    then: Callable[[Outcome], Sequence[Job]] = lambda _: (),
    expected: int | None = None,
    placement: Placement | None = None,
    progress: bool = False,
    runner: Callable[[RunConfig, Path], dict[str, Any]] = _run_one,
) -> list[Outcome]:
    """Run ``jobs`` (and the jobs ``then`` returns as each one ends) as Ray tasks, ``workers`` at a time;
    finished ones are reused. ``expected``: how many jobs there will be in all, for the estimate of time left.

    Args:
        workers: runs at once (None: the machine's cores on a local Ray, what the cluster holds on one).
        placement: where the runs go (default: a local Ray).
        progress: one bar for the study (runs done, failed, running, ETA; a plain line at most every few seconds
            in a log).
        runner: what a task runs, ``runner(cfg, run_dir) -> {"eval", "resumed_from"}`` (default ``train``);
            a module-level function, since Ray sends it to the workers.

    Raises:
        StudyInterrupted: a SIGTERM / SIGINT arrived; every task was cancelled, every finished run recorded.

    Jobs returned by ``then`` must share the base models and evaluations of ``prepare``'s configs (callers
    prepare them first).
    """
    from dynashape.runtime.progress import progress_bar
    from dynashape.train.signals import stop_requests

    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    cluster = Cluster(placement or Placement(), workers)
    total = expected if expected is not None else len(jobs)
    run = _Dispatch(cluster, jobs, log=log, then=then, total=total, runner=runner)
    try:
        with stop_requests(message="cancelling every run of the study (a second signal stops at once)") as stop:
            run.bar = progress_bar(total, "study", progress, unit="runs", interval=10.0)
            while (run.queue or run.running) and not stop:
                run.step(stop)
            run.show()
            if stop:
                log(f"{signal.Signals(stop[0]).name} received: cancelling {len(run.running)} running runs")
                cancelled = run.cancel()
                raise StudyInterrupted(stop[0], finished=len(run.outcomes), cancelled=cancelled)
    finally:
        if run.bar is not None:
            run.bar.close()
        run.cancel()  # an error in this process (a `then` that raised): no task outlives the study
        cluster.close()
    return run.outcomes


def _outcome(job: Job, out: dict[str, Any]) -> Outcome:
    status = "resumed" if out["resumed_from"] is not None else "trained"
    if out["eval"] is None:
        return Outcome(job, "failed", seconds=out["seconds"], error="the run stopped before its evaluation")
    return Outcome(job, status, out["eval"], out["seconds"])
