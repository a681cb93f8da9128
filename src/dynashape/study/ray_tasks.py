"""The Ray a study runs on, and what one Ray task does there.

``Placement`` says where runs go (a local Ray sized here, or a cluster joined by address) and what each holds
(CPUs, also its torch threads; GPUs, fractions allowed). ``Cluster`` starts, joins or borrows that Ray and makes
the remote task; ``run_task`` is the task: it runs one training run in the worker and sends back the run
folder's summary files (``RESULT_FILES``), so that a cluster needs no shared disk for results. The scheduler
(``dynashape.study.scheduler``) decides which jobs to submit and when; this module knows nothing of a study.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.train.config import RunConfig

__all__ = [
    "RESULT_FILES",
    "Cluster",
    "Placement",
    "RunFailed",
    "default_jobs",
    "failure_text",
    "quiet_loading",
    "require_ray",
    "run_task",
]

RESULT_FILES = ("config.yaml", "eval_base.json", "metrics.jsonl", "history.jsonl", "eval.json")
"""The run folder's files a task sends back to the driver (what a comparison keeps of each run; eval.json last,
since its presence marks the run finished)."""


class RunFailed(RuntimeError):
    """A run's own exception, as the text the study records (``Type: message``)."""


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


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def quiet_loading() -> None:
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
    quiet_loading()


def run_task(
    runner: Callable[[RunConfig, Path], dict[str, Any]], cfg: RunConfig, run_dir: Path, threads: int
) -> dict[str, Any]:
    """What a Ray task runs: ``runner(cfg, run_dir)`` with ``threads`` torch threads, and the run folder's
    ``RESULT_FILES`` (bytes) to send back with its outcome (plus ``seconds``, ``host`` and ``pid``)."""
    _set_threads(threads)
    start = time.perf_counter()
    try:
        out = dict(runner(cfg, run_dir))
    except Exception as err:
        # sent back as text: an exception whose class cannot be pickled would reach the driver as Ray's
        # "failed to deserialize", which says nothing of the run
        raise RunFailed(f"{type(err).__name__}: {err}") from None
    out["seconds"] = time.perf_counter() - start
    out["host"], out["pid"] = socket.gethostname(), os.getpid()
    files = {}
    for name in RESULT_FILES:
        path = run_dir / name
        if path.is_file():
            files[name] = path.read_bytes()
    out["files"] = files
    return out


def require_ray() -> None:
    """Refuse, in one line saying how to install it, a study where Ray is not installed (checked before a
    comparison writes anything)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise RuntimeError(
            "the study engine runs each run as a Ray task and Ray is not installed: pip install 'dynashape[study]'"
        )


class Cluster:
    """The Ray the study runs on: a local one started here (shut down by ``close``), a cluster joined here
    (``close`` disconnects, the cluster stays), or one the caller already started (left as it is)."""

    def __init__(self, placement: Placement, jobs: int | None) -> None:
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
        self.remote = ray.remote(run_task).options(
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


def failure_text(err: BaseException) -> str:
    """What the record says of a failed task: the run's own exception, or what Ray says of a dead worker."""
    import ray.exceptions as rex

    if isinstance(err, rex.RayTaskError):
        cause = err.cause
        return str(cause) if isinstance(cause, RunFailed) else f"{type(cause).__name__}: {cause}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__} (retried once): {first}"
