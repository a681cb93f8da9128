"""MEDS repeated-error penalty (arXiv 2604.11297). Layer 1: pure tensor math.

Paper: "The Past Is Not Past: Memory-Enhanced Dynamic Reward Shaping", arXiv 2604.11297; official code
Linxi000/MEDS. penalty = min(alpha * ln(|C| + 1), beta): 0 for a first-time error (|C| = 0), growing
logarithmically with the size of the recurring cluster the answer falls into, capped at beta.
"""

from __future__ import annotations

import torch

__all__ = ["repeat_penalty"]


def repeat_penalty(cluster_sizes: torch.Tensor, *, alpha: float, beta: float) -> torch.Tensor:
    """min(alpha * ln(|C| + 1), beta) per rollout.

    Args:
        cluster_sizes: integer or float Tensor [N], |C| >= 0 (stored points in the voted cluster).
        alpha: log slope (official 0.1; 0.02 for Qwen3-8B). beta: cap (official 2 * alpha).
    Returns:
        float64 Tensor [N].
    """
    return torch.clamp(alpha * torch.log1p(cluster_sizes.to(torch.float64)), max=beta)
