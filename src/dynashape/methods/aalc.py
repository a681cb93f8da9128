"""AALC: a length reward that switches on as validation accuracy reaches its target (Li et al., arXiv
2506.20160). Layer 1: the reward (pure). Layer 2: `AalcSchedule`, which holds the last validation accuracy.

r = alpha_t * R_raw + c * R_len, a = min(1, A_val / A_target), alpha_t = 0.9 + 0.1 (1 - a),
R_len = 1 - min(a^beta, min(1, |y| / L_max)). Far below the target a^beta is ~0 and R_len ~1 for every length (no
length pressure); at the target a^beta = 1 and shorter answers earn more.

Official code: du-nlp-lab/AALC, commit f12452d6: `verl/workers/reward_manager/length_reward.py`
(`LRRewardManager.__call__`, lines 87-94: beta = 128, c = 1e-6, L_max = `self.max_length` = 1024, all
hard-coded) and `verl/trainer/ppo/ray_trainer.py` (line 818: target_acc = 1; line 921: the reward receives
`list(val_metrics.values())[0]`, the first metric of the latest validation, refreshed every `test_freq` steps).
Before any validation the code passes -1 and the reward is R_raw unchanged: here, `val_accuracy=None`. The
published manager reads a misspelt name (`validataion_acc`) and so raises NameError as written; the intended
formula is unambiguous and is the one implemented. R_raw is the correctness verdict (0/1).

Precision (`precision`, default "float32", the official code's). The official reward is float32 arithmetic:
`valid_response_length` is a 0-d int tensor (an attention-mask sum), so `valid_response_length / 1024` is a
float32 tensor, and while `min` picks it (length ratio below 1 and below a^beta) the whole sum
`reward * alpha + 1e-6 * length_reward` is computed in float32 (a Python float plus a float32 tensor); otherwise
it is Python float64 arithmetic. Either way it is written into a float32 reward tensor (line 94), and verl's GRPO
of that repository (`verl/trainer/ppo/core_algos.py`, `compute_grpo_outcome_advantage`) normalises it in
float32. Next to a reward of 0.9 a float32 step is 6e-8, so the 1e-6 length term keeps about 16 levels, and the
group mean's rounding moves advantages by up to ~0.05 in an all-correct group, whose std is ~1e-7 + eps 1e-6.
"float32" reproduces that arithmetic (`aalc_reward` and `aalc_grpo_float32`); "float64" computes the paper's
formula without rounding. The default follows the official code, as the project's rule asks, because the
paper's results were trained with that rounding. This default was changed from float64 (issue 49): the AALC
rows of the field study (docs/results-field.md), run before it, used "float64" and would change if re-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups
from dynashape.methods._blocks import size_blocks
from dynashape.methods._inputs import as_correct, as_lengths, check_rows

__all__ = ["AALC_PRECISIONS", "AalcConfig", "AalcSchedule", "aalc_grpo_float32", "aalc_reward"]

Precision = Literal["float32", "float64"]
AALC_PRECISIONS: tuple[str, ...] = ("float32", "float64")


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
    precision: Precision = "float32"
    """'float32': the official code's arithmetic (float32 reward and GRPO, see the module docstring); 'float64':
    the formula unrounded (the default before issue 49)."""

    def __post_init__(self) -> None:
        require_choice("precision", self.precision, AALC_PRECISIONS)
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
    precision: Precision = "float32",
) -> torch.Tensor:
    """AALC reward r = alpha_t * 1[correct] + c * R_len (AALC Eq. 3-5, `LRRewardManager`), or 1[correct] when
    there is no validation accuracy yet.

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N] (token counts).
        val_accuracy: the last validation accuracy A_val in [0, 1], or None before the first validation.
        beta, c, l_max, a_target, precision: see `AalcConfig`.
    Returns: float64 Tensor [N]; under "float32" its values are the official float32 rewards.
    """
    require_choice("precision", precision, AALC_PRECISIONS)
    check_rows(correct=correct, lengths=lengths)
    raw, length = as_correct(correct), as_lengths(lengths)
    if val_accuracy is None:
        return raw
    require_range("val_accuracy", val_accuracy, 0.0, 1.0)
    a = min(1.0, val_accuracy / a_target)
    alpha = 0.9 + 0.1 * (1.0 - a)
    if precision == "float32":
        return _official_float32(raw * alpha, length, switch=a**beta, c=c, l_max=l_max)
    length_ratio = (length / l_max).clamp_max(1.0)
    r_len = 1.0 - length_ratio.clamp_max(a**beta)
    return alpha * raw + c * r_len


def _official_float32(
    base: torch.Tensor, length: torch.Tensor, *, switch: float, c: float, l_max: float
) -> torch.Tensor:
    """`LRRewardManager`'s arithmetic for every row at once: the same torch operations on [N] as the code's on
    0-d tensors (elementwise, so each row rounds as it would alone). base: float64 [N], reward * alpha."""
    ratio = length.round().to(torch.int64) / l_max  # float32, as valid_response_length / self.max_length
    # min(1, ratio) and then min(acc_ratio ** 128, .) return the tensor only where it is the smaller
    by_tensor = (ratio < 1) & (ratio < switch)
    in_float32 = base.to(torch.float32) + c * (1 - ratio)  # a Python float plus a float32 tensor
    in_python = (base + c * (1.0 - switch)).to(torch.float32)  # float64, rounded when stored
    return torch.where(by_tensor, in_float32, in_python).to(torch.float64)


def aalc_grpo_float32(rewards: torch.Tensor, groups: Groups, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO as AALC's verl computes it (`compute_grpo_outcome_advantage`, du-nlp-lab/AALC@f12452d), in float32:
    per group (r - torch.mean) / (torch.std + eps), Bessel std; a group of one gets mean 0 and std 1, so
    r / (1 + eps) (the library's GroupNormalise gives it 0).

    The mean is the row-wise `mean(dim=1)` of each group's [G', size] block, which rounds as verl's
    `torch.mean` of the group's 1-d tensor (checked in tests/methods/test_aalc.py); verl's std is a full reduction
    whose rounding may differ from the row-wise std by a few float32 steps (relative 1e-7 on the advantage).
    Args: rewards: float Tensor [N] (float32 values). groups: the batch's Groups. eps: verl's epsilon.
    Returns: float64 Tensor [N] holding float32 values.
    """
    scores = rewards.detach().cpu().to(torch.float32)
    out = torch.zeros_like(scores)
    for _, rows in size_blocks(groups):
        block = scores[rows]  # [G', size]
        if block.shape[1] == 1:
            out[rows] = (block - torch.tensor(0.0, device=block.device)) / (
                torch.tensor(1.0, device=block.device) + eps
            )
        else:
            mean = block.mean(dim=1, keepdim=True)
            out[rows] = (block - mean) / (block.std(dim=1, keepdim=True) + eps)
    return out.to(device=rewards.device, dtype=torch.float64)


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
            precision=cfg.precision,
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
