"""TransferQueue fields -> dynashape's inputs: what the ``dynashape`` trainer mode reads from verl's rows.

Pure functions of the fields' values (testable without verl or TransferQueue): the estimator's per-sample extras
(verdicts, prompt keys, padding tags, budgets, truncation), LASER-D's monitor batch of validation generations,
verl's response cap from its config, and GFPO's masks with a dropped row's tokens set to 0. The trainer
(:mod:`dynashape.integrations.verl.trainer`) reads the fields and calls these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch
from dynashape.integrations._prompts import prompt_key_of
from dynashape.integrations.convert import group_ids_from_index
from dynashape.integrations.verl.convert import flags_from_info
from dynashape.integrations.verl.estimators import EstimatorExtras, correct_from_acc

__all__ = [
    "MONITOR_FIELDS",
    "extras_from_fields",
    "masked_rows",
    "max_response_length",
    "monitor_from_fields",
    "padding_from_tags",
    "rows_of",
    "values_of",
]

#: TransferQueue fields of a validation generation that LASER-D's monitor reads.
MONITOR_FIELDS: tuple[str, ...] = ("uid", "response_mask", "rm_scores", "extra_fields")


def padding_from_tags(tags: Sequence[Any] | None) -> torch.Tensor | None:
    """Bool [bs] from KVBatchMeta tags: True where verl tagged a synthetic padding row (``is_padding``)."""
    if tags is None:
        return None
    flags = [bool(t.get("is_padding", False)) if isinstance(t, dict) else False for t in tags]
    return torch.tensor(flags, dtype=torch.bool)


def extras_from_fields(
    raw_prompts: Sequence[Any] | None,
    extra_fields: Sequence[Any] | None,
    fingerprints: torch.Tensor | None,
    padding: torch.Tensor | None = None,
    budgets: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
) -> EstimatorExtras:
    """Per-sample extras from TransferQueue fields (pure, testable without verl).

    Args:
        raw_prompts: [bs] chat message lists or strings, or None.
        extra_fields: [bs] dicts whose ``reward_extra_info`` may hold ``acc`` (the verifier's verdict), or None.
        fingerprints: float [bs, D] with NaN rows, or None.
        padding: Bool [bs] verl's padding rows (their copied ``acc`` and prompt do not count), or None.
        budgets: Long [bs] each row's token budget (``convert.budgets_from_non_tensor``), or None.
        truncated: Bool [bs] the rows cut at max_response_length (``convert.truncated_from_lengths``), or None.

    Returns:
        EstimatorExtras; ``correct`` is set only when every real row carries ``acc`` (padding rows get False),
        ``formatted`` only when every real row carries ``formatted`` (dynashape's compute_score returns it).
    """
    keys = None if raw_prompts is None else [prompt_key_of(p) for p in raw_prompts]
    correct, formatted = None, None
    if extra_fields is not None:
        verdicts, formats = _info_of(extra_fields, "acc"), _info_of(extra_fields, "formatted")
        if padding is not None:  # padding rows are dropped by the estimator: any placeholder verdict will do
            pads = padding.tolist()
            verdicts = [False if pad else v for v, pad in zip(verdicts, pads, strict=True)]
            formats = [False if pad else f for f, pad in zip(formats, pads, strict=True)]
        correct = correct_from_acc(np.array(verdicts, dtype=object)) if verdicts else None
        formatted = flags_from_info(formats, "formatted")
    return EstimatorExtras(
        prompt_keys=keys,
        fingerprints=fingerprints,
        correct=correct,
        padding=padding,
        budgets=budgets,
        truncated=truncated,
        formatted=formatted,
        drops_rows=True,
    )


def _info_of(extra_fields: Sequence[Any], key: str) -> list[Any]:
    """Each row's ``reward_extra_info[key]`` (None where a row has none)."""
    values = []
    for field in extra_fields:
        info = field.get("reward_extra_info", {}) if isinstance(field, dict) else {}
        values.append(info.get(key) if isinstance(info, dict) else None)
    return values


def max_response_length(config: Any) -> int | None:
    """verl's response cap: ``actor_rollout_ref.rollout.response_length``, else ``data.max_response_length``."""
    for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):
        node = config
        for key in path:
            node = node.get(key, None) if hasattr(node, "get") else getattr(node, key, None)
            if node is None:
                break
        if node is not None:
            return int(node)
    return None


def monitor_from_fields(
    uids: Sequence[Any],
    lengths: torch.Tensor,
    scores: torch.Tensor,
    extra_fields: Sequence[Any] | None,
    *,
    correct_threshold: float = 0.5,
) -> RolloutBatch:
    """A RolloutBatch of verl's validation generations (LASER-D's monitor; pure, testable without verl).

    Args:
        uids: [n] the prompt uid of each generation (the validation's groups).
        lengths: [n] response tokens of each generation (its response mask summed, EOS included, as in training).
        scores: [n] the summed reward of each generation.
        extra_fields: [n] dicts whose ``reward_extra_info`` may hold ``acc``, or None.
        correct_threshold: the verdict when not every row carries ``acc``: summed score above this.
    """
    correct = None
    if extra_fields is not None:
        verdicts = _info_of(extra_fields, "acc")
        correct = correct_from_acc(np.array(verdicts, dtype=object)) if verdicts else None
    return RolloutBatch(
        group_ids=group_ids_from_index(np.array([str(u) for u in uids], dtype=object)),
        correct=scores.float() > correct_threshold if correct is None else correct,
        lengths=lengths.long(),
    )


def masked_rows(mask: Any, dropped: torch.Tensor) -> Any:
    """`mask` ([bs, T] or nested) with every token of the `dropped` rows set to 0 (GFPO's filter)."""
    if getattr(mask, "is_nested", False):
        rows = [row * 0 if bool(gone) else row for row, gone in zip(mask.unbind(), dropped.tolist(), strict=True)]
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    return mask * (~dropped.to(mask.device)).to(mask.dtype)[:, None]


def values_of(data: Any, key: str) -> list[Any]:
    """A TransferQueue field of non-tensor values (NonTensorStack, array or list) as a Python list."""
    value = data[key]
    return list(value.tolist()) if hasattr(value, "tolist") else list(value)


def rows_of(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a [n, T] or nested (jagged) tensor."""
    return list(tensor.unbind()) if tensor.is_nested else list(tensor)
