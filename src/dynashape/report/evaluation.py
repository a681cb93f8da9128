"""Held-out evaluation: n samples per problem, avg@n accuracy, unbiased pass@k, mean length, per difficulty."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.train.config import EvalConfig
from dynashape.train.rollout import encode_prompts, sample
from dynashape.train.task import Problem

__all__ = ["evaluate", "select_problems"]


def select_problems(problems: Sequence[Problem], count: int | None) -> list[Problem]:
    """``count`` problems evenly spaced over ``problems`` (all when None or not fewer): index ``i * n // count``.

    Held-out splits are often ordered (the toy's by difficulty), so the first ``count`` would be the easiest.
    """
    n = len(problems)
    if count is None or count >= n:
        return list(problems)
    return [problems[i * n // count] for i in range(count)]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    cfg: EvalConfig,
    verifier: Any,
    *,
    device: str | torch.device = "cpu",
    prompt_format: Any = None,
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, Any]:
    """Sample ``cfg.n_samples`` answers per problem with the evaluation cap; score them.

    ``cfg.max_problems`` keeps that many problems, evenly spaced (``select_problems``). ``prompt_format``
    (``train.prompts.PromptFormat``) renders the prompts as in training; None sends the problem text after
    the tokenizer's BOS. ``progress`` shows finished rollouts with an ETA (``train.progress.progress_bar``).

    Returns a JSON-ready dict: ``accuracy`` (avg@n), ``mean_length`` (tokens, EOS included, all samples),
    ``pass_at_k`` ({k: value} for k = 1, 2, 4, ..., n), ``truncated_frac``, ``per_difficulty``
    ({d: {accuracy, mean_length}}), ``n_samples``, ``n_problems``. The draws use their own generator seeded
    with ``cfg.seed``, so the base and the final model see the same random stream.
    """
    from dynashape.metrics import pass_at_k_curve
    from dynashape.train.progress import progress_bar

    if not problems:
        raise ValueError("problems must not be empty")
    problems = select_problems(problems, cfg.max_problems)
    model.eval()
    n = cfg.n_samples
    flat = [p for p in problems for _ in range(n)]
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(cfg.seed)
    correct_parts, length_parts, trunc_parts = [], [], []
    bar = progress_bar(len(flat), desc, progress, unit="rollouts")
    solved = 0
    for start in range(0, len(flat), cfg.batch_size):
        chunk = flat[start : start + cfg.batch_size]
        questions = [p.prompt for p in chunk]
        ids, mask = encode_prompts(tokenizer, questions) if prompt_format is None else prompt_format.encode(questions)
        ro = sample(
            model,
            ids.to(device),
            mask.to(device),
            max_new_tokens=cfg.max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            generator=generator,
            on_finished=None if bar is None else bar.update,
        )
        texts = tokenizer.batch_decode(ro.response_ids, skip_special_tokens=True)
        verdicts = verifier.verify([p.answer for p in chunk], texts)
        correct = np.array([bool(v.correct) for v in verdicts]) & ~ro.truncated.cpu().numpy()
        correct_parts.append(correct)
        if bar is not None:
            solved += int(correct.sum())
            bar.set_postfix(acc=f"{solved / (start + len(chunk)):.3f}")
        length_parts.append(ro.lengths.cpu().numpy())
        trunc_parts.append(ro.truncated.cpu().numpy())
    if bar is not None:
        bar.close()
    correct = np.concatenate(correct_parts).reshape(len(problems), n)
    lengths = np.concatenate(length_parts).reshape(len(problems), n).astype(np.float64)
    truncated = np.concatenate(trunc_parts)
    curve = pass_at_k_curve(np.full(len(problems), n), correct.sum(1))
    difficulty = np.array([p.difficulty for p in problems])
    per_difficulty = {
        str(int(d)): {
            "accuracy": float(correct[difficulty == d].mean()),
            "mean_length": float(lengths[difficulty == d].mean()),
            "n_problems": int((difficulty == d).sum()),
        }
        for d in np.unique(difficulty)
    }
    return {
        "accuracy": float(correct.mean()),
        "mean_length": float(lengths.mean()),
        "pass_at_k": {str(int(k)): float(v) for k, v in zip(curve.ks, curve.values, strict=True)},
        "truncated_frac": float(truncated.mean()),
        "per_difficulty": per_difficulty,
        "n_samples": n,
        "n_problems": len(problems),
        "max_new_tokens": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
    }
