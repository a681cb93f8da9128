"""Where the MEDS fingerprint is read: the answer token of each response (MEDS, arXiv 2604.11297).

1. :func:`answer_positions` finds p, the ``{`` of the last ``\\boxed{`` in each response (response-relative),
   and :func:`answer_targets` reads y*, the token sampled at p + 1.
2. :func:`padded_token_index` / :func:`packed_token_index` turn response-relative positions into indices of
   the forward's input (left/right-padded ``[B, S]`` batches, or verl's packed ``[1, total]`` row), ready for
   :class:`dynashape.meds.capture.FingerprintCapture`.

Everything is vectorised over rollouts: the token strings are looked at once per tokenizer (a table of flags
over the vocabulary), after which a batch is a handful of tensor ops.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "BOXED_MARKER",
    "TokenIndex",
    "answer_positions",
    "answer_targets",
    "packed_token_index",
    "padded_token_index",
]

BOXED_MARKER = "\\boxed{"
_RULES = ("official", "last")

# ---------------------------------------------------------------------------------------------------------
# 1. Answer position and target
# ---------------------------------------------------------------------------------------------------------


_BOXED, _BRACE = 1, 2  # bit flags of a token


class _TokenTables(NamedTuple):
    flags: Tensor  # [V + 2] uint8 indexed by id + 1: _BOXED if the token contains "boxed" (any case), _BRACE
    # if it contains "{"; entries 0 and V + 1 are 0 (ids below 0 or beyond the tokenizer, padding)
    marker: Tensor  # [L] long: tokenizer.encode("\\boxed{") without special tokens


_TABLES: weakref.WeakKeyDictionary[Any, _TokenTables] = weakref.WeakKeyDictionary()


def _decode_each(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text of every single token; one Rust call for fast tokenizers (4x faster than batch_decode)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.decode_batch([[i] for i in ids], skip_special_tokens=False)
    return tokenizer.batch_decode([[i] for i in ids])


def _token_tables(tokenizer: Any) -> _TokenTables:
    """Per-vocabulary lookup tables, built once per tokenizer (about 0.5 s for a 150k vocabulary).

    A token matches when its vocabulary string (``convert_ids_to_tokens``, what the official code tests) OR
    its decoded text contains the substring. The decoded form catches byte-fallback pieces such as
    ``<0x7B>``; byte-level BPE strings like ``Ġ{`` already contain ``{``. The cache is keyed by the tokenizer
    object and rebuilt when its length changes (tokens added).
    """
    vocab = len(tokenizer)
    try:
        cached = _TABLES.get(tokenizer)
    except TypeError:  # not weak-referenceable: build every time
        cached = None
    if cached is not None and len(cached.flags) == vocab + 2:
        return cached
    ids = list(range(vocab))
    pieces = tokenizer.convert_ids_to_tokens(ids)
    decoded = _decode_each(tokenizer, ids)
    texts = [f"{p or ''}\x00{d or ''}".lower() for p, d in zip(pieces, decoded, strict=True)]
    # Zero entries at both ends: ids are shifted by one and clamped, so -100, padding and ids of a padded
    # model vocabulary (beyond the tokenizer) land on a token that matches nothing.
    flags = [0] + [_BOXED * ("boxed" in t) + _BRACE * ("{" in t) for t in texts] + [0]
    marker = torch.tensor(tokenizer.encode(BOXED_MARKER, add_special_tokens=False), dtype=torch.long)
    tables = _TokenTables(torch.tensor(flags, dtype=torch.uint8), marker)
    try:
        _TABLES[tokenizer] = tables
    except TypeError:
        pass
    return tables


def _as_padded(
    token_ids: Tensor | Sequence[Sequence[int]], mask: Tensor | None, pad_token_id: int | None
) -> tuple[Tensor, Tensor]:
    """Rollouts as a LongTensor [N, T] and a bool mask [N, T] of real tokens."""
    if mask is not None and pad_token_id is not None:
        raise ValueError("pad_token_id: give either response_mask or pad_token_id, not both")
    if isinstance(token_ids, Tensor):
        if token_ids.dim() != 2:
            raise ValueError(f"response_token_ids: expected shape [N, T], got {tuple(token_ids.shape)}")
        ids = token_ids.long()
        if mask is not None:
            if mask.shape != ids.shape:
                raise ValueError(f"response_mask: shape {tuple(mask.shape)} != ids shape {tuple(ids.shape)}")
            return ids, mask.to(device=ids.device, dtype=torch.bool)
        if pad_token_id is not None:
            return ids, ids != pad_token_id
        return ids, torch.ones_like(ids, dtype=torch.bool)
    if mask is not None or pad_token_id is not None:
        raise ValueError("response_mask: a mask or pad id only applies to a padded tensor, not to lists")
    lengths = torch.tensor([len(r) for r in token_ids], dtype=torch.long)
    width = int(lengths.max()) if len(lengths) else 0
    valid = torch.arange(width) < lengths[:, None]
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    # Flatten once and scatter by the mask: row-major order of True cells equals the concatenated rows.
    # np.fromiter is the cheapest way from Python ints to a buffer (~3x torch.tensor(list)).
    flat = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=int(lengths.sum()))
    ids[valid] = torch.from_numpy(flat)
    return ids, valid


def answer_positions(
    response_token_ids: Tensor | Sequence[Sequence[int]],
    tokenizer: Any,
    *,
    response_mask: Tensor | None = None,
    pad_token_id: int | None = None,
    window: int = 10,
    rule: Literal["official", "last"] = "official",
) -> Tensor:
    """Position p of the answer's opening ``{`` in each response (MEDS, arXiv 2604.11297), or -1.

    Rule (as the official MEDS code): p is the last token of the LAST exact occurrence of the token sequence
    ``tokenizer.encode("\\boxed{")``. Without one (the tokenizer merged ``{`` with its neighbours), p is
    found from the last token whose string contains ``boxed`` that has a token containing ``{`` among itself
    and the next ``window - 1`` tokens: the first such token. Matching uses the token strings, so it works
    for byte-level BPE (``Ġ{``), SentencePiece (``▁{``) and character-level vocabularies alike.

    With ``rule="last"`` (an option, not the official behaviour) p is the later of the two candidates, so a
    response whose last box is not an exact marker match (``Ġ\\boxed{`` after a space while the marker
    encodes as ``\\boxed{``) uses its last box rather than an earlier exact one.

    Deviation from the official code, on purpose: p = -1 also when p is the last real token, because y* (the
    token at p + 1) does not exist there; the official code would read a padding token as the answer.

    Args:
        response_token_ids: Response tokens only, as a list of N lists of ints or a LongTensor [N, T].
        tokenizer: Any Hugging Face tokenizer (``convert_ids_to_tokens``, ``batch_decode``, ``encode``).
        response_mask: Optional [N, T] mask of real tokens for a tensor input (bool or 0/1).
        pad_token_id: Alternative to ``response_mask``: positions holding this id are padding.
        window: Tokens searched for ``{`` from a ``boxed`` token, the token itself included (official: 10).
        rule: ``"official"`` (exact marker match first, fallback only without one) or ``"last"``.

    Returns:
        LongTensor [N] of response-relative positions, -1 where there is no answer; on the input's device.
    """
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    if rule not in _RULES:
        raise ValueError(f"rule: must be one of {_RULES}, got {rule!r}")
    ids, mask = _as_padded(response_token_ids, response_mask, pad_token_id)
    tables = _token_tables(tokenizer)
    n, t = ids.shape
    device = ids.device
    none = torch.full((n,), -1, dtype=torch.long, device=device)
    if n == 0 or t == 0:
        return none
    # Dense work is a few passes over [N, T] (an id remap, a flag lookup, two scans); everything after runs
    # on the few tokens that can matter (marker starts, "boxed" tokens): 8192 x 1000 rollouts take ~0.2 s
    # on 2 CPU cores, against ~5 s for the official per-rollout loop (benchmarks/bench_fingerprint.py).
    tokens = (ids + 1).clamp_(0, len(tables.flags) - 1).masked_fill_(~mask, 0)  # id + 1, 0 = no token
    flags = tables.flags.to(device)[tokens]

    # Exact marker: starts where the first marker token sits, kept if the next L - 1 tokens follow it.
    marker = tables.marker.to(device) + 1
    exact = none
    if len(marker) > 0:
        rows, cols = (tokens == marker[0]).nonzero(as_tuple=True)
        offsets = torch.arange(len(marker), device=device)
        span = cols[:, None] + offsets  # [K, L]
        inside = span < t
        match = (tokens[rows[:, None], span.clamp(max=t - 1)] == marker) & inside
        ends = torch.where(match.all(1), cols + len(marker) - 1, -1)
        exact = none.scatter_reduce(0, rows, ends, reduce="amax")

    # Fallback: for each "boxed" token, the first "{" token among it and the next window - 1 tokens.
    # Later boxed tokens never give an earlier brace, so the last valid one is the row's maximum.
    rows, cols = (flags & _BOXED).nonzero(as_tuple=True)
    span = cols[:, None] + torch.arange(window, device=device)  # [K, window]
    brace = ((flags[rows[:, None], span.clamp(max=t - 1)] & _BRACE) > 0) & (span < t)
    first = brace.int().argmax(1)  # first True (0 when none, masked below)
    found = torch.where(brace.any(1), cols + first, -1)
    fallback = none.scatter_reduce(0, rows, found, reduce="amax")

    position = torch.where(exact >= 0, exact, fallback) if rule == "official" else torch.maximum(exact, fallback)
    following = (position + 1).clamp(max=t - 1)
    has_next = (position >= 0) & (position + 1 < t) & mask.gather(1, following[:, None])[:, 0]
    return torch.where(has_next, position, -1)


def answer_targets(response_token_ids: Tensor | Sequence[Sequence[int]], positions: Tensor) -> Tensor:
    """y* per rollout: the response token at p + 1, or -1 where p is -1.

    Args:
        response_token_ids: The responses given to :func:`answer_positions` (list of lists or [N, T]).
        positions: LongTensor [N] from :func:`answer_positions`.

    Returns:
        LongTensor [N] of token ids, -1 where there is no answer.
    """
    ids, mask = _as_padded(response_token_ids, None, None)
    positions = positions.to(ids.device).long()
    if positions.shape != (ids.shape[0],):
        raise ValueError(f"positions: expected shape ({ids.shape[0]},), got {tuple(positions.shape)}")
    if ids.shape[1] == 0:
        return torch.full_like(positions, -1)
    following = (positions + 1).clamp(0, ids.shape[1] - 1)
    ok = (positions >= 0) & (positions + 1 < ids.shape[1]) & mask.gather(1, following[:, None])[:, 0]
    return torch.where(ok, ids.gather(1, following[:, None])[:, 0], -1)


# ---------------------------------------------------------------------------------------------------------
# 2. Response-relative positions -> indices of the forward's input
# ---------------------------------------------------------------------------------------------------------


class TokenIndex(NamedTuple):
    """Where each rollout's answer token sits in the forward's input ``[R, S]``.

    Attributes:
        rows: LongTensor [N], the input row of each rollout (``arange(N)`` for a padded batch, zeros for a
            single packed row).
        positions: LongTensor [N], the index along the sequence axis within that row; -1 = no answer.
    """

    rows: Tensor
    positions: Tensor


def padded_token_index(response_positions: Tensor, attention_mask: Tensor, response_lengths: Tensor) -> TokenIndex:
    """Map response-relative positions into a padded prompt+response batch [B, S].

    Valid for every layout where the response is the LAST ``response_lengths[b]`` real tokens of row b:
    verl's (prompt left-padded, response right-padded), TRL's ``prompt_completion_ids``, and prompt+response
    concatenated then left- or right-padded as a whole. The sequence index is
    ``last_real_index + 1 - response_length + p``.

    Args:
        response_positions: LongTensor [B] from :func:`answer_positions`, -1 = none.
        attention_mask: [B, S] mask of real tokens of the whole sequence.
        response_lengths: LongTensor [B] of real response tokens (``response_mask.sum(-1)``).

    Returns:
        :class:`TokenIndex` with rows ``arange(B)`` and positions [B] (-1 kept).
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask: expected shape [B, S], got {tuple(attention_mask.shape)}")
    b, s = attention_mask.shape
    response_positions = response_positions.to(attention_mask.device).long()
    response_lengths = response_lengths.to(attention_mask.device).long()
    for name, value in (("response_positions", response_positions), ("response_lengths", response_lengths)):
        if value.shape != (b,):
            raise ValueError(f"{name}: expected shape ({b},), got {tuple(value.shape)}")
    real = attention_mask.bool()
    # Index of the last real token: S - 1 - (first real index of the flipped row).
    last_real = s - 1 - real.flip(1).int().argmax(1)
    positions = last_real + 1 - response_lengths + response_positions
    positions = torch.where(response_positions >= 0, positions, -1)
    rows = torch.arange(b, device=attention_mask.device)
    return TokenIndex(rows=rows, positions=positions)


def packed_token_index(response_positions: Tensor, cu_seqlens: Tensor, response_lengths: Tensor) -> TokenIndex:
    """Map response-relative positions into one packed row [1, total] (verl's remove-padding path).

    Sequence b occupies ``[cu_seqlens[b], cu_seqlens[b + 1])`` and ends with its response, so the flat index
    is ``cu_seqlens[b + 1] - response_lengths[b] + p``.

    Args:
        response_positions: LongTensor [B] from :func:`answer_positions`, -1 = none.
        cu_seqlens: LongTensor [B + 1] of cumulative real sequence lengths (starts at 0).
        response_lengths: LongTensor [B] of real response tokens.

    Returns:
        :class:`TokenIndex` with rows all 0 and flat positions [B] (-1 kept).
    """
    b = response_positions.shape[0]
    if cu_seqlens.shape != (b + 1,):
        raise ValueError(f"cu_seqlens: expected shape ({b + 1},), got {tuple(cu_seqlens.shape)}")
    if response_lengths.shape != (b,):
        raise ValueError(f"response_lengths: expected shape ({b},), got {tuple(response_lengths.shape)}")
    device = cu_seqlens.device
    response_positions = response_positions.to(device).long()
    positions = cu_seqlens[1:].long() - response_lengths.to(device).long() + response_positions
    positions = torch.where(response_positions >= 0, positions, -1)
    return TokenIndex(rows=torch.zeros(b, dtype=torch.long, device=device), positions=positions)
