"""Group statistics over arbitrary group ids, vectorised (no Python loop over groups or rollouts).

Layer 1 of the design: tensors in, tensors out. A `Groups` value is computed once per batch (one torch.unique)
and reused by every statistic. All reductions are scatter/index_add operations, so unequal group sizes and
non-contiguous ids cost nothing extra.

Conventions (lead.md section 3-4, baselines.md):
- "unbiased" std divides by n - 1 (Bessel), "population" by n. A group of one has std 0 either way.
- GRPO normalisation gives exactly 0 for a constant group and for a group of one.
- Masked statistics ignore rollouts where mask is False; a group with no selected rollout has count 0 and its
  statistics are 0 (callers decide what such a group means, e.g. LEAD's b_max sentinel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "Groups",
    "group_count",
    "group_max",
    "group_mean",
    "group_median",
    "group_min",
    "group_normalize",
    "group_var",
    "total_variance_stats",
    "whiten",
]

StdKind = Literal["unbiased", "none"]


@dataclass(frozen=True)
class Groups:
    """Dense numbering of a batch's groups.

    Attributes:
        index: LongTensor [N], the dense group (0..G-1) of each rollout, in order of sorted group id.
        counts: LongTensor [G], rollouts per group.
    """

    index: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def from_ids(cls, group_ids: torch.Tensor) -> Groups:
        """Number groups densely. group_ids: integer Tensor [N] (any values)."""
        _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
        return cls(index=index, counts=counts)

    @property
    def num_groups(self) -> int:
        return int(self.counts.shape[0])

    def gather(self, per_group: torch.Tensor) -> torch.Tensor:
        """Broadcast a per-group value [G] back to rollouts [N]."""
        return per_group[self.index]


def _sum(values: torch.Tensor, groups: Groups) -> torch.Tensor:
    out = torch.zeros(groups.num_groups, dtype=values.dtype, device=values.device)
    return out.index_add_(0, groups.index, values)


def _masked(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return values if mask is None else torch.where(mask, values, torch.zeros((), dtype=values.dtype))


def group_count(groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Number of (selected) rollouts per group. mask: BoolTensor [N] or None. Returns LongTensor [G]."""
    if mask is None:
        return groups.counts
    return _sum(mask.long(), groups)


def group_mean(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of `values` [N] per group over the selected rollouts; 0 for a group with none. Returns [G]."""
    count = group_count(groups, mask).to(values.dtype)
    return _sum(_masked(values, mask), groups) / count.clamp_min(1)


def group_var(
    values: torch.Tensor,
    groups: Groups,
    mask: torch.Tensor | None = None,
    *,
    unbiased: bool,
) -> torch.Tensor:
    """Variance per group ([G]); Bessel-corrected if `unbiased`. Groups of 0 or 1 selected rollouts give 0.

    Two-pass (deviations from the group mean) rather than E[x^2] - E[x]^2, so a constant group gives exactly 0
    and large offsets (lengths in the thousands) lose no precision.
    """
    count = group_count(groups, mask).to(values.dtype)
    dev = values - groups.gather(group_mean(values, groups, mask))
    sq = _sum(_masked(dev * dev, mask), groups)
    denom = (count - 1) if unbiased else count
    return torch.where(count > 1, sq / denom.clamp_min(1), torch.zeros((), dtype=values.dtype))


def _extreme(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None, reduce: str) -> torch.Tensor:
    fill = float("inf") if reduce == "amin" else float("-inf")
    src = values if mask is None else torch.where(mask, values, torch.full((), fill, dtype=values.dtype))
    out = torch.full((groups.num_groups,), fill, dtype=values.dtype, device=values.device)
    out = out.scatter_reduce(0, groups.index, src, reduce=reduce, include_self=True)
    return torch.where(group_count(groups, mask) > 0, out, torch.zeros((), dtype=values.dtype))


def group_min(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Minimum per group over the selected rollouts; 0 for a group with none. Returns [G]."""
    return _extreme(values, groups, mask, "amin")


def group_max(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Maximum per group over the selected rollouts; 0 for a group with none. Returns [G]."""
    return _extreme(values, groups, mask, "amax")


def group_median(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Median per group (mean of the two middle values when the count is even); 0 for an empty group. [G].

    One sort for the whole batch: order by value (unselected rollouts pushed to +inf), then stably by group,
    so each group's selected values sit sorted at the start of its segment.
    """
    key = values if mask is None else torch.where(mask, values, torch.full((), float("inf"), dtype=values.dtype))
    by_value = torch.argsort(key, stable=True)
    by_group = torch.argsort(groups.index[by_value], stable=True)
    ordered = key[by_value][by_group]
    starts = torch.cumsum(groups.counts, 0) - groups.counts
    count = group_count(groups, mask)
    lo = starts + (count - 1).clamp_min(0) // 2
    hi = starts + count // 2
    hi = torch.where(count > 0, hi, starts)
    median = 0.5 * (ordered[lo] + ordered[hi])
    return torch.where(count > 0, median, torch.zeros((), dtype=values.dtype))


def group_normalize(
    values: torch.Tensor,
    groups: Groups,
    *,
    std: StdKind = "unbiased",
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO normalisation: (r - mean_q r) / (std_q r + eps), per rollout. values: [N] float. Returns [N].

    `std="unbiased"` uses Bessel's correction (torch.std, as verl's GRPO); `std="none"` only centres (Dr. GRPO).
    eps sits outside the square root, added to the std, as in verl. A constant group or a group of one gives
    exactly 0 (we zero the deviations of groups whose min equals their max rather than trust rounding).
    """
    centred = values - groups.gather(group_mean(values, groups))
    constant = group_max(values, groups) == group_min(values, groups)
    centred = torch.where(groups.gather(constant), torch.zeros((), dtype=values.dtype), centred)
    if std == "none":
        return centred
    sd = group_var(values, groups, unbiased=True).sqrt()
    return centred / (groups.gather(sd) + eps)


def whiten(values: torch.Tensor, weights: torch.Tensor | None = None, *, eps: float = 1e-8) -> torch.Tensor:
    """Batch whitening (A - mu) / sqrt(var + eps) of per-rollout values [N]. Returns [N].

    weights=None: plain mean and unbiased variance over the N rollouts (TRL's sequence-level convention).
    weights=lengths: every response token counts once (verl's masked_whiten over a response mask in which
    rollout i contributes l_i identical tokens): mu = sum l_i A_i / sum l_i,
    var = sum l_i (A_i - mu)^2 / (sum l_i - 1).
    With fewer than two response tokens in the whole batch (verl raises there) the rollouts are weighted
    equally instead; a batch of one rollout whitens to 0.
    """
    w = torch.ones_like(values) if weights is None else weights.to(values.dtype)
    total = w.sum()
    if weights is not None and not bool(total > 1):
        w = torch.ones_like(values)
        total = w.sum()
    mu = (w * values).sum() / total.clamp_min(torch.finfo(values.dtype).tiny)
    dev = values - mu
    var = (w * dev * dev).sum() / (total - 1) if bool(total > 1) else torch.zeros((), dtype=values.dtype)
    return dev / torch.sqrt(var + eps)


def total_variance_stats(
    values: torch.Tensor,
    groups: Groups,
    mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch mean and std of a reward by the law of total variance, every group weighted equally.

    mu = mean_q m_q, sigma = sqrt(mean_q v_q + Var_q(m_q) + eps), with m_q, v_q the mean and population
    variance of the selected rollouts of group q and Var_q population too (lead.md section 4). Only groups with
    at least one selected rollout count. No such group: mu = sigma = 0 (LEAD's efficiency channel when nothing
    is correct). Returns two 0-d tensors.
    """
    count = group_count(groups, mask)
    present = count > 0
    if not bool(present.any()):
        zero = torch.zeros((), dtype=values.dtype, device=values.device)
        return zero, zero.clone()
    m = group_mean(values, groups, mask)[present]
    v = group_var(values, groups, mask, unbiased=False)[present]
    mu = m.mean()
    sigma = torch.sqrt(v.mean() + ((m - mu) ** 2).mean() + eps)
    return mu, sigma
