"""The verl v1 trainer ``dynashape``: verl's sync PPO trainer plus what a plain estimator cannot get.

Select it with ``trainer.use_v1=true trainer.v1.trainer_mode=dynashape``. It behaves exactly like verl's
``sync`` trainer (it reports ``trainer_mode == "sync"`` to verl's own code), and in addition, when
``algorithm.adv_estimator`` is one of our estimators:

* validates ``algorithm.<name>.*`` at start-up (a typo fails before any GPU work);
* hands the estimator per-sample extras read from verl's TransferQueue: the verifier's verdict
  (``reward_extra_info["acc"]``), a stable prompt key (MD5 of the whitespace-normalised prompt text, as MEDS),
  and, for ``meds``/``lead_meds``, the fingerprints computed by the patched FSDP forward during the
  old-log-prob pass (:mod:`dynashape.integrations.verl_fingerprint`);
* logs the shaper's metrics (``lead/lambda_c``, ``meds/penalty_mean``, ...) with verl's step metrics;
* saves the shaper state as ``global_step_N/dynashape_shaper.pt`` with every verl checkpoint (before verl
  writes ``latest_checkpointed_iteration.txt``) and restores it when verl resumes from that checkpoint.

verl 0.9.1 methods overridden (signatures as in ``verl/trainer/ppo/v1/trainer_base.py``):
    __init__(self, config: DictConfig)
    _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta
    _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta
    _save_checkpoint(self) -> None;  _load_checkpoint(self) -> None
This module imports verl's v1 trainer (Ray, TransferQueue): the plugin imports it only once verl has.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from dynashape.integrations._prompts import prompt_key_of, prompt_text
from dynashape.integrations.verl_estimators import (
    ESTIMATOR_NAMES,
    MEDS_ESTIMATORS,
    EstimatorExtras,
    last_metrics,
    provide_extras,
    save_state_atomic,
    session_for,
)
from dynashape.integrations.verl_fingerprint import (
    ANSWER_POS_FIELD,
    ANSWER_TARGET_FIELD,
    FINGERPRINT_FIELD,
    FLAG_KEY,
    answer_fields,
)

__all__ = ["STATE_FILE", "extras_from_fields", "prompt_text", "register_trainer"]

logger = logging.getLogger(__name__)

STATE_FILE = "dynashape_shaper.pt"


def extras_from_fields(
    raw_prompts: Sequence[Any] | None,
    extra_fields: Sequence[Any] | None,
    fingerprints: torch.Tensor | None,
) -> EstimatorExtras:
    """Per-sample extras from TransferQueue fields (pure, testable without verl).

    Args:
        raw_prompts: [bs] chat message lists or strings, or None.
        extra_fields: [bs] dicts whose ``reward_extra_info`` may hold ``acc`` (the verifier's verdict), or None.
        fingerprints: float [bs, D] with NaN rows, or None.

    Returns:
        EstimatorExtras; ``correct`` is set only when every row carries ``acc``.
    """
    keys = None if raw_prompts is None else [prompt_key_of(p) for p in raw_prompts]
    correct = None
    if extra_fields is not None:
        verdicts = []
        for field in extra_fields:
            info = field.get("reward_extra_info", {}) if isinstance(field, dict) else {}
            verdicts.append(info.get("acc") if isinstance(info, dict) else None)
        if verdicts and all(v is not None for v in verdicts):
            correct = torch.tensor([bool(v) for v in verdicts], dtype=torch.bool)
    return EstimatorExtras(prompt_keys=keys, fingerprints=fingerprints, correct=correct)


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
            super().__init__(config)
            self.dynashape_estimator = str(config.algorithm.adv_estimator)
            self.dynashape_session = None
            if self.dynashape_estimator in ESTIMATOR_NAMES:
                self.dynashape_session = session_for(self.dynashape_estimator, config.algorithm)
                self.dynashape_session.managed_by_trainer = True

        @property
        def _dynashape_meds(self) -> bool:
            return self.dynashape_session is not None and self.dynashape_estimator in MEDS_ESTIMATORS

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
            fields = ["raw_prompt", "extra_fields"] + ([FINGERPRINT_FIELD] if self._dynashape_meds else [])
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
            fingerprints = None
            if self._dynashape_meds:
                fingerprints = data[FINGERPRINT_FIELD]
                if fingerprints.is_nested:
                    fingerprints = fingerprints.to_padded_tensor(padding=float("nan"))
                fingerprints = fingerprints.float().cpu()
            extras = extras_from_fields(list(data["raw_prompt"]), list(data["extra_fields"]), fingerprints)
            with provide_extras(extras):
                batch = super()._compute_advantage(batch, metrics)
            metrics.update(last_metrics(self.dynashape_estimator))
            return batch

        def _save_checkpoint(self) -> None:
            if self.dynashape_session is not None:
                folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
                save_state_atomic(self.dynashape_session.shaper.state_dict(), os.path.join(folder, STATE_FILE))
            super()._save_checkpoint()

        def _load_checkpoint(self) -> None:
            super()._load_checkpoint()
            if self.dynashape_session is None or self.global_steps == 0:
                return
            trainer = self.config.trainer
            if trainer.resume_mode == "resume_path":
                folder = trainer.resume_from_path
            else:
                folder = os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}")
            path = os.path.join(os.path.abspath(folder), STATE_FILE)
            if os.path.exists(path):
                state = torch.load(path, map_location="cpu", weights_only=False)
                self.dynashape_session.shaper.load_state_dict(state)
                logger.info("dynashape: restored the '%s' shaper state from %s", self.dynashape_estimator, path)
            else:
                logger.warning("dynashape: %s not found; the '%s' shaper starts fresh", path, self.dynashape_estimator)

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
