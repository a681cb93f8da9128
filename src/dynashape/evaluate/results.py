"""From per-sample verdicts to the papers' numbers: avg@n, unbiased pass@k, lengths, truncation, AES, eigen ratio.

Pure functions of the sample records (``evaluate.cache.SampleRecord``); the metrics themselves are the
project's (``metrics.pass_at_k_curve``, ``metrics.aes``, ``world.measures.wrong_eigen_ratio``).

results.json, for other tools to read::

    {"protocol": {...every setting...}, "model": ..., "base": ...,
     "benchmarks": {NAME: {"n_problems", "n_samples", "accuracy", "mean_length", "truncation_rate",
                           "pass_at_k": {k: value}, "aes" (with a base), "eigen_ratio" (meds)}},
     "overall": {...}}

``overall`` is the unweighted mean over benchmarks (the papers' headline: every benchmark counts once, whatever
its size) of accuracy, length, truncation and of pass@k at the ks every benchmark has. Its ``aes`` is computed
on those averages (accuracy and length), and ``aes_mean_over_benchmarks`` is the mean of the per-benchmark AES
values: the spec asks to say which; both are given, with the constants in ``aes_constants``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dynashape.core.metrics import aes, pass_at_k_curve

__all__ = ["AES_CONSTANTS", "add_aes", "aes_or_none", "summarise", "summarise_benchmark"]

AES_CONSTANTS = {"alpha": 1.0, "beta": 3.0, "gamma": 5.0}
"""O1-Pruner's weights as the LEAD paper (arXiv 2605.09806) uses them, the ``metrics.aes``
defaults, reported with every AES."""


def summarise_benchmark(
    records: Sequence[Mapping[str, Any]], problem_ids: Sequence[str], n: int, *, eigen_ratio: bool = False
) -> dict[str, Any]:
    """One benchmark's numbers from its sample records (every problem x every sample present).

    Args:
        records: dicts with ``problem_id``, ``sample``, ``correct``, ``length``, ``truncated`` (and
            ``fingerprint``: a list of floats or None, when ``eigen_ratio``).
        problem_ids: the evaluated problems, in order.
        n: samples per problem.
        eigen_ratio: add ``eigen_ratio``, the top-1 eigen ratio of the wrong answers' fingerprints (NaN -> None
            when fewer than 2 wrong answers have one), and ``fingerprinted_wrong``, how many had one.

    Returns:
        ``n_problems``, ``n_samples``, ``accuracy`` (avg@n: the mean over all samples = pass@1),
        ``mean_length`` (tokens, EOS included), ``truncation_rate``, ``pass_at_k`` ({"k": value}, k = 1, 2,
        4, ... up to n and n itself).
    """
    index = {pid: i for i, pid in enumerate(problem_ids)}
    correct = np.zeros((len(problem_ids), n), dtype=bool)
    length = np.zeros((len(problem_ids), n), dtype=np.float64)
    truncated = np.zeros((len(problem_ids), n), dtype=bool)
    seen = np.zeros((len(problem_ids), n), dtype=bool)
    for r in records:
        i, j = index[r["problem_id"]], int(r["sample"])
        correct[i, j], length[i, j], truncated[i, j], seen[i, j] = r["correct"], r["length"], r["truncated"], True
    if not seen.all():
        i, j = np.argwhere(~seen)[0]
        raise ValueError(f"sample {j} of problem {problem_ids[i]!r} is missing: the evaluation is incomplete")
    curve = pass_at_k_curve(np.full(len(problem_ids), n), correct.sum(1))
    out: dict[str, Any] = {
        "n_problems": len(problem_ids),
        "n_samples": n,
        "accuracy": float(correct.mean()),
        "mean_length": float(length.mean()),
        "truncation_rate": float(truncated.mean()),
        "pass_at_k": {str(int(k)): float(v) for k, v in zip(curve.ks, curve.values, strict=True)},
    }
    if eigen_ratio:
        from dynashape.world.measures import wrong_eigen_ratio

        fps = [r["fingerprint"] for r in records if not r["correct"] and r.get("fingerprint") is not None]
        value = wrong_eigen_ratio(np.asarray(fps, dtype=np.float64).reshape(len(fps), -1)) if fps else math.nan
        out["eigen_ratio"] = None if math.isnan(value) else value
        out["fingerprinted_wrong"] = len(fps)
    return out


def summarise(benchmarks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``overall``: the unweighted mean over benchmarks of accuracy, mean length, truncation rate, and pass@k at
    the ks all benchmarks have (and the eigen ratio where every benchmark has one)."""
    parts = list(benchmarks.values())
    if not parts:
        raise ValueError("no benchmark to summarise")
    out: dict[str, Any] = {
        "n_benchmarks": len(parts),
        **{key: float(np.mean([b[key] for b in parts])) for key in ("accuracy", "mean_length", "truncation_rate")},
    }
    ks = sorted(set.intersection(*(set(b["pass_at_k"]) for b in parts)), key=int)
    out["pass_at_k"] = {k: float(np.mean([b["pass_at_k"][k] for b in parts])) for k in ks}
    ratios = [b.get("eigen_ratio") for b in parts]
    if all(r is not None for r in ratios):
        out["eigen_ratio"] = float(np.mean(ratios))
    return out


def aes_or_none(acc: float, length: float, base_acc: float, base_length: float) -> dict[str, Any] | None:
    """``metrics.aes`` with the spec's constants, as a dict (value, delta_length, delta_acc).

    AES divides by the base accuracy. When the base solves nothing: equal accuracies (0 and 0) are no change
    (dA = 0, AES = alpha dL); a model that solves something has an undefined relative gain, and None is
    returned rather than a number that would look like a score.
    """
    if base_acc == 0:
        if acc != 0:
            return None
        acc = base_acc = 1.0  # dA = 0: only the length term remains
    r = aes(acc, length, base_acc, base_length, **AES_CONSTANTS)
    return {"value": r.value, "delta_length": r.delta_length, "delta_acc": r.delta_acc}


def add_aes(results: dict[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` with ``aes`` per benchmark and overall against ``base`` (same layout, same benchmarks)."""
    missing = sorted(set(results["benchmarks"]) - set(base["benchmarks"]))
    if missing:
        raise ValueError(f"the base's results lack the benchmarks {missing}")
    values = []
    for name, bench in results["benchmarks"].items():
        ref = base["benchmarks"][name]
        bench["aes"] = aes_or_none(bench["accuracy"], bench["mean_length"], ref["accuracy"], ref["mean_length"])
        values.append(None if bench["aes"] is None else bench["aes"]["value"])
    overall, ref = results["overall"], base["overall"]
    overall["aes"] = aes_or_none(overall["accuracy"], overall["mean_length"], ref["accuracy"], ref["mean_length"])
    overall["aes_mean_over_benchmarks"] = None if None in values else float(np.mean(values))
    overall["aes_constants"] = dict(AES_CONSTANTS)
    overall["aes_computed_on"] = (
        "aes: on the unweighted means of accuracy and length over benchmarks; aes_mean_over_benchmarks: per "
        "benchmark, then averaged"
    )
    return results
