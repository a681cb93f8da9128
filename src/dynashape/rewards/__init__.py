"""Rewards: answer extraction, the math verifier and its verl / TRL adapters.

Importing this package never imports math-verify or sympy: they load inside the verifier's worker processes.
"""

from dynashape.rewards.answers import extract_answer, fast_equivalent, normalize_answer
from dynashape.rewards.length import overlong_penalty
from dynashape.rewards.scoring import compute_score, correctness_reward
from dynashape.rewards.verifier import (
    MathVerifier,
    Reason,
    Verdict,
    VerifierConfig,
    default_verifier,
    verify_answer,
)

__all__ = [
    "MathVerifier",
    "Reason",
    "Verdict",
    "VerifierConfig",
    "compute_score",
    "correctness_reward",
    "default_verifier",
    "extract_answer",
    "fast_equivalent",
    "normalize_answer",
    "overlong_penalty",
    "verify_answer",
]
