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
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.train.config import RunConfig
from dynashape.train.signals import StudyInterrupted

__all__ = [
    "RESULT_FILES",
    "Job",
    "Outcome",
    "Placement",
    "RunFailed",
    "default_jobs",
    "finished_eval",
    "prepare",
    "require_ray",
    "run_jobs",
]

RESULT_FILES = ("config.yaml", "eval_base.json", "metrics.jsonl", "history.jsonl", "eval.json")
"""The run folder's files a task sends back to the driver (what a comparison keeps of each run; eval.json last,
since its presence marks the run finished)."""
CANCEL_GRACE_SECONDS = 20.0
"""How long cancelled tasks get to end before the driver stops waiting (the issue's bound is 30 s in all)."""


class RunFailed(RuntimeError):
    """A run's own exception, as the text the study records (``Type: message``)."""


@dataclass(frozen=True)
class Job:
    """One training run: its label (for the log), config and folder."""

    label: str
    cfg: RunConfig
    run_dir: Path


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where the runs go, and what each one holds there.

    Args:
        address: None starts a local Ray (sized by ``jobs``) and shuts it down at the end; ``auto`` or
            ``HOST:PORT`` joins a running cluster (``ray start --head`` / ``ray start --address``).
        cpus_per_run: Ray CPUs each run holds, also its torch threads (at least 1). None: the machine's cores
            over ``jobs`` on a local Ray, 1 on a cluster.
        gpus_per_run: GPUs each run holds (a fraction shares one GPU between runs; 0: none).
    """

    address: str | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float = 0.0

    def __post_init__(self) -> None:
        if self.cpus_per_run is not None and not self.cpus_per_run > 0:
            raise ValueError(f"cpus_per_run must be > 0, got {self.cpus_per_run}")
        if not self.gpus_per_run >= 0:
            raise ValueError(f"gpus_per_run must be >= 0, got {self.gpus_per_run}")

    def cpus(self, jobs: int) -> float:
        """CPUs per run when ``jobs`` run at once."""
        if self.cpus_per_run is not None:
            return self.cpus_per_run
        return float(max(1, default_jobs() // jobs)) if self.address is None else 1.0


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


def prepare(configs: Iterable[RunConfig], *, log: Callable[[str], None] = lambda _: None, progress: bool = True) -> int:
    """Build each distinct base model and base evaluation of ``configs`` once, in this process; returns how many
    base evaluations were prepared. A pretrained model (``model_path``) has no cache: its runs evaluate it.
    ``progress``: the warm-up's and each base evaluation's progress (a line every 10 s in a log: a real model's
    base evaluation takes many minutes before the study's first run starts)."""
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


def _quiet_loading() -> None:
    """No transformers progress bars ("Loading weights") in a log of plain lines."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is optional for the toy's helpers; runs need it anyway
        pass


def _set_threads(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    _quiet_loading()


def _run_one(cfg: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Train (or resume) one run; ``train`` holds the folder's lock (a busy folder: ``FolderBusyError``).

    The lock is taken there and only there: a second lock object on the same folder in this process would be
    refused by the first."""
    from dynashape.train.run import train

    result = train(cfg, run_dir, progress=False, report=False)
    return {"eval": result.eval, "resumed_from": result.resumed_from}


def _task(runner: Callable[[RunConfig, Path], dict[str, Any]], job: Job, threads: int) -> dict[str, Any]:
    """What a Ray task runs: ``runner`` on the job with ``threads`` torch threads, and the run folder's
    ``RESULT_FILES`` (bytes) to send back with its outcome."""
    _set_threads(threads)
    start = time.perf_counter()
    try:
        out = dict(runner(job.cfg, job.run_dir))
    except Exception as err:
        # sent back as text: an exception whose class cannot be pickled would reach the driver as Ray's
        # "failed to deserialize", which says nothing of the run
        raise RunFailed(f"{type(err).__name__}: {err}") from None
    out["seconds"] = time.perf_counter() - start
    out["host"], out["pid"] = socket.gethostname(), os.getpid()
    files = {}
    for name in RESULT_FILES:
        path = job.run_dir / name
        if path.is_file():
            files[name] = path.read_bytes()
    out["files"] = files
    return out


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


def require_ray() -> None:
    """Refuse, in one line saying how to install it, a study where Ray is not installed (checked before a
    comparison writes anything)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise RuntimeError(
            "the study engine runs each run as a Ray task and Ray is not installed: pip install 'dynashape[study]'"
        )


class _Cluster:
    """The Ray the study runs on: a local one started here (shut down by ``close``), a cluster joined here
    (``close`` disconnects, the cluster stays), or one the caller already started (left as it is)."""

    def __init__(self, placement: Placement, jobs: int | None) -> None:
        import logging

        if placement.address is not None:
            _choose_token_auth()  # before Ray is imported: it reads its auth mode once, at import
        require_ray()
        import ray

        self.ray = ray
        self.owned = not ray.is_initialized()
        quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        if self.owned and placement.address is None:
            jobs = default_jobs() if jobs is None else jobs
            # sized by --jobs: `jobs` runs of `cpus_per_run` CPUs fit at once; a small object store, since all
            # that travels is a run's summary files (well under a megabyte)
            cpus = math.ceil(jobs * placement.cpus(jobs))
            # address="local": a new Ray even where RAY_ADDRESS points at a cluster (joining one is --ray-address)
            ray.init(address="local", num_cpus=cpus, object_store_memory=200 * 2**20, **quiet)
        elif self.owned:
            _join(ray, placement.address, quiet)
        if jobs is None:  # as many runs at once as the cluster's CPUs (and GPUs) hold
            resources = ray.cluster_resources()
            fits = [resources.get("CPU", 0.0) / placement.cpus(1)]
            if placement.gpus_per_run > 0:
                fits.append(resources.get("GPU", 0.0) / placement.gpus_per_run)
            jobs = max(1, math.floor(min(fits)))
        self.jobs = jobs
        cpus = placement.cpus(jobs)
        self.threads = max(1, math.floor(cpus))
        self.remote = ray.remote(_task).options(
            num_cpus=cpus,
            num_gpus=placement.gpus_per_run,
            max_retries=1,  # a dead worker's task runs once more (system failures only, see retry_exceptions)
            retry_exceptions=False,  # a run's own exception is deterministic: retrying would fail again
        )

    def cancel(self, refs: Iterable[Any], grace: float) -> None:
        """Kill the tasks' workers and wait (at most ``grace`` seconds) until Ray has seen them end."""
        refs = list(refs)
        for ref in refs:
            self.ray.cancel(ref, force=True, recursive=True)
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=grace)

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()


def _choose_token_auth() -> None:
    """``ray start`` enables token authentication by default (Ray 2.5x) and writes the token to
    ``~/.ray/auth_token``, but a driver that joins by address sends it only with ``RAY_AUTH_MODE=token`` set
    before Ray is imported (seen with Ray 2.60: "Authentication token is missing or incorrect", then "Failed to
    connect"). With a token at hand and no mode chosen, choose token mode."""
    has_token = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    if "RAY_AUTH_MODE" not in os.environ and (has_token or (Path.home() / ".ray" / "auth_token").is_file()):
        os.environ["RAY_AUTH_MODE"] = "token"


def _join(ray: Any, address: str, options: dict[str, Any]) -> None:
    """Connect this process to the Ray cluster at ``address`` as its driver; a clear error when it cannot."""
    try:
        ray.init(address=address, **options)
    except ConnectionError as err:
        raise RuntimeError(
            f"--ray-address {address}: cannot join a Ray cluster there ({err}); is `ray start --head` running, and "
            "does this machine have the cluster's token (RAY_AUTH_TOKEN, or ~/.ray/auth_token from `ray "
            "get-auth-token`), with RAY_AUTH_MODE=token set before Ray was imported?"
        ) from err


def _failure(err: BaseException) -> str:
    """What the record says of a failed task: the run's own exception, or what Ray says of a dead worker."""
    import ray.exceptions as rex

    if isinstance(err, rex.RayTaskError):
        cause = err.cause
        return str(cause) if isinstance(cause, RunFailed) else f"{type(cause).__name__}: {cause}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__} (retried once): {first}"


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
    placement = placement or Placement()
    outcomes: list[Outcome] = []
    queue = list(jobs)
    total = expected if expected is not None else len(queue)
    started_at = time.perf_counter()
    durations: list[float] = []
    running: dict[Any, tuple[Job, float]] = {}
    bar = None
    cluster = _Cluster(placement, workers)
    workers = cluster.jobs

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
        if bar is not None:
            if outcome.status == "reused":  # the bar counts the work of this invocation: its rate gives the ETA
                bar.total -= 1
            else:
                bar.update(1)
        queue.extend(then(outcome))

    def launch(job: Job) -> None:
        done = finished_eval(job)
        if done is not None:
            finish(Outcome(job, "reused", done))
            return
        partial = (job.run_dir / "checkpoints").exists()
        log(f"start {job.label} ({'resuming' if partial else 'new'}) -> {job.run_dir}")
        running[cluster.remote.remote(runner, job, cluster.threads)] = (job, time.perf_counter())

    def collect(ref: Any) -> None:
        job, start = running.pop(ref)
        try:
            out = cluster.ray.get(ref)
        except Exception as err:  # the run's own error, or a worker that died twice
            finish(Outcome(job, "failed", seconds=time.perf_counter() - start, error=_failure(err)))
            return
        _keep_files(job.run_dir, out.pop("files"))
        finish(_outcome(job, out))

    def show() -> None:
        if bar is not None:
            bar.set_postfix(failed=sum(o.status == "failed" for o in outcomes), running=len(running))
            bar.update(0)  # a line when the last one is old enough (a log), a redraw on a terminal

    try:
        with stop_requests(message="cancelling every run of the study (a second signal stops at once)") as stop:
            bar = progress_bar(total, "study", progress, unit="runs", interval=10.0)
            while (queue or running) and not stop:
                while queue and len(running) < workers and not stop:
                    launch(queue.pop(0))
                show()
                if running:
                    ready, _ = cluster.ray.wait(list(running), num_returns=1, timeout=0.5)
                    for ref in ready:
                        collect(ref)
            show()
            if stop:
                cancelled = len(running)
                log(f"{signal.Signals(stop[0]).name} received: cancelling {cancelled} running runs")
                cluster.cancel(running, CANCEL_GRACE_SECONDS)
                running.clear()
                raise StudyInterrupted(stop[0], finished=len(outcomes), cancelled=cancelled)
    finally:
        if bar is not None:
            bar.close()
        if running:  # an error in this process (a `then` that raised): no task outlives the study
            cluster.cancel(running, CANCEL_GRACE_SECONDS)
        cluster.close()
    return outcomes


def _outcome(job: Job, out: dict[str, Any]) -> Outcome:
    status = "resumed" if out["resumed_from"] is not None else "trained"
    if out["eval"] is None:
        return Outcome(job, "failed", seconds=out["seconds"], error="the run stopped before its evaluation")
    return Outcome(job, status, out["eval"], out["seconds"])
