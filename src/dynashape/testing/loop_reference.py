"""Per-group Python-loop versions of the shaper formulas (docs/algorithms.md: LEAD and the baselines).

Inputs are plain lists; outputs are lists of floats. Each function mirrors one vectorised function of the
package, so an equivalence test can compare them on random batches with unequal groups.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

__all__ = [
    "grpo_loop",
    "lead_loop",
    "shorterbetter_loop",
    "whiten_loop",
]


def _groups(ids: Sequence[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(ids):
        out[g].append(i)
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _pvar(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def _svar(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def grpo_loop(rewards: Sequence[float], ids: Sequence[int], eps: float = 1e-6, std: str = "unbiased") -> list[float]:
    """(r - mean) / (unbiased std + eps) per group; 0 for a group of one or a constant group."""
    adv = [0.0] * len(rewards)
    for members in _groups(ids).values():
        vals = [rewards[i] for i in members]
        if len(vals) < 2 or max(vals) == min(vals):
            continue
        m = _mean(vals)
        sd = math.sqrt(_svar(vals))
        for i in members:
            adv[i] = rewards[i] - m if std == "none" else (rewards[i] - m) / (sd + eps)
    return adv


def whiten_loop(values: Sequence[float], weights: Sequence[float] | None = None, eps: float = 1e-8) -> list[float]:
    """(A - mu) / sqrt(var + eps): weights = token counts (token whitening) or None (sequence).

    Token whitening: a rollout with no token is left out of mu and var and gets 0; with fewer than two tokens
    in all, the rollouts that have tokens count once each."""
    if weights is None:
        weights = [1.0] * len(values)
        keep = [True] * len(values)
    else:
        keep = [w > 0 for w in weights]
        if sum(weights) <= 1:
            weights = [1.0 if k else 0.0 for k in keep]
    total = sum(weights)
    mu = sum(w * v for w, v in zip(weights, values)) / max(total, 1)
    var = sum(w * (v - mu) ** 2 for w, v in zip(weights, values)) / (total - 1) if total > 1 else 0.0
    return [(v - mu) / math.sqrt(var + eps) if k else 0.0 for v, k in zip(values, keep)]


def shorterbetter_loop(
    correct: Sequence[bool],
    lengths: Sequence[int],
    ids: Sequence[int],
    alpha: float = 2.0,
    beta: float = 0.001,
) -> list[float]:
    reward = [0.0] * len(correct)
    for members in _groups(ids).values():
        good = [lengths[i] for i in members if correct[i]]
        sol = min(good) if good else _mean([lengths[i] for i in members])
        for i in members:
            reward[i] = alpha * float(correct[i]) - beta * abs(lengths[i] - sol)
    return grpo_loop(reward, ids)


def _target(lengths: list[int], correct: list[bool], mode: str, l_min: float, b_max: float) -> float:
    if mode == "mean_all":
        return min(max(_mean(lengths), l_min), b_max)
    good = sorted(ln for ln, c in zip(lengths, correct) if c)
    if not good:
        return b_max
    if mode == "min_correct":
        raw = good[0]
    elif mode == "median_correct":
        n = len(good)
        raw = good[n // 2] if n % 2 else 0.5 * (good[n // 2 - 1] + good[n // 2])
    else:
        raw = _mean(good)
    return min(max(raw, l_min), b_max)


def _total_var(per_group: list[list[float]]) -> tuple[float, float]:
    per_group = [g for g in per_group if g]
    if not per_group:
        return 0.0, 0.0
    means = [_mean(g) for g in per_group]
    mu = _mean(means)
    sigma = math.sqrt(_mean([_pvar(g) for g in per_group]) + _pvar(means) + 1e-8)
    return mu, sigma


def lead_loop(
    correct: Sequence[bool],
    lengths: Sequence[int],
    ids: Sequence[int],
    *,
    ema: float = 0.5,
    l_min: float = 1000,
    b_max: float = 4000,
    alpha: float = 1.0,
    beta: float = 0.95,
    lambda_min: float = 0.3,
    eps: float = 1e-8,
    target: str = "mean_correct",
    efficiency: str = "symmetric",
    static_lambda_c: float | None = None,
    whiten: str = "token",
) -> tuple[list[float], float, dict[str, float]]:
    """One LEAD step. Returns (advantages, new ema of lambda_c, a few intermediate values)."""
    groups = _groups(ids)
    r_c = [float(c) for c in correct]
    r_l = [0.0] * len(correct)
    targets = {}
    for g, members in groups.items():
        lt = _target([lengths[i] for i in members], [bool(correct[i]) for i in members], target, l_min, b_max)
        targets[g] = lt
        for i in members:
            if efficiency == "symmetric":
                r_l[i] = max(-1.0, 1.0 - abs(lengths[i] - lt) / lt)
            else:
                r_l[i] = max(-1.0, min(0.0, 1.0 - lengths[i] / lt))
    a_c = grpo_loop(r_c, ids)
    a_l = grpo_loop(r_l, ids)
    mu_c, sigma_c = _total_var([[r_c[i] for i in m] for m in groups.values()])
    mu_l, sigma_l = _total_var([[r_l[i] for i in m if correct[i]] for m in groups.values()])
    cv_c = sigma_c / (abs(mu_c) + eps)
    cv_l = sigma_l / (abs(mu_l) + eps)
    n_c, n_l = cv_c / (cv_c + cv_l + eps), cv_l / (cv_c + cv_l + eps)
    p_c = (1.0 - min(max(mu_c, 0.0), 1.0)) ** alpha
    p_l = ((1.0 - min(max(mu_l, -1.0), 1.0)) / 2.0) ** alpha
    d_c, d_l = n_c * p_c, n_l * p_l
    target_c = d_c / (d_c + d_l + eps)
    if static_lambda_c is not None:
        new_ema = static_lambda_c
        lam_c = static_lambda_c
    else:
        new_ema = beta * ema + (1.0 - beta) * target_c
        lam_c = max(new_ema, lambda_min)
    combined = [lam_c * a + (1.0 - lam_c) * b for a, b in zip(a_c, a_l)]
    if whiten == "token":
        adv = whiten_loop(combined, [float(x) for x in lengths])
    elif whiten == "sequence":
        adv = whiten_loop(combined)
    else:
        adv = combined
    info = {
        "mu_c": mu_c,
        "sigma_c": sigma_c,
        "mu_l": mu_l,
        "sigma_l": sigma_l,
        "target_lambda_c": target_c,
        "lambda_c": lam_c,
        "potential_c": p_c,
        "potential_l": p_l,
    }
    return adv, new_ema, info
