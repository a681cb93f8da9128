"""The settings of the MEDS error memory (:class:`dynashape.meds.memory.ErrorMemory`): the kNN vote, the
clustering and its backend, the bounds on what it keeps, and where its refits run."""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.meds.clustering import BACKENDS, CLUSTER_METHODS, Backend, ClusterMethod

__all__ = ["DEFAULT_MAX_PER_BANK", "DEFAULT_MAX_POINTS", "MemoryConfig"]

DEFAULT_MAX_PER_BANK = 4096
DEFAULT_MAX_POINTS = 2**23


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Settings of :class:`ErrorMemory` (frozen, validated on construction)."""

    k: int = 3
    """Neighbours in the kNN vote (official 3); k = bank size when the bank is smaller."""
    min_cluster_size: int = 2
    """HDBSCAN ``min_cluster_size`` (official 2)."""
    min_samples: int = 1
    """HDBSCAN ``min_samples`` (official 1: single-linkage distances)."""
    cluster_method: ClusterMethod = "hdbscan"
    """``"hdbscan"`` (official) or ``"single"`` (paper ablation: all stored points form one cluster)."""
    backend: Backend = "sklearn"
    """``"sklearn"`` (``sklearn.cluster.HDBSCAN``, exact spanning tree) or ``"hdbscan"`` (the package of the
    official code, approximate Boruvka tree: bit-exact official |C|). See :mod:`dynashape.meds.clustering`."""
    max_per_bank: int | None = DEFAULT_MAX_PER_BANK
    """Keep at most this many fingerprints per bank, oldest dropped first; None = never prune (the official
    code). The default bounds a long run and never binds in the papers' settings (a bank gains at most one
    group of rollouts per visit of its prompt: G x epochs, in the hundreds)."""
    max_points: int | None = DEFAULT_MAX_POINTS
    """Keep at most this many fingerprints in all banks together: past it, the banks visited longest ago are
    forgotten whole; None = no bound (the official code). The default bounds memory (2**23 points of a 14-layer
    fingerprint are 470 MB) and never binds in the papers' settings (thousands of prompts x hundreds of points)."""
    workers: int = 0
    """Worker processes for refits; 0 = refit in this process (in a background thread if ``background``)."""
    background: bool = False
    """Return from ``update`` before the refits finish; a bank's refit is awaited at its next visit."""

    def __post_init__(self) -> None:
        for name, low in (("k", 1), ("min_cluster_size", 2), ("min_samples", 1), ("workers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.cluster_method not in CLUSTER_METHODS:
            raise ValueError(f"cluster_method must be one of {CLUSTER_METHODS}, got {self.cluster_method!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        for name in ("max_per_bank", "max_points"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ValueError(f"{name} must be None or an int >= 1, got {cap!r}")
        if not isinstance(self.background, bool):
            raise ValueError(f"background must be a bool, got {self.background!r}")
