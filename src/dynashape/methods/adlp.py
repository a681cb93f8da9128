"""A-DLP: a direct length penalty whose weight follows the batch accuracy by dual ascent (Su et al., arXiv
2505.18298). Layer 1: the reward and the lambda update (pure). Layer 2: `AdlpController`, which keeps lambda.

Official code: JinyanSu1/A-DLP, commit afbc411d: `verl/verl/trainer/main_ppo.py` (`constrained_reward_fn`:
the correctness reward minus lambda * response length on the last token; `trainer.lambda_len` set from
`algorithm.length_ctrl.lambda_init`), `verl/verl/trainer/ppo/ray_trainer.py` (in `fit`, right after
the reward), `scripts/train.sh` (lambda_init 1e-3, lr 1e-3, acc_init 0.62, n = 4, GRPO).

Order, as the code: the batch's rewards use lambda_t; then the accuracy of that same batch (the share of
rollouts whose correctness reward is positive, over the whole batch before any rejection sampling) gives
lambda_{t+1} = max(0, lambda_t + eta * (acc_t - acc_ref)). The code resets lambda from its config at every
start, so a resumed run loses it; here lambda is the controller's state and is checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.checks import require_range
from dynashape.methods._inputs import as_correct, as_lengths, check_rows

__all__ = ["AdlpConfig", "AdlpController", "AdlpStep", "adlp_lambda_update", "adlp_reward"]


@dataclass(frozen=True, kw_only=True)
class AdlpConfig:
    """A-DLP's dual-ascent hyperparameters."""

    lambda0: float = 1e-3
    """Initial penalty per token (`length_ctrl.lambda_init`). >= 0."""
    eta: float = 1e-3
    """Dual step size (`length_ctrl.lr`). >= 0."""
    acc_ref: float = 0.62
    """Reference accuracy: lambda grows while the batch accuracy is above it (`length_ctrl.acc_init`). [0, 1]."""

    def __post_init__(self) -> None:
        require_range("lambda0", self.lambda0, 0.0, None)
        require_range("eta", self.eta, 0.0, None)
        require_range("acc_ref", self.acc_ref, 0.0, 1.0)


def adlp_reward(correct: torch.Tensor, lengths: torch.Tensor, *, lam: float) -> torch.Tensor:
    """A-DLP reward r = 1[correct] - lambda_t * |y| (A-DLP Eq. 4). Returns float64 Tensor [N].

    Args: correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N]. lam: lambda_t >= 0.
    """
    require_range("lam", lam, 0.0, None)
    check_rows(correct=correct, lengths=lengths)
    return as_correct(correct) - lam * as_lengths(lengths)


def adlp_lambda_update(lam: float, accuracy: float, *, eta: float, acc_ref: float) -> float:
    """lambda_{t+1} = max(0, lambda_t + eta * (acc_t - acc_ref)) (A-DLP Eq. 6), as a Python float."""
    require_range("accuracy", accuracy, 0.0, 1.0)
    return max(0.0, lam + eta * (accuracy - acc_ref))


@dataclass(frozen=True)
class AdlpStep:
    """One A-DLP step: the rewards [N] (float64) under `lam`, the batch accuracy and the next lambda."""

    rewards: torch.Tensor
    lam: float
    accuracy: float
    next_lam: float

    @property
    def metrics(self) -> dict[str, float]:
        return {
            "adlp/lambda": self.lam,
            "adlp/lambda_next": self.next_lam,
            "adlp/accuracy": self.accuracy,
        }


class AdlpController:
    """Keeps A-DLP's lambda across steps. Learned state: `lambda_` (float) and `n_updates_` (int)."""

    def __init__(self, config: AdlpConfig | None = None) -> None:
        self.config = config or AdlpConfig()
        self.reset()

    def reset(self) -> None:
        self.lambda_ = float(self.config.lambda0)
        self.n_updates_ = 0

    def step(self, correct: torch.Tensor, lengths: torch.Tensor) -> AdlpStep:
        """Reward the batch with the current lambda, then advance lambda by the batch's accuracy (once)."""
        rewards = adlp_reward(correct, lengths, lam=self.lambda_)
        accuracy = float(as_correct(correct).mean())
        lam = self.lambda_
        self.lambda_ = adlp_lambda_update(lam, accuracy, eta=self.config.eta, acc_ref=self.config.acc_ref)
        self.n_updates_ += 1
        return AdlpStep(rewards=rewards, lam=lam, accuracy=accuracy, next_lam=self.lambda_)

    def state_dict(self) -> dict[str, Any]:
        return {"lambda": self.lambda_, "n_updates": self.n_updates_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            lam = float(state["lambda"])
            n_updates = int(state["n_updates"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"A-DLP state must hold 'lambda' (float) and 'n_updates' (int): {err}") from err
        if not (lam >= 0.0 and lam < float("inf")) or n_updates < 0:
            raise ValueError(f"A-DLP state is corrupt: lambda={lam}, n_updates={n_updates}")
        self.lambda_ = lam
        self.n_updates_ = n_updates
