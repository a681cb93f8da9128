"""GFPO: sample more, keep the k best of each group by length or reward per token, and learn only from those
(Shrivastava et al., arXiv 2508.09726). Layer 1: the keep mask and the advantages (pure). Layer 2:
`AdaptiveKeep`, the adaptive-difficulty variant's per-quartile k from a history of group difficulties.

A_i = m_i (r_i - mean_S r) / (std_S r + eps) with S the kept rows of i's group and m_i = 1[i in S]; dropped rows
get advantage 0 AND keep=False, so that they leave the loss altogether (a zero advantage alone would still count
their tokens in the loss's normaliser).

Official code: huggingface/trl, `trl/experimental/gfpo/gfpo_trainer.py` (`_generate_and_score_completions`:
`group_filter_func`, `num_remains_in_group`) and `gfpo_config.py`, at commit b6ff4a780e364a92c27165d2fcdb7154bbf1b564
(the parent of 60f8fd75, which removed GFPO from trl). There the user's filter scores each completion and
`_, idx = torch.topk(group_filter_scores, num_remains_in_group, dim=-1)` on the [groups, num_generations] score
matrix keeps the k highest; the kept rewards are normalised per group with torch's Bessel std and 1e-4 beside it.
Here the filter is the paper's: 'length' scores -|y| (the shortest kept), 'reward_per_token' r / |y| (|y| = 0
counted as 1 token, where a Python filter would raise ZeroDivisionError). The kept set is torch.topk's own,
ties included (see `gfpo_keep_mask` for how it is made the same on every device). Lengths are the batch's
token counts; trl hands the filter the decoded completions, so a filter written as len(text) counts characters.
Not reproduced: trl passes the filter `all_completions[i : i + num_generations]` for group i, which for i >= 1
is the slice starting at row i, not at row i * num_generations (its `group_rewards` are grouped correctly); the
paper's per-group filter is what is implemented. A kept set of one rollout gets advantage 0 (the library's
convention; trl requires k >= 2, where its std would be NaN).

Adaptive difficulty (paper Sec. 4.3): a group's difficulty is its mean reward; the paper places it among the
quartiles of a streaming t-digest over training. `AdaptiveKeep` keeps an exact window of the most recent group
means instead (plain values in its state) and assigns k = 4 / 6 / 8 / 8 (of 16) from the easiest quartile to the
hardest; the current batch joins the history before its quartiles are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_mean, group_normalize
from dynashape.methods._blocks import size_blocks
from dynashape.methods._inputs import as_lengths, as_rewards, check_rows, require_int

__all__ = ["GFPO_CRITERIA", "AdaptiveKeep", "GfpoConfig", "GfpoResult", "gfpo_advantages", "gfpo_keep_mask"]

Criterion = Literal["length", "reward_per_token"]
GFPO_CRITERIA: tuple[str, ...] = ("length", "reward_per_token")


@dataclass(frozen=True, kw_only=True)
class GfpoConfig:
    """GFPO's filter."""

    keep: int = 8
    """k, rollouts kept per group (the paper's 8 of 16); a smaller group keeps all. >= 1."""
    by: Criterion = "length"
    """'length': the k shortest; 'reward_per_token': the k highest r / |y|."""
    eps: float = 1e-4
    """Beside the kept set's std (trl's GFPO: 1e-4). > 0."""
    adaptive_keep: tuple[int, int, int, int] | None = None
    """Adaptive difficulty: k for the easiest to the hardest quartile of group mean reward (paper: (4, 6, 8, 8));
    None keeps `keep` for every group."""
    history: int = 10000
    """Adaptive difficulty: how many recent group means set the quartiles. >= 1."""

    def __post_init__(self) -> None:
        require_int("keep", self.keep, 1)
        require_choice("by", self.by, GFPO_CRITERIA)
        require_range("eps", self.eps, 0.0, None, low_open=True)
        if self.adaptive_keep is not None:
            object.__setattr__(self, "adaptive_keep", tuple(self.adaptive_keep))
            if len(self.adaptive_keep) != 4:
                raise ValueError(f"adaptive_keep={self.adaptive_keep!r} must give 4 values (easiest to hardest)")
            for i, k in enumerate(self.adaptive_keep):
                require_int(f"adaptive_keep[{i}]", k, 1)
        require_int("history", self.history, 1)


@dataclass(frozen=True)
class GfpoResult:
    """advantages: float64 [N], 0 on dropped rows; keep: BoolTensor [N]; keep_per_group: LongTensor [G], the k
    asked of each group (the kept count is min(k, group size))."""

    advantages: torch.Tensor
    keep: torch.Tensor
    keep_per_group: torch.Tensor

    @property
    def metrics(self) -> dict[str, float]:
        return {"gfpo/kept_fraction": float(self.keep.double().mean())}


def _per_group_k(keep: int | torch.Tensor, groups: Groups) -> torch.Tensor:
    if isinstance(keep, torch.Tensor):
        if keep.shape != (groups.num_groups,):
            raise ValueError(f"keep must be an int or a Tensor [{groups.num_groups}], got shape {tuple(keep.shape)}")
        if bool((keep < 1).any()):
            raise ValueError(f"keep={keep.tolist()} must be >= 1 for every group")
        return keep.to(device=groups.index.device, dtype=torch.long)
    require_int("keep", keep, 1)
    return torch.full((groups.num_groups,), keep, dtype=torch.long, device=groups.index.device)


def _filter_scores(rewards: torch.Tensor, lengths: torch.Tensor, by: Criterion) -> torch.Tensor:
    """The filter's score per row, higher kept first, on the CPU in the dtype trl's tensor would have.

    trl builds its scores with ``torch.tensor(python list)``: the paper's length filter returns -len (ints ->
    int64), the reward-per-token filter r / len in Python floats from float32 rewards (-> float32). The dtype
    decides which nearby values tie, so it is reproduced: r is rounded to float32, divided in float64, and the
    quotient rounded to float32. Returns: int64 or float32 Tensor [N] on the CPU.
    """
    if by == "length":
        return (-lengths.cpu()).round().to(torch.int64)
    quotient = rewards.cpu().to(torch.float32).to(torch.float64) / lengths.cpu().clamp_min(1.0)
    return quotient.to(torch.float32)


def gfpo_keep_mask(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    keep: int | torch.Tensor,
    by: Criterion = "length",
) -> torch.Tensor:
    """The rows GFPO keeps: per group, the rows ``torch.topk(scores, k, dim=-1)`` returns, as in trl.

    Ties are broken as torch.topk breaks them, which is the point: with four equal lengths and k = 2, torch
    2.13's CPU topk returns rows [2, 3], not [0, 1]. torch leaves the order of ties unspecified: CUDA's topk is
    another algorithm (radix selection; its ties were not checked here, no GPU), and CPU's may change with the
    torch version (libstdc++'s nth_element or partial_sort over (value, index) pairs). So that the kept set is
    the same wherever the batch lives, topk always runs here on a CPU copy of the scores: the set trl keeps
    when its topk runs on the CPU under the same torch. Each group's rows, in batch order, form one row of a
    [G', size] matrix (trl's ``view(-1, num_generations)``); one topk call per distinct (group size, k), so
    groups of unequal size or k need no Python loop over groups. A group with k >= its size keeps every row.
    Args:
        rewards: float Tensor [N]. lengths: LongTensor [N]. groups: the batch's Groups.
        keep: k for every group (int) or per group (LongTensor [G], in the Groups' dense order).
        by: 'length' (score -|y|: the shortest) or 'reward_per_token' (score r / max(|y|, 1)).
    Returns: BoolTensor [N] on the device of ``groups.index``.
    """
    require_choice("by", by, GFPO_CRITERIA)
    check_rows(rewards=rewards, lengths=lengths, group_index=groups.index)
    scores = _filter_scores(as_rewards("rewards", rewards), as_lengths(lengths), by)
    k = _per_group_k(keep, groups).cpu()
    mask = torch.zeros(groups.index.shape[0], dtype=torch.bool, device=k.device)  # CPU, whatever the default
    for chosen, block in size_blocks(groups):  # block: [G', size], each group's rows in batch order
        k_block = k.index_select(0, chosen).clamp_max(block.shape[1])
        for k_value in torch.unique(k_block).tolist():  # one k for all groups without adaptive_keep
            rows = block[k_block == k_value]
            if k_value < rows.shape[1]:
                rows = rows.gather(1, torch.topk(scores[rows], k_value, dim=-1).indices)
            mask[rows.reshape(-1)] = True
    return mask.to(groups.index.device)


def gfpo_advantages(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    keep: int | torch.Tensor,
    by: Criterion = "length",
    eps: float = 1e-4,
) -> GfpoResult:
    """GFPO advantages (GFPO Eq. 2): GRPO normalisation within each group's kept rows, 0 and keep=False elsewhere.

    Args: as `gfpo_keep_mask`; eps beside the kept set's Bessel std.
    Returns: GfpoResult.
    """
    mask = gfpo_keep_mask(rewards, lengths, groups, keep=keep, by=by)
    r = as_rewards("rewards", rewards)
    kept_rows = torch.nonzero(mask).squeeze(1)
    kept_groups = Groups.from_ids(groups.index.index_select(0, kept_rows))
    normalised = group_normalize(r.index_select(0, kept_rows), kept_groups, eps=eps)
    advantages = torch.zeros_like(r).index_copy_(0, kept_rows, normalised)
    return GfpoResult(advantages=advantages, keep=mask, keep_per_group=_per_group_k(keep, groups))


class AdaptiveKeep:
    """Adaptive-difficulty GFPO's k per group from the quartiles of recent group mean rewards.

    Learned state: `history_` (list of float, the most recent `config.history` group means, oldest first).
    `keep_for(rewards, groups)` adds the batch's group means to the history, then returns k per group: the
    easiest quartile (mean above the 75th percentile) gets adaptive_keep[0], above the median [1], above the
    25th percentile [2], the rest [3]. Percentiles by linear interpolation (torch.quantile).
    """

    def __init__(self, config: GfpoConfig | None = None) -> None:
        self.config = config or GfpoConfig(adaptive_keep=(4, 6, 8, 8))
        if self.config.adaptive_keep is None:
            raise ValueError("AdaptiveKeep needs a config with adaptive_keep set, e.g. (4, 6, 8, 8)")
        self.reset()

    def reset(self) -> None:
        self.history_: list[float] = []

    def keep_for(self, rewards: torch.Tensor, groups: Groups) -> torch.Tensor:
        """k per group (LongTensor [G]) for this batch; advances the history once."""
        means = group_mean(as_rewards("rewards", rewards), groups)
        self.history_ = (self.history_ + means.tolist())[-self.config.history :]
        past = torch.tensor(self.history_, dtype=torch.float64, device=means.device)
        cuts = torch.quantile(past, torch.tensor([0.75, 0.5, 0.25], dtype=torch.float64, device=means.device))
        ks: Sequence[int] = self.config.adaptive_keep  # type: ignore[assignment]
        table = torch.tensor(list(ks), dtype=torch.long, device=means.device)
        # how many cuts the mean does NOT exceed: 0 -> easiest quartile ... 3 -> hardest
        quartile = (means.unsqueeze(1) <= cuts.unsqueeze(0)).sum(1)
        return table.index_select(0, quartile)

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history_)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            history = [float(x) for x in state["history"]]
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"GFPO adaptive state must hold 'history' (a list of floats): {err}") from err
        if len(history) > self.config.history:
            limit = self.config.history
            raise ValueError(f"GFPO adaptive history has {len(history)} values, more than history={limit}")
        self.history_ = history
