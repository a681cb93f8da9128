"""Engine rollouts -> RolloutBatch, and per-row advantages -> the engine's token advantages (pure: no state, no
engine imported).

What every engine adapter runs on each estimator call: verl's and SkyRL's estimators both get [bs, T] token
rewards and a response mask with a uid per row, reduce them once to per-row vectors (O(bs) after one reduction
of the [bs, T] inputs), build the batch (``batch_from_rows``), and spread the shaper's [bs] advantages back over
the response tokens (``broadcast_advantages``). ``content_order`` / ``reordered`` give a row order that depends
on the rows' contents only (an engine that pads or shuffles rows gives the shaper the same batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch, group_ids_from_uids

__all__ = [
    "batch_from_rows",
    "broadcast_advantages",
    "check_shapes",
    "content_order",
    "group_ids_from_index",
    "reordered",
]


def group_ids_from_index(index: Sequence[Any] | np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """verl's per-rollout uid array -> LongTensor [N] of group ids (numbered by sorted uid)."""
    try:
        return group_ids_from_uids(index, device)
    except ValueError as err:
        raise ValueError(f"index: {err}") from None


def batch_from_rows(
    score: torch.Tensor,
    lengths: torch.Tensor,
    index: Sequence[Any] | np.ndarray,
    *,
    rows: torch.Tensor | None = None,
    correct_threshold: float = 0.5,
    correct: torch.Tensor | None = None,
    residual_reward: bool = False,
    prompt_keys: Sequence[str] | None = None,
    fingerprints: torch.Tensor | None = None,
    budgets: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    formatted: torch.Tensor | None = None,
) -> RolloutBatch:
    """A RolloutBatch from per-row vectors (what :func:`rollout_batch_from_verl` reduces the [bs, T] inputs to).

    Why vectors: the estimator's inputs are [bs, T]; reducing them to [bs] once and selecting rows on the
    reductions costs O(bs) instead of copying O(bs * T) per selection.

    Args:
        score: float [bs], the summed token-level reward of each row.
        lengths: [bs] response tokens of each row.
        index: [bs] uid per rollout.
        rows: Optional LongTensor [n] of the rows to keep, in the order wanted (None: every row as given).
        correct_threshold: Row is correct when its summed reward exceeds this (ignored when `correct` given).
        correct: Optional Bool [bs], the verifier's verdict (e.g. reward_extra_info["acc"]).
        residual_reward: Add rewards [n, 1] = summed score - correct (see EstimatorSettings).
        prompt_keys: Optional [bs] stable prompt ids (MEDS memory).
        fingerprints: Optional float [bs, D], NaN rows where absent (MEDS).
        budgets: Optional LongTensor [bs], each row's token budget (L1).
        truncated: Optional Bool [bs], the rows verl cut at max_response_length (DLER, stop_properly).
        formatted: Optional Bool [bs], the rows whose answer is in the asked format (LASER's score).
    """
    bs = score.shape[0]
    if len(index) != bs:
        raise ValueError(f"index: has {len(index)} uids but token_level_rewards has {bs} rows")
    device = lengths.device
    if correct is None:
        correct = score > correct_threshold
    correct = correct.to(device=device, dtype=torch.bool)
    lengths = lengths.long()
    if fingerprints is not None:
        fingerprints = fingerprints.to(device)
    if budgets is not None:
        budgets = budgets.to(device)
    flags = {
        name: None if value is None else value.to(device=device, dtype=torch.bool)
        for name, value in (("truncated", truncated), ("formatted", formatted))
    }
    if rows is not None:
        rows_np = rows.cpu().numpy()
        score, correct, lengths = score[rows], correct[rows], lengths[rows]
        index = np.asarray(index, dtype=object)[rows_np]
        prompt_keys = None if prompt_keys is None else np.asarray(prompt_keys, dtype=object)[rows_np].tolist()
        fingerprints = None if fingerprints is None else fingerprints[rows]
        budgets = None if budgets is None else budgets[rows]
        flags = {name: None if value is None else value[rows] for name, value in flags.items()}
    residual = (score.to(torch.float32) - correct.to(torch.float32))[:, None] if residual_reward else None
    return RolloutBatch(
        group_ids=group_ids_from_index(index, device),
        correct=correct,
        lengths=lengths,
        rewards=residual,
        prompt_keys=None if prompt_keys is None else [str(k) for k in prompt_keys],
        fingerprints=fingerprints,
        budgets=budgets,
        **flags,
    )


def reordered(batch: RolloutBatch, order: torch.Tensor | np.ndarray) -> RolloutBatch:
    """`batch` with its rows in `order` (row ``order[i]`` goes to position i); group ids keep their numbers."""
    order_t = torch.as_tensor(order, dtype=torch.long, device=batch.device)
    keys = None if batch.prompt_keys is None else np.asarray(batch.prompt_keys, dtype=object)[order_t.cpu().numpy()]
    return RolloutBatch(
        group_ids=batch.group_ids[order_t],
        correct=batch.correct[order_t],
        lengths=batch.lengths[order_t],
        rewards=None if batch.rewards is None else batch.rewards[order_t],
        prompt_keys=None if keys is None else keys.tolist(),
        fingerprints=None if batch.fingerprints is None else batch.fingerprints[order_t],
        budgets=None if batch.budgets is None else batch.budgets[order_t],
        truncated=None if batch.truncated is None else batch.truncated[order_t],
        formatted=None if batch.formatted is None else batch.formatted[order_t],
    )


def check_shapes(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> None:
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"token_level_rewards/response_mask: expected equal shapes [bs, T], got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}"
        )


def content_order(batch: RolloutBatch) -> np.ndarray:
    """A row order that depends on the rows' contents only, never on their order in ``batch``.

    Sorted by prompt key, verdict, whether a fingerprint was taken, the fingerprint's values, then the length
    (a stable sort: rows equal in all of these are interchangeable for the shaper). Needs ``prompt_keys``.

    Returns:
        int64 [N] permutation: ``batch`` row ``order[i]`` goes to position i.
    """
    if batch.prompt_keys is None:
        raise ValueError("content_order: the batch has no prompt_keys")
    key_rank = np.unique(np.asarray(batch.prompt_keys, dtype=str), return_inverse=True)[1].reshape(-1)
    columns: list[np.ndarray] = [batch.lengths.cpu().numpy()]
    if batch.fingerprints is not None:
        fp = batch.fingerprints.detach().to(torch.float64).cpu().numpy()
        taken = np.isfinite(fp).all(axis=1)
        columns += [np.where(taken, fp[:, j], 0.0) for j in reversed(range(fp.shape[1]))]
        columns.append((~taken).astype(np.int64))
    columns += [batch.correct.cpu().numpy().astype(np.int64), key_rank]
    return np.lexsort(columns).astype(np.int64)  # the last column is the primary key


def broadcast_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[bs] per-rollout advantage -> [bs, T] over the response tokens (0 elsewhere), float32.

    One multiply with type promotion (a bool or integer mask times a float32 vector is float32), so no float
    copy of the [bs, T] mask is made first.
    """
    advantages = advantages.to(torch.float32)[:, None]
    if response_mask.is_floating_point() and response_mask.dtype != torch.float32:
        response_mask = response_mask.to(torch.float32)
    return response_mask * advantages
