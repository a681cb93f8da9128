"""verl estimator inputs -> RolloutBatch, and per-row advantages -> verl's token advantages (pure: no state, no verl).

The conversions :mod:`dynashape.integrations.verl.estimators` runs on every call, each O(bs) after one reduction
of the [bs, T] inputs to per-row vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch, group_ids_from_uids

__all__ = [
    "DEFAULT_BUDGET_KEY",
    "batch_from_rows",
    "broadcast_advantages",
    "budgets_from_non_tensor",
    "check_shapes",
    "content_order",
    "correct_from_acc",
    "flags_from_info",
    "group_ids_from_index",
    "reordered",
    "rollout_batch_from_verl",
    "truncated_from_lengths",
]


#: Where L1's datasets keep each prompt's token budget (verl's extra info ``reward_model.num_tokens``).
DEFAULT_BUDGET_KEY = "reward_model.num_tokens"


def budgets_from_non_tensor(non_tensor: Any, key: str = DEFAULT_BUDGET_KEY) -> torch.Tensor:
    """Each row's token budget from verl's per-row dataset fields (``non_tensor_batch``), in verl's row order.

    Args:
        non_tensor: a mapping of column name -> [bs] values (verl's ``non_tensor_batch``, or the fields the v1
            trainer reads from TransferQueue); the first part of `key` names the column, the rest walks into
            each row's nested dicts.
        key: dotted path, e.g. ``reward_model.num_tokens``.

    Returns:
        LongTensor [bs] (CPU).

    Raises:
        ValueError: the column is missing, or a row lacks the key or holds something other than a non-negative
            integer (an integral float counts: parquet may store ints as floats), naming the key, row and value.
    """
    column, *path = key.split(".")
    try:
        values = non_tensor[column]
    except (KeyError, TypeError):
        have = sorted(map(str, non_tensor)) if hasattr(non_tensor, "keys") else type(non_tensor).__name__
        raise ValueError(f"budget key {key!r}: the batch has no field {column!r} (fields: {have})") from None
    budgets = []
    for row, value in enumerate(values):
        for part in path:
            if not hasattr(value, "get") or part not in value:
                raise ValueError(f"budget key {key!r}: row {row} has no {part!r} (its value there: {value!r})")
            value = value[part]
        budgets.append(_budget(key, row, value))
    return torch.tensor(budgets, dtype=torch.long)


def _budget(key: str, row: int, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"budget key {key!r}: row {row} holds {value!r}; expected a non-negative integer")
    if not np.isfinite(value) or float(value) != int(value) or value < 0:
        raise ValueError(f"budget key {key!r}: row {row} holds {value!r}; expected a non-negative integer")
    return int(value)


def group_ids_from_index(index: Sequence[Any] | np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """verl's per-rollout uid array -> LongTensor [N] of group ids (numbered by sorted uid)."""
    try:
        return group_ids_from_uids(index, device)
    except ValueError as err:
        raise ValueError(f"index: {err}") from None


def rollout_batch_from_verl(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any] | np.ndarray, **options: Any
) -> RolloutBatch:
    """Build a RolloutBatch from verl estimator inputs.

    Args:
        token_level_rewards: float [bs, T], the outcome score at the last valid token (summed per row).
        response_mask: [bs, T] 0/1 mask of response tokens.
        index: [bs] uid per rollout (same uid = same prompt in this step).
        **options: :func:`batch_from_rows`'s keywords (correct_threshold, correct, residual_reward, prompt_keys,
            fingerprints).
    """
    check_shapes(token_level_rewards, response_mask)
    return batch_from_rows(token_level_rewards.sum(-1), response_mask.sum(-1), index, **options)


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


def truncated_from_lengths(lengths: torch.Tensor, max_response_length: int) -> torch.Tensor:
    """Bool [bs]: the rows that reached ``max_response_length`` tokens, which verl's rollout stops at.

    verl 0.9.1 does not pass the rollout's finish reason on (its vLLM server reports "stop" and "length" both as
    "completed", ``vllm_async_server.py``), so the length is what says a response was cut. A response whose EOS
    falls exactly on the last allowed token counts as cut too: verl keeps no record that tells the two apart.
    """
    if isinstance(max_response_length, bool) or not isinstance(max_response_length, int) or max_response_length < 1:
        raise ValueError(f"max_response_length must be an integer >= 1, got {max_response_length!r}")
    return lengths.long() >= max_response_length


def flags_from_info(values: Sequence[Any] | np.ndarray | None, key: str) -> torch.Tensor | None:
    """A reward function's per-row boolean extra (``reward_extra_info[key]``, e.g. ``formatted``) -> Bool [bs]
    (CPU), or None unless every row has a bool or a 0/1 number."""
    if values is None:
        return None
    rows = list(values)
    if not rows or any(v is None or isinstance(v, str) or not np.isscalar(v) or v not in (0, 1) for v in rows):
        return None
    return torch.tensor([bool(v) for v in rows], dtype=torch.bool)


def correct_from_acc(values: Sequence[Any] | np.ndarray | None) -> torch.Tensor | None:
    """The reward function's ``acc`` values [bs] -> Bool [bs] (CPU), or None unless every row has one.

    ``acc`` is a bool (dynashape's and verl's math reward functions) or a number (verl's DAPO reward manager
    stores a float-returning function's raw score as ``acc``: 0/1 or -1/+1); a number counts as correct above 0.5.

    Raises:
        ValueError: a NaN/inf value (naming its row).
    """
    if values is None:
        return None
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.shape[0] == 0:
        return None
    if arr.dtype == np.bool_:
        return torch.from_numpy(arr.copy())
    if arr.dtype.kind in "iuf":
        numbers = arr.astype(np.float64)
    else:  # object arrays (lists of dicts' values): every row must hold a bool or a number
        if any(v is None or isinstance(v, str) or not np.isscalar(v) for v in arr):
            return None
        numbers = np.array([float(v) for v in arr], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(numbers))
    if bad.size:
        raise ValueError(f"reward_extra_info['acc']: row {int(bad[0])} is {numbers[bad[0]]}; expected a finite verdict")
    return torch.from_numpy(numbers > 0.5)
