"""The MEDS error memory's state: its banks, and the plain-valued state dict a checkpoint holds.

A state dict (``banks_to_state``) is plain values and tensors, loadable with ``torch.load(weights_only=True)``;
``banks_from_state`` checks every field of one before rebuilding a bank, so a truncated, foreign or tampered
state is refused (``MemoryFileError``) and never half-loaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynashape.io import state as state_files
from dynashape.meds.clustering import BankKey
from dynashape.meds.memory_config import MemoryConfig

__all__ = ["STATE_FORMAT", "STATE_VERSION", "Bank", "MemoryFileError", "banks_from_state", "banks_to_state"]

STATE_FORMAT = "dynashape.meds.ErrorMemory"
STATE_VERSION = 1
# Settings whose change would make stored labels meaningless; load_state_dict refuses a mismatch on these.
STATE_BOUND_FIELDS = ("cluster_method", "min_cluster_size", "min_samples")


class MemoryFileError(state_files.StateFileError):
    """A memory file or state dict is corrupt, truncated, foreign, or of an unknown format version.

    ``MemoryFileError(path, problem)``: ``path`` names the file, or is None for a state dict (no file)."""


class Bank:
    """One bank: raw float32 fingerprints (oldest first) and the labels of their last fit."""

    __slots__ = ("labels", "n_clusters", "n_noise", "vectors")

    def __init__(self, vectors: np.ndarray, labels: np.ndarray | None) -> None:
        self.vectors = vectors
        self.labels: np.ndarray | None = None
        self.n_clusters = 0
        self.n_noise = 0
        if labels is not None:
            self.set_labels(labels)

    def set_labels(self, labels: np.ndarray) -> None:
        self.labels = labels
        self.n_clusters = int(labels.max(initial=-1)) + 1
        self.n_noise = int(np.count_nonzero(labels < 0))


def banks_to_state(banks: dict[BankKey, Bank], config: MemoryConfig) -> dict[str, Any]:
    """The banks as plain values (str, lists, tensors), with the settings their labels depend on.

    Banks are flattened: ``vectors`` holds each bank's ``[n, d]`` rows back to back (float32), ``labels`` its
    ``n`` labels (int64); ``lengths``/``dims`` split them.
    """
    import torch

    items = list(banks.items())
    vectors = [b.vectors.reshape(-1) for _, b in items]
    labels = [b.labels for _, b in items]
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "config": {f: getattr(config, f) for f in ("k", *STATE_BOUND_FIELDS, "backend", "max_per_bank")},
        "prompt_keys": [key for (key, _), _ in items],
        "correct": [c for (_, c), _ in items],
        "lengths": torch.tensor([b.vectors.shape[0] for _, b in items], dtype=torch.int64),
        "dims": torch.tensor([b.vectors.shape[1] for _, b in items], dtype=torch.int64),
        "vectors": torch.from_numpy(np.concatenate(vectors) if vectors else np.zeros(0, np.float32)),
        "labels": torch.from_numpy(np.concatenate(labels) if labels else np.zeros(0, np.int64)),
    }


def banks_from_state(state: Any, config: MemoryConfig) -> dict[BankKey, Bank]:
    """Validate a state dict and rebuild its banks; raises MemoryFileError on anything unexpected."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise MemoryFileError(None, f"not an ErrorMemory state (expected format {STATE_FORMAT!r})")
    if state.get("version") != STATE_VERSION:
        raise MemoryFileError(None, f"unsupported ErrorMemory state version {state.get('version')!r}")
    try:
        saved = state["config"]
        for field in STATE_BOUND_FIELDS:
            if saved[field] != getattr(config, field):
                raise MemoryFileError(
                    None,
                    f"state was saved with {field}={saved[field]!r} but this memory has "
                    f"{field}={getattr(config, field)!r}",
                )
        keys, corr = list(state["prompt_keys"]), list(state["correct"])
        lengths = np.asarray(state["lengths"], dtype=np.int64).reshape(-1)
        dims = np.asarray(state["dims"], dtype=np.int64).reshape(-1)
        vectors = np.asarray(state["vectors"]).reshape(-1)
        labels = np.asarray(state["labels"]).reshape(-1)
    except MemoryFileError:
        raise
    except Exception as err:
        raise MemoryFileError(None, f"malformed ErrorMemory state: {err}") from err
    b = len(keys)
    if not (len(corr) == lengths.size == dims.size == b):
        raise MemoryFileError(None, "malformed ErrorMemory state: per-bank fields have different lengths")
    if not all(isinstance(k, str) for k in keys) or not all(isinstance(c, bool) for c in corr):
        raise MemoryFileError(None, "malformed ErrorMemory state: prompt_keys must be str and correct bool")
    if (lengths < 1).any() or (dims < 1).any():
        raise MemoryFileError(None, "malformed ErrorMemory state: a bank has no points or no dimension")
    if vectors.dtype != np.float32 or labels.dtype != np.int64:
        raise MemoryFileError(None, "malformed ErrorMemory state: vectors must be float32 and labels int64")
    if vectors.size != int((lengths * dims).sum()) or labels.size != int(lengths.sum()):
        raise MemoryFileError(None, "malformed ErrorMemory state: vectors/labels sizes do not match lengths/dims")
    if not np.isfinite(vectors).all() or (labels < -1).any():
        raise MemoryFileError(None, "malformed ErrorMemory state: non-finite vectors or labels below -1")
    # A cluster label indexes one of at most n clusters of a bank of n points; a larger one (a tampered state)
    # would make the next update allocate a count array of that size.
    if (labels >= np.repeat(lengths, lengths)).any():
        raise MemoryFileError(None, "malformed ErrorMemory state: a cluster label beyond its bank's point count")
    if len(set(zip(keys, corr, strict=True))) != b:
        raise MemoryFileError(None, "malformed ErrorMemory state: duplicate bank keys")
    v_ends = np.cumsum(lengths * dims)
    l_ends = np.cumsum(lengths)
    banks: dict[BankKey, Bank] = {}
    for i in range(b):
        v = vectors[v_ends[i] - lengths[i] * dims[i] : v_ends[i]].reshape(int(lengths[i]), int(dims[i]))
        lab = labels[l_ends[i] - lengths[i] : l_ends[i]]
        banks[(keys[i], corr[i])] = Bank(v.copy(), lab.copy())
    return banks
