"""Input checks and the one reward channel most field methods share. Layer 1: tensors in, tensors out.

Every check raises ValueError naming the argument and the first bad index, so that an engine adapter that passes
a wrong column learns at once which one. The field's rewards are float64 tensors: AALC adds a 1e-6 term to
rewards near 1, which float32 (resolution about 6e-8 at 0.9) rounds to a few per cent. Its official code does
round it, so AALC's default reproduces that float32 arithmetic and holds the result in float64 (`aalc.py`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "STD_KINDS",
    "WHITEN_MODES",
    "as_correct",
    "as_lengths",
    "as_rewards",
    "capped_correct",
    "check_norm",
    "check_rows",
    "require_int",
]

_F64 = torch.float64

#: Group normalisation: "unbiased" divides by the group's Bessel std + eps (GRPO), "none" only centres.
STD_KINDS: tuple[str, ...] = ("unbiased", "none")
#: BatchWhiten: "token" weights rollouts by length (verl's masked_whiten), "sequence" equally (TRL), "none".
WHITEN_MODES: tuple[str, ...] = ("token", "sequence", "none")


def check_norm(std: str, eps: float) -> None:
    """Refuse a group normalisation's std kind or eps, naming the field."""
    from dynashape.core.checks import require_choice, require_range

    require_choice("std", std, STD_KINDS)
    require_range("eps", eps, 0.0, None, low_open=True)  # eps = 0 turns a constant group's 0 / 0 into NaN


def check_rows(**tensors: torch.Tensor | None) -> int:
    """Raise unless every given tensor has the same first dimension N > 0. Returns N."""
    present = {name: t for name, t in tensors.items() if t is not None}
    sizes = {name: int(t.shape[0]) if t.dim() > 0 else -1 for name, t in present.items()}
    if any(s < 0 for s in sizes.values()):
        bad = next(name for name, s in sizes.items() if s < 0)
        raise ValueError(f"{bad} must have a rollout dimension, got a 0-d tensor")
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"{name} [{s}]" for name, s in sizes.items())
        raise ValueError(f"rollout counts differ: {shown}")
    n = next(iter(sizes.values()))
    if n == 0:
        raise ValueError("the batch is empty (N = 0)")
    return n


def _first_bad(bad: torch.Tensor) -> int:
    return int(torch.nonzero(bad.reshape(bad.shape[0], -1).any(-1))[0, 0])


def as_rewards(name: str, values: torch.Tensor) -> torch.Tensor:
    """Float64 copy of a reward tensor [N] or [N, K]; NaN or inf raises ValueError naming `name` and the row."""
    values = values.to(_F64)
    finite = torch.isfinite(values)
    if not bool(finite.all()):
        i = _first_bad(~finite)
        raise ValueError(f"{name}[{i}]={values[i].tolist()} must be finite")
    return values


def _per_rollout(name: str, values: torch.Tensor, bad: torch.Tensor, rule: str) -> torch.Tensor:
    """Raise ValueError naming `name` and the first row where `bad` holds; else return `values`."""
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise ValueError(f"{name}[{i}]={values[i].item()} {rule}")
    return values


def _one_dim(name: str, values: torch.Tensor) -> torch.Tensor:
    if values.dim() != 1:
        raise ValueError(f"{name} must be 1-d [N], got shape {tuple(values.shape)}")
    return values.to(_F64)


def as_correct(correct: torch.Tensor, name: str = "correct") -> torch.Tensor:
    """Float64 0/1 [N] from a BoolTensor or a 0/1 float/int tensor; any other value raises ValueError."""
    values = _one_dim(name, correct)
    return _per_rollout(name, values, (values != 0) & (values != 1), "must be 0 or 1 (a verifier verdict)")


def as_lengths(lengths: torch.Tensor, name: str = "lengths") -> torch.Tensor:
    """Float64 [N] from token counts; negative, NaN or inf values raise ValueError naming `name` and the row."""
    values = _one_dim(name, lengths)
    return _per_rollout(name, values, ~torch.isfinite(values) | (values < 0), "must be a finite number >= 0")


def require_int(field: str, value: Any, low: int) -> None:
    """Raise ValueError unless `value` is an int (not a bool) >= low: token counts, steps, group sizes."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{field}={value!r} must be an integer >= {low}")


def capped_correct(correct: torch.Tensor, lengths: torch.Tensor, cap: float | torch.Tensor) -> torch.Tensor:
    """1[correct and length <= cap], float64 [N]: ThinkPrune's and DLER's reward, LASER's bonus condition.

    The cap is inclusive (a response of exactly `cap` tokens passes), as every official code compares with <=.
    Args: correct, lengths: float64 [N] (from `as_correct`, `as_lengths`). cap: a number or float Tensor [N].
    """
    return correct * (lengths <= cap).to(_F64)
