"""Benchmark: MEDS error memory, ours (ErrorMemory) vs the official approach, with identical |C| outputs.

Workload (issue): P prompts x R rollouts per step, every step visits all P prompts again (V visits), with
fingerprints of dimension 14; about half of the rollouts are wrong, and each prompt has a few recurring
"error modes" and "solution modes" (plus unique outliers) so that clusters exist. Every row is stored, in the
bank of its correctness, as the official code does (it clusters both banks whatever the penalty target).

Official approach (re-implemented here from the spec, the way recipe/MEDS/layer_logits_utils.py works): per
bank, for each new fingerprint a fresh ``sklearn.neighbors.NearestNeighbors(metric="cosine",
algorithm="brute")`` query of k = 3 against the previous labels, then the points are appended and the
``hdbscan`` package refits the whole bank, all serially inside the step.

Ours: ``ErrorMemory.update`` (vectorised kNN vote per bank; refits either inline, or in the background in
``--workers`` processes while the rest of the training step runs). The rest of the step is simulated by
``--gap`` seconds of sleep (the trainer waits on the accelerator then; a DAPO step of the paper is ~10 s at
512 prompts). "Wait" is the time ``update`` blocks the step. Our timed runs use ``--backend`` (default
``hdbscan``, whose |C| must equal the official approach exactly: asserted); the other backend is run inline too,
and its disagreements with the official |C| are counted (scikit-learn builds an exact spanning tree where the
official package default is approximate; see dynashape.meds.clustering). The background |C| must equal the
inline |C| exactly (asserted).

Run (small default, a few minutes on 2 cores):
    .venv/bin/python benchmarks/bench_memory.py
Full size of the issue:
    .venv/bin/python benchmarks/bench_memory.py --prompts 512 --rollouts 16 --visits 10
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np

from dynashape.meds.memory import ErrorMemory


def make_workload(prompts: int, rollouts: int, visits: int, dim: int, seed: int):
    """Per visit: (keys [N], correct [N] bool, fingerprints [N, dim] float32) with recurring structure."""
    rng = np.random.default_rng(seed)
    keys = np.repeat(np.array([f"prompt-{p:06d}" for p in range(prompts)]), rollouts)
    # Layer logits of one prompt share a common profile; modes are offsets from it.
    base = rng.normal(size=(prompts, dim)) + np.linspace(0.0, 2.0, dim)
    n_modes = 6
    wrong_modes = base[:, None, :] + rng.normal(size=(prompts, n_modes, dim))
    right_modes = base[:, None, :] + rng.normal(size=(prompts, 2, dim))
    accuracy = rng.uniform(0.2, 0.8, size=prompts)
    mode_p = 1.0 / np.arange(1, n_modes + 1)
    mode_p /= mode_p.sum()
    out = []
    for _ in range(visits):
        n = prompts * rollouts
        prompt = np.repeat(np.arange(prompts), rollouts)
        correct = rng.random(n) < accuracy[prompt]
        mode = rng.choice(n_modes, size=n, p=mode_p)
        centre = np.where(correct[:, None], right_modes[prompt, mode % 2], wrong_modes[prompt, mode])
        outlier = rng.random(n) < 0.15  # unique answers: fresh directions, mostly noise
        centre = np.where(outlier[:, None], base[prompt] + 1.5 * rng.normal(size=(n, dim)), centre)
        x = centre + 0.05 * rng.normal(size=(n, dim))
        out.append((keys, correct, x.astype(np.float32)))
    return out


class OfficialMemory:
    """The official per-bank loop: kNN per point with a fresh NearestNeighbors, then an hdbscan refit."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, bool], dict[str, list]] = {}
        self.three_way: np.ndarray = np.zeros(0, dtype=bool)  # rows whose 3 neighbours had 3 distinct clusters

    def update(self, keys: np.ndarray, correct: np.ndarray, x: np.ndarray) -> np.ndarray:
        import hdbscan
        from sklearn.neighbors import NearestNeighbors
        from sklearn.preprocessing import normalize

        sizes = np.zeros(len(keys), dtype=np.int64)
        self.three_way = np.zeros(len(keys), dtype=bool)
        per_bank: dict[tuple[str, bool], list[int]] = {}
        for i, (key, c) in enumerate(zip(keys.tolist(), correct.tolist(), strict=True)):
            per_bank.setdefault((key, c), []).append(i)
        for bank_key, rows in per_bank.items():
            st = self.state.setdefault(bank_key, {"vectors": [], "labels": []})
            has_labels = len(st["labels"]) > 0 and len(st["labels"]) == len(st["vectors"])
            labels = np.array(st["labels"], dtype=int)
            for i in rows:
                vec = np.array(x[i], dtype=float)
                if has_labels:
                    stored = np.stack(st["vectors"])
                    nn = NearestNeighbors(n_neighbors=min(3, len(stored)), metric="cosine", algorithm="brute")
                    nn.fit(stored)
                    _, idx = nn.kneighbors(vec.reshape(1, -1))
                    values, counts = np.unique(labels[idx[0]], return_counts=True)
                    self.three_way[i] = len(values) == 3 and values[0] != -1
                    sizes[i] = int(np.sum(labels == int(values[np.argmax(counts)])))
            for i in rows:
                st["vectors"].append(np.array(x[i], dtype=float))
            if len(st["vectors"]) < 2:
                st["labels"] = [-1] * len(st["vectors"])
                continue
            unit = normalize(np.stack(st["vectors"]), norm="l2")
            fitted = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1, metric="euclidean").fit_predict(unit)
            st["labels"] = fitted.tolist()
        return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--visits", type=int, default=6)
    parser.add_argument("--dim", type=int, default=14)
    parser.add_argument("--workers", type=int, default=2, help="refit processes for the background mode")
    parser.add_argument(
        "--gap", type=float, default=None, help="simulated rest of a step in s (default 10 s x prompts / 512)"
    )
    parser.add_argument(
        "--backend",
        choices=("sklearn", "hdbscan"),
        default="hdbscan",
        help="backend of our timed runs; hdbscan = the official package (|C| asserted equal to the official)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = make_workload(args.prompts, args.rollouts, args.visits, args.dim, args.seed)
    print(
        f"workload: {args.prompts} prompts x {args.rollouts} rollouts x {args.visits} visits, dim {args.dim}, "
        f"wrong frac {1 - np.mean([c.mean() for _, c, _ in work]):.2f}, backend {args.backend}, "
        f"cpus {os.cpu_count()}"
    )

    # Warm up imports (scikit-learn, hdbscan: seconds) outside every timed region.
    warm_keys, warm_correct, warm_x = ["warm"] * 4, np.zeros(4, dtype=bool), np.eye(4, 3, dtype=np.float32)
    OfficialMemory().update(np.array(warm_keys), warm_correct, warm_x)
    for backend in ("sklearn", "hdbscan"):
        ErrorMemory(backend=backend).update(warm_keys, warm_correct, warm_x)

    official = OfficialMemory()
    t_official, ref, three_way = [], [], []
    for keys, correct, x in work:
        t0 = time.perf_counter()
        ref.append(official.update(keys, correct, x))
        t_official.append(time.perf_counter() - t0)
        three_way.append(official.three_way)

    # Ours, refits inline (fully synchronous): the raw compute.
    sync = ErrorMemory(backend=args.backend)
    t_sync, out_sync = [], []
    for keys, correct, x in work:
        t0 = time.perf_counter()
        out_sync.append(sync.update(keys, correct, x))
        t_sync.append(time.perf_counter() - t0)

    # Ours, refits in the background in worker processes while the "rest of the step" runs.
    # The paper's DAPO step is ~9.6 s at 512 prompts x 16 rollouts (8.00 min / 50 steps); scale with the batch.
    gap = args.gap if args.gap is not None else 10.0 * args.prompts / 512
    t_bg, out_bg = [], []
    with ErrorMemory(backend=args.backend, workers=args.workers, background=True) as bg:
        t0 = time.perf_counter()
        bg.start()
        t_start = time.perf_counter() - t0
        for keys, correct, x in work:
            t0 = time.perf_counter()
            out_bg.append(bg.update(keys, correct, x))
            t_bg.append(time.perf_counter() - t0)
            time.sleep(gap)
        t0 = time.perf_counter()
        bg.wait()
        t_final = time.perf_counter() - t0

    # The other backend, inline: its time and its |C| agreement with the official code.
    other = "sklearn" if args.backend == "hdbscan" else "hdbscan"
    probe = ErrorMemory(backend=other)
    t_other, out_other = [], []
    for keys, correct, x in work:
        t0 = time.perf_counter()
        out_other.append(probe.update(keys, correct, x))
        t_other.append(time.perf_counter() - t0)

    # Peak Python-heap memory of a whole run of ours (tracemalloc slows it, so it is a separate pass).
    traced = ErrorMemory(backend=args.backend)
    tracemalloc.start()
    for keys, correct, x in work:
        traced.update(keys, correct, x)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stats = traced.stats()

    rows = sum(len(r) for r in ref)
    for name, outs in ((args.backend, out_sync), (other, out_other)):
        diff = [int(np.sum(a != b)) for a, b in zip(ref, outs, strict=True)]
        on_ties = sum(int(np.sum((a != b) & t)) for a, b, t in zip(ref, outs, three_way, strict=True))
        print(
            f"backend {name}: |C| differing from the official approach in {sum(diff)} of {rows} rows "
            f"(per visit {diff}; {on_ties} of them three-way ties)"
        )
    print(f"rows whose official vote was a three-way tie of three clusters: {sum(int(t.sum()) for t in three_way)}")
    for a, b in zip(out_sync, out_bg, strict=True):
        assert np.array_equal(a, b), "the background schedule must give exactly the serial |C|"
    if args.backend == "hdbscan":
        for a, b in zip(ref, out_sync, strict=True):
            assert np.array_equal(a, b), "with the hdbscan backend |C| must equal the official approach exactly"

    print(
        f"\n{'visit':>5} {'official s':>11} {'ours sync s':>12} {other + ' sync s':>15} {'ours bg wait s':>15}"
        f" {'ratio sync':>11} {'ratio bg':>9}"
    )
    for v in range(args.visits):
        print(
            f"{v + 1:>5} {t_official[v]:>11.3f} {t_sync[v]:>12.3f} {t_other[v]:>15.3f} {t_bg[v]:>15.3f} "
            f"{t_official[v] / t_sync[v]:>11.1f} {t_official[v] / t_bg[v]:>9.1f}"
        )
    print(
        f"background: workers={args.workers}, simulated gap {gap:.2f} s, final wait {t_final:.3f} s, "
        f"pool start (once, before step 1) {t_start:.2f} s"
    )
    print(
        f"last visit: official {t_official[-1]:.3f} s, ours sync {t_sync[-1]:.3f} s "
        f"({t_official[-1] / t_sync[-1]:.1f}x), ours background wait {t_bg[-1]:.3f} s "
        f"({t_official[-1] / t_bg[-1]:.1f}x)"
    )
    per_1000 = 1000.0 / args.prompts
    print(
        f"memory: stored {stats['memory_bytes'] / 2**20:.2f} MiB, tracemalloc peak {peak / 2**20:.1f} MiB "
        f"for {args.prompts} prompts -> {stats['memory_bytes'] * per_1000 / 2**20:.2f} MiB stored and "
        f"{peak * per_1000 / 2**20:.1f} MiB peak per 1,000 prompts; banks {stats['banks']:.0f}, "
        f"points {stats['points']:.0f}, clusters/bank {stats['clusters_per_bank']:.2f}, "
        f"noise frac {stats['noise_frac']:.2f}"
    )


if __name__ == "__main__":
    main()
