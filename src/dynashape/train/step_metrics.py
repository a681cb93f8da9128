"""What one step of the reference trainer records: its metrics and rollouts (``StepOutput``), the tokens it
sampled (``TokenCount``), and the accuracy and length of its rollouts overall and per difficulty."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from dynashape.runtime.sampler import Rollouts
from dynashape.world.base import Problem

__all__ = ["StepOutput", "TokenCount", "rollout_metrics", "token_metrics"]


@dataclass
class StepOutput:
    """What one step produced: metrics (flat floats) and per-rollout records (for reports)."""

    metrics: dict[str, float]
    lengths: torch.Tensor = field(repr=False)
    correct: torch.Tensor = field(repr=False)


@dataclass(frozen=True)
class TokenCount:
    """Tokens sampled: prompt tokens (BOS and template included, pads not) and response tokens (EOS included)
    of every rollout drawn, over ``rounds`` sampling rounds. What a step costs whether or not its rollouts reach
    the loss: dynamic sampling's discarded rounds (DAPO, DLER) and a filter's dropped rollouts (GFPO) count."""

    prompt: int = 0
    response: int = 0
    rounds: int = 0

    @staticmethod
    def of(rollouts: Rollouts) -> TokenCount:
        """One sampling round: ``prompt_mask`` [N, P] and ``lengths`` [N] summed over its N rollouts, each rollout
        counting its own copy of the prompt (the sampler prefills all N rows)."""
        return TokenCount(int(rollouts.prompt_mask.sum()), int(rollouts.lengths.sum()), 1)

    def __add__(self, other: TokenCount) -> TokenCount:
        return TokenCount(self.prompt + other.prompt, self.response + other.response, self.rounds + other.rounds)

    def state_dict(self) -> dict[str, int]:
        return {"prompt": self.prompt, "response": self.response, "rounds": self.rounds}


def rollout_metrics(
    problems: Sequence[Problem], correct: torch.Tensor, lengths: torch.Tensor, truncated: torch.Tensor
) -> dict[str, float]:
    """Accuracy and length overall and per difficulty (mean / min / max), truncation rate."""
    difficulty = torch.tensor([p.difficulty for p in problems])
    lengths_f = lengths.float()
    out = {
        "accuracy": float(correct.float().mean()),
        "length/mean": float(lengths_f.mean()),
        "truncated_frac": float(truncated.float().mean()),
    }
    if bool(correct.any()):  # absent rather than NaN, so every logged value is finite
        out["length/mean_correct"] = float(lengths_f[correct].mean())
    for d in torch.unique(difficulty).tolist():  # a handful of difficulty levels, not rollouts
        sel = difficulty == d
        out[f"accuracy/d{d}"] = float(correct[sel].float().mean())
        out[f"length/d{d}/mean"] = float(lengths_f[sel].mean())
        out[f"length/d{d}/min"] = float(lengths_f[sel].min())
        out[f"length/d{d}/max"] = float(lengths_f[sel].max())
    return out


def token_metrics(step: TokenCount, total: TokenCount | None) -> dict[str, float]:
    """A step's sampled tokens (``tokens/prompt``, ``tokens/response``) and the run's totals so far, this step
    included (``tokens/prompt_total``, ``tokens/response_total``, ``sampling_rounds_total``); the totals are left
    out when unknown (``total`` None: a run resumed from a checkpoint without them)."""
    out = {"tokens/prompt": float(step.prompt), "tokens/response": float(step.response)}
    if total is not None:
        out |= {
            "tokens/prompt_total": float(total.prompt),
            "tokens/response_total": float(total.response),
            "sampling_rounds_total": float(total.rounds),
        }
    return out
