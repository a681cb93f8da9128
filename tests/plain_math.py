"""Plain-Python references for the tests: one rollout at a time, floats only, nothing from dynashape.

These are the formulas of the spec written the slow, obvious way (lead.md, baselines.md), so that a test can
check the vectorised package against something it does not share code with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def members(ids: Sequence[int]) -> dict[int, list[int]]:
    """Group id -> positions of its rollouts, in batch order."""
    out: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        out.setdefault(int(g), []).append(i)
    return out


def group_normalize(values: Sequence[float], ids: Sequence[int], eps: float = 1e-6) -> list[float]:
    """(r - mean_q) / (Bessel std_q + eps); 0 for a group of one."""
    out = [0.0] * len(values)
    for rows in members(ids).values():
        vals = [values[i] for i in rows]
        mean = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
        for i in rows:
            out[i] = (values[i] - mean) / (sd + eps) if len(vals) > 1 else 0.0
    return out


def token_whiten(values: Sequence[float], lengths: Sequence[int], eps: float = 1e-8) -> list[float]:
    """verl's masked_whiten with rollout i repeated lengths[i] times; rollouts without tokens get 0."""
    tokens = [(v, n) for v, n in zip(values, lengths) if n > 0]
    total = sum(n for _, n in tokens)
    mean = sum(v * n for v, n in tokens) / total
    var = sum(n * (v - mean) ** 2 for v, n in tokens) / (total - 1)
    return [(v - mean) / math.sqrt(var + eps) if n > 0 else 0.0 for v, n in zip(values, lengths)]


def sequence_whiten(values: Sequence[float], eps: float = 1e-8) -> list[float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return [(v - mean) / math.sqrt(var + eps) for v in values]


def total_variance(values: Sequence[float], ids: Sequence[int], selected: Sequence[bool]) -> tuple[float, float]:
    """Mean of group means and sqrt(mean within-group pop var + pop var of the means), over groups with a
    selected rollout (lead.md section 4; no eps)."""
    means, variances = [], []
    for rows in members(ids).values():
        vals = [values[i] for i in rows if selected[i]]
        if vals:
            m = sum(vals) / len(vals)
            means.append(m)
            variances.append(sum((v - m) ** 2 for v in vals) / len(vals))
    mu = sum(means) / len(means)
    var_m = sum((m - mu) ** 2 for m in means) / len(means)
    return mu, math.sqrt(sum(variances) / len(variances) + var_m)


def lead_first_step(
    ids: Sequence[int],
    correct: Sequence[bool],
    lengths: Sequence[int],
    *,
    l_min: float,
    b_max: float,
    extra: Sequence[Sequence[float]] = (),
    ranges: Sequence[tuple[float, float]] = (),
    lambda_min: float = 0.3,
    beta: float = 0.95,
) -> dict[str, list[float]]:
    """One LEAD step from a fresh controller (lead.md sections 1-7), token whitening, defaults otherwise.

    extra: extra reward columns (one list per column), with their declared ranges.
    """
    groups = members(ids)
    target = {}
    for g, rows in groups.items():
        good = [lengths[i] for i in rows if correct[i]]
        target[g] = min(max(sum(good) / len(good), l_min), b_max) if good else b_max
    r_l = [max(-1.0, 1 - abs(lengths[i] - target[ids[i]]) / target[ids[i]]) for i in range(len(ids))]
    channels = [[float(c) for c in correct], r_l, *[list(col) for col in extra]]
    all_ranges = [(0.0, 1.0), (-1.0, 1.0), *ranges]
    k = len(channels)
    stats = [total_variance(ch, ids, correct if j == 1 else [True] * len(ids)) for j, ch in enumerate(channels)]
    cv = [sd / abs(mu) for mu, sd in stats]
    cv_norm = [c / sum(cv) for c in cv]
    potential = [(hi - min(max(mu, lo), hi)) / (hi - lo) for (mu, _), (lo, hi) in zip(stats, all_ranges)]
    psi = [n * p for n, p in zip(cv_norm, potential)]
    target_w = [d / sum(psi) for d in psi]
    ema = [beta / k + (1 - beta) * t for t in target_w]
    w0 = max(ema[0], lambda_min)
    rest = sum(ema[1:])
    weights = [w0] + [(1 - w0) * e / rest for e in ema[1:]]
    channel_adv = [group_normalize(ch, ids) for ch in channels]
    combined = [sum(weights[j] * channel_adv[j][i] for j in range(k)) for i in range(len(ids))]
    return {
        "targets": [target[g] for g in ids],
        "r_l": r_l,
        "mu": [mu for mu, _ in stats],
        "sigma": [sd for _, sd in stats],
        "cv": cv,
        "cv_norm": cv_norm,
        "potential": potential,
        "psi": psi,
        "target_weights": target_w,
        "weights": weights,
        "advantages": token_whiten(combined, lengths),
    }
