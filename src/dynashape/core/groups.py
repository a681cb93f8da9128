"""Group statistics over arbitrary group ids, vectorised (no Python loop over groups or rollouts).

Layer 1 of the design: tensors in, tensors out. A `Groups` value is computed once per batch and reused by every
statistic. All reductions are index_add / scatter operations, so unequal group sizes and non-contiguous ids
cost nothing extra. Values may be [N] or [N, K] (K reward channels at once); masks are [N] or the values' shape.

Conventions (docs/algorithms.md "Group statistics"; arXiv 2605.09806 for LEAD):
- "unbiased" std divides by n - 1 (Bessel), "population" by n. A group of one has std 0 either way.
- GRPO normalisation gives exactly 0 for a constant group and for a group of one.
- Masked statistics ignore rollouts where mask is False; a group with no selected rollout has count 0 and its
  statistics are 0 (callers decide what such a group means, e.g. LEAD's b_max sentinel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
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

# Dense numbering by bincount is O(N + id span) and several times faster than a sort (torch.unique); use it
# whenever the ids are compact enough, which engine uids and prompt indices always are.
_MAX_SPAN_PER_ROLLOUT = 8
# The deterministic per-group sum off the CPU scatters into a dense [G, largest group] table; past this many
# cells per rollout (one huge group among many small ones) it falls back to index_add_ (see Groups.sum).
_MAX_DENSE_CELLS_PER_ROLLOUT = 16


@dataclass(frozen=True)
class Groups:
    """Dense numbering of a batch's groups.

    Attributes:
        index: LongTensor [N], the dense group (0..G-1) of each rollout, groups in order of sorted id.
        counts: LongTensor [G], rollouts per group.
        first: LongTensor [G], the position of each group's first rollout (a member to centre on).
    """

    index: torch.Tensor
    counts: torch.Tensor
    first: torch.Tensor

    @classmethod
    def from_ids(cls, group_ids: torch.Tensor) -> Groups:
        """Number groups densely. group_ids: integer Tensor [N], any values."""
        n = group_ids.shape[0]
        lo, hi = (int(v) for v in torch.aminmax(group_ids))
        if hi - lo < _MAX_SPAN_PER_ROLLOUT * n + 1024:
            shifted = group_ids - lo
            per_id = torch.bincount(shifted, minlength=hi - lo + 1)
            present = per_id > 0
            index = (torch.cumsum(present, 0) - 1).index_select(0, shifted)
            counts = per_id[present]
        else:
            _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
        positions = torch.arange(n, device=group_ids.device)
        first = torch.full_like(counts, n).scatter_reduce(0, index, positions, reduce="amin")
        return cls(index=index, counts=counts, first=first)

    @property
    def num_groups(self) -> int:
        return int(self.counts.shape[0])

    def gather(self, per_group: torch.Tensor) -> torch.Tensor:
        """Broadcast a per-group value [G] or [G, K] back to rollouts [N] or [N, K]."""
        # index_select, not per_group[index]: advanced indexing is ~100x slower on CPU in torch 2.13
        return per_group.index_select(0, self.index)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sum of values [N] or [N, K]. Returns [G] or [G, K]. Deterministic on every device.

        On the CPU, index_add_ adds in row order, which is deterministic. On CUDA it adds with atomics, in an order
        that changes from run to run, so the same batch could give different advantages in the last bit
        (docs/algorithms.md "Devices, determinism and dtypes" promises the same result for the same batch and
        state). Off the CPU the sum therefore scatters each rollout into its own cell of a dense [G, largest group]
        table (no two rollouts share a cell, so no atomics) and sums along the group axis, a fixed-order reduction.
        A batch whose table would exceed 16 cells per rollout (one huge group among many tiny ones) uses index_add_
        instead, which is deterministic there only under ``torch.use_deterministic_algorithms(True)``.
        """
        if values.device.type == "cpu" or not self.dense_fits:
            out = values.new_zeros((self.num_groups, *values.shape[1:]))
            return out.index_add_(0, self.index, values)
        return self.dense_sum(values)

    @cached_property
    def slot(self) -> torch.Tensor:
        """LongTensor [N]: each rollout's rank among its group's rollouts in batch order (0..count-1)."""
        order = torch.argsort(self.index, stable=True)
        starts = torch.cumsum(self.counts, 0) - self.counts
        ranks = torch.arange(order.shape[0], device=order.device) - starts.index_select(0, self.index[order])
        return torch.empty_like(ranks).scatter_(0, order, ranks)

    @property
    def dense_fits(self) -> bool:
        """Whether the dense [G, largest group] table of `dense_sum` stays within its memory bound."""
        cells = self.num_groups * int(self.counts.max())
        return cells <= _MAX_DENSE_CELLS_PER_ROLLOUT * int(self.index.shape[0])

    def dense_sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sum through a dense [G, largest group] table: the deterministic path of `sum`."""
        table = values.new_zeros((self.num_groups, int(self.counts.max()), *values.shape[1:]))
        table[self.index, self.slot] = values  # every (group, slot) cell is written once: no accumulation
        return table.sum(dim=1)


def _require_positive(field: str, value: float) -> None:
    """eps-like regularisers: a clear error instead of the NaN that 0 gives on a constant group."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ValueError(f"{field}={value!r} must be a finite number > 0")


def _fit(mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A [N] mask broadcast against [N, K] values."""
    return mask.unsqueeze(-1) if mask.dim() < values.dim() else mask


def _masked(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return values if mask is None else torch.where(_fit(mask, values), values, values.new_zeros(()))


def group_count(groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Number of (selected) rollouts per group. mask: BoolTensor [N] / [N, K] or None. Returns [G] / [G, K]."""
    if mask is None:
        return groups.counts
    return groups.sum(mask.long())


def _count_like(groups: Groups, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    count = group_count(groups, mask).to(values.dtype)
    return count.unsqueeze(-1) if count.dim() < values.dim() else count


def group_mean(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of `values` per group over the selected rollouts; 0 for a group with none. Returns [G] / [G, K]."""
    return groups.sum(_masked(values, mask)) / _count_like(groups, values, mask).clamp_min(1)


def group_var(
    values: torch.Tensor,
    groups: Groups,
    mask: torch.Tensor | None = None,
    *,
    unbiased: bool,
) -> torch.Tensor:
    """Variance per group ([G] / [G, K]); Bessel-corrected if `unbiased`. Groups of 0 or 1 selected give 0.

    Two-pass (deviations from the group mean) rather than E[x^2] - E[x]^2, so large offsets (lengths in the
    thousands) lose no precision.
    """
    count = _count_like(groups, values, mask)
    dev = values - groups.gather(group_mean(values, groups, mask))
    sq = groups.sum(_masked(dev * dev, mask))
    denom = (count - 1) if unbiased else count
    return torch.where(count > 1, sq / denom.clamp_min(1), values.new_zeros(()))


def _extreme(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None, reduce: str) -> torch.Tensor:
    fill = values.new_full((), float("inf") if reduce == "amin" else float("-inf"))
    src = values if mask is None else torch.where(_fit(mask, values), values, fill)
    index = groups.index if values.dim() == 1 else groups.index.unsqueeze(-1).expand_as(values)
    out = fill.expand((groups.num_groups, *values.shape[1:])).clone()
    out = out.scatter_reduce(0, index, src, reduce=reduce, include_self=True)
    return torch.where(_count_like(groups, values, mask) > 0, out, values.new_zeros(()))


def group_min(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Minimum per group over the selected rollouts; 0 for a group with none. Returns [G] / [G, K]."""
    return _extreme(values, groups, mask, "amin")


def group_max(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Maximum per group over the selected rollouts; 0 for a group with none. Returns [G] / [G, K]."""
    return _extreme(values, groups, mask, "amax")


def group_median(values: torch.Tensor, groups: Groups, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Median per group of values [N] (mean of the two middle values when the count is even); 0 for an empty
    group. Returns [G].

    One sort for the whole batch: order by value (unselected rollouts pushed to +inf), then stably by group,
    so each group's selected values sit sorted at the start of its segment.
    """
    key = values if mask is None else torch.where(mask, values, values.new_full((), float("inf")))
    by_value = torch.argsort(key, stable=True)
    by_group = torch.argsort(groups.index[by_value], stable=True)
    ordered = key[by_value][by_group]
    starts = torch.cumsum(groups.counts, 0) - groups.counts
    count = group_count(groups, mask)
    lo = starts + (count - 1).clamp_min(0) // 2
    hi = torch.where(count > 0, starts + count // 2, starts)
    median = 0.5 * (ordered[lo] + ordered[hi])
    return torch.where(count > 0, median, values.new_zeros(()))


def group_normalize(
    values: torch.Tensor,
    groups: Groups,
    *,
    std: StdKind = "unbiased",
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO normalisation: (r - mean_q r) / (std_q r + eps), per rollout. values: [N] or [N, K] float.

    `std="unbiased"` uses Bessel's correction (torch.std, as verl's GRPO); `std="none"` only centres (Dr. GRPO).
    eps sits outside the square root, added to the std, as in verl; it must be > 0 (eps = 0 would turn the
    0 / 0 of a constant group into NaN). A constant group or a group of one gives exactly 0: we first subtract
    one member of the group (its first rollout), which makes every deviation of a constant group exactly 0,
    whatever rounding the mean would have had.
    """
    _require_positive("eps", eps)
    dev = values - groups.gather(values.index_select(0, groups.first))
    count = _count_like(groups, values, None)
    centred = dev - groups.gather(groups.sum(dev) / count)
    if std == "none":
        return centred
    var = groups.sum(centred * centred) / (count - 1).clamp_min(1)
    return centred / (groups.gather(var.sqrt()) + eps)


def whiten(values: torch.Tensor, weights: torch.Tensor | None = None, *, eps: float = 1e-8) -> torch.Tensor:
    """Batch whitening (A - mu) / sqrt(var + eps) of per-rollout values [N]. Returns [N].

    weights=None: plain mean and unbiased variance over the N rollouts (TRL's sequence-level convention).
    weights=lengths: every response token counts once (verl's masked_whiten over a response mask in which
    rollout i contributes l_i identical tokens): mu = sum l_i A_i / sum l_i,
    var = sum l_i (A_i - mu)^2 / (sum l_i - 1). A rollout with no token (l_i = 0) has nothing for an engine
    to apply an advantage to: it stays out of mu and var and gets exactly 0 (otherwise it would be divided by
    the spread of the others, and a batch whose tokens all come from one rollout would blow it up by
    1 / sqrt(eps)). With fewer than two response tokens in the whole batch (verl raises there) the rollouts
    that have tokens are weighted equally instead; a batch of one such rollout whitens to 0.
    eps sits inside the square root (verl's masked_whiten); the shapers' configs keep it > 0.
    """
    if weights is None:
        n = values.shape[0]
        dev = values - values.mean()
        var = (dev * dev).sum() / (n - 1) if n > 1 else values.new_zeros(())
        return dev / torch.sqrt(var + eps)
    w = weights.to(values.dtype)
    has_tokens = w > 0
    if not bool(w.sum() > 1):
        w = has_tokens.to(values.dtype)
    total = w.sum()
    mu = (w * values).sum() / total.clamp_min(1)
    dev = values - mu
    var = (w * dev * dev).sum() / (total - 1) if bool(total > 1) else values.new_zeros(())
    return torch.where(has_tokens, dev / torch.sqrt(var + eps), values.new_zeros(()))


def total_variance_stats(
    values: torch.Tensor,
    groups: Groups,
    mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch mean and std of a reward by the law of total variance, every group weighted equally.

    mu = mean_q m_q, sigma = sqrt(mean_q v_q + Var_q(m_q) + eps), with m_q, v_q the mean and population
    variance of the selected rollouts of group q and Var_q population too (arXiv 2605.09806). Only groups with
    at least one selected rollout count; with none, mu = sigma = 0 (LEAD's efficiency channel when nothing is
    correct). values: [N] or [N, K] (mask [N] or [N, K]). Returns mu, sigma: 0-d or [K].
    """
    present = (_count_like(groups, values, mask) > 0).to(values.dtype)
    n_present = present.sum(0)
    m = group_mean(values, groups, mask)
    v = group_var(values, groups, mask, unbiased=False)
    mu = (m * present).sum(0) / n_present.clamp_min(1)
    var_m = (((m - mu) ** 2) * present).sum(0) / n_present.clamp_min(1)
    sigma = torch.sqrt((v * present).sum(0) / n_present.clamp_min(1) + var_m + eps)
    return mu, torch.where(n_present > 0, sigma, values.new_zeros(()))
