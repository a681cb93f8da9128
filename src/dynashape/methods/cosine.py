"""The cosine length-scaled reward (Yeo et al. 2025, arXiv 2502.03373), as Hugging Face's open-r1
`get_cosine_scaled_reward` computes it. Layer 1: pure tensor math and its config."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dynashape.core.checks import require_range
from dynashape.methods._inputs import check_norm

__all__ = ["CosineConfig", "cosine_length_reward"]


def cosine_length_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    *,
    min_value_wrong: float,
    max_value_wrong: float,
    min_value_correct: float,
    max_value_correct: float,
    max_len: float,
    exceed_length: float | None = None,
    exceed_margin: float = 0.0,
) -> torch.Tensor:
    """Cosine length-scaled reward (Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning in LLMs",
    arXiv 2502.03373, its cosine length-scaling reward), as Hugging Face's `get_cosine_scaled_reward` computes it.

    With t = l / max_len and (lo, hi) = (min_value_correct, max_value_correct) for a correct answer,
    (max_value_wrong, min_value_wrong) for a wrong one (the source swaps the wrong pair on purpose):

        r = lo + 0.5 * (hi - lo) * (1 + cos(pi * t))

    so r = hi at l = 0 and r = lo at l = max_len: a short correct answer earns max_value_correct, a short wrong
    one is punished with min_value_wrong, a long wrong one only with max_value_wrong. Beyond max_len the
    reference function keeps following the cosine (it is periodic: l = 2 max_len gives hi again); with
    `exceed_length` set, every rollout with l + exceed_margin >= max_len gets exceed_length instead, as the
    paper's own code does (`CosineScaledSparseReward`, margin 16 there).

    Args:
        correct: BoolTensor [N]. lengths: integer or float Tensor [N], tokens.
    Returns:
        float64 Tensor [N] on the input's device.
    """
    length = lengths.to(torch.float64)
    cosine = torch.cos(length * (math.pi / max_len))
    is_correct = correct.bool()
    # new_tensor: float64 on the input's device (a Python-scalar where() would round the values to float32)
    lo = torch.where(is_correct, length.new_tensor(min_value_correct), length.new_tensor(max_value_wrong))
    hi = torch.where(is_correct, length.new_tensor(max_value_correct), length.new_tensor(min_value_wrong))
    reward = lo + 0.5 * (hi - lo) * (1.0 + cosine)
    if exceed_length is not None:
        reward = torch.where(length + exceed_margin >= max_len, exceed_length, reward)
    return reward


@dataclass(frozen=True, kw_only=True)
class CosineConfig:
    """Defaults: the signature of `get_cosine_scaled_reward` in Hugging Face's open-r1 (`src/open_r1/rewards.py`),
    the TRL recipe the issue names (TRL itself does not ship the function in `trl.rewards`). open-r1's script
    arguments default min_value_wrong to 0.0 instead."""

    min_value_wrong: float = -1.0
    """Reward of a wrong answer of length 0 (the most punished: short and wrong)."""
    max_value_wrong: float = -0.5
    """Reward of a wrong answer of length max_len."""
    min_value_correct: float = 0.5
    """Reward of a correct answer of length max_len."""
    max_value_correct: float = 1.0
    """Reward of a correct answer of length 0."""
    max_len: float = 1000
    """Length (tokens) at which the cosine reaches its end value; the reference counts characters."""
    exceed_length: float | None = None
    """None: the cosine continues past max_len (open-r1). A value: the reward of every rollout with
    l + exceed_margin >= max_len (the paper's code; its runs used e.g. -10)."""
    exceed_margin: float = 0.0
    """Tokens added to l before comparing with max_len when exceed_length is set (16 in the paper's code)."""
    std: str = "unbiased"
    """Group normalisation: "unbiased" (GRPO, Bessel std, as TRL's GRPOTrainer) or "none" (centre only)."""
    eps: float = 1e-6
    """Added to the group std (outside the square root, as verl)."""

    def __post_init__(self) -> None:
        for field in ("min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct"):
            require_range(field, getattr(self, field))
        require_range("max_len", self.max_len, 0.0, None, low_open=True)
        if self.exceed_length is not None:
            require_range("exceed_length", self.exceed_length)
        require_range("exceed_margin", self.exceed_margin, 0.0, None)
        check_norm(self.std, self.eps)
