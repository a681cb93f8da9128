"""AALC: a length reward that switches on as validation accuracy reaches its target (Li et al., arXiv
2506.20160). Layer 1: the reward (pure). Layer 2: `AalcSchedule`, which holds the last validation accuracy.

r = alpha_t * R_raw + c * R_len, a = min(1, A_val / A_target), alpha_t = 0.9 + 0.1 (1 - a),
R_len = 1 - min(a^beta, min(1, |y| / L_max)). Far below the target a^beta is ~0 and R_len ~1 for every length (no
length pressure); at the target a^beta = 1 and shorter answers earn more.

Official code: du-nlp-lab/AALC, commit f12452d6: `verl/workers/reward_manager/length_reward.py`
(`LRRewardManager.__call__`, lines 88-92: beta = 128, c = 1e-6, L_max = `self.max_length` = 1024, all
hard-coded) and `verl/trainer/ppo/ray_trainer.py` (line 818: target_acc = 1; line 921: the reward receives
`list(val_metrics.values())[0]`, the first metric of the latest validation, refreshed every `test_freq` steps).
Before any validation the code passes -1 and the reward is R_raw unchanged: here, `val_accuracy=None`. The
published manager reads a misspelt name (`validataion_acc`) and so raises NameError as written; the intended
formula is unambiguous and is the one implemented. R_raw is the correctness verdict (0/1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.checks import require_range
from dynashape.methods._inputs import as_correct, as_lengths, check_rows

__all__ = ["AalcConfig", "AalcSchedule", "aalc_reward"]


@dataclass(frozen=True, kw_only=True)
class AalcConfig:
    """AALC's schedule constants (the code's values)."""

    beta: float = 128
    """Sharpness of the switch a^beta (code: 128). > 0."""
    c: float = 1e-6
    """Weight of the length reward (code: 1e-6). >= 0."""
    l_max: float = 1024
    """Length at which the length ratio saturates at 1, in tokens (code: 1024). > 0."""
    a_target: float = 1.0
    """Target validation accuracy A_target (code: 1). (0, 1]."""

    def __post_init__(self) -> None:
        require_range("beta", self.beta, 0.0, None, low_open=True)
        require_range("c", self.c, 0.0, None)
        require_range("l_max", self.l_max, 0.0, None, low_open=True)
        require_range("a_target", self.a_target, 0.0, 1.0, low_open=True)


def aalc_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    *,
    val_accuracy: float | None,
    beta: float = 128,
    c: float = 1e-6,
    l_max: float = 1024,
    a_target: float = 1.0,
) -> torch.Tensor:
    """AALC reward r = alpha_t * 1[correct] + c * R_len (AALC Eq. 3-5, `LRRewardManager`), or 1[correct] when
    there is no validation accuracy yet.

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N].
        val_accuracy: the last validation accuracy A_val in [0, 1], or None before the first validation.
        beta, c, l_max, a_target: see `AalcConfig`.
    Returns: float64 Tensor [N] (float64 matters: c * R_len is ~1e-6 next to rewards near 1).
    """
    check_rows(correct=correct, lengths=lengths)
    raw, length = as_correct(correct), as_lengths(lengths)
    if val_accuracy is None:
        return raw
    require_range("val_accuracy", val_accuracy, 0.0, 1.0)
    a = min(1.0, val_accuracy / a_target)
    alpha = 0.9 + 0.1 * (1.0 - a)
    length_ratio = (length / l_max).clamp_max(1.0)
    r_len = 1.0 - length_ratio.clamp_max(a**beta)
    return alpha * raw + c * r_len


class AalcSchedule:
    """Holds AALC's last validation accuracy A_val. Learned state: `val_accuracy_` (float or None).

    The trainer calls `observe_validation(acc)` after each validation; `reward` reads the value (no state change).
    """

    def __init__(self, config: AalcConfig | None = None) -> None:
        self.config = config or AalcConfig()
        self.reset()

    def reset(self) -> None:
        self.val_accuracy_: float | None = None

    def observe_validation(self, accuracy: float) -> None:
        require_range("accuracy", accuracy, 0.0, 1.0)
        self.val_accuracy_ = float(accuracy)

    def reward(self, correct: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        return aalc_reward(
            correct,
            lengths,
            val_accuracy=self.val_accuracy_,
            beta=cfg.beta,
            c=cfg.c,
            l_max=cfg.l_max,
            a_target=cfg.a_target,
        )

    @property
    def metrics(self) -> dict[str, float]:
        """`aalc/val_accuracy` and `aalc/alpha` once a validation accuracy is known; empty before."""
        if self.val_accuracy_ is None:
            return {}
        a = min(1.0, self.val_accuracy_ / self.config.a_target)
        return {"aalc/val_accuracy": self.val_accuracy_, "aalc/alpha": 0.9 + 0.1 * (1.0 - a)}

    def state_dict(self) -> dict[str, Any]:
        return {"val_accuracy": self.val_accuracy_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or "val_accuracy" not in state:
            raise ValueError(f"AALC state must hold 'val_accuracy' (a float in [0, 1] or None), got {state!r}")
        value = state["val_accuracy"]
        if value is not None:
            require_range("val_accuracy", value, 0.0, 1.0)
            value = float(value)
        self.val_accuracy_ = value
