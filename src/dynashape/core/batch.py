"""RolloutBatch: the one input type of every shaper (flat rollouts plus group ids).

A batch is N rollouts side by side. Groups (the rollouts of one prompt) are given by `group_ids`, any integers,
so groups may have different sizes after dynamic sampling or truncation. Vocabulary mapped to the engines:
`group_ids` = verl `index` / `uid`, group size = TRL `num_generations`.

Validation happens once, on construction: equal first dimensions, finite values, non-negative lengths, N > 0.
A violation raises ValueError naming the field and the first bad index. Nothing is coerced silently: integer
fields must have an integer dtype, `correct` must be boolean or exactly 0/1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["RolloutBatch", "group_ids_from_uids"]

# Refuses a field whose rows or device differ from group_ids's (built per batch in __post_init__).
_RowCheck = Callable[[str, torch.Tensor], None]


def _as_tensor(field: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field} must be a tensor or array, got {type(value).__name__}") from err


def _first_index(bad: torch.Tensor) -> tuple[int, ...]:
    """Index of the first True of a boolean tensor, as a tuple (row, col, ...)."""
    flat = int(torch.nonzero(bad.reshape(-1), as_tuple=False)[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(bad.shape)))


def _fmt_index(idx: tuple[int, ...]) -> str:
    return str(idx[0]) if len(idx) == 1 else str(list(idx))


def _require_integer(field: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` as int64: every integer dtype is legal (engines send int32, numpy may send uint8 ...); the group
    maths and torch's indexing want int64, and a uint64 value beyond int64 is refused rather than wrapped."""
    if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
        raise ValueError(f"{field} must have an integer dtype, got {t.dtype}")
    if t.dtype == torch.uint64:
        as_int64 = t.view(torch.int64)  # torch has few uint64 kernels; values >= 2**63 read as negative here
        big = as_int64 < 0
        if bool(big.any()):
            idx = _first_index(big)
            raise ValueError(f"{field} has a value beyond int64 ({t[idx].item()}) at index {_fmt_index(idx)}")
        return as_int64.clone()
    return t if t.dtype == torch.int64 else t.to(torch.int64)


def _require_finite(field: str, t: torch.Tensor) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = _first_index(bad)
        raise ValueError(f"{field} has a non-finite value {t[idx].item()!r} at index {_fmt_index(idx)}")


def _flags(field: str, value: Any, check_rows: _RowCheck) -> torch.Tensor:
    """A 1-D bool [N] from a BoolTensor or an exactly 0/1 tensor (verdicts, truncation, format)."""
    t = _as_tensor(field, value)
    if t.dim() != 1:
        raise ValueError(f"{field} must be 1-D [N], got shape {tuple(t.shape)}")
    check_rows(field, t)
    if t.dtype == torch.bool:
        return t
    if t.is_floating_point():
        _require_finite(field, t)
    bad = (t != 0) & (t != 1)
    if bool(bad.any()):
        idx = _first_index(bad)
        raise ValueError(f"{field} must be boolean or 0/1, got {t[idx].item()!r} at index {_fmt_index(idx)}")
    return t != 0


def _token_counts(field: str, value: Any, check_rows: _RowCheck) -> torch.Tensor:
    """A 1-D integer [N] of token counts (lengths, budgets): non-negative, no silent cast from floats."""
    t = _as_tensor(field, value)
    if t.dim() != 1:
        raise ValueError(f"{field} must be 1-D [N], got shape {tuple(t.shape)}")
    check_rows(field, t)
    if t.is_floating_point():
        _require_finite(field, t)
    t = _require_integer(field, t)
    neg = t < 0
    if bool(neg.any()):
        idx = _first_index(neg)
        raise ValueError(f"{field} has a negative value {t[idx].item()} at index {_fmt_index(idx)}")
    return t


def _float_matrix(field: str, width: str, value: Any, check_rows: _RowCheck) -> torch.Tensor:
    """``value`` as a floating tensor [N, width] with width >= 1 and N rows (``check_rows``)."""
    t = _as_tensor(field, value)
    if t.dim() != 2 or t.shape[1] == 0:
        raise ValueError(f"{field} must be 2-D [N, {width}] with {width} >= 1, got shape {tuple(t.shape)}")
    check_rows(field, t)
    if not t.is_floating_point():
        raise ValueError(f"{field} must have a floating dtype, got {t.dtype}")
    return t


def _rewards(value: Any, check_rows: _RowCheck) -> torch.Tensor:
    """The extra reward channels as a float [N, K], K >= 1, every value finite."""
    rewards = _float_matrix("rewards", "K", value, check_rows)
    _require_finite("rewards", rewards)
    return rewards


def _prompt_keys(value: Any, n: int) -> tuple[str, ...]:
    """N prompt keys as a tuple of str (a lone string is refused: it would read as N one-letter keys)."""
    if isinstance(value, (str, bytes)):
        raise ValueError("prompt_keys must be a sequence of N str, got a single string")
    prompt_keys = tuple(value)
    if len(prompt_keys) != n:
        raise ValueError(f"prompt_keys has {len(prompt_keys)} entries but group_ids has {n}")
    for i, key in enumerate(prompt_keys):
        if not isinstance(key, str):
            raise ValueError(f"prompt_keys[{i}] must be str, got {type(key).__name__}")
    return prompt_keys


def _fingerprints(value: Any, check_rows: _RowCheck) -> torch.Tensor:
    """Fingerprints as a float [N, D], D >= 1; a row of all NaN is legal and means "no fingerprint"."""
    fingerprints = _float_matrix("fingerprints", "D", value, check_rows)
    # A whole NaN row means "no fingerprint"; anything else non-finite is corrupt data.
    nan_row = torch.isnan(fingerprints).all(dim=1, keepdim=True)
    _require_finite("fingerprints", torch.where(nan_row, 0.0, fingerprints))
    return fingerprints


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """N rollouts of M prompts, flat, with the verdicts and lengths every shaper needs.

    Attributes:
        group_ids: LongTensor [N]. Which prompt each rollout answers (any ints; need not be contiguous or sorted).
        correct: BoolTensor [N]. Verifier verdict (a 0/1 float tensor is accepted and stored as bool).
        lengths: LongTensor [N]. Response length in tokens (prompt excluded, EOS included, as the engine counts).
        rewards: optional float Tensor [N, K]. Extra reward channels (format, overlong, ...).
        prompt_keys: optional tuple of N str. A stable id of each rollout's prompt across steps (MEDS memory).
        fingerprints: optional float Tensor [N, D]; a row of all NaN means "no fingerprint" (MEDS).
        budgets: optional LongTensor [N]. The token budget each rollout's prompt asked for (L1's n_gold);
            validated like `lengths` (integer dtype, non-negative).
        truncated: optional BoolTensor [N]. True where the response did not end by itself: the engine stopped
            it at its length cap (verl: finish reason "length" or length == max_response_length; TRL: no EOS in
            the completion; the reference trainer: the cap reached without EOS). DLER's stop-properly penalty
            and the ``stop_properly`` part read it. Boolean or exactly 0/1, like `correct`.
        formatted: optional BoolTensor [N]. True where the response gives its final answer in the form the
            prompt asks for (the library's verifier: a closed ``\\boxed{}``); LASER's official base score reads
            it (-1 for an unformatted response). Boolean or exactly 0/1.
    """

    group_ids: torch.Tensor
    correct: torch.Tensor
    lengths: torch.Tensor
    rewards: torch.Tensor | None = None
    prompt_keys: tuple[str, ...] | None = None
    fingerprints: torch.Tensor | None = None
    budgets: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    formatted: torch.Tensor | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen dataclass: normalise fields once, here
        group_ids = _as_tensor("group_ids", self.group_ids)
        if group_ids.dim() != 1:
            raise ValueError(f"group_ids must be 1-D [N], got shape {tuple(group_ids.shape)}")
        n = group_ids.shape[0]
        if n == 0:
            raise ValueError("empty batch: group_ids has 0 rollouts (N must be > 0)")
        group_ids = _require_integer("group_ids", group_ids)
        device = group_ids.device

        def check_rows(field: str, t: torch.Tensor) -> None:
            if t.shape[0] != n:
                raise ValueError(f"{field} has {t.shape[0]} rows but group_ids has {n} (shape mismatch)")
            if t.device != device:
                raise ValueError(f"{field} is on {t.device} but group_ids is on {device}")

        correct = _flags("correct", self.correct, check_rows)
        truncated = None if self.truncated is None else _flags("truncated", self.truncated, check_rows)
        formatted = None if self.formatted is None else _flags("formatted", self.formatted, check_rows)

        lengths = _token_counts("lengths", self.lengths, check_rows)
        budgets = None if self.budgets is None else _token_counts("budgets", self.budgets, check_rows)
        rewards = None if self.rewards is None else _rewards(self.rewards, check_rows)
        prompt_keys = None if self.prompt_keys is None else _prompt_keys(self.prompt_keys, n)
        fingerprints = None if self.fingerprints is None else _fingerprints(self.fingerprints, check_rows)

        set_(self, "group_ids", group_ids)
        set_(self, "correct", correct)
        set_(self, "lengths", lengths)
        set_(self, "rewards", rewards)
        set_(self, "prompt_keys", prompt_keys)
        set_(self, "fingerprints", fingerprints)
        set_(self, "budgets", budgets)
        set_(self, "truncated", truncated)
        set_(self, "formatted", formatted)

    def __len__(self) -> int:
        return int(self.group_ids.shape[0])

    @property
    def device(self) -> torch.device:
        return self.group_ids.device

    @classmethod
    def from_uids(cls, uids: Sequence[Any] | np.ndarray, **fields: Any) -> RolloutBatch:
        """Build a batch from verl-style per-rollout uid strings (see `group_ids_from_uids`).

        verl's uid is a fresh uuid per prompt per step, so it is not used as `prompt_keys`: pass stable keys
        (e.g. a hash of the prompt text) for anything that must persist across steps (MEDS memory).
        """
        lengths = fields.get("lengths")
        device = lengths.device if isinstance(lengths, torch.Tensor) else None
        return cls(group_ids=group_ids_from_uids(uids, device), **fields)


def _require_one_uid_type(uids: Sequence[Any]) -> None:
    kinds = {int if isinstance(u, (int, np.integer)) else type(u) for u in uids}
    if len(kinds) > 1:
        raise ValueError(f"uids mix types {sorted(k.__name__ for k in kinds)}: use one type for every uid")


def group_ids_from_uids(uids: Sequence[Any] | np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """Per-rollout uids (str or int, verl's `index`) -> LongTensor [N] of group ids, numbered by sorted uid.

    Any numbering works (shapers only compare ids); np.unique keeps it vectorised over rollouts.
    """
    if isinstance(uids, (str, bytes)):
        raise ValueError("uids must be a sequence of N uids, got a single string")
    if isinstance(uids, (list, tuple)):
        _require_one_uid_type(uids)  # numpy would turn [1, "1"] into two equal strings: one group of two prompts
    arr = np.asarray(uids)
    if arr.dtype == object:
        _require_one_uid_type(arr.tolist())
    if arr.ndim != 1:
        raise ValueError(f"uids must be 1-D [N], got shape {arr.shape}")
    _, inverse = np.unique(arr.astype(str) if arr.dtype == object else arr, return_inverse=True)
    return torch.from_numpy(inverse.reshape(-1).astype(np.int64)).to(device)
