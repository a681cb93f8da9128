"""Pure metrics of sampled responses that the world audit and every run's evaluation report.

Each function takes plain lists / arrays (no model, no sampling) so that it can be worked by hand on a
tiny fixture (``tests/train/test_world_metrics.py``). Library parts do the standard pieces: the adjusted
Rand index is scikit-learn's, the clustering is the MEDS memory's HDBSCAN (``dynashape.meds.clustering``),
the eigen ratio is ``dynashape.core.metrics.top1_eigen_ratio``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

__all__ = [
    "budget_rules",
    "cluster_mode_ari",
    "mean_by",
    "mode_entropy",
    "top_answer_share",
    "truncation_at",
    "wrong_eigen_ratio",
]


def _check_same_length(**columns: Sequence) -> int:
    sizes = {name: len(v) for name, v in columns.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"columns must have equal lengths, got {sizes}")
    return next(iter(sizes.values())) if sizes else 0


def truncation_at(lengths: Sequence[float], budget: int) -> float:
    """Share of responses longer than ``budget`` tokens: those a run with that budget would truncate.

    ``lengths`` are sampled under a larger cap (EOS included), so a response of ``budget`` tokens or fewer
    ended within the budget and one longer did not.
    """
    x = np.asarray(lengths, dtype=np.float64)
    if x.size == 0:
        raise ValueError("lengths must not be empty")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return float((x > budget).mean())


def mean_by(values: Sequence[float], keys: Sequence[Hashable]) -> dict[str, float]:
    """Mean of ``values`` per key (keys as strings, sorted naturally), e.g. accuracy per difficulty."""
    _check_same_length(values=values, keys=keys)
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for v, k in zip(values, keys, strict=True):
        groups[k].append(float(v))
    return {str(k): sum(v) / len(v) for k, v in sorted(groups.items(), key=lambda kv: str(kv[0]).zfill(8))}


def mode_entropy(prompt_ids: Sequence[Hashable], modes: Sequence[str]) -> float:
    """Mean over prompts of the Shannon entropy (nats) of the error modes of that prompt's wrong answers.

    ``modes`` holds the mode of every wrong response ("" marks a right one and is skipped). Prompts without a
    wrong response do not count. 0 = every prompt fails one way; ln 2 = two modes, equally often. NaN when
    no response is wrong.
    """
    _check_same_length(prompt_ids=prompt_ids, modes=modes)
    per: dict[Hashable, Counter] = defaultdict(Counter)
    for p, m in zip(prompt_ids, modes, strict=True):
        if m:
            per[p][m] += 1
    if not per:
        return float("nan")
    total = 0.0
    for counts in per.values():
        n = sum(counts.values())
        total -= sum(c / n * math.log(c / n) for c in counts.values())
    return total / len(per)


def top_answer_share(prompt_ids: Sequence[Hashable], answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """Mean over prompts with a wrong response of the share of its wrong responses giving its most common
    wrong answer (a missing answer counts as one answer, ``None``). NaN when none is wrong."""
    _check_same_length(prompt_ids=prompt_ids, answers=answers, correct=correct)
    per: dict[Hashable, Counter] = defaultdict(Counter)
    for p, a, c in zip(prompt_ids, answers, correct, strict=True):
        if not c:
            per[p][a] += 1
    if not per:
        return float("nan")
    return sum(max(c.values()) / sum(c.values()) for c in per.values()) / len(per)


def cluster_mode_ari(
    fingerprints: np.ndarray,
    modes: Sequence[str],
    prompt_ids: Sequence[Hashable] | None = None,
    *,
    min_rows: int = 3,
) -> dict[str, float]:
    """Adjusted Rand index between HDBSCAN clusters of wrong-answer fingerprints and their true error modes.

    The fingerprints are L2-normalised and clustered as the MEDS memory clusters a bank
    (``dynashape.meds.clustering.fit_labels``: min_cluster_size 2, min_samples 1); each noise point is a cluster
    of its own. ``sklearn.metrics.adjusted_rand_score`` compares the clusters with the modes.

    Args:
        fingerprints: float [M, D], one row per wrong response.
        modes: [M] its error mode.
        prompt_ids: [M] its prompt; when given, also the mean ARI over prompts with >= ``min_rows`` wrong
            responses, each clustered alone (as MEDS clusters per prompt).

    Returns:
        ``{"pooled": ARI over all rows, "per_prompt": mean over prompts (NaN if none qualifies),
        "prompts": how many prompts qualified}``; ``pooled`` is NaN with fewer than 2 rows.
    """
    from sklearn.metrics import adjusted_rand_score

    x = np.asarray(fingerprints, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"fingerprints must be 2-D [M, D], got shape {x.shape}")
    _check_same_length(fingerprints=x, modes=modes)
    if not np.isfinite(x).all():
        raise ValueError("fingerprints must be finite")

    def ari(rows: np.ndarray) -> float:
        from dynashape.meds.clustering import fit_labels, l2_normalize_rows

        labels = fit_labels(l2_normalize_rows(x[rows]))
        noise = labels < 0
        labels = labels.copy()
        labels[noise] = labels.max(initial=-1) + 1 + np.arange(int(noise.sum()))  # each noise point alone
        return float(adjusted_rand_score([modes[i] for i in rows], labels))

    out = {"pooled": ari(np.arange(len(x))) if len(x) >= 2 else float("nan"), "per_prompt": float("nan"), "prompts": 0}
    if prompt_ids is not None:
        _check_same_length(fingerprints=x, prompt_ids=prompt_ids)
        per: dict[Hashable, list[int]] = defaultdict(list)
        for i, p in enumerate(prompt_ids):
            per[p].append(i)
        scores = [ari(np.array(rows)) for rows in per.values() if len(rows) >= min_rows]
        if scores:
            out["per_prompt"] = sum(scores) / len(scores)
        out["prompts"] = len(scores)
    return out


def wrong_eigen_ratio(fingerprints: np.ndarray) -> float:
    """Top-1 eigen ratio (``dynashape.core.metrics.top1_eigen_ratio``) of the L2-normalised wrong-answer
    fingerprints: the share of their variance along one direction (lower = errors spread over more
    directions, MEDS's diversity measure). NaN with fewer than 2 rows."""
    from dynashape.core.metrics import top1_eigen_ratio
    from dynashape.meds.clustering import l2_normalize_rows

    x = np.asarray(fingerprints, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"fingerprints must be 2-D [M, D], got shape {x.shape}")
    if len(x) < 2:
        return float("nan")
    return top1_eigen_ratio(l2_normalize_rows(x))


def budget_rules(lengths: Sequence[float], difficulties: Sequence[int], *, loose_quantile: float = 0.97) -> dict:
    """The two training budgets from the base model's sampled lengths (tokens, EOS included).

    * ``tight``: the median length on the hardest difficulty, rounded up: the budget cuts into the base's
      natural length on hard problems (the LEAD paper's regime: R1-Distill trained at 4K tokens);
    * ``loose``: the smallest integer B with at most ``1 - loose_quantile`` of all lengths above B (the
      97th percentile): the budget truncates at most 3 % of the base's responses.

    Returns ``{"tight": int, "loose": int, "hardest": d}``.
    """
    n = _check_same_length(lengths=lengths, difficulties=difficulties)
    if n == 0:
        raise ValueError("lengths must not be empty")
    if not 0 < loose_quantile < 1:
        raise ValueError(f"loose_quantile must be in (0, 1), got {loose_quantile}")
    x = np.asarray(lengths, dtype=np.float64)
    d = np.asarray(difficulties)
    hardest = int(d.max())
    tight = math.ceil(float(np.median(x[d == hardest])))
    s = np.sort(x)
    allowed = math.floor((1 - loose_quantile) * n + 1e-9)  # how many may lie above B
    loose = math.ceil(float(s[n - 1 - allowed]))
    return {"tight": tight, "loose": loose, "hardest": hardest}
