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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.integrations.verl.checks import check_config
from dynashape.integrations.verl.convert import budgets_from_non_tensor, truncated_from_lengths
from dynashape.integrations.verl.estimators import (
    EstimatorExtras,
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
from dynashape.integrations.verl.queue_fields import (
    MONITOR_FIELDS,
    extras_from_fields,
    masked_rows,
    max_response_length,
    monitor_from_fields,
    padding_from_tags,
    rows_of,
    values_of,
)
from dynashape.shapers import shaper_needs

__all__ = ["register_trainer"]

logger = logging.getLogger(__name__)


def _put_answer_fields(trainer: Any, batch: Any) -> None:
    """Before the old-log-prob forward of a shaper that reads fingerprints: each response's answer positions and
    targets into TransferQueue (``fingerprint.answer_fields``), and the capture's settings on the batch, read by
    the patched forward (:mod:`dynashape.integrations.verl.fingerprint`)."""
    import transfer_queue as tq
    from tensordict import TensorDict

    settings = trainer.dynashape_session.settings
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
    responses = data["responses"]
    lengths = responses.offsets().diff()
    padded = responses.to_padded_tensor(padding=trainer.tokenizer.pad_token_id or 0)
    positions, targets = answer_fields(padded, lengths, trainer.tokenizer)
    fields = TensorDict({ANSWER_POS_FIELD: positions, ANSWER_TARGET_FIELD: targets}, batch_size=len(batch))
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
    batch.extra_info[FLAG_KEY] = {
        "layers": settings.fingerprint_layers,
        "diff": settings.fingerprint_diff,
        "norm": settings.fingerprint_norm,
    }


def _advantage_extras(trainer: Any, batch: Any) -> EstimatorExtras:
    """The estimator's per-sample extras of one training batch, read from TransferQueue: prompts, verdicts,
    fingerprints (a shaper that reads them), budgets (one that needs them), padding tags and truncation."""
    import transfer_queue as tq

    needs = shaper_needs(trainer.dynashape_estimator)
    budget_key = trainer.dynashape_session.settings.budget_key
    column = budget_key.split(".")[0]  # the dataset field holding the budgets (L1)
    fields = ["raw_prompt", "extra_fields", "response_mask"]
    fields += [FINGERPRINT_FIELD] if needs.fingerprints else []
    if needs.budgets:
        fields.append(column)
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    fingerprints = None
    if needs.fingerprints:
        fingerprints = data[FINGERPRINT_FIELD]
        if fingerprints.is_nested:
            fingerprints = fingerprints.to_padded_tensor(padding=float("nan"))
        fingerprints = fingerprints.float().cpu()
    budgets = None
    if needs.budgets:
        budgets = budgets_from_non_tensor(
            {column: values_of(data, column)} if column in data.keys() else {}, budget_key
        )
    padding = padding_from_tags(getattr(batch, "tags", None))
    cap = max_response_length(trainer.config)
    truncated = None
    if cap is not None:  # DLER's and stop_properly's input: the rows verl's rollout cut at its cap
        lengths = torch.stack([row.sum() for row in rows_of(data["response_mask"])]).cpu()
        truncated = truncated_from_lengths(lengths, cap)
    return extras_from_fields(
        list(data["raw_prompt"]), list(data["extra_fields"]), fingerprints, padding, budgets, truncated
    )


def _mask_dropped_rows(batch: Any, dropped: torch.Tensor) -> Any:
    """GFPO: a dropped row carries no loss term, and the token mean (verl's batch_num_tokens, the sum of
    loss_mask) does not count its tokens: both masks set to 0 on the ``dropped`` rows (Bool [bs])."""
    import transfer_queue as tq
    from tensordict import TensorDict

    keys, partition = batch.keys, batch.partition_id
    masks = tq.kv_batch_get(keys=keys, partition_id=partition, select_fields=["response_mask", "loss_mask"])
    out = {k: masked_rows(masks[k], dropped.cpu()) for k in ("response_mask", "loss_mask") if k in masks.keys()}
    return tq.kv_batch_put(keys=keys, partition_id=partition, fields=TensorDict(out, batch_size=len(batch)))


@contextmanager
def _reading_validation_rows(trainer: Any) -> Iterator[None]:
    """During verl's ``_validate``: the generations of each validation batch the replay buffer hands out, read
    from TransferQueue into ``trainer._dynashape_monitor_rows`` just before verl clears them.

    Only the trajectories of the batches the replay buffer hands ``_validate`` are read: the buffer also clears
    partition "val" of its tag-only prompt markers, which hold no fields."""
    import transfer_queue as tq

    clear, buffer = tq.kv_clear, trainer.replay_buffer
    sampled: list[list[Any]] = []
    trainer._dynashape_monitor_rows = []

    def sample(*a: Any, **k: Any) -> Any:
        out = type(buffer).sample(buffer, *a, **k)
        if k.get("partition_id") == "val":
            sampled.append(list(out[0].keys))
        return out

    def kv_clear(keys: Any = None, partition_id: Any = None, **k: Any) -> Any:
        if partition_id == "val" and sampled and list(keys) == sampled[-1]:
            data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(MONITOR_FIELDS))
            trainer._dynashape_monitor_rows.append(data)
        return clear(keys=keys, partition_id=partition_id, **k)

    buffer.sample, tq.kv_clear = sample, kv_clear
    try:
        yield
    finally:
        tq.kv_clear = clear
        del buffer.sample  # the instance attribute: the class's method again
        trainer._dynashape_monitor_rows = None


def _monitor_from_rows(parts: Sequence[Any], correct_threshold: float) -> RolloutBatch:
    """``monitor_from_fields`` of the TransferQueue rows ``_reading_validation_rows`` kept (one TensorDict per
    validation batch, holding ``MONITOR_FIELDS``)."""
    uids, lengths, scores, extra = [], [], [], []
    for data in parts:
        uids += [str(u) for u in values_of(data, "uid")]
        lengths += [row.sum() for row in rows_of(data["response_mask"])]
        scores += [row.sum() for row in rows_of(data["rm_scores"])]
        extra += values_of(data, "extra_fields")
    return monitor_from_fields(
        uids, torch.stack(lengths), torch.stack(scores), extra, correct_threshold=correct_threshold
    )


def _trainer_class() -> type:
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
            _put_answer_fields(self, batch)
            try:
                return super()._compute_old_log_prob(batch, metrics)
            finally:
                batch.extra_info.pop(FLAG_KEY, None)  # the ref and update forwards must not capture

        def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
            if self.dynashape_session is None:
                return super()._compute_advantage(batch, metrics)
            name, needs = self.dynashape_estimator, shaper_needs(self.dynashape_estimator)
            with provide_extras(_advantage_extras(self, batch)):  # verl's own adds the shaper's metrics (hooks.py)
                result = super()._compute_advantage(batch, metrics)
            dropped = dropped_rows(name) if needs.drops_rows else None
            if dropped is not None:
                result = _mask_dropped_rows(batch, dropped)
                metrics["dynashape/dropped_rows"] = float(dropped.sum())
            return result

        def _validate(self, *args: Any, **kwargs: Any) -> Any:
            """verl's validation; for a shaper that reads a monitor set (LASER-D), its generations are read from
            TransferQueue before verl clears them, for the plugin's hook to hand over (``dynashape_monitor_batch``)."""
            if self.dynashape_session is None or not shaper_needs(self.dynashape_estimator).monitor_rollouts:
                return super()._validate(*args, **kwargs)
            with _reading_validation_rows(self):
                return super()._validate(*args, **kwargs)

        def dynashape_monitor_batch(self) -> RolloutBatch | None:
            """The monitor rollouts of the validation under way (None outside one)."""
            parts = getattr(self, "_dynashape_monitor_rows", None)
            if not parts:
                return None
            return _monitor_from_rows(parts, self.dynashape_session.settings.correct_threshold)

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
