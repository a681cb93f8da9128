"""dynashape inside TRL: ``ShapedGRPOTrainer``, a ``GRPOTrainer`` whose advantages come from our shapers.

    from dynashape import get_shaper
    from dynashape.integrations.trl import ShapedGRPOTrainer
    from dynashape.rewards.scoring import correctness_reward

    trainer = ShapedGRPOTrainer(
        shaper=get_shaper("lead", b_max=4000, whiten="sequence"),
        model=model, reward_funcs=[correctness_reward], args=GRPOConfig(...), train_dataset=dataset,
    )

TRL 1.16 computes advantages inline in ``_generate_and_score_completions`` (no hook; TRL issue 4525 advises
subclassing). After the base method has gathered the rewards of every process, we:

1. read the verdict from one reward function (``correctness_reward``, default the first; correct = value >
   ``correct_threshold``, None/NaN = wrong) and gather the completion lengths from every process;
2. build one global RolloutBatch (group = ``global_index // num_generations``, TRL's layout), optionally with
   other reward functions as extra ``rewards`` channels, stable prompt keys and MEDS fingerprints;
3. call the shaper once per generation batch (its state advances once, identically on every process) and
   hand each process its slice ``[rank * n_local, (rank + 1) * n_local)``;
4. log the shaper's metrics under their own names (``lead/lambda_c``, ...), replace TRL's advantage column in
   the completions log with ours, and save/restore the shaper state with every TRL checkpoint (written where
   TRL writes the checkpoint: world process 0, or each node's main process with ``save_on_each_node``; read
   with ``torch.load(weights_only=True)``; a resume where only some processes find the file is refused).

The field's length methods get what they read (``shaper.needs``; ``signals.py``, ``keep.py``):
budgets from a dataset column (``budget_column``, default ``num_tokens``), the validation accuracy (AALC) and a
monitor set (LASER-D) from TRL's evaluation pass, and a filter's dropped rows (GFPO's ``Shaped.keep``) taken
out of the loss: their completion mask zeroed, ``num_items_in_batch`` recounted, row-averaged losses rescaled.

TRL options that only shape TRL's own advantages (``scale_rewards``, ``reward_weights``,
``multi_objective_aggregation``) are refused when set to a non-default value: the shaper owns normalisation.

MEDS fingerprints are read with forward hooks during the old-log-prob forward TRL already runs (when it runs
one: ``gradient_accumulation_steps`` not a multiple of ``steps_per_generation * num_iterations``, or vLLM
importance sampling); otherwise one extra no-grad forward of the policy computes them. Never from the reference
forward: with PEFT and ``beta != 0`` TRL runs the reference as the policy module with its adapters disabled,
which is recognised and skipped. Text models only.

Methods of TRL 1.16 we override or call (``tests/integrations/test_trl_engine.py`` checks them):
    _generate_and_score_completions(self, inputs) -> dict with prompt_ids, prompt_mask, completion_ids,
        completion_mask, advantages [n_local], num_items_in_batch, ...
    _calculate_rewards(self, inputs, prompts, completions, completion_ids_list) -> gathered [N, n_funcs]
    _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
        compute_entropy=False, ...) -> (logps, entropies, aux_loss)
    _load_optimizer_and_scheduler(self, checkpoint)
    compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None) -> loss (rescaled)
    evaluate(self, ...) -> metrics (the held-out signals handed to the shaper after it)
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import torch

try:
    import trl
    from accelerate.utils import is_peft_model
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("dynashape.integrations.trl needs TRL: pip install 'dynashape[trl]'") from err

from dynashape.core.batch import RolloutBatch
from dynashape.integrations._prompts import prompt_key_of
from dynashape.integrations.trl.fingerprints import is_policy_forward, logps_with_fingerprints
from dynashape.integrations.trl.keep import ROW_MEAN_LOSSES, check_row_mean_loss, drop_rows, kept_share
from dynashape.integrations.trl.options import SUPPORTED_TRL, check_trl_version, check_unhonoured_options
from dynashape.integrations.trl.signals import (
    DEFAULT_BUDGET_COLUMN,
    EvalPool,
    budget_of,
    check_budget_column,
    check_eval_signal_options,
)
from dynashape.integrations.trl.state import STATE_FILE, ShaperStateCallback, load_shaper_state, restore_shaper_state
from dynashape.meds.capture import OFFICIAL_FINGERPRINT_LAYERS, FingerprintCapture
from dynashape.meds.positions import answer_positions, answer_targets
from dynashape.rewards.answers import has_boxed_answer
from dynashape.rewards.scoring import completion_text
from dynashape.shapers import Shaped, Shaper

__all__ = [
    "STATE_FILE",
    "SUPPORTED_TRL",
    "ShapedGRPOTrainer",
    "ShaperStateCallback",
    "check_trl_version",
    "check_unhonoured_options",
    "load_shaper_state",
]

logger = logging.getLogger(__name__)


class ShapedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with advantages from a dynashape shaper, computed once over the gathered batch.

    Args:
        shaper: The shaper (``get_shaper("lead", ...)``). Use ``whiten="sequence"`` for TRL's convention.
        correctness_reward: Index or name of the reward function whose value is the verifier's verdict.
        correct_threshold: Correct when that reward exceeds this.
        reward_channels: Indices or names of reward functions passed as the batch's extra ``rewards`` channels
            (for shapers that take them: gdpo, lead with ``reward_ranges``); default none.
        fingerprints: Compute MEDS fingerprints and prompt keys; default: when the shaper declares it reads
            fingerprints (``shaper.needs``: meds, lead_meds). Prompt keys are also passed to a shaper that
            declares it reads them.
        fingerprint_layers, fingerprint_diff, fingerprint_norm: The fingerprint's settings (MEDS, arXiv 2604.11297).
        budget_column: The train dataset column holding each prompt's token budget, for a shaper that reads
            budgets (L1: ``shaper.needs.budgets``); default ``"num_tokens"``; a dotted name reads into a dict
            column (``"reward_model.num_tokens"``). Refused for a shaper that reads none.
        *args, **kwargs: Everything ``GRPOTrainer`` takes.

    The field's held-out signals come from TRL's evaluation pass: after each evaluation a shaper that reads the
    validation accuracy (AALC) observes the pooled share of correct eval completions, and one that reads a
    monitor set (LASER-D) observes the eval completions as its monitor batch. Only evaluations on the schedule
    are observed: not the one ``eval_on_start`` repeats at the step a run resumed from, nor the extra one at
    ``max_steps`` (so a resumed run's shaper state equals an uninterrupted run's).
    """

    def __init__(
        self,
        *args: Any,
        shaper: Shaper,
        correctness_reward: int | str = 0,
        correct_threshold: float = 0.5,
        reward_channels: Sequence[int | str] = (),
        fingerprints: bool | None = None,
        fingerprint_layers: int = OFFICIAL_FINGERPRINT_LAYERS,
        fingerprint_diff: bool = False,
        fingerprint_norm: str = "raw",
        budget_column: str | None = None,
        **kwargs: Any,
    ) -> None:
        check_trl_version(trl.__version__)
        if not isinstance(shaper, Shaper):
            raise TypeError(f"shaper: expected a dynashape Shaper (get_shaper(...)), got {type(shaper).__name__}")
        # GRPOTrainer(model, reward_funcs, args, train_dataset, eval_dataset, ...): checked before the model loads.
        given = dict(zip(("model", "reward_funcs", "args", "train_dataset", "eval_dataset"), args, strict=False))
        given.update(kwargs)
        check_unhonoured_options(given.get("args"))
        check_eval_signal_options(shaper, given.get("args"), given.get("eval_dataset"))
        if budget_column is not None and not shaper.needs.budgets:
            raise ValueError(f"budget_column={budget_column!r}: shaper {shaper.name!r} reads no budgets")
        self.budget_column = (budget_column or DEFAULT_BUDGET_COLUMN) if shaper.needs.budgets else None
        if self.budget_column is not None:
            check_budget_column(given.get("train_dataset"), self.budget_column)
        super().__init__(*args, **kwargs)
        if shaper.needs.drops_rows:  # a filter declared up front is refused here, not at its first batch
            check_row_mean_loss(
                self.loss_type, entropy_bonus=self._entropy_bonus_enabled, aux_loss=self.aux_loss_enabled
            )
        self.shaper = shaper
        self.correctness_index = self._reward_index("correctness_reward", correctness_reward)
        self.correct_threshold = float(correct_threshold)
        self.reward_channel_indices = [self._reward_index("reward_channels", c) for c in reward_channels]
        self.fingerprints = shaper.needs.fingerprints if fingerprints is None else bool(fingerprints)
        self.prompt_keys = self.fingerprints or shaper.needs.prompt_keys
        self.fingerprint_options = {"layers": fingerprint_layers, "diff": fingerprint_diff, "norm": fingerprint_norm}
        self.last_shaped: Shaped | None = None
        self.add_callback(ShaperStateCallback(shaper))
        self._ds_rewards: torch.Tensor | None = None
        self._ds_local: dict[str, Any] = {}
        self._ds_capture = False
        self._ds_fingerprints: torch.Tensor | None = None
        self._ds_eval: EvalPool | None = None  # the evaluation pass under way, for the held-out signals
        # The step of the last evaluation the shaper observed (or the step a run resumed from): one per step.
        self._ds_observed_step: int | None = None
        # PEFT: the policy is the model with its trained adapter active; TRL's reference forward (beta != 0) runs
        # the same module with the adapters disabled (or a "ref" adapter active) and must not give fingerprints.
        unwrapped = self.accelerator.unwrap_model(self.model)
        self._ds_policy_adapter = getattr(unwrapped, "active_adapter", None) if is_peft_model(unwrapped) else None

    def _reward_index(self, arg: str, which: int | str) -> int:
        names = list(self.reward_func_names)
        if isinstance(which, str):
            if which not in names:
                raise ValueError(f"{arg}: no reward function named {which!r}; have {names}")
            return names.index(which)
        if isinstance(which, bool) or not 0 <= which < len(names):
            raise ValueError(f"{arg}: index {which!r} is out of range for {len(names)} reward functions {names}")
        return int(which)

    # -- capture what the base method computes -----------------------------------------------------------

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ds_rewards = rewards
        # TRL's own test of a cut completion (its clipped_ratio metric): the last token is neither EOS nor pad
        stops = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        self._ds_local = {
            "prompts": list(prompts),
            "lengths": [len(ids) for ids in completion_ids_list],
            "truncated": [bool(len(ids)) and int(ids[-1]) not in stops for ids in completion_ids_list],
        }
        if self.shaper.needs.formatted:  # LASER's official score: a closed boxed answer in the completion's text
            self._ds_local["formatted"] = [has_boxed_answer(completion_text(c, i)) for i, c in enumerate(completions)]
        if self.budget_column is not None and self.model.training:
            # inputs[i] is the dataset row of completion i (TRL repeats each row num_generations times).
            self._ds_local["budgets"] = [budget_of(row, self.budget_column) for row in inputs]
        return rewards

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> Any:
        if not self._ds_capture or self._ds_fingerprints is not None or not self._is_policy_forward(model):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
            )
        # The old-log-prob forward of the policy: one capture per chunk of rows (TRL chunks by batch_size).
        result, self._ds_fingerprints = logps_with_fingerprints(
            super()._get_per_token_logps_and_entropies,
            model,
            self.accelerator.unwrap_model(model),
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size,
            tokenizer=self.processing_class,
            options=self.fingerprint_options,
            **kwargs,
        )
        return result

    def _is_policy_forward(self, model: Any) -> bool:
        """True for a forward of the trained policy: not the reference model, not the adapter-disabled PEFT model."""
        if model is not self.model:
            return False
        return is_policy_forward(self.accelerator.unwrap_model(model), self._ds_policy_adapter)

    # -- the override ---------------------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"
        self._ds_rewards, self._ds_fingerprints = None, None
        self._ds_capture = self.fingerprints and mode == "train"
        try:
            output = super()._generate_and_score_completions(inputs)
            if mode != "train":  # evaluation must not advance the shaper's state
                if self._ds_eval is not None:
                    basics = self._gathered_basics(self.num_generations_eval)
                    self._ds_eval.add(basics.correct, basics.lengths, self.num_generations_eval)
                return output
            if self._ds_rewards is None:
                raise RuntimeError("ShapedGRPOTrainer: TRL did not call _calculate_rewards; unsupported TRL version")
            if self.fingerprints and self._ds_fingerprints is None:
                self._fingerprint_forward(output)
        finally:
            self._ds_capture = False
        shaped = self._shape(output)
        n_local = output["completion_ids"].size(0)
        start = self.accelerator.process_index * n_local
        output["advantages"] = shaped.advantages[start : start + n_local].to(output["advantages"].device)
        if shaped.keep is not None:
            check_row_mean_loss(
                self.loss_type, entropy_bonus=self._entropy_bonus_enabled, aux_loss=self.aux_loss_enabled
            )
            drop_rows(output, shaped.keep[start : start + n_local], self.accelerator.gather)
        self._log_shaped(shaped, mode)
        return output

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        factor = kept_share(inputs) if self.loss_type in ROW_MEAN_LOSSES else None
        # TRL averaged over every row of the micro-batch, dropped ones (all-zero masks) included.
        return loss if factor is None else loss * factor

    # -- evaluation: the held-out signals -------------------------------------------------------------------

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        needs = self.shaper.needs
        if not (needs.validation_accuracy or needs.monitor_rollouts):
            return super().evaluate(*args, **kwargs)
        self._ds_eval = EvalPool()
        try:
            metrics = super().evaluate(*args, **kwargs)
            pool = self._ds_eval
        finally:
            self._ds_eval = None
        if not len(pool):
            raise RuntimeError("ShapedGRPOTrainer: the evaluation pass scored no completions")
        if not self._observes_this_evaluation():
            logger.info("dynashape: evaluation at step %d not observed (off schedule)", self.state.global_step)
            return metrics
        if needs.validation_accuracy:
            self.shaper.observe(validation_accuracy=pool.accuracy())
        if needs.monitor_rollouts:
            self.shaper.observe(monitor=pool.monitor_batch())
        self._ds_observed_step = self.state.global_step
        return metrics

    def _observes_this_evaluation(self) -> bool:
        """Whether the shaper observes the evaluation now ending: one on the evaluation schedule (step 0 with
        ``eval_on_start``, every ``eval_steps``), so that the state at every step equals an uninterrupted run's.
        At most one per step: not the one ``eval_on_start`` runs at the step a run resumed from (the restored
        state already holds that step's observation), nor a second ``evaluate()`` at a step already observed;
        and not the extra one transformers runs at ``max_steps`` off the schedule (a longer run would not
        observe it)."""
        step = self.state.global_step
        if step == self._ds_observed_step:
            return False
        if str(getattr(self.args.eval_strategy, "value", self.args.eval_strategy)) != "steps":
            return True
        every = self.state.eval_steps or self.args.eval_steps
        return step % int(every) == 0

    def _fingerprint_forward(self, output: dict[str, Any]) -> None:
        """One no-grad policy forward for the fingerprints when TRL ran no old-log-prob forward."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            self._get_per_token_logps_and_entropies(
                self.model, ids, mask, output["completion_ids"].size(1), self.args.per_device_train_batch_size
            )

    def _gathered_basics(self, num_generations: int) -> RolloutBatch:
        """Verdicts, lengths and groups of the whole generation batch, every process's rows in process order."""
        from accelerate.utils import gather

        device = self.accelerator.device
        rewards = self._ds_rewards
        n = rewards.shape[0]
        verdict = rewards[:, self.correctness_index]
        correct = torch.nan_to_num(verdict, nan=float("-inf")) > self.correct_threshold
        lengths = gather(torch.tensor(self._ds_local["lengths"], dtype=torch.long, device=device))
        if lengths.shape[0] != n:
            raise RuntimeError(f"gathered {lengths.shape[0]} completion lengths for {n} rewards")
        group_ids = torch.arange(n, device=device) // num_generations
        return RolloutBatch(group_ids=group_ids, correct=correct.to(device), lengths=lengths)

    def _shape(self, output: dict[str, Any]) -> Shaped:
        from accelerate.utils import gather, gather_object

        device = self.accelerator.device
        basics = self._gathered_basics(self.num_generations)
        rewards = self._ds_rewards
        channels = rewards[:, self.reward_channel_indices] if self.reward_channel_indices else None
        budgets = None
        if self.budget_column is not None:
            budgets = gather(torch.tensor(self._ds_local["budgets"], dtype=torch.long, device=device))
        keys, prints = None, None
        if self.prompt_keys:
            keys = [prompt_key_of(p) for p in gather_object(self._ds_local["prompts"])]
        if self.fingerprints:
            prints = gather(self._ds_fingerprints.to(device).float())
        flags = {  # truncated: no EOS in the completion; formatted: a closed boxed answer in its text
            name: gather(torch.tensor(self._ds_local[name], dtype=torch.bool, device=device))
            for name in ("truncated", "formatted")
            if name in self._ds_local
        }
        batch = RolloutBatch(
            group_ids=basics.group_ids,
            correct=basics.correct,
            lengths=basics.lengths,
            rewards=None if channels is None else channels.to(device).float(),
            prompt_keys=keys,
            fingerprints=prints,
            budgets=budgets,
            **flags,
        )
        with torch.no_grad():
            shaped = self.shaper(batch)
        self.last_shaped = shaped
        return shaped

    def _log_shaped(self, shaped: Shaped, mode: str) -> None:
        for name, value in shaped.metrics.items():
            self._metrics[mode][name].append(float(value))
        # TRL already logged its own (unused) advantages for the completions table: replace them with ours.
        column = self._logs["advantages"]
        for _ in range(min(len(column), shaped.advantages.shape[0])):
            column.pop()
        column.extend(shaped.advantages.tolist())

    # -- checkpoints ----------------------------------------------------------------------------------------

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            # the step resumed from counts as observed: its evaluation's observation is in the restored state
            self._ds_observed_step = restore_shaper_state(self.shaper, checkpoint)
