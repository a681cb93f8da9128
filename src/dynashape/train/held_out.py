"""The held-out signals a shaper reads during training: the validation accuracy (AALC) and a monitor set's
rollouts (LASER-D), each sampled from the validation problems on its own schedule and its own seed, so that the
training draws stay as they are."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from dynashape.train.config import TrainConfig
from dynashape.world.base import Problem

__all__ = ["held_out_signals", "sample_held_out"]


def sample_held_out(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    verifier: Any,
    cfg: TrainConfig,
    *,
    n: int,
    seed: int,
    device: torch.device,
    prompt_format: Any,
) -> Any:
    """``n`` samples of every problem at the training temperature and cap, from a generator seeded by ``seed``
    (``evaluation.sample_responses``: its ``correct`` and ``lengths`` are arrays [len(problems) * n])."""
    from dynashape.train.evaluation import sample_responses

    return sample_responses(
        model,
        tokenizer,
        problems,
        verifier,
        n=n,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        seed=seed,
        device=device,
        prompt_format=prompt_format,
    )


def held_out_signals(
    shaper: Any, cfg: TrainConfig, step: int, n_problems: int, sample: Callable[[int, int], Any]
) -> dict[str, float]:
    """Before step ``step``: the validation accuracy, every ``validation_every`` steps from step 0 (verl validates
    before training too), handed to a shaper that reads it (AALC); and a monitor set's rollouts, every
    ``refresh_every`` steps of the shaper's config from step 0, for a shaper that reads them (LASER-D, with its
    ``n_rollout`` samples per prompt).

    Args:
        n_problems: how many validation problems ``sample`` draws from.
        sample: ``sample(n, purpose)``, ``n`` samples of every validation problem (purpose 1: the validation
            accuracy, 2: the monitor set; each its own seed).

    Returns:
        The metrics logged: ``val/accuracy``, ``monitor/accuracy`` (each only at a step it was sampled).
    """
    from dynashape.core.batch import RolloutBatch

    needs, metrics = shaper.needs, {}
    if cfg.validation_every and step % cfg.validation_every == 0:
        accuracy = float(sample(cfg.validation_samples, 1).correct.mean())
        metrics["val/accuracy"] = accuracy
        if needs.validation_accuracy:
            shaper.observe(validation_accuracy=accuracy)
    if needs.monitor_rollouts and step % shaper.config.refresh_every == 0:
        n = shaper.config.n_rollout
        monitor = sample(n, 2)
        shaper.observe(
            monitor=RolloutBatch(
                group_ids=torch.arange(n_problems).repeat_interleave(n),
                correct=torch.from_numpy(monitor.correct),
                lengths=torch.from_numpy(monitor.lengths),
            )
        )
        metrics["monitor/accuracy"] = float(monitor.correct.mean())
    return metrics
