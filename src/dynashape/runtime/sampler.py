"""Batched sampling with a KV cache, and the teacher-forced log-prob forward over prompt + response.

Prompts are left-padded so that every row's last prompt token sits in the same column; position ids come
from the attention mask (``cumsum - 1``), both while sampling and in the log-prob forward, so the old
log-probs are those of the distribution that sampled the tokens. Our own loop rather than
``model.generate``: on a CPU and a tiny model the per-token overhead of ``generate`` (logits processors,
stopping criteria, cache bookkeeping) dominates; ``benchmarks/bench_trainer.py`` measures both.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynashape.runtime.kv_cache import inplace_cache

__all__ = [
    "Rollouts",
    "TokenStats",
    "concat_rollouts",
    "encode_prompts",
    "left_pad",
    "sample",
    "sequence_logprobs",
]


@dataclass(frozen=True)
class Rollouts:
    """N sampled responses to left-padded prompts.

    Attributes:
        prompt_ids: LongTensor [N, P], left-padded with the pad id.
        prompt_mask: LongTensor [N, P], 1 on real prompt tokens.
        response_ids: LongTensor [N, T], right-padded with the pad id; EOS included when sampled.
        response_mask: LongTensor [N, T], 1 on sampled tokens (EOS included).
        lengths: LongTensor [N], response tokens (EOS included), i.e. ``response_mask.sum(-1)``.
        truncated: BoolTensor [N], True when no EOS was sampled within ``max_new_tokens``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor

    def select(self, index: torch.Tensor) -> Rollouts:
        """The rollouts at ``index`` (LongTensor [M]), trimmed to the longest kept response."""
        lengths = self.lengths[index]
        width = int(lengths.max()) if len(index) else 0
        return Rollouts(
            self.prompt_ids[index],
            self.prompt_mask[index],
            self.response_ids[index, :width],
            self.response_mask[index, :width],
            lengths,
            self.truncated[index],
        )


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], *, add_bos: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask [N, P]; a BOS token is prepended when the tokenizer has one."""
    bos = [tokenizer.bos_token_id] if add_bos and tokenizer.bos_token_id is not None else []
    rows = [bos + tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return left_pad(rows, tokenizer.pad_token_id)


def left_pad(rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id rows as left-padded ids and mask [N, P] (P = the longest row): every last token in one column."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids, mask


def _cache_keyword(model: torch.nn.Module) -> str:
    # transformers 5 renamed ``past_key_values`` to ``cache`` (the old name warns); accept both.
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return out.past_key_values if cache is None else cache


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    on_finished: Callable[[int], None] | None = None,
) -> Rollouts:
    """Sample one response per prompt row with a KV cache (ancestral sampling at ``temperature``).

    At each token one draw is made for every unfinished row, in row order (finished rows draw nothing), so the
    tokens depend on the generator and the model only, not on how the batch is laid out in memory. Finished
    rows are dropped from the batch (and from the cache) once a quarter of it has finished, so late tokens
    cost in proportion to the rows still writing.

    Args:
        prompt_ids, prompt_mask: LongTensor [N, P], left-padded (see ``encode_prompts``).
        max_new_tokens: response cap; a row without EOS by then is ``truncated``.
        temperature: softmax temperature (> 0). top_p: nucleus mass kept (1.0 = off).
        generator: torch.Generator on the model's device, for reproducible draws (resume).
        on_finished: called after every token with the number of rows that finished at it (EOS or the cap;
            often 0); a progress bar's hook. It does not change the draws.
    """
    _check_sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    device = prompt_ids.device
    n, p = prompt_ids.shape
    cache_kw = _cache_keyword(model)
    # The attention mask of every position a row can reach; step t passes the first p + t + 1 columns.
    full_mask = torch.zeros((n, p + max_new_tokens), dtype=prompt_mask.dtype, device=device)
    full_mask[:, :p] = prompt_mask
    kv, logits = _prefill(model, prompt_ids, prompt_mask, width=p + max_new_tokens, cache_kw=cache_kw)
    next_pos = prompt_mask.sum(-1, keepdim=True)  # position of the first response token, per row
    tokens = torch.full((n, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    rows = torch.arange(n, device=device)  # original index of each row still in the batch
    live = torch.ones(n, dtype=torch.bool, device=device)  # per batch row: not finished yet
    for t in range(max_new_tokens):
        live_rows = live.nonzero().squeeze(1)
        drawn = _draw(logits[live_rows], temperature=temperature, top_p=top_p, generator=generator)
        tokens[rows[live_rows], t] = drawn
        lengths[rows[live_rows]] += 1
        live[live_rows[drawn == eos_token_id]] = False
        n_live = int(live.sum())
        if on_finished is not None:  # every token, 0 included: a progress line can say it is still working
            on_finished(len(live_rows) - n_live if t < max_new_tokens - 1 else len(live_rows))  # at the cap: all
        if n_live == 0 or t == max_new_tokens - 1:
            break
        if n_live <= 3 * len(rows) // 4:  # compact: drop finished rows from the batch and the cache
            keep = live.nonzero().squeeze(1)
            kv.reorder_cache(keep)
            rows, live, full_mask, next_pos = rows[keep], live[keep], full_mask[keep], next_pos[keep]
        step_tokens = tokens[rows, t].masked_fill(~live, pad_token_id)[:, None]
        full_mask[:, p + t] = 1
        out = model(
            input_ids=step_tokens,
            attention_mask=full_mask[:, : p + t + 1],
            position_ids=next_pos + t,
            use_cache=True,
            **{cache_kw: kv},
        )
        kv, logits = _cache_of(out), out.logits[:, -1]
    width = int(lengths.max())
    response_ids = tokens[:, :width]
    response_mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
    truncated = (lengths == max_new_tokens) & (tokens[:, -1] != eos_token_id)
    return Rollouts(prompt_ids, prompt_mask, response_ids, response_mask, lengths, truncated)


def _check_sampling(*, temperature: float, top_p: float, max_new_tokens: int) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def _prefill(
    model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, width: int, cache_kw: str
) -> tuple[Any, torch.Tensor]:
    """The prompts' forward: (the KV cache, the logits [N, V] of each row's first response token)."""
    # keys and values written in place into buffers sized for the whole rollout (same values as the model's own
    # cache, without its per-token copy); None: the model makes its own
    cache = inplace_cache(model.config, width) if hasattr(model, "config") else None
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=_positions(prompt_mask),
        use_cache=True,
        logits_to_keep=1,
        **({} if cache is None else {cache_kw: cache}),
    )
    return _cache_of(out), out.logits[:, -1]


def _draw(logits: torch.Tensor, *, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``logits`` [R, V]: softmax at ``temperature``, the nucleus ``top_p``, one draw each."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest prefix reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics of a teacher-forced forward over the responses.

    Attributes:
        logprobs: float32 [N, T], log-prob of each response token (0 on padding).
        entropy: float32 [N, T] or None, entropy of the next-token distribution (0 on padding).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


def sequence_logprobs(
    model: torch.nn.Module, rollouts: Rollouts, *, with_entropy: bool = False, temperature: float = 1.0
) -> TokenStats:
    """Log-probs of the sampled response tokens under ``model`` (one forward over prompt + response).

    Runs with gradients when the caller has them enabled (the update) and without under ``no_grad`` (the
    old log-probs, where MEDS fingerprint hooks ride along).
    """
    ids = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)
    mask = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    p, t = rollouts.prompt_ids.shape[1], rollouts.response_ids.shape[1]
    out = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False)
    logits = out.logits[:, p - 1 : p - 1 + t].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, rollouts.response_ids[..., None]).squeeze(-1)
    valid = rollouts.response_mask.bool()
    logprobs = logprobs.masked_fill(~valid, 0.0)
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1).masked_fill(~valid, 0.0)
    return TokenStats(logprobs, entropy)


def concat_rollouts(parts: Sequence[Rollouts], pad_token_id: int) -> Rollouts:
    """Stack rollouts of several generation rounds: prompts re-padded on the left, responses on the right."""
    if not parts:
        raise ValueError("concat_rollouts needs at least one Rollouts")
    if len(parts) == 1:
        return parts[0]
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.response_ids.shape[1] for r in parts)

    def pad(x: torch.Tensor, width: int, value: int, left: bool) -> torch.Tensor:
        extra = width - x.shape[1]
        return torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value)

    return Rollouts(
        torch.cat([pad(r.prompt_ids, p, pad_token_id, True) for r in parts]),
        torch.cat([pad(r.prompt_mask, p, 0, True) for r in parts]),
        torch.cat([pad(r.response_ids, t, pad_token_id, False) for r in parts]),
        torch.cat([pad(r.response_mask, t, 0, False) for r in parts]),
        torch.cat([r.lengths for r in parts]),
        torch.cat([r.truncated for r in parts]),
    )
