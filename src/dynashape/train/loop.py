"""The RL loop of the reference trainer, one step top to bottom.

    [validation / monitor set, on their schedules] -> sample prompts -> G rollouts each (temperature 1.0,
    KV cache, batched) -> verifier -> optional dynamic sampling -> old log-probs forward (+ MEDS fingerprints
    from the same forward) -> shaper -> advantages -> the preset's loss (objectives.py: clip, drpo)
    -> AdamW step(s) -> metrics

Everything method-specific comes from ``TrainConfig`` (a preset): which reward columns, which shaper, which
loss. No branch here names a method. ``run.py`` owns the run folder, checkpoints and evaluation.
The prompts drawn (``prompt_stream.py``), the reward columns (``reward_columns.py``), the held-out signals
(``held_out.py``) and what a step records (``step_metrics.py``) are modules of their own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynashape.losses.registry import LossInputs, get_loss
from dynashape.rewards.answers import has_boxed_answer
from dynashape.runtime.prompts import encode_questions
from dynashape.runtime.sampler import Rollouts, TokenStats, concat_rollouts, sample, sequence_logprobs
from dynashape.train.config import TrainConfig
from dynashape.train.held_out import held_out_signals, sample_held_out
from dynashape.train.prompt_stream import PromptStream
from dynashape.train.reward_columns import reward_columns
from dynashape.train.step_metrics import StepOutput, TokenCount, rollout_metrics, token_metrics
from dynashape.world.base import Problem

__all__ = ["PromptStream", "StepOutput", "Trainer", "reward_columns"]


@dataclass
class _Collected:
    rollouts: Rollouts | None  # the kept groups (None when dynamic sampling kept none)
    problems: list[Problem]  # one per kept rollout
    group_ids: torch.Tensor
    correct: torch.Tensor
    rounds: int
    sampled: dict[str, Any]  # every sampled rollout (kept or not), for honest accuracy / length metrics
    tokens: TokenCount  # the tokens every sampled rollout cost (kept or not)
    formatted: torch.Tensor | None = None  # [N] the kept rollouts' answers in the asked format (LASER's score)


class Trainer:
    """Holds the policy, optimiser, shaper, verifier and RNG; ``step()`` runs one RL step.

    Args:
        model: a causal LM (any ``transformers`` model with ``logits`` output), in train mode or not.
        tokenizer: its tokenizer (pad, eos ids).
        problems: training problems.
        cfg: the step configuration (a preset).
        verifier: object with ``verify(golds, responses) -> list[verdict with .correct]``.
        ref_model: frozen reference for the KL term (needed when ``cfg.kl_coef > 0``).
        device: torch device of the model.
        prompt_format: how problems become prompt ids (chat template, suffix; ``prompts.PromptFormat``);
            None sends each problem's text as it is, after the tokenizer's BOS.
        validation: the validation (and monitor) problems: sampled every ``cfg.validation_every`` steps for the
            validation accuracy, and on the shaper's own schedule for a shaper that reads a monitor set's
            rollouts (LASER-D). Needed only then.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        problems: Sequence[Problem],
        cfg: TrainConfig,
        verifier: Any,
        *,
        ref_model: torch.nn.Module | None = None,
        device: str | torch.device = "cpu",
        prompt_format: Any = None,
        validation: Sequence[Problem] = (),
    ) -> None:
        from dynashape.shapers import get_shaper

        if cfg.kl_coef > 0 and ref_model is None:
            raise ValueError(f"kl_coef={cfg.kl_coef} > 0 needs a ref_model")
        self.model, self.tokenizer, self.cfg, self.verifier = model, tokenizer, cfg, verifier
        self.ref_model, self.device = ref_model, torch.device(device)
        self.prompt_format = prompt_format
        pool = problems if cfg.prompt_pool is None else problems[: cfg.prompt_pool]
        self.stream = PromptStream(pool, cfg.seed)
        self.shaper = get_shaper(cfg.shaper, **cfg.shaper_kwargs)
        self.validation = list(validation)
        if (cfg.validation_every or self.shaper.needs.monitor_rollouts) and not self.validation:
            raise ValueError(
                f"validation_every={cfg.validation_every}, shaper {cfg.shaper!r}: the trainer needs validation "
                "problems to sample (Trainer(validation=...))"
            )
        self.loss = get_loss(cfg.loss)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99)
        )
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed)
        self.step_index = 0
        self.tokens_: TokenCount | None = TokenCount()  # tokens sampled so far; None: unknown (see load_state_dict)

    # -- state -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything besides model and optimiser weights that a resumed run needs (RNG, data, shaper)."""
        return {
            "step": self.step_index,
            "stream": self.stream.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "shaper": self.shaper.state_dict(),
            **({} if self.tokens_ is None else {"tokens": self.tokens_.state_dict()}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_index = int(state["step"])
        self.stream.load_state_dict(state["stream"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.shaper.load_state_dict(state["shaper"])
        # A checkpoint written before token counting has no totals: they stay unknown rather than restart at 0.
        tokens = state.get("tokens")
        self.tokens_ = None if tokens is None else TokenCount(**{k: int(v) for k, v in tokens.items()})

    # -- phases ------------------------------------------------------------------------------------------
    def _generate(self, problems: list[Problem]) -> Rollouts:
        g = self.cfg.group_size
        questions = [p.prompt for p in problems]
        ids, mask = encode_questions(self.tokenizer, questions, self.prompt_format)
        ids = ids.repeat_interleave(g, dim=0).to(self.device)
        mask = mask.repeat_interleave(g, dim=0).to(self.device)
        self.model.eval()
        return sample(
            self.model,
            ids,
            mask,
            max_new_tokens=self.cfg.max_new_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            temperature=self.cfg.temperature,
            generator=self.generator,
        )

    def _verify(self, rollouts: Rollouts, problems: list[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
        """Bool [N] verdicts and Bool [N] formatted (the verdict's own ``formatted`` where it gives one, else a
        closed boxed answer in the text, `dynashape.rewards.answers.has_boxed_answer`)."""
        texts = self.tokenizer.batch_decode(rollouts.response_ids, skip_special_tokens=True)
        verdicts = self.verifier.verify([p.answer for p in problems], texts)
        correct = torch.tensor([bool(v.correct) for v in verdicts], dtype=torch.bool)
        said = [getattr(v, "formatted", None) for v in verdicts]
        formatted = torch.tensor(
            [bool(f) if f is not None else has_boxed_answer(t) for f, t in zip(said, texts, strict=True)],
            dtype=torch.bool,
        )
        # A truncated rollout has no final answer the trainer trusts (the budget binds: over budget = wrong).
        return correct & ~rollouts.truncated.cpu(), formatted

    def _held_out(self, n: int, purpose: int) -> Any:
        """``n`` samples of every validation problem (``held_out.sample_held_out``), on this step's own seed."""
        return sample_held_out(
            self.model,
            self.tokenizer,
            self.validation,
            self.verifier,
            self.cfg,
            n=n,
            seed=(self.cfg.seed * 1_000_003 + self.step_index) * 4 + purpose,
            device=self.device,
            prompt_format=self.prompt_format,
        )

    def _collect(self, timings: dict[str, float]) -> _Collected:
        """Sample groups; under dynamic sampling keep only mixed groups, refilling for a few rounds."""
        cfg, g = self.cfg, self.cfg.group_size
        kept: list[tuple[Rollouts, list[Problem], torch.Tensor, torch.Tensor]] = []
        sampled: dict[str, Any] = {"problems": [], "correct": [], "lengths": [], "truncated": []}
        n_groups, rounds, tokens = 0, 0, TokenCount()
        while n_groups < cfg.prompts_per_step and rounds < cfg.max_sampling_rounds:
            rounds += 1
            prompts = self.stream.take(cfg.prompts_per_step)
            t0 = time.perf_counter()
            rollouts = self._generate(prompts)
            t1 = time.perf_counter()
            tokens += TokenCount.of(rollouts)
            per_rollout = [p for p in prompts for _ in range(g)]
            correct, formatted = self._verify(rollouts, per_rollout)
            timings["sample"] += t1 - t0
            timings["verify"] += time.perf_counter() - t1
            sampled["problems"] += per_rollout
            sampled["correct"].append(correct)
            sampled["lengths"].append(rollouts.lengths.cpu())
            sampled["truncated"].append(rollouts.truncated.cpu())
            keep = torch.ones(len(prompts), dtype=torch.bool)
            if cfg.dynamic_sampling:
                acc = correct.view(-1, g).float().mean(1)
                keep = (acc > 0) & (acc < 1)
            keep_groups = keep.nonzero().squeeze(1)[: cfg.prompts_per_step - n_groups]
            if len(keep_groups):
                rows = (keep_groups[:, None] * g + torch.arange(g)).reshape(-1)
                kept.append(
                    (
                        rollouts.select(rows.to(rollouts.lengths.device)),
                        [per_rollout[int(i)] for i in rows],
                        correct[rows],
                        formatted[rows],
                    )
                )
                n_groups += len(keep_groups)
            if not cfg.dynamic_sampling:
                break
        for key in ("correct", "lengths", "truncated"):
            sampled[key] = torch.cat(sampled[key])
        if not kept:  # every group was uniform in every round: nothing to learn from this step
            return _Collected(
                None, [], torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.bool), rounds, sampled, tokens
            )
        merged = concat_rollouts([k[0] for k in kept], self.tokenizer.pad_token_id)
        problems = [p for k in kept for p in k[1]]
        group_ids = torch.arange(n_groups).repeat_interleave(g)
        correct_kept, formatted_kept = torch.cat([k[2] for k in kept]), torch.cat([k[3] for k in kept])
        return _Collected(merged, problems, group_ids, correct_kept, rounds, sampled, tokens, formatted_kept)

    def _token_metrics(self, step: TokenCount) -> dict[str, float]:
        """This step's sampled tokens (``tokens/prompt``, ``tokens/response``) and the run's totals so far
        (``tokens/prompt_total``, ``tokens/response_total``, ``sampling_rounds_total``); adds ``step`` to the
        totals. The totals are left out when unknown (a run resumed from a checkpoint without them)."""
        if self.tokens_ is not None:
            self.tokens_ += step
        return token_metrics(step, self.tokens_)

    def _budgets(self, problems: list[Problem]) -> torch.Tensor | None:
        """LongTensor [N] of the budgets the rollouts' prompts name, for a shaper that reads them (L1)."""
        if not self.shaper.needs.budgets:
            return None
        missing = [p.key for p in problems if p.budget is None]
        if missing:
            raise ValueError(f"shaper {self.cfg.shaper!r} reads budgets, but prompt {missing[0]} names none")
        return torch.tensor([p.budget for p in problems], dtype=torch.long)

    def _scored_forward(self, rollouts: Rollouts) -> tuple[TokenStats, torch.Tensor | None]:
        """Log-probs and entropy [N, T] of the responses; MEDS fingerprints [N, D] ride along on the same forward.

        Runs with gradients when the caller has them enabled (the fused on-policy update) and without under
        ``no_grad`` (the separate old-log-prob pass); the fingerprint hooks read detached values either way.
        """
        layers = self.cfg.fingerprint_layers
        if layers is None:
            return sequence_logprobs(self.model, rollouts, with_entropy=True, temperature=self.cfg.temperature), None
        from dynashape.meds.capture import FingerprintCapture
        from dynashape.meds.positions import answer_positions, answer_targets

        p = answer_positions(rollouts.response_ids, self.tokenizer, response_mask=rollouts.response_mask)
        y = answer_targets(rollouts.response_ids, p)
        width = rollouts.prompt_ids.shape[1]
        positions = torch.where(p >= 0, p + width, -1)  # prompt is left-padded to `width`
        with FingerprintCapture(self.model, positions, y, layers=layers) as capture:
            stats = sequence_logprobs(self.model, rollouts, with_entropy=True, temperature=self.cfg.temperature)
        return stats, capture.result()

    def _update(
        self,
        rollouts: Rollouts,
        group_ids: torch.Tensor,
        correct: torch.Tensor,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        fused: TokenStats | None = None,
        keep: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """``ppo_epochs`` passes of ``mini_batches`` AdamW steps over whole groups; returns mean diagnostics.

        ``fused``: the statistics of a forward over all of ``rollouts`` already run with gradients (the single
        on-policy update, see ``step``); the one mini-batch of the one epoch uses it instead of a new forward.
        ``keep``: the shaper's kept rows (``Shaped.keep``), or None for all; the loss drops the others.
        """
        cfg = self.cfg
        lr = cfg.lr * min(1.0, (self.step_index + 1) / max(1, cfg.lr_warmup_steps))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_groups = int(group_ids.max()) + 1
        chunks = torch.arange(n_groups).chunk(min(cfg.mini_batches, n_groups))
        sums: dict[str, float] = {}
        need_entropy = cfg.entropy_coef > 0 or cfg.entropy_advantage.enabled
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            for chunk in chunks:
                rows = torch.isin(group_ids, chunk).nonzero().squeeze(1)
                mb = rollouts.select(rows.to(rollouts.lengths.device))
                t = mb.response_ids.shape[1]
                mask = mb.response_mask
                if fused is not None:
                    stats = fused
                else:
                    stats = sequence_logprobs(self.model, mb, with_entropy=need_entropy, temperature=cfg.temperature)
                loss, diagnostics = self.loss(
                    LossInputs(
                        logprobs=stats.logprobs,
                        old_logprobs=old_logprobs[rows, :t],
                        response_mask=mask,
                        advantages=advantages[rows].to(mask.device),
                        group_ids=group_ids[rows].to(mask.device),
                        correct=correct[rows].to(mask.device),
                        lengths=mb.lengths,
                        ref_logprobs=None if ref_logprobs is None else ref_logprobs[rows, :t],
                        entropy=stats.entropy,
                        keep=None if keep is None else keep[rows].to(mask.device),
                    ),
                    cfg,
                )
                diag = dict(diagnostics)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                diag["grad_norm"] = grad_norm
                for k, v in diag.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
        count = cfg.ppo_epochs * len(chunks)
        return {**{k: v / count for k, v in sums.items()}, "lr": lr}

    # -- the step ----------------------------------------------------------------------------------------
    def step(self) -> StepOutput:
        """One RL step; advances data position, RNG, shaper state and weights exactly once."""
        from dynashape.core.batch import RolloutBatch

        cfg = self.cfg
        timings = {"sample": 0.0, "verify": 0.0, "old_logprob": 0.0, "shape": 0.0, "update": 0.0}
        t_start = time.perf_counter()
        held_out = held_out_signals(self.shaper, cfg, self.step_index, len(self.validation), self._held_out)
        if held_out:  # only then: the metrics of runs without it keep their keys
            timings["held_out"] = time.perf_counter() - t_start
        col = self._collect(timings)
        s = col.sampled
        metrics: dict[str, float] = {
            "step": float(self.step_index + 1),
            "sampling_rounds": float(col.rounds),
            **self._token_metrics(col.tokens),
            "groups_kept": float(len(col.group_ids) // cfg.group_size),
            "groups_kept_frac": len(col.group_ids) / len(s["correct"]),
            **rollout_metrics(s["problems"], s["correct"], s["lengths"], s["truncated"]),
            **held_out,
        }
        if col.rollouts is not None:
            rollouts, lengths = col.rollouts, col.rollouts.lengths.cpu()

            # One on-policy update (one mini-batch, one epoch): the old log-probs are the detached log-probs of
            # the update's own forward (ratio 1, the same gradient), so that forward runs once, with gradients,
            # before the shaper (its time is then the update's forward). Otherwise a separate no-grad pass.
            fuse = cfg.fuse_old_logprobs and cfg.mini_batches == 1 and cfg.ppo_epochs == 1
            t0 = time.perf_counter()
            self.model.train(fuse)
            with torch.set_grad_enabled(fuse):
                stats, fingerprints = self._scored_forward(rollouts)
            old_logprobs, entropy = stats.logprobs.detach(), stats.entropy.detach()  # type: ignore[union-attr]
            ref_logprobs = None
            if self.ref_model is not None:
                with torch.no_grad():
                    ref_logprobs = sequence_logprobs(self.ref_model, rollouts, temperature=cfg.temperature).logprobs
            mask = rollouts.response_mask.float()
            metrics["entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
            timings["old_logprob"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            batch = RolloutBatch(
                group_ids=col.group_ids,
                correct=col.correct,
                lengths=lengths,
                rewards=reward_columns(cfg.reward_columns, col.correct, lengths, cfg),
                prompt_keys=[p.key for p in col.problems],
                fingerprints=None if fingerprints is None else fingerprints.cpu(),
                budgets=self._budgets(col.problems),
                truncated=rollouts.truncated.cpu(),  # the cap reached without EOS (DLER, stop_properly)
                formatted=col.formatted,
            )
            shaped = self.shaper(batch)
            metrics.update(shaped.metrics)
            metrics["advantage_abs_mean"] = float(shaped.advantages.abs().mean())
            timings["shape"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            metrics.update(
                self._update(
                    rollouts,
                    col.group_ids,
                    col.correct,
                    shaped.advantages,
                    old_logprobs,
                    ref_logprobs,
                    fused=stats if fuse else None,
                    keep=shaped.keep,
                )
            )
            timings["update"] = time.perf_counter() - t0
        self.step_index += 1
        timings["step"] = time.perf_counter() - t_start
        metrics.update({f"time/{k}": v for k, v in timings.items()})
        return StepOutput(metrics, s["lengths"], s["correct"])
