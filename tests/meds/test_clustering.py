"""Layer-1 MEDS memory math: normalisation, majority vote, kNN vote, |C| rule, HDBSCAN backends."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynashape.meds.clustering import (
    assign,
    fit_labels,
    fit_labels_many,
    group_by_bank,
    knn_vote,
    l2_normalize_rows,
    majority_vote,
    voted_cluster_sizes,
)


def unit(deg: float, r: float = 1.0) -> list[float]:
    return [r * math.cos(math.radians(deg)), r * math.sin(math.radians(deg))]


def partition(labels: np.ndarray) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Clusters as sorted member tuples (numbering-free) and the noise members."""
    clusters = sorted(tuple(np.flatnonzero(labels == c).tolist()) for c in set(labels.tolist()) if c != -1)
    return clusters, tuple(np.flatnonzero(labels == -1).tolist())


def size_profile(labels: np.ndarray) -> tuple[list[int], int]:
    """Multiset of cluster sizes and the noise count."""
    sizes = sorted(int(np.sum(labels == c)) for c in set(labels.tolist()) if c != -1)
    return sizes, int(np.sum(labels == -1))


# ---------------------------------------------------------------------------------------------- normalisation
def test_l2_normalize_rows_hand_values_and_zero_row() -> None:
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]], dtype=np.float32)
    out = l2_normalize_rows(x)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]])


def test_l2_normalize_rows_matches_sklearn_bitwise() -> None:
    from sklearn.preprocessing import normalize

    rng = np.random.default_rng(3)
    x = (rng.normal(size=(200, 14)) * rng.uniform(0.01, 50, size=(200, 1))).astype(np.float32)
    np.testing.assert_array_equal(l2_normalize_rows(x), normalize(x.astype(np.float64), norm="l2"))


# ---------------------------------------------------------------------------------------------- majority vote
@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([0, 0, 1], 0),
        ([1, 0, 1], 1),
        ([-1, 0, 1], -1),  # three-way tie with noise: noise is the smallest label
        ([2, 1, 0], 0),  # three-way tie of clusters: smallest label
        ([3, -1, 3], 3),  # noise outvoted
        ([-1, 4, -1], -1),  # noise majority
        ([2, 1], 1),  # k = 2 tie
        ([7], 7),
        ([1, 1, 0, 0], 0),
    ],
)
def test_majority_vote_hand_cases(labels: list[int], expected: int) -> None:
    assert majority_vote(np.array([labels])).tolist() == [expected]


def slow_vote(row: list[int]) -> int:
    counts = Counter(row)
    best = max(counts.values())
    return min(label for label, c in counts.items() if c == best)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 4), min_size=3, max_size=3), min_size=1, max_size=20))
def test_majority_vote_equals_slow_loop(rows: list[list[int]]) -> None:
    assert majority_vote(np.array(rows)).tolist() == [slow_vote(r) for r in rows]


# --------------------------------------------------------------------------------------------------- kNN vote
def slow_knn_vote(stored: np.ndarray, labels: np.ndarray, queries: np.ndarray, k: int) -> list[int | None]:
    """Loop reference: cosine distance in Python floats, sort by (distance, index), vote.

    Returns None for a query whose k-th and (k+1)-th distances are within 1e-9 (a near-tie where the last
    float bits decide the neighbour set): such a query is not compared.
    """
    out: list[int | None] = []
    for q in queries:
        dists = []
        for i, s in enumerate(stored):
            nq = math.sqrt(sum(float(v) ** 2 for v in q)) or 1.0
            ns = math.sqrt(sum(float(v) ** 2 for v in s)) or 1.0
            cos = sum(float(a) * float(b) for a, b in zip(q, s, strict=True)) / (nq * ns)
            dists.append((min(max(1.0 - cos, 0.0), 2.0), i))
        dists.sort()
        kk = min(k, len(stored))
        if kk < len(dists) and dists[kk][0] - dists[kk - 1][0] < 1e-9:
            out.append(None)
            continue
        out.append(slow_vote([int(labels[i]) for _, i in dists[:kk]]))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_knn_vote_equals_slow_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, b, d = int(rng.integers(1, 25)), int(rng.integers(1, 6)), int(rng.integers(2, 6))
    k = int(rng.integers(1, 6))
    stored = rng.normal(size=(m, d)) * rng.uniform(0.1, 10, size=(m, 1))
    queries = rng.normal(size=(b, d))
    labels = rng.integers(-1, 3, size=m)
    got = knn_vote(l2_normalize_rows(stored), labels, l2_normalize_rows(queries), k=k).tolist()
    want = slow_knn_vote(stored, labels, queries, k)
    compared = [(g, w) for g, w in zip(got, want, strict=True) if w is not None]
    assert compared, "every query was a near-tie"
    assert [g for g, _ in compared] == [w for _, w in compared]


def test_knn_vote_hand_case_cosine_not_euclidean() -> None:
    # Stored directions 0 deg (label 0, far out), 10 and 20 deg (label 1, short vectors), 90 deg (label 2).
    # A query at 2 deg is nearest in ANGLE to 0 (2), then 10 (8), then 20 (18): votes 0, 1, 1 -> 1.
    stored = np.array([unit(0, 100.0), unit(10, 0.1), unit(20, 0.1), unit(90, 1.0)])
    labels = np.array([0, 1, 1, 2])
    q = np.array([unit(2, 1.0)])
    assert knn_vote(l2_normalize_rows(stored), labels, l2_normalize_rows(q), k=3).tolist() == [1]
    # k = 1: the nearest direction alone.
    assert knn_vote(l2_normalize_rows(stored), labels, l2_normalize_rows(q), k=1).tolist() == [0]
    # k larger than the bank: all 4 vote (0, 1, 1, 2) -> 1.
    assert knn_vote(l2_normalize_rows(stored), labels, l2_normalize_rows(q), k=9).tolist() == [1]


def test_knn_vote_exact_distance_ties_prefer_older_vectors() -> None:
    # Four copies of one direction with labels 2, 2, 0, 0 (in storage order): all at distance 0. The three
    # oldest (2, 2, 0) vote, so the result is 2; a newest-first or arbitrary choice could give 0.
    stored = l2_normalize_rows(np.array([[1.0, 0.0]] * 4))
    labels = np.array([2, 2, 0, 0])
    assert knn_vote(stored, labels, stored[:1], k=3).tolist() == [2]


def test_knn_vote_rejects_empty_bank_and_bad_k() -> None:
    with pytest.raises(ValueError, match="stored_unit"):
        knn_vote(np.zeros((0, 2)), np.zeros(0, dtype=np.int64), np.ones((1, 2)))
    with pytest.raises(ValueError, match="k must be"):
        knn_vote(np.ones((1, 2)), np.zeros(1, dtype=np.int64), np.ones((1, 2)), k=0)


# --------------------------------------------------------------------------------------------------- |C| rule
def test_voted_cluster_sizes_hand_values() -> None:
    stored = np.array([0, 0, 1, -1, 0, -1, 2])
    # label 0 -> 3 stored, 1 -> 1, 2 -> 1, noise -> 2 (noise counts like any label).
    assert voted_cluster_sizes(stored, np.array([0, 1, -1, 2, 0])).tolist() == [3, 1, 2, 1, 3]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 5), min_size=1, max_size=40), st.lists(st.integers(-1, 5), max_size=10))
def test_voted_cluster_sizes_equals_slow_loop(stored: list[int], votes: list[int]) -> None:
    got = voted_cluster_sizes(np.array(stored), np.array(votes, dtype=np.int64)).tolist()
    assert got == [sum(1 for s in stored if s == v) for v in votes]


def test_assign_first_visit_and_single() -> None:
    q = l2_normalize_rows(np.array([unit(0), unit(50)]))
    empty = np.zeros((0, 2))
    first = assign(empty, None, q)
    assert first.cluster_sizes.tolist() == [0, 0] and first.labels.tolist() == [-1, -1]
    stored = l2_normalize_rows(np.array([unit(0), unit(1), unit(180)]))
    # Never fitted (labels None) also counts as a first visit even with stored rows.
    assert assign(stored, None, q).cluster_sizes.tolist() == [0, 0]
    single = assign(stored, np.zeros(3, dtype=np.int64), q, cluster_method="single")
    assert single.cluster_sizes.tolist() == [3, 3]


# ----------------------------------------------------------------------------------------------------- refits
BACKENDS = ["sklearn", pytest.param("hdbscan", marks=pytest.mark.filterwarnings("ignore"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_labels_hand_partition(backend: str) -> None:
    if backend == "hdbscan":
        pytest.importorskip("hdbscan")
    # A = {0, 1.2, 2} deg, B = {60, 63} deg, O1 = 200, O2 = 300. Single-linkage edges: A inside (0.8, 1.2),
    # B inside (3), A-B 58, O2-A 60, O1-O2 100. From the top: O1 falls out of the root at 100, O2 at 60, then
    # the root splits into A (3) and B (2): two clusters, O1/O2 noise (root points; the root is not allowed).
    x = l2_normalize_rows(np.array([unit(0), unit(60), unit(1.2), unit(200), unit(63), unit(2), unit(300)]))
    clusters, noise = partition(fit_labels(x, backend=backend))
    assert clusters == [(0, 2, 5), (1, 4)]
    assert noise == (3, 6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_labels_small_banks(backend: str) -> None:
    if backend == "hdbscan":
        pytest.importorskip("hdbscan")
    assert fit_labels(np.zeros((0, 2)), backend=backend).tolist() == []
    assert fit_labels(l2_normalize_rows(np.array([unit(5)])), backend=backend).tolist() == [-1]
    # Two points: the root splits into two singletons, no cluster is allowed: all noise.
    assert fit_labels(l2_normalize_rows(np.array([unit(0), unit(1)])), backend=backend).tolist() == [-1, -1]
    # Three points, a pair and a far one: the far point falls out, the pair is the root: all noise.
    three = l2_normalize_rows(np.array([unit(0), unit(1), unit(90)]))
    assert fit_labels(three, backend=backend).tolist() == [-1, -1, -1]
    # Two far-apart pairs: two clusters.
    four = l2_normalize_rows(np.array([unit(0), unit(1), unit(90), unit(91.5)]))
    assert partition(fit_labels(four, backend=backend)) == ([(0, 1), (2, 3)], ())


def test_fit_labels_single_method_is_one_cluster() -> None:
    x = l2_normalize_rows(np.array([unit(0), unit(90), unit(180)]))
    assert fit_labels(x, cluster_method="single").tolist() == [0, 0, 0]
    assert fit_labels(x[:1], cluster_method="single").tolist() == [0]


def test_fit_labels_many_normalises_and_keeps_tokens() -> None:
    raw = np.array([unit(0, 0.1), unit(1, 30.0), unit(90, 2.0), unit(91.5, 0.01)], dtype=np.float32)
    out = fit_labels_many([("a", raw), ("b", raw[:2])])
    assert [t for t, _ in out] == ["a", "b"]
    np.testing.assert_array_equal(out[0][1], fit_labels(l2_normalize_rows(raw)))
    assert partition(out[0][1]) == ([(0, 1), (2, 3)], ())
    assert out[1][1].tolist() == [-1, -1]


def test_fit_labels_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend"):
        fit_labels(l2_normalize_rows(np.array([unit(0), unit(1), unit(2)])), backend="faiss")  # type: ignore[arg-type]


def random_bank(rng: np.random.Generator) -> np.ndarray:
    n, d = int(rng.integers(2, 120)), int(rng.choice([2, 3, 14]))
    return l2_normalize_rows(rng.normal(size=(n, d)))


@pytest.mark.parametrize("seed", range(50))
def test_backends_same_cluster_sizes_on_random_banks(seed: int) -> None:
    pytest.importorskip("hdbscan")
    x = random_bank(np.random.default_rng(seed))
    a = fit_labels(x, backend="sklearn")
    b = fit_labels(x, backend="hdbscan")
    assert size_profile(a) == size_profile(b)
    assert partition(a) == partition(b)


@pytest.mark.parametrize("seed", range(20))
def test_sklearn_equals_exact_tree_hdbscan_on_clustered_banks(seed: int) -> None:
    # Banks of a few tight clusters: the official hdbscan defaults (approximate Boruvka tree) may differ
    # here, but scikit-learn must equal the hdbscan package with an exact spanning tree.
    hdbscan = pytest.importorskip("hdbscan")
    rng = np.random.default_rng(1000 + seed)
    centres = rng.normal(size=(int(rng.integers(1, 6)), 14))
    n = int(rng.integers(4, 100))
    x = l2_normalize_rows(centres[rng.integers(0, len(centres), n)] + 0.05 * rng.normal(size=(n, 14)))
    exact = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1, approx_min_span_tree=False).fit_predict(x)
    assert partition(fit_labels(x, backend="sklearn")) == partition(np.asarray(exact))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "", "\u00e9t\u00e9", "a ", "a\x00"]), st.booleans()), max_size=30))
def test_group_by_bank_equals_dict_loop(rows: list[tuple[str, bool]]) -> None:
    keys = np.empty(len(rows), dtype=object)
    keys[:] = [k for k, _ in rows]
    correct = np.array([c for _, c in rows], dtype=bool)
    want: dict[tuple[str, bool], list[int]] = {}
    for i, row in enumerate(rows):
        want.setdefault(row, []).append(i)
    got = group_by_bank(keys, correct)
    assert [key for key, _ in got] == sorted(want)
    assert {key: idx.tolist() for key, idx in got} == want
