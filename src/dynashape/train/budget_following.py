"""How well a model follows the token budget its prompt names: L1's fixed-budget evaluation.

L1 (arXiv 2503.04697, Sec. 4) evaluates a trained model at a few fixed budgets, every prompt naming the same
one, and reports accuracy and how far the lengths land from the budget. Here, per budget b, on the run's
held-out split with its evaluation settings (samples, cap, temperature, top-p, seed):

    accuracy          mean verdict (a truncated response is wrong, as everywhere)
    mean_length       mean response length in tokens
    following_error   mean |length - b| / b, over every response
    truncated_frac    share of responses cut at the evaluation cap
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dynashape.train.config import RunConfig
from dynashape.world.base import Problem

__all__ = ["BUDGET_SEED_OFFSET", "evaluate_at_budgets", "following_error"]

BUDGET_SEED_OFFSET = 7
"""The fixed-budget evaluations draw from ``eval.seed + offset + i`` (budget i): streams of their own, apart from
the held-out evaluation's ``eval.seed`` and its pass@k subset's ``eval.seed + 1``."""


def following_error(lengths: np.ndarray, budget: int) -> float:
    """Mean |length - budget| / budget over ``lengths`` [n] (L1's deviation from the budget, relative)."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    if len(lengths) == 0:
        raise ValueError("lengths must not be empty")
    return float(np.mean(np.abs(np.asarray(lengths, dtype=np.float64) - budget)) / budget)


def evaluate_at_budgets(
    cfg: RunConfig, model: Any, tokenizer: Any, problems: Sequence[Problem], verifier: Any, *, fmt: Any = None
) -> dict[str, dict[str, float]]:
    """{str(b): {accuracy, mean_length, following_error, truncated_frac}} for every b of
    ``cfg.train.budget_prompt.eval_budgets``, each on ``problems`` (prompts without a budget) naming b."""
    from dynashape.train.evaluation import sample_responses
    from dynashape.world.budget_prompts import with_budget

    bp, ev = cfg.train.budget_prompt, cfg.eval
    out: dict[str, dict[str, float]] = {}
    for i, budget in enumerate(bp.eval_budgets):
        samples = sample_responses(
            model,
            tokenizer,
            [with_budget(p, budget, bp.form) for p in problems],  # type: ignore[arg-type]
            verifier,
            n=ev.n_samples,
            max_new_tokens=ev.max_new_tokens,
            temperature=ev.temperature,
            top_p=ev.top_p,
            seed=ev.seed + BUDGET_SEED_OFFSET + i,
            device=cfg.device,
            prompt_format=fmt,
        )
        out[str(budget)] = {
            "accuracy": float(samples.correct.mean()),
            "mean_length": float(samples.lengths.mean()),
            "following_error": following_error(samples.lengths, budget),
            "truncated_frac": float(samples.truncated.mean()),
        }
    return out
