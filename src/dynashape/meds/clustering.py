"""MEDS error-memory math (layer 1): kNN vote, the |C| rule, and the HDBSCAN backends.

Everything here is a pure function on NumPy arrays; the stateful :class:`dynashape.meds.memory.ErrorMemory`
calls these, so the math is testable without any memory state (paper:
"The Past Is Not Past: Memory-Enhanced Dynamic Reward Shaping", arXiv 2604.11297; official code
``Linxi000/MEDS``, ``recipe/MEDS/layer_logits_utils.py``).

Conventions shared with the official code:

* Vectors are compared by cosine distance for the vote and clustered as L2-normalised rows with Euclidean
  distance. Rows are normalised in float64 with a zero row left at zero (as
  ``sklearn.preprocessing.normalize`` does), so a float32 fingerprint gives the official float64 numbers.
* Labels are HDBSCAN labels: ``-1`` is noise, clusters are ``0..K-1`` in the backend's own numbering.
* Backends. ``"hdbscan"`` is the package the official code calls, with its defaults: algorithm "best", which
  for Euclidean data of <= 60 dimensions is Boruvka on a KD-tree with ``approx_min_span_tree=True``, i.e. an
  only APPROXIMATE minimum spanning tree. ``"sklearn"`` (``sklearn.cluster.HDBSCAN``) always builds the exact
  tree; its metric / alpha / leaf_size / epsilon / selection defaults equal the package's. On banks without
  tight structure the two give the same partitions; on banks of several tight clusters the approximate tree
  now and then changes a partition (0.2-0.3 % of |C| values in benchmarks/bench_memory.py differ), and label
  numbers differ often, which matters only when a k = 3 vote sees three different clusters (a three-way tie
  goes to the smallest label). ``backend="hdbscan"`` reproduces the official |C| bit for bit.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

BankKey = tuple[str, bool]
ClusterMethod = Literal["hdbscan", "single"]
Backend = Literal["sklearn", "hdbscan"]
CLUSTER_METHODS: tuple[str, ...] = ("hdbscan", "single")
BACKENDS: tuple[str, ...] = ("sklearn", "hdbscan")
NOISE = -1


def l2_normalize_rows(x: np.ndarray) -> np.ndarray:
    """Scale each row to unit L2 norm, in float64; an all-zero row stays zero.

    Args:
        x: ``[n, d]`` float array.

    Returns:
        ``[n, d]`` float64 array. Same arithmetic as ``sklearn.preprocessing.normalize(x, norm="l2")`` (row
        norm via ``einsum``; a zero norm is replaced by 1) so the official code's inputs are reproduced.
    """
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    norms[norms == 0.0] = 1.0
    return x64 / norms[:, None]


def majority_vote(neighbor_labels: np.ndarray) -> np.ndarray:
    """Most frequent label per row; a tie goes to the smallest label (a tie with noise ``-1`` gives ``-1``).

    Args:
        neighbor_labels: ``[b, k]`` int labels of each query's k nearest stored vectors, k >= 1.

    Returns:
        ``[b]`` int64 voted labels.
    """
    votes = np.sort(np.asarray(neighbor_labels, dtype=np.int64), axis=1)
    # counts[i, j] = how many of row i's k labels equal votes[i, j]; k <= a handful, so the [b, k, k]
    # comparison is cheaper than any bincount over arbitrary label ranges.
    counts = (votes[:, :, None] == votes[:, None, :]).sum(axis=2)
    # argmax returns the first maximum; rows are sorted ascending, so that is the smallest tied label.
    best = np.argmax(counts, axis=1)
    return votes[np.arange(votes.shape[0]), best]


def knn_vote(stored_unit: np.ndarray, stored_labels: np.ndarray, queries_unit: np.ndarray, *, k: int = 3) -> np.ndarray:
    """Label each query by a majority vote of its k nearest stored vectors under cosine distance.

    MEDS section 2 step 1: k = min(k, number stored); cosine distance ``1 - <q, s>`` of unit rows, clipped to
    [0, 2] like scikit-learn's ``cosine_distances``; exactly equal distances are broken by the older stored
    vector (lower index), a deterministic choice where the official brute-force search is arbitrary.

    Args:
        stored_unit: ``[m, d]`` L2-normalised stored vectors, m >= 1.
        stored_labels: ``[m]`` int labels from the stored vectors' last fit (``-1`` = noise).
        queries_unit: ``[b, d]`` L2-normalised new vectors.
        k: neighbours that vote (>= 1).

    Returns:
        ``[b]`` int64 voted labels (see :func:`majority_vote` for ties).
    """
    m = stored_unit.shape[0]
    if m == 0:
        raise ValueError("stored_unit must hold at least one vector, got 0")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    kk = min(k, m)
    distance = np.clip(1.0 - queries_unit @ stored_unit.T, 0.0, 2.0)
    nearest = np.argsort(distance, axis=1, kind="stable")[:, :kk]
    return majority_vote(np.asarray(stored_labels, dtype=np.int64)[nearest])


def voted_cluster_sizes(stored_labels: np.ndarray, votes: np.ndarray) -> np.ndarray:
    """|C| of each vote: the number of STORED vectors carrying the voted label (MEDS section 2 step 2).

    A vote of ``-1`` counts the stored noise points, exactly like any other label.

    Args:
        stored_labels: ``[m]`` int labels of the stored vectors (before the new batch is appended).
        votes: ``[b]`` int voted labels.

    Returns:
        ``[b]`` int64 cluster sizes.
    """
    labels = np.asarray(stored_labels, dtype=np.int64)
    votes = np.asarray(votes, dtype=np.int64)
    if labels.size == 0:
        return np.zeros(votes.shape, dtype=np.int64)
    # Shift by one so that noise (-1) gets bin 0; a vote always comes from a stored label, but stay safe.
    counts = np.bincount(labels + 1, minlength=int(max(labels.max(), votes.max(initial=-1))) + 2)
    return counts[votes + 1].astype(np.int64)


class Assignment(NamedTuple):
    """Result of :func:`assign`: per query, the voted label and its |C|."""

    labels: np.ndarray
    """``[b]`` int64 voted labels; ``-1`` also on a first visit (no labels yet)."""
    cluster_sizes: np.ndarray
    """``[b]`` int64 |C|: stored points with the voted label; 0 on a first visit."""


def assign(
    stored_unit: np.ndarray,
    stored_labels: np.ndarray | None,
    queries_unit: np.ndarray,
    *,
    k: int = 3,
    cluster_method: ClusterMethod = "hdbscan",
) -> Assignment:
    """Steps 1-2 of MEDS section 2 for one bank: vote each new vector into a stored cluster and size it.

    Args:
        stored_unit: ``[m, d]`` L2-normalised stored vectors (m may be 0).
        stored_labels: ``[m]`` labels of the last fit, or None when the bank was never fitted (first visit).
        queries_unit: ``[b, d]`` L2-normalised new vectors.
        k: neighbours that vote.
        cluster_method: ``"hdbscan"`` (kNN vote) or ``"single"`` (everything stored is one cluster, so
            |C| = m, which is what the vote gives on all-zero labels; computed directly).

    Returns:
        :class:`Assignment` with ``[b]`` labels and cluster sizes.
    """
    b = queries_unit.shape[0]
    m = stored_unit.shape[0]
    if stored_labels is None or m == 0:
        return Assignment(np.full(b, NOISE, dtype=np.int64), np.zeros(b, dtype=np.int64))
    if cluster_method == "single":
        return Assignment(np.zeros(b, dtype=np.int64), np.full(b, m, dtype=np.int64))
    votes = knn_vote(stored_unit, stored_labels, queries_unit, k=k)
    return Assignment(votes, voted_cluster_sizes(stored_labels, votes))


def fit_labels(
    unit_rows: np.ndarray,
    *,
    cluster_method: ClusterMethod = "hdbscan",
    backend: Backend = "sklearn",
    min_cluster_size: int = 2,
    min_samples: int = 1,
) -> np.ndarray:
    """Step 3 of MEDS section 2: cluster a whole bank (after the append).

    HDBSCAN with Euclidean distance on unit rows, ``min_cluster_size=2``, ``min_samples=1`` (core distance =
    distance to the nearest other row, never above an edge of the spanning tree: single linkage),
    ``cluster_selection_method="eom"``, ``allow_single_cluster=False``, ``alpha=1.0``,
    ``cluster_selection_epsilon=0.0``, which are the ``hdbscan`` package defaults the official code relies
    on; scikit-learn's estimator is given the same values explicitly (see the module docstring for the one
    difference: its spanning tree is exact). A bank of fewer than 2 rows is all noise (the official guard).

    Args:
        unit_rows: ``[n, d]`` L2-normalised float64 rows.
        cluster_method: ``"hdbscan"`` or ``"single"`` (all rows one cluster, label 0).
        backend: ``"sklearn"`` (``sklearn.cluster.HDBSCAN``) or ``"hdbscan"`` (the package the official code
            uses; optional dependency).
        min_cluster_size: HDBSCAN ``min_cluster_size``.
        min_samples: HDBSCAN ``min_samples`` as the ``hdbscan`` package (and so the official code) counts it:
            neighbours other than the point itself. scikit-learn counts the point itself, so its estimator gets
            ``min_samples + 1`` (its documented equivalence), clamped to the bank size as the package clamps.

    Returns:
        ``[n]`` int64 labels, ``-1`` for noise.
    """
    n = unit_rows.shape[0]
    if cluster_method == "single":
        return np.zeros(n, dtype=np.int64)
    if n < 2:
        return np.full(n, NOISE, dtype=np.int64)
    # The official parameters; both libraries take them under the same names.
    params = {
        "min_cluster_size": min_cluster_size,
        "min_samples": min_samples,
        "metric": "euclidean",
        "alpha": 1.0,
        "cluster_selection_epsilon": 0.0,
        "cluster_selection_method": "eom",
        "allow_single_cluster": False,
    }
    if backend == "sklearn":
        from sklearn.cluster import HDBSCAN

        clusterer = HDBSCAN(**{**params, "min_samples": min(min_samples + 1, n)}, copy=True)
    elif backend == "hdbscan":
        import hdbscan

        # core_dist_n_jobs only parallelises core distances above 16,384 rows; 1 avoids nested pools.
        clusterer = hdbscan.HDBSCAN(**params, core_dist_n_jobs=1)
    else:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return np.asarray(clusterer.fit_predict(unit_rows), dtype=np.int64)


def fit_labels_many(
    jobs: list[tuple[Hashable, np.ndarray]],
    *,
    cluster_method: ClusterMethod = "hdbscan",
    backend: Backend = "sklearn",
    min_cluster_size: int = 2,
    min_samples: int = 1,
) -> list[tuple[Hashable, np.ndarray]]:
    """Normalise and :func:`fit_labels` several banks; module-level so that worker processes can run it.

    Args:
        jobs: ``(token, vectors)`` pairs, ``vectors`` a bank's raw ``[n, d]`` rows (float32 is enough: they
            are normalised here in float64, so shipping float32 to a worker halves the traffic at no cost).
        cluster_method, backend, min_cluster_size, min_samples: as in :func:`fit_labels`.

    Returns:
        ``(token, labels)`` pairs in the order of ``jobs``; the token is returned untouched.
    """
    return [
        (
            token,
            fit_labels(
                l2_normalize_rows(vectors),
                cluster_method=cluster_method,
                backend=backend,
                min_cluster_size=min_cluster_size,
                min_samples=min_samples,
            ),
        )
        for token, vectors in jobs
    ]


# ----------------------------------------------------------------------------------------- batch plumbing
class MemoryBatch(NamedTuple):
    """A validated update batch."""

    keys: np.ndarray
    """``[N]`` object array of str prompt ids."""
    correct: np.ndarray
    """``[N]`` bool."""
    fingerprints: np.ndarray
    """``[N, D]`` float32, finite."""


def check_memory_batch(prompt_keys: Sequence[str], correct: Any, fingerprints: Any) -> MemoryBatch:
    """Validate one :meth:`ErrorMemory.update` batch and convert it (tensors and 0/1 accepted).

    Args:
        prompt_keys: ``N`` str prompt ids.
        correct: ``[N]`` bool or 0/1 (array, list or tensor).
        fingerprints: ``[N, D]`` numbers (array or tensor of any float dtype), every row finite.

    Returns:
        :class:`MemoryBatch` of ``[N]`` str keys, ``[N]`` bool correctness, ``[N, D]`` float32 fingerprints.

    Raises:
        ValueError: naming the field and the first bad index (non-str key, non-0/1 correctness, non-finite
            row, also a float64 value beyond float32), or the three lengths / the shape.
    """
    if hasattr(fingerprints, "detach"):  # a torch tensor; any dtype, any device
        import torch

        fingerprints = fingerprints.detach().to(device="cpu", dtype=torch.float32).numpy()
    try:
        x = np.asarray(fingerprints, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"fingerprints must be a numeric [N, D] array: {err}") from err
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"fingerprints must have shape [N, D] with D >= 1, got shape {x.shape}")
    if isinstance(prompt_keys, str):
        raise ValueError("prompt_keys must be a sequence of str, got a single str")
    keys_list = list(prompt_keys)
    if not all(isinstance(key, str) for key in keys_list):
        bad = next(i for i, key in enumerate(keys_list) if not isinstance(key, str))
        raise ValueError(f"prompt_keys[{bad}] must be a str, got {keys_list[bad]!r}")
    if hasattr(correct, "detach"):
        correct = correct.detach().cpu().numpy()
    corr = np.asarray(correct)
    n = x.shape[0]
    if len(keys_list) != n or corr.shape != (n,):
        raise ValueError(
            f"lengths differ: prompt_keys has {len(keys_list)}, correct has shape {corr.shape}, "
            f"fingerprints has {n} rows"
        )
    if corr.dtype != np.bool_:
        if not np.issubdtype(corr.dtype, np.number) or not np.isin(corr, (0, 1)).all():
            bad = int(np.flatnonzero(~np.isin(corr, (0, 1)))[0]) if np.issubdtype(corr.dtype, np.number) else 0
            raise ValueError(f"correct[{bad}] must be a bool or 0/1, got {corr[bad]!r}")
        corr = corr.astype(bool)
    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite)
        raise ValueError(
            f"fingerprints[{int(bad_rows[0])}] has a non-finite value (NaN/inf, or beyond float32); "
            f"{bad_rows.size} such row(s): pass only finite fingerprints"
        )
    # object, not a NumPy str dtype: that would silently drop trailing "\x00" characters of a key.
    keys = np.empty(n, dtype=object)
    keys[:] = keys_list
    return MemoryBatch(keys, corr, x)


def group_by_bank(keys: np.ndarray, correct: np.ndarray) -> list[tuple[BankKey, np.ndarray]]:
    """Split row indices by bank ``(key, correct)`` without a Python loop over rows.

    Args:
        keys: ``[N]`` str prompt ids (object or str array).
        correct: ``[N]`` bool.

    Returns:
        ``(bank_key, rows)`` pairs, banks sorted by (key, correct); ``rows`` int indices in batch order, the
        order in which the bank stores them (as the official loop appends them).
    """
    if keys.size == 0:
        return []
    unique_keys, inverse = np.unique(keys, return_inverse=True)
    code = inverse.reshape(-1) * 2 + correct.astype(np.int64)
    order = np.argsort(code, kind="stable")
    sorted_code = code[order]
    starts = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
    return [
        ((str(unique_keys[c // 2]), bool(c % 2)), rows)
        for c, rows in zip(sorted_code[starts].tolist(), np.split(order, starts[1:]), strict=True)
    ]
