"""MEDS per-prompt error memory (layer 2): banks of fingerprints, kNN assignment, HDBSCAN refits, checkpoints.

MEDS, arXiv 2604.11297. Each bank is keyed by ``(prompt_key, correct)``. Per :meth:`ErrorMemory.update`
call, every bank the batch touches (1) votes each new fingerprint into a cluster of its previous fit, (2)
reports |C| = stored points with that label, (3) appends the new fingerprints and refits. The math lives in
:mod:`dynashape.meds.clustering`; this module owns the banks, the scheduling of refits and the files (the
settings are :mod:`dynashape.meds.memory_config`, the state dict's format :mod:`dynashape.meds.memory_state`).

Refit scheduling (``background`` / ``workers``): the refit of a bank only matters at that bank's NEXT visit,
one training step or more later, so it need not sit on the step's critical path. With ``background=True``
:meth:`update` returns right after the vote and the refits run in a worker thread (``workers=0``) or in
``workers`` processes; a bank's pending refit is awaited only when the bank is visited again, or when the
state is read (``state_dict``, ``save``, ``close``). A refit is a deterministic function of the bank's stored
rows, and the vote always waits for its own bank's refit, so every schedule gives exactly the serial results.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import numpy as np

from dynashape.io import state as state_files
from dynashape.meds.clustering import (
    Backend,
    BankKey,
    ClusterMethod,
    assign,
    check_memory_batch,
    fit_labels_many,
    group_by_bank,
    l2_normalize_rows,
)
from dynashape.meds.memory_config import DEFAULT_MAX_PER_BANK, DEFAULT_MAX_POINTS, MemoryConfig
from dynashape.meds.memory_state import Bank, MemoryFileError, banks_from_state, banks_to_state

__all__ = ["DEFAULT_MAX_PER_BANK", "DEFAULT_MAX_POINTS", "ErrorMemory", "MemoryConfig", "MemoryFileError"]


class ErrorMemory:
    """Per-prompt memory of fingerprints that sizes the cluster each new rollout falls into (MEDS |C|).

    Learned state: ``banks_`` maps ``(prompt_key, correct)`` to a bank. Use :meth:`update` once per training
    step with the rows to store (finite fingerprints of the targeted correctness); it returns |C| per row.
    Not thread-safe: call it from one thread. Call :meth:`close` (or use ``with``) to stop worker processes.

    Args: see :class:`MemoryConfig` (every field is a keyword argument here).
    """

    def __init__(
        self,
        *,
        k: int = 3,
        min_cluster_size: int = 2,
        min_samples: int = 1,
        cluster_method: ClusterMethod = "hdbscan",
        backend: Backend = "sklearn",
        max_per_bank: int | None = DEFAULT_MAX_PER_BANK,
        max_points: int | None = DEFAULT_MAX_POINTS,
        workers: int = 0,
        background: bool = False,
    ) -> None:
        self.config = MemoryConfig(
            k=k,
            min_cluster_size=min_cluster_size,
            min_samples=min_samples,
            cluster_method=cluster_method,
            backend=backend,
            max_per_bank=max_per_bank,
            max_points=max_points,
            workers=workers,
            background=background,
        )
        if backend == "hdbscan" and cluster_method == "hdbscan":
            try:
                import hdbscan  # noqa: F401
            except ImportError as err:
                raise ImportError("backend='hdbscan' needs the hdbscan package: pip install hdbscan") from err
        self.banks_: dict[BankKey, Bank] = {}
        self._executor: Executor | None = None
        self._pending: dict[BankKey, Future] = {}
        self._chunk_jobs: dict[Future, list[tuple[BankKey, np.ndarray]]] = {}

    @classmethod
    def from_config(cls, config: MemoryConfig) -> ErrorMemory:
        """Build a memory from a :class:`MemoryConfig`."""
        return cls(**dataclasses.asdict(config))

    # ------------------------------------------------------------------------------------------------ update
    def update(self, prompt_keys: Sequence[str], correct: Any, fingerprints: Any) -> np.ndarray:
        """Assign, size and store one batch of fingerprints (MEDS section 2, steps 1-3 per bank touched).

        Args:
            prompt_keys: ``N`` stable prompt ids (str); official: the first 16 hex chars of the MD5 of the
                whitespace-normalised question.
            correct: ``[N]`` bool (or 0/1) correctness of each row; selects the bank.
            fingerprints: ``[N, D]`` float array or tensor; every row finite. Stored as float32.

        Returns:
            ``[N]`` int64 |C| per row: stored points of the bank (before this batch) with the voted label;
            0 on a bank's first visit.

        Raises:
            ValueError: mismatched lengths, a non-str key, a non-finite row (index named), a correctness
                value other than bool/0/1, or a dimension that differs from a bank's stored one. Nothing
                is changed when it raises.
        """
        keys, corr, x = check_memory_batch(prompt_keys, correct, fingerprints)
        sizes = np.zeros(len(keys), dtype=np.int64)
        if len(keys) == 0:
            return sizes
        groups = group_by_bank(keys, corr)
        for key, _rows in groups:
            bank = self.banks_.get(key)
            if bank is not None and bank.vectors.shape[1] != x.shape[1]:
                raise ValueError(
                    f"fingerprints have dimension {x.shape[1]} but bank {key!r} stores dimension "
                    f"{bank.vectors.shape[1]}"
                )
        cfg = self.config
        jobs: list[tuple[BankKey, np.ndarray]] = []
        for key, rows in groups:
            if key in self._pending:
                self._resolve(self._pending[key])
            new = x[rows]
            bank = self.banks_.get(key)
            if bank is None:
                bank = self.banks_[key] = Bank(new[:0], None)
            result = assign(
                l2_normalize_rows(bank.vectors),
                bank.labels,
                l2_normalize_rows(new),
                k=cfg.k,
                cluster_method=cfg.cluster_method,
            )
            sizes[rows] = result.cluster_sizes
            stored = np.concatenate([bank.vectors, new])
            if cfg.max_per_bank is not None and stored.shape[0] > cfg.max_per_bank:
                stored = stored[-cfg.max_per_bank :].copy()
            bank.vectors = stored
            jobs.append((key, stored))
        self._refit(jobs)
        self._forget_beyond(cfg.max_points, touched=[key for key, _ in groups])
        return sizes

    def _forget_beyond(self, max_points: int | None, *, touched: Sequence[BankKey]) -> None:
        """Keep the banks in visit order (the latest last) and forget the least recently visited ones while the
        banks hold more than ``max_points`` fingerprints (never a bank of this update)."""
        for key in touched:
            self.banks_[key] = self.banks_.pop(key)  # move to the end: most recently visited
        if max_points is None:
            return
        total = sum(b.vectors.shape[0] for b in self.banks_.values())
        keep = set(touched)
        while total > max_points:
            key = next(iter(self.banks_))
            if key in keep:
                break
            if key in self._pending:  # its refit must land before the bank goes
                self._resolve(self._pending[key])
            total -= self.banks_.pop(key).vectors.shape[0]

    # ----------------------------------------------------------------------------------- refit scheduling
    def _fit_kwargs(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "cluster_method": cfg.cluster_method,
            "backend": cfg.backend,
            "min_cluster_size": cfg.min_cluster_size,
            "min_samples": cfg.min_samples,
        }

    def _apply(self, results: list[tuple[BankKey, np.ndarray]]) -> None:
        for key, labels in results:
            bank = self.banks_[key]
            if labels.shape[0] != bank.vectors.shape[0]:  # would mean a bank changed while its fit ran
                raise RuntimeError(
                    f"refit of bank {key!r} returned {labels.shape[0]} labels for {bank.vectors.shape[0]} points"
                )
            bank.set_labels(labels)

    def _get_executor(self) -> Executor:
        if self._executor is None:
            if self.config.workers == 0:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynashape-meds-refit")
            else:
                import multiprocessing

                # spawn, not fork: the trainer process holds torch/OpenMP threads that fork does not survive.
                self._executor = ProcessPoolExecutor(
                    max_workers=self.config.workers, mp_context=multiprocessing.get_context("spawn")
                )
        return self._executor

    def start(self) -> None:
        """Start the refit worker(s) now, with the backend imported there (else it happens at the first refit).

        Only useful with ``background`` or ``workers``; spawning a process and importing scikit-learn takes
        seconds, which a trainer would rather pay at start-up than inside its first steps.
        """
        cfg = self.config
        if not cfg.background and cfg.workers == 0:
            return
        executor = self._get_executor()
        warm: list[tuple[BankKey, np.ndarray]] = [(("warm-up", False), np.eye(3, dtype=np.float32))]
        for future in [
            executor.submit(fit_labels_many, warm, **self._fit_kwargs()) for _ in range(max(1, cfg.workers))
        ]:
            future.result()

    def _refit(self, jobs: list[tuple[BankKey, np.ndarray]]) -> None:
        cfg = self.config
        if not cfg.background and cfg.workers == 0:
            self._apply(fit_labels_many(jobs, **self._fit_kwargs()))
            return
        executor = self._get_executor()
        # Balanced chunks (largest banks dealt round-robin): few enough to keep inter-process traffic low,
        # several per worker so one big bank does not leave the others idle.
        n_chunks = min(len(jobs), max(1, cfg.workers) * 4)
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i][1].shape[0])
        chunks = [[jobs[i] for i in order[c::n_chunks]] for c in range(n_chunks)]
        futures = []
        for chunk in chunks:
            future = executor.submit(fit_labels_many, chunk, **self._fit_kwargs())
            self._chunk_jobs[future] = chunk
            for key, _ in chunk:
                self._pending[key] = future
            futures.append(future)
        if not cfg.background:
            for future in futures:
                self._resolve(future)

    def _resolve(self, future: Future) -> None:
        """Wait for one chunk of refits and store its labels; a failed worker is redone here (same result)."""
        jobs = self._chunk_jobs.pop(future)
        try:
            results = future.result()
        except Exception as err:
            # A crashed worker (BrokenProcessPool) or any error: refit inline, which gives identical labels
            # or raises the error again from this thread. A broken pool is dropped and restarted on demand.
            if isinstance(err, BrokenExecutor):
                self._executor = None
            results = None
        for key, _ in jobs:
            self._pending.pop(key, None)
        if results is None:
            results = fit_labels_many(jobs, **self._fit_kwargs())
        self._apply(results)

    def wait(self) -> None:
        """Block until every pending refit is stored (the state then equals the serial one)."""
        for future in list(self._chunk_jobs):
            if future in self._chunk_jobs:
                self._resolve(future)

    def _harvest_done(self) -> None:
        for future in list(self._chunk_jobs):
            if future.done():
                self._resolve(future)

    def _shutdown_executor(self, *, wait: bool) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=not wait)
            self._executor = None

    def close(self) -> None:
        """Finish pending refits and stop the worker thread/processes (a later update restarts them)."""
        self.wait()
        self._shutdown_executor(wait=True)

    def __enter__(self) -> ErrorMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> None:
        """Forget every bank (pending refits are dropped); the settings and worker pool stay."""
        for future in self._chunk_jobs:
            future.cancel()
        self._chunk_jobs.clear()
        self._pending.clear()
        self.banks_ = {}

    # ------------------------------------------------------------------------------------------------ stats
    def stats(self) -> dict[str, float]:
        """Memory size and cluster structure, for logging (never blocks on pending refits).

        Returns:
            ``banks``, ``points`` (stored fingerprints), ``clusters_per_bank`` (mean non-noise clusters per
            bank), ``noise_frac`` (noise points / points), ``memory_bytes`` (fingerprints + labels). With
            ``background=True`` the last two count each bank's latest finished fit.
        """
        self._harvest_done()
        banks = list(self.banks_.values())
        points = sum(b.vectors.shape[0] for b in banks)
        fitted = [b for b in banks if b.labels is not None]
        fitted_points = sum(b.labels.shape[0] for b in fitted)  # type: ignore[union-attr]
        return {
            "banks": float(len(banks)),
            "points": float(points),
            "clusters_per_bank": float(np.mean([b.n_clusters for b in fitted])) if fitted else 0.0,
            "noise_frac": sum(b.n_noise for b in fitted) / fitted_points if fitted_points else 0.0,
            "memory_bytes": float(sum(b.vectors.nbytes + (0 if b.labels is None else b.labels.nbytes) for b in banks)),
        }

    # ------------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """The learned state as plain values (str, lists, tensors), loadable with ``weights_only=True``.

        Waits for pending refits first. Banks are flattened: ``vectors`` holds each bank's ``[n, d]`` rows
        back to back (float32), ``labels`` its ``n`` labels (int64); ``lengths``/``dims`` split them.
        """
        self.wait()
        return banks_to_state(self.banks_, self.config)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the banks by those of ``state`` (from :meth:`state_dict`); all-or-nothing.

        Raises:
            MemoryFileError: a foreign or inconsistent state, an unknown version, or a state saved with a
                different ``cluster_method`` / ``min_cluster_size`` / ``min_samples`` (its labels would not
                be this memory's). The current state is untouched when it raises.
        """
        banks = banks_from_state(state, self.config)
        for future in self._chunk_jobs:
            future.cancel()
        self._chunk_jobs.clear()
        self._pending.clear()
        self.banks_ = banks

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to ``path`` atomically (``state.torch_save``: fsynced, os.replace)."""
        state_files.torch_save(path, self.state_dict())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load a file written by :meth:`save` (``torch.load(weights_only=True)``: no arbitrary unpickling).

        Raises:
            MemoryFileError: the file is unreadable, truncated, corrupt or not an ErrorMemory state; the
                in-memory state is untouched.
        """
        try:
            state = state_files.torch_load(path, map_location="cpu")
        except state_files.StateFileError as err:
            raise MemoryFileError(path, f"not a readable ErrorMemory file ({err.problem})") from err
        try:
            self.load_state_dict(state)
        except MemoryFileError as err:
            raise MemoryFileError(path, err.problem) from err
