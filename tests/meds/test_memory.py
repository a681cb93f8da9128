"""ErrorMemory (layer 2): |C| over hand-made visit sequences, caps, banks, persistence, schedules."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

import dynashape.meds.memory as memory_module
from dynashape.io.state import StateFileError
from dynashape.meds.memory import ErrorMemory, MemoryConfig, MemoryFileError

W, R = False, True  # bank correctness


def fp(*degrees: float) -> np.ndarray:
    """2-D fingerprints pointing at the given angles, with varying lengths (only directions may matter)."""
    radii = [0.3, 7.0, 1.0, 2.5, 0.05, 40.0]
    return np.array(
        [
            [radii[i % 6] * math.cos(math.radians(a)), radii[i % 6] * math.sin(math.radians(a))]
            for i, a in enumerate(degrees)
        ],
        dtype=np.float32,
    )


def visit(mem: ErrorMemory, *degrees: float, key: str = "p", correct: bool = W) -> list[int]:
    n = len(degrees)
    return mem.update([key] * n, np.full(n, correct), fp(*degrees)).tolist()


def partition_sizes(mem: ErrorMemory, key: tuple[str, bool]) -> tuple[list[int], int]:
    labels = mem.banks_[key].labels
    assert labels is not None
    return sorted(int(np.sum(labels == c)) for c in set(labels.tolist()) if c != -1), int(np.sum(labels == -1))


BACKENDS = ["sklearn", "hdbscan"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "hdbscan":
        pytest.importorskip("hdbscan")
    return request.param


# ------------------------------------------------------------------------------------- hand-worked sequences
def test_scripted_run_hand_values(backend: str) -> None:
    mem = ErrorMemory(backend=backend)
    # Visit 1: cold start, |C| = 0. Bank {0, 2} deg: two points are all noise.
    assert visit(mem, 0, 2) == [0, 0]
    # Visit 2: k = 3 > bank size 2, both neighbours noise -> |C| = noise count = 2. Bank {0, 2, 100, 103}:
    # two tight pairs far apart -> two clusters of 2.
    assert visit(mem, 100, 103) == [2, 2]
    assert partition_sizes(mem, ("p", W)) == ([2, 2], 0)
    # Visit 3: 1.5 -> neighbours 2, 0, 100 -> A (2); 200 -> 103, 100, 0 -> B (2); 300 -> 0, 2, 100 -> A (2).
    assert visit(mem, 1.5, 200, 300) == [2, 2, 2]
    # Refit of {0, 2, 100, 103, 1.5, 200, 300}: tree edges 0.5, 1.5, 3, 60 (300-0), 97 (200-103), 98 (2-100):
    # the root splits at 98 into X = {0, 1.5, 2, 300} and Y = {100, 103, 200}; 300 and 200 fall out of X and
    # Y (they stay members), the inner splits only shed single points: X (4) and Y (3), no noise.
    assert partition_sizes(mem, ("p", W)) == ([3, 4], 0)
    # Visit 4: 101.2 -> 100, 103, 200 (98.8 beats 2 at 99.2) -> Y (3); 301 -> 300, 0, 1.5 -> X (4).
    assert visit(mem, 101.2, 301) == [3, 4]
    # Refit of the 9 stored directions {0, 1.5, 2, 100, 101.2, 103, 200, 300, 301}. min_samples = 1: core
    # distance 0, so mutual reachability is the chord 2 sin(gap / 2), increasing in the angular gap; the
    # spanning tree is the circle of neighbours minus its widest gap (200-300, 100 deg). Edges, ascending:
    # 0.5 (1.5-2), 1 (300-301), 1.2 (100-101.2), 1.5 (0-1.5), 1.8 (101.2-103), 59 (301-0), 97 (103-200),
    # 98 (2-100). Condensed tree (lambda = 1 / chord), min_cluster_size = 2:
    #   root splits at 98 into X = {300, 301, 0, 1.5, 2} (5) and Y = {100, 101.2, 103, 200} (4);
    #   X splits at 59 into X1 = {300, 301} and X2 = {0, 1.5, 2} (both >= 2: a true split);
    #   Y only sheds single points (200 at 97, 103 at 1.8, then 100 and 101.2 at 1.2): Y is a leaf and 200
    #   stays its member.
    # EOM at X: stability(X) = 5 (1/chord(59) - 1/chord(98)) = 5 (1.0154 - 0.6625) = 1.76, while
    # stability(X1) alone = 2 (1/chord(1) - 1/chord(59)) = 2 (57.297 - 1.015) = 112.6 > 1.76: X1 and X2 are
    # kept; Y is a leaf and kept; the root is never selected (allow_single_cluster False).
    # Partition: {300, 301}, {0, 1.5, 2}, {100, 101.2, 103, 200}: 3 clusters, 0 noise points.
    assert partition_sizes(mem, ("p", W)) == ([2, 3, 4], 0)
    # One bank: clusters_per_bank = 3 / 1; noise_frac = 0 noise / 9 points; memory = 9 float32 2-vectors
    # plus 9 int64 labels.
    assert mem.stats() == {
        "banks": 1.0,
        "points": 9.0,
        "clusters_per_bank": 3.0,
        "noise_frac": 0.0,
        "memory_bytes": 9 * 2 * 4 + 9 * 8.0,
    }


def test_noise_vote_gives_noise_count(backend: str) -> None:
    mem = ErrorMemory(backend=backend)
    # A = {0, 1.2, 2}, B = {60, 63}, noise O1 = 200, O2 = 300 (see test_fit_labels_hand_partition).
    assert visit(mem, 0, 60, 1.2, 200, 63, 2, 300) == [0] * 7
    assert partition_sizes(mem, ("p", W)) == ([2, 3], 2)
    assert mem.stats()["noise_frac"] == pytest.approx(2 / 7)
    # 245 -> O1 (45), O2 (55), then 0 (115): votes -1, -1, A -> noise -> |C| = 2 noise points (A would be 3).
    # 0.7 -> A (3); 61.2 -> B (2).
    assert visit(mem, 245, 0.7, 61.2) == [2, 3, 2]


def injected(labels: list[int], degrees: list[float], **kwargs: object) -> ErrorMemory:
    """A memory whose bank ("p", wrong) holds the given directions with the given labels of a last fit."""
    mem = ErrorMemory(**kwargs)  # type: ignore[arg-type]
    state = mem.state_dict()
    n = len(degrees)
    state.update(
        prompt_keys=["p"],
        correct=[False],
        lengths=torch.tensor([n]),
        dims=torch.tensor([2]),
        vectors=torch.from_numpy(fp(*degrees).reshape(-1)),
        labels=torch.tensor(labels, dtype=torch.int64),
    )
    mem.load_state_dict(state)
    return mem


def test_tie_with_noise_gives_noise() -> None:
    # Three stored points labelled -1, 0, 1 and k = 3: each label gets one vote; the tie goes to -1, and
    # |C| is the number of noise points (1), whatever the query.
    mem = injected([1, -1, 0], [0, 120, 240])
    assert visit(mem, 10, 130) == [1, 1]
    # Three clusters tied: smallest label 0 wins; label 0 has 2 stored points here.
    mem = injected([2, 1, 0, 0], [0, 120, 240, 250])
    assert visit(mem, 60) == [2]  # neighbours 0 (2), 120 (1), 250 (0) -> 0 -> two points


def test_k_larger_than_bank_uses_whole_bank(backend: str) -> None:
    # Bank after two visits: X = {0, 1.5, 2} (3), Y = {100, 103} (2). A query at 101: k = 3 -> Y, Y, X -> 2;
    # k = 10 > 5 stored -> all vote: 3 X, 2 Y -> X -> 3.
    small_k, big_k = ErrorMemory(backend=backend), ErrorMemory(backend=backend, k=10)
    for mem in (small_k, big_k):
        visit(mem, 0, 2, 1.5)
        visit(mem, 100, 103)
        assert partition_sizes(mem, ("p", W)) == ([2, 3], 0)
    assert visit(small_k, 101) == [2]
    assert visit(big_k, 101) == [3]


def test_cap_drops_oldest(backend: str) -> None:
    capped, free = ErrorMemory(backend=backend, max_per_bank=3), ErrorMemory(backend=backend)
    for mem in (capped, free):
        assert visit(mem, 0, 2) == [0, 0]
        assert visit(mem, 100, 103) == [2, 2]
    # Capped bank = {2, 100, 103}: the 2 falls out of the root, the pair is the root: all noise.
    assert partition_sizes(capped, ("p", W)) == ([], 3)
    stored = np.concatenate([fp(0, 2), fp(100, 103)])  # as passed: two calls
    np.testing.assert_array_equal(capped.banks_[("p", W)].vectors, stored[1:])
    # 101 -> all neighbours noise -> 3 noise points; without the cap -> cluster {100, 103} -> 2.
    assert visit(capped, 101) == [3]
    assert visit(free, 101) == [2]
    np.testing.assert_array_equal(capped.banks_[("p", W)].vectors[-1], fp(101)[0])
    assert capped.banks_[("p", W)].vectors.shape[0] == 3
    # A batch bigger than the cap keeps its newest rows.
    tiny = ErrorMemory(backend=backend, max_per_bank=2)
    visit(tiny, 0, 10, 20)
    np.testing.assert_array_equal(tiny.banks_[("p", W)].vectors, fp(0, 10, 20)[1:])


def test_banks_are_keyed_by_prompt_and_correctness() -> None:
    mem = ErrorMemory()
    keys = ["p", "p", "p", "p", "p", "q"]
    correct = np.array([W, W, R, R, R, W])
    assert mem.update(keys, correct, fp(0, 2, 0.5, 1, 1.5, 0)).tolist() == [0] * 6
    assert set(mem.banks_) == {("p", W), ("p", R), ("q", W)}
    # Wrong bank of p: 2 noise points; right bank of p: 3 noise points; q: 1; a new prompt r: cold.
    out = mem.update(["p", "p", "q", "r"], np.array([W, R, W, W]), fp(1, 1, 1, 1))
    assert out.tolist() == [2, 3, 1, 0]
    # Only the rows passed are stored (the caller filters by target): the wrong-only use leaves R alone.
    before = mem.banks_[("p", R)].vectors.copy()
    mem.update(["p"], np.array([W]), fp(5))
    np.testing.assert_array_equal(mem.banks_[("p", R)].vectors, before)


def test_single_method_counts_bank_size() -> None:
    mem = ErrorMemory(cluster_method="single")
    assert visit(mem, 0, 90) == [0, 0]
    assert visit(mem, 180) == [2]
    assert visit(mem, 45, 270) == [3, 3]
    assert visit(mem, 1, correct=R) == [0]
    capped = ErrorMemory(cluster_method="single", max_per_bank=2)
    visit(capped, 0, 90, 180)
    assert visit(capped, 5) == [2]


def test_reset_forgets_everything() -> None:
    mem = ErrorMemory()
    visit(mem, 0, 2)
    mem.reset()
    assert mem.banks_ == {}
    assert visit(mem, 0) == [0]


def test_tensor_inputs_and_empty_batch() -> None:
    mem = ErrorMemory()
    assert mem.update(["p", "p"], torch.tensor([0, 0]), torch.tensor(fp(0, 2), dtype=torch.bfloat16)).tolist() == [
        0,
        0,
    ]
    assert mem.banks_[("p", W)].vectors.dtype == np.float32
    assert mem.update([], np.zeros(0, dtype=bool), np.zeros((0, 2))).tolist() == []


# --------------------------------------------------------------------------------------------- validation
def test_bad_inputs_raise_and_change_nothing() -> None:
    mem = ErrorMemory()
    visit(mem, 0, 2)
    snapshot = mem.banks_[("p", W)].vectors.copy()
    x = fp(1, 2, 3)
    x[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"fingerprints\[2\]"):
        mem.update(["p"] * 3, np.zeros(3, dtype=bool), x)
    with pytest.raises(ValueError, match="lengths differ"):
        mem.update(["p"] * 2, np.zeros(3, dtype=bool), fp(1, 2, 3))
    with pytest.raises(ValueError, match="lengths differ"):
        mem.update(["p"] * 3, np.zeros(2, dtype=bool), fp(1, 2, 3))
    with pytest.raises(ValueError, match=r"prompt_keys\[1\]"):
        mem.update(["p", 7], np.zeros(2, dtype=bool), fp(1, 2))  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"correct\[1\]"):
        mem.update(["p", "p"], np.array([0, 2]), fp(1, 2))
    with pytest.raises(ValueError, match="dimension 3"):
        mem.update(["new", "p"], np.zeros(2, dtype=bool), np.ones((2, 3)))
    with pytest.raises(ValueError, match="shape"):
        mem.update(["p"], np.zeros(1, dtype=bool), np.ones(3))
    assert set(mem.banks_) == {("p", W)}
    np.testing.assert_array_equal(mem.banks_[("p", W)].vectors, snapshot)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("k", 0),
        ("min_cluster_size", 1),
        ("min_samples", 0),
        ("cluster_method", "kmeans"),
        ("backend", "x"),
        ("max_per_bank", 0),
        ("workers", -1),
        ("background", 1),
        ("k", True),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MemoryConfig(**{field: value})  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------------- persistence
def random_visits(n_visits: int, seed: int = 0, prompts: int = 6, rollouts: int = 8, dim: int = 5):
    rng = np.random.default_rng(seed)
    modes = rng.normal(size=(prompts, 3, dim))
    for _ in range(n_visits):
        p = np.repeat(np.arange(prompts), rollouts)
        x = modes[p, rng.integers(0, 3, p.size)] + 0.05 * rng.normal(size=(p.size, dim))
        yield [f"k{i}" for i in p], rng.random(p.size) < 0.5, x.astype(np.float32)


def test_save_load_mid_run_gives_identical_results(tmp_path: os.PathLike[str]) -> None:
    visits = list(random_visits(5, seed=1))
    straight = ErrorMemory()
    expected = [straight.update(*v) for v in visits]
    first = ErrorMemory()
    for v in visits[:2]:
        first.update(*v)
    path = os.path.join(tmp_path, "memory.pt")
    first.save(path)
    resumed = ErrorMemory()
    resumed.load(path)
    for i, v in enumerate(visits[2:], start=2):
        np.testing.assert_array_equal(resumed.update(*v), expected[i])
        np.testing.assert_array_equal(first.update(*v), expected[i])
    assert not [f for f in os.listdir(tmp_path) if f != "memory.pt"], "temp files left behind"


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("kind", ["truncated", "random", "json", "empty", "other_torch", "version", "config"])
def test_bad_file_raises_and_keeps_state(tmp_path: os.PathLike[str], kind: str) -> None:
    mem = ErrorMemory()
    for v in random_visits(2, seed=2):
        mem.update(*v)
    good = os.path.join(tmp_path, "good.pt")
    mem.save(good)
    bad = os.path.join(tmp_path, "bad.pt")
    raw = open(good, "rb").read()
    if kind == "truncated":
        open(bad, "wb").write(raw[: len(raw) // 2])
    elif kind == "random":
        open(bad, "wb").write(np.random.default_rng(0).bytes(4096))
    elif kind == "json":
        open(bad, "w").write(json.dumps({"format": "something else", "banks": [1, 2, 3]}))
    elif kind == "empty":
        open(bad, "wb").close()
    elif kind == "other_torch":
        torch.save({"weights": torch.ones(3)}, bad)
    elif kind == "version":
        state = mem.state_dict()
        state["version"] = 99
        torch.save(state, bad)
    else:
        torch.save(ErrorMemory(min_cluster_size=3).state_dict(), bad)
    other = ErrorMemory()
    for v in random_visits(1, seed=3):
        other.update(*v)
    before = other.state_dict()
    with pytest.raises(MemoryFileError, match=r"bad\.pt") as err:
        other.load(bad)
    assert isinstance(err.value, StateFileError) and err.value.path == bad  # the package's one error type
    assert_same_state(other.state_dict(), before)


def test_malformed_state_dicts_are_refused() -> None:
    mem = ErrorMemory()
    visit(mem, 0, 2)
    good = mem.state_dict()
    for change in (
        {"labels": good["labels"][:1]},
        {"vectors": good["vectors"].double()},
        {"lengths": torch.tensor([5])},
        {"prompt_keys": ["p", "q"]},
        {"vectors": torch.full_like(good["vectors"], float("nan"))},
        {"labels": torch.tensor([-2, 0])},
    ):
        with pytest.raises(MemoryFileError):
            ErrorMemory().load_state_dict({**good, **change})
    with pytest.raises(MemoryFileError, match="format"):
        mem.load_state_dict([1, 2])  # type: ignore[arg-type]
    # a label of 10**18 would make the next visit allocate a count array of that size: refused on load
    huge = good["labels"].clone()
    huge[0] = 10**18
    with pytest.raises(MemoryFileError, match="cluster label beyond its bank's point count"):
        ErrorMemory().load_state_dict({**good, "labels": huge})


def test_save_is_atomic_when_writing_fails(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    mem = ErrorMemory()
    visit(mem, 0, 2)
    path = os.path.join(tmp_path, "m.pt")
    mem.save(path)
    original = open(path, "rb").read()
    visit(mem, 100, 103)

    def broken_save(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        mem.save(path)
    assert open(path, "rb").read() == original
    assert os.listdir(tmp_path) == ["m.pt"]


# ------------------------------------------------------------------------------------------------ schedules
def run(mem: ErrorMemory, visits: list) -> list[np.ndarray]:
    with mem:
        return [mem.update(*v) for v in visits]


def test_background_thread_equals_serial() -> None:
    visits = list(random_visits(4, seed=5, prompts=10))
    serial = run(ErrorMemory(), visits)
    background = run(ErrorMemory(background=True), visits)
    for a, b in zip(serial, background, strict=True):
        np.testing.assert_array_equal(a, b)


def test_failed_background_refit_is_redone_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    real = memory_module.fit_labels_many

    def fails_off_main_thread(*args: object, **kwargs: object) -> object:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("worker died")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    visits = list(random_visits(3, seed=6))
    serial = run(ErrorMemory(), visits)
    monkeypatch.setattr(memory_module, "fit_labels_many", fails_off_main_thread)
    background = run(ErrorMemory(background=True), visits)
    for a, b in zip(serial, background, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # spawning two workers that import scikit-learn takes 5-15 s on 2 busy cores
def test_process_pool_background_equals_serial() -> None:
    visits = list(random_visits(3, seed=7, prompts=12))
    serial = run(ErrorMemory(), visits)
    mem = ErrorMemory(workers=2, background=True)
    pooled = run(mem, visits)
    for a, b in zip(serial, pooled, strict=True):
        np.testing.assert_array_equal(a, b)
    assert mem.stats()["points"] == 3 * 12 * 8


def test_stats_hand_values_and_non_blocking() -> None:
    mem = ErrorMemory()
    assert mem.stats() == {
        "banks": 0.0,
        "points": 0.0,
        "clusters_per_bank": 0.0,
        "noise_frac": 0.0,
        "memory_bytes": 0.0,
    }
    visit(mem, 0, 2)  # 2 noise points, 0 clusters
    visit(mem, 0, 1.2, 2, 60, 63, key="q")  # clusters {0, 1.2, 2} and {60, 63}
    s = mem.stats()
    assert s["banks"] == 2 and s["points"] == 7
    assert s["clusters_per_bank"] == pytest.approx((0 + 2) / 2)
    assert s["noise_frac"] == pytest.approx(2 / 7)
    assert s["memory_bytes"] == 7 * (2 * 4 + 8)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_equals_official_loop_on_random_visits(backend_name: str) -> None:
    """Equivalence to a slow loop written like the official code (Linxi000/MEDS, recipe/MEDS/layer_logits_utils.py:
    per point kNN vote over the bank before the batch, then a refit of the whole bank), using the clustering
    libraries directly: nothing from dynashape.meds.clustering."""
    if backend_name == "hdbscan":
        hdbscan = pytest.importorskip("hdbscan")
    from sklearn.cluster import HDBSCAN
    from sklearn.neighbors import NearestNeighbors

    def official_refit(vectors: list[np.ndarray]) -> list[int]:
        # The official guard: fewer than 2 vectors are all noise.
        if len(vectors) < 2:
            return [-1] * len(vectors)
        x = np.stack(vectors)
        unit = x / np.sqrt((x * x).sum(axis=1, keepdims=True))  # L2 rows (no zero rows in these visits)
        # The official call: min_cluster_size=2, min_samples=1, metric="euclidean", everything else the
        # library default (eom, allow_single_cluster False, alpha 1, epsilon 0); sklearn takes the same names.
        if backend_name == "sklearn":
            clusterer = HDBSCAN(min_cluster_size=2, min_samples=1, metric="euclidean", copy=True)
        else:
            clusterer = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1, metric="euclidean")
        return [int(label) for label in clusterer.fit_predict(unit)]

    visits = list(random_visits(4, seed=8, prompts=5, rollouts=6, dim=4))
    # ErrorMemory's keyword defaults and MemoryConfig's defaults are written twice: both must be the official.
    mems = [ErrorMemory(backend=backend_name), ErrorMemory.from_config(MemoryConfig(backend=backend_name))]
    banks: dict[tuple[str, bool], dict[str, list]] = {}
    votes: list[int] = []
    for keys, correct, x in visits:
        got = [mem.update(keys, correct, x) for mem in mems]
        want = np.zeros(len(keys), dtype=np.int64)
        order: dict[tuple[str, bool], list[int]] = {}
        for i, key in enumerate(zip(keys, correct.tolist(), strict=True)):
            order.setdefault(key, []).append(i)
        for key, rows in order.items():
            bank = banks.setdefault(key, {"vectors": [], "labels": []})
            if bank["labels"]:
                stored, labels = np.stack(bank["vectors"]), np.array(bank["labels"])
                for i in rows:
                    nn = NearestNeighbors(n_neighbors=min(3, len(stored)), metric="cosine", algorithm="brute")
                    idx = nn.fit(stored).kneighbors(x[i : i + 1].astype(np.float64))[1][0]
                    values, counts = np.unique(labels[idx], return_counts=True)
                    votes.append(int(values[np.argmax(counts)]))  # np.unique sorts: a tie goes to the smallest
                    want[i] = int(np.sum(labels == votes[-1]))
            bank["vectors"].extend(x[i].astype(np.float64) for i in rows)
            bank["labels"] = official_refit(bank["vectors"])
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], want)
    # The visits must exercise both kinds of vote: some |C| counts a cluster, some counts the noise points.
    assert min(votes) == -1 and max(votes) >= 0, votes


@pytest.mark.parametrize("backend_name", ["sklearn", "hdbscan"])
def test_min_samples_two_counts_like_the_official_package(backend_name: str) -> None:
    if backend_name == "hdbscan":
        pytest.importorskip("hdbscan")
    mem = ErrorMemory(backend=backend_name, min_samples=2)
    visit(mem, 0, 2)
    visit(mem, 100, 103)
    # Official convention (hdbscan package): min_samples = 2 neighbours besides the point, so the core distance
    # is the chord to the second nearest OTHER point: 0 -> 100 deg, 2 -> 98, 100 -> 98, 103 -> 101.
    # Mutual reachability = max(core a, core b, chord): (2, 100) 98, (0, 2) and (0, 100) 100, (103, 100) and
    # (103, 2) 101. Tree: 2-100 at 98, 0 joins at 100, 103 at 101. From the top, 103 then 0 fall out alone and
    # the last pair splits into two single points: the root never splits into two clusters of >= 2 and is not
    # selectable (allow_single_cluster False): all 4 points are noise. (Counting the point itself, the core
    # distance is the nearest other point and the two pairs {0, 2}, {100, 103} would be clusters.)
    assert partition_sizes(mem, ("p", W)) == ([], 4)


@pytest.mark.parametrize("backend_name", ["sklearn", "hdbscan"])
def test_min_samples_above_bank_size_is_clamped(backend_name: str) -> None:
    if backend_name == "hdbscan":
        pytest.importorskip("hdbscan")
    mem = ErrorMemory(backend=backend_name, min_samples=3)
    # Two stored points: 3 neighbours besides the point do not exist; the official package clamps to the one
    # other point. Either way a root of 2 points cannot split into two clusters of >= 2: both are noise.
    assert visit(mem, 0, 2) == [0, 0]
    assert partition_sizes(mem, ("p", W)) == ([], 2)
    # Next visit: 1 -> neighbours 0 and 2, both noise -> |C| = 2 noise points.
    assert visit(mem, 1) == [2]


def test_max_points_forgets_the_least_recently_visited_banks_hand_worked() -> None:
    """max_points=5: A(3) B(2) fill it; C(2) makes 7, A (visited longest ago) goes; B is visited again, D(1)
    makes 6 and C goes. A bank of the current update is never forgotten."""
    mem = ErrorMemory(max_points=5)
    visit(mem, 0, 1, 2, key="A")
    visit(mem, 10, 11, key="B")
    assert [k for k, _ in mem.banks_] == ["A", "B"]
    visit(mem, 20, 21, key="C")
    assert [k for k, _ in mem.banks_] == ["B", "C"] and mem.stats()["points"] == 4
    visit(mem, 12, key="B")
    visit(mem, 30, key="D")
    assert [k for k, _ in mem.banks_] == ["B", "D"] and mem.stats()["points"] == 4
    big = ErrorMemory(max_points=2)
    visit(big, 0, 1, 2, key="A")  # one update larger than the cap keeps its bank
    assert [k for k, _ in big.banks_] == ["A"] and big.stats()["points"] == 3


def test_default_caps_bound_memory_and_none_is_the_official_unbounded_memory() -> None:
    from dynashape.meds.memory import DEFAULT_MAX_PER_BANK, DEFAULT_MAX_POINTS, MemoryConfig
    from dynashape.shapers.meds import MedsConfig

    assert (MemoryConfig().max_per_bank, MemoryConfig().max_points) == (4096, 2**23)
    assert (MedsConfig().max_per_bank, MedsConfig().max_points) == (DEFAULT_MAX_PER_BANK, DEFAULT_MAX_POINTS)
    assert MedsConfig(max_per_bank=None, max_points=None).memory_config().max_points is None
    with pytest.raises(ValueError, match="max_points must be None or an int >= 1, got 0"):
        MemoryConfig(max_points=0)
    unbounded = ErrorMemory(max_per_bank=None, max_points=None)
    for i in range(6):
        visit(unbounded, float(i), key=f"k{i}")
    assert unbounded.stats()["points"] == 6.0
