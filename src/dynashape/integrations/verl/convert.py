"""What only verl hands an estimator, read into dynashape's inputs (pure: no state, no verl): its [bs, T] inputs as
a RolloutBatch, the budgets in its per-row dataset fields, the rows its rollout cut at the cap, and the verdicts
and flags its reward functions return in ``reward_extra_info``.

The engine-neutral conversions (per-row vectors -> RolloutBatch, advantages -> token advantages, a row order by
content) are :mod:`dynashape.integrations.convert`, shared with SkyRL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch
from dynashape.integrations.convert import batch_from_rows, check_shapes

__all__ = [
    "DEFAULT_BUDGET_KEY",
    "budgets_from_non_tensor",
    "correct_from_acc",
    "flags_from_info",
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
