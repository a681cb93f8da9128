"""The verl v1 trainer ``dynashape``: verl's sync PPO trainer plus what a plain estimator cannot get.

Select it with ``trainer.use_v1=true trainer.v1.trainer_mode=dynashape``. It behaves exactly like verl's
``sync`` trainer (it reports ``trainer_mode == "sync"`` to verl's own code), and in addition, when
``algorithm.adv_estimator`` is one of our estimators:

* validates the whole configuration at start-up (:func:`dynashape.integrations.verl.checks.check_config`: the
  ``algorithm.<name>.*`` keys, the verdict, and for MEDS the engine, strategy, Ulysses, remove-padding, fused
  kernels and rollout-correction bypass mode), one error listing every change, before any GPU work;
* hands the estimator per-sample extras read from verl's TransferQueue: the verifier's verdict
  (``reward_extra_info["acc"]``), a stable prompt key (MD5 of the whitespace-normalised prompt text, as MEDS),
  the ``is_padding`` tags of verl's synthetic padding rows (kept away from the shaper), and, for a shaper that
  declares it reads them (``meds``, ``lead_meds``), the fingerprints computed by the patched FSDP forward during the
  old-log-prob pass
  (:mod:`dynashape.integrations.verl.fingerprint`);
* for the field's methods (``Shaper.needs``): each row's token budget from the dataset field
  ``algorithm.<name>.budget_key`` (L1); after the advantages, ``response_mask`` and ``loss_mask`` set to 0 on the
  rows a filter drops (GFPO), so they carry no loss term and no token of the token mean; and, during verl's
  validation, its generations read from TransferQueue before verl clears them, handed to LASER-D as its monitor
  set by the plugin's ``_validate`` hook (:func:`dynashape.integrations.verl.hooks.observe_validation`);
* (like every v1 trainer mode, through :mod:`dynashape.integrations.verl.hooks`) logs the shaper's metrics
  (``lead/lambda_c``, ``meds/penalty_mean``, ...) with verl's step metrics.

The shaper state is saved with every verl checkpoint and restored on resume by the hooks every verl trainer gets
from the plugin (:mod:`dynashape.integrations.verl.hooks`), in this mode as in the plain one.

verl 0.9.1 methods overridden (signatures as in ``verl/trainer/ppo/v1/trainer_base.py``):
    __init__(self, config: DictConfig)
    _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta
    _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta
    _validate(self) -> dict[str, float]   (reads ``tq.kv_clear(keys=, partition_id="val")`` calls inside it)
This module imports verl's v1 trainer (Ray, TransferQueue): the plugin imports it only once verl has.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch
from dynashape.integrations._prompts import prompt_key_of, prompt_text
from dynashape.integrations.verl.checks import check_config
from dynashape.integrations.verl.convert import (
    budgets_from_non_tensor,
    flags_from_info,
    group_ids_from_index,
    truncated_from_lengths,
)
from dynashape.integrations.verl.estimators import (
    EstimatorExtras,
    correct_from_acc,
    dropped_rows,
    estimator_names,
    provide_extras,
    session_for,
)
from dynashape.integrations.verl.fingerprint import (
    ANSWER_POS_FIELD,
    ANSWER_TARGET_FIELD,
    FINGERPRINT_FIELD,
    FLAG_KEY,
    answer_fields,
)
from dynashape.shapers import shaper_needs

__all__ = [
    "extras_from_fields",
    "masked_rows",
    "max_response_length",
    "monitor_from_fields",
    "padding_from_tags",
    "prompt_text",
    "register_trainer",
]

#: TransferQueue fields of a validation generation that LASER-D's monitor reads.
MONITOR_FIELDS: tuple[str, ...] = ("uid", "response_mask", "rm_scores", "extra_fields")

logger = logging.getLogger(__name__)


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


def _values(data: Any, key: str) -> list[Any]:
    """A TransferQueue field of non-tensor values (NonTensorStack, array or list) as a Python list."""
    value = data[key]
    return list(value.tolist()) if hasattr(value, "tolist") else list(value)


def _rows(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a [n, T] or nested (jagged) tensor."""
    return list(tensor.unbind()) if tensor.is_nested else list(tensor)


def _trainer_class() -> type:
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    class DynashapeTrainer(PPOTrainerSync):
        """verl's sync PPO trainer + dynashape extras, metrics and checkpointed shaper state."""

        # verl branches on `trainer_mode == "sync"` (replay buffer, refills, checkpoints): we are sync.
        base_mode = "sync"

        @property
        def trainer_mode(self) -> str:
            return self.base_mode

        @trainer_mode.setter
        def trainer_mode(self, value: str) -> None:  # PPOTrainer.__init__ assigns the configured name
            pass

        def __init__(self, config: Any) -> None:
            check_config(config)  # before verl builds anything (the plugin's __init__ hook checks again: cheap)
            super().__init__(config)
            self.dynashape_estimator = str(config.algorithm.adv_estimator)
            self.dynashape_session = None
            if self.dynashape_estimator in estimator_names():
                self.dynashape_session = session_for(self.dynashape_estimator, config.algorithm)

        @property
        def _dynashape_meds(self) -> bool:
            """Whether the shaper reads fingerprints (its declaration), taken in the old-log-prob forward."""
            return self.dynashape_session is not None and shaper_needs(self.dynashape_estimator).fingerprints

        def _compute_old_log_prob(self, batch: Any, metrics: dict) -> Any:
            if not self._dynashape_meds:
                return super()._compute_old_log_prob(batch, metrics)
            settings = self.dynashape_session.settings
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
            responses = data["responses"]
            lengths = responses.offsets().diff()
            padded = responses.to_padded_tensor(padding=self.tokenizer.pad_token_id or 0)
            positions, targets = answer_fields(padded, lengths, self.tokenizer)
            fields = TensorDict({ANSWER_POS_FIELD: positions, ANSWER_TARGET_FIELD: targets}, batch_size=len(batch))
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
            batch.extra_info[FLAG_KEY] = {
                "layers": settings.fingerprint_layers,
                "diff": settings.fingerprint_diff,
                "norm": settings.fingerprint_norm,
            }
            try:
                return super()._compute_old_log_prob(batch, metrics)
            finally:
                batch.extra_info.pop(FLAG_KEY, None)  # the ref and update forwards must not capture

        def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
            if self.dynashape_session is None:
                return super()._compute_advantage(batch, metrics)
            name, needs = self.dynashape_estimator, shaper_needs(self.dynashape_estimator)
            budget_key = self.dynashape_session.settings.budget_key
            column = budget_key.split(".")[0]  # the dataset field holding the budgets (L1)
            fields = ["raw_prompt", "extra_fields", "response_mask"]
            fields += [FINGERPRINT_FIELD] if self._dynashape_meds else []
            if needs.budgets:
                fields.append(column)
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
            fingerprints = None
            if self._dynashape_meds:
                fingerprints = data[FINGERPRINT_FIELD]
                if fingerprints.is_nested:
                    fingerprints = fingerprints.to_padded_tensor(padding=float("nan"))
                fingerprints = fingerprints.float().cpu()
            budgets = None
            if needs.budgets:
                budgets = budgets_from_non_tensor(
                    {column: _values(data, column)} if column in data.keys() else {}, budget_key
                )
            padding = padding_from_tags(getattr(batch, "tags", None))
            cap = max_response_length(self.config)
            truncated = None
            if cap is not None:  # DLER's and stop_properly's input: the rows verl's rollout cut at its cap
                lengths = torch.stack([row.sum() for row in _rows(data["response_mask"])]).cpu()
                truncated = truncated_from_lengths(lengths, cap)
            extras = extras_from_fields(
                list(data["raw_prompt"]), list(data["extra_fields"]), fingerprints, padding, budgets, truncated
            )
            with provide_extras(extras):  # verl's own _compute_advantage adds the shaper's metrics (hooks.py)
                result = super()._compute_advantage(batch, metrics)
            dropped = dropped_rows(name) if needs.drops_rows else None
            if dropped is not None:
                # GFPO: a dropped row carries no loss term, and the token mean (verl's batch_num_tokens, the sum of
                # loss_mask) does not count its tokens
                keys, partition = batch.keys, batch.partition_id
                masks = tq.kv_batch_get(keys=keys, partition_id=partition, select_fields=["response_mask", "loss_mask"])
                out = {
                    k: masked_rows(masks[k], dropped.cpu()) for k in ("response_mask", "loss_mask") if k in masks.keys()
                }
                result = tq.kv_batch_put(
                    keys=keys, partition_id=partition, fields=TensorDict(out, batch_size=len(batch))
                )
                metrics["dynashape/dropped_rows"] = float(dropped.sum())
            return result

        def _validate(self, *args: Any, **kwargs: Any) -> Any:
            """verl's validation; for a shaper that reads a monitor set (LASER-D), its generations are read from
            TransferQueue before verl clears them, for the plugin's hook to hand over (``dynashape_monitor_batch``).

            Only the trajectories of the batches the replay buffer hands ``_validate`` are read: the buffer also
            clears partition "val" of its tag-only prompt markers, which hold no fields."""
            if self.dynashape_session is None or not shaper_needs(self.dynashape_estimator).monitor_rollouts:
                return super()._validate(*args, **kwargs)
            clear, buffer = tq.kv_clear, self.replay_buffer
            sampled: list[list[Any]] = []
            self._dynashape_monitor_rows = []

            def sample(*a: Any, **k: Any) -> Any:
                out = type(buffer).sample(buffer, *a, **k)
                if k.get("partition_id") == "val":
                    sampled.append(list(out[0].keys))
                return out

            def kv_clear(keys: Any = None, partition_id: Any = None, **k: Any) -> Any:
                if partition_id == "val" and sampled and list(keys) == sampled[-1]:
                    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(MONITOR_FIELDS))
                    self._dynashape_monitor_rows.append(data)
                return clear(keys=keys, partition_id=partition_id, **k)

            buffer.sample, tq.kv_clear = sample, kv_clear
            try:
                return super()._validate(*args, **kwargs)
            finally:
                tq.kv_clear = clear
                del buffer.sample  # the instance attribute: the class's method again
                self._dynashape_monitor_rows = None

        def dynashape_monitor_batch(self) -> RolloutBatch | None:
            """The monitor rollouts of the validation under way (None outside one)."""
            parts = getattr(self, "_dynashape_monitor_rows", None)
            if not parts:
                return None
            uids, lengths, scores, extra = [], [], [], []
            for data in parts:
                uids += [str(u) for u in _values(data, "uid")]
                lengths += [row.sum() for row in _rows(data["response_mask"])]
                scores += [row.sum() for row in _rows(data["rm_scores"])]
                extra += _values(data, "extra_fields")
            return monitor_from_fields(
                uids,
                torch.stack(lengths),
                torch.stack(scores),
                extra,
                correct_threshold=self.dynashape_session.settings.correct_threshold,
            )

    return DynashapeTrainer


def register_trainer(name: str = "dynashape") -> type:
    """Build the trainer class and register it with verl's ``register_trainer`` (idempotent)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    from verl.trainer.ppo.v1.trainer_base import register_trainer as verl_register

    existing = TRAINER_REGISTRY.get(name)
    if existing is not None and existing.__module__ == __name__:
        return existing
    cls = _trainer_class()
    verl_register(name)(cls)
    return cls
