"""Held-out evaluation: n samples per problem, avg@n accuracy, unbiased pass@k, mean length, per difficulty;
plus the world's own metrics (``World.stats``: on the chain world shortcut rate, error modes, their entropy per
prompt, the wrong answers' eigen ratio) and pass@k up to k = 64 on the world's fixed subset
(``World.passk_subset``: hard and trap problems)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dynashape.runtime.fingerprints import wrong_fingerprints
from dynashape.runtime.prompts import encode_questions, select_problems
from dynashape.runtime.sampler import sample
from dynashape.train.config import EvalConfig
from dynashape.world.base import Problem, Samples, World

EVAL_FORMAT = 2
"""Layout version of ``evaluate``'s result (2: with ``per_problem``); it keys the cached base evaluations."""

__all__ = [
    "EVAL_FORMAT",
    "Samples",
    "evaluate",
    "passk_problems",
    "sample_responses",
    "select_problems",
    "wrong_fingerprints",
]


@torch.no_grad()
def sample_responses(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    verifier: Any,
    *,
    n: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 400,
    fingerprint_layers: int | None = None,
    device: str | torch.device = "cpu",
    prompt_format: Any = None,
    bar: Any = None,
) -> Samples:
    """Sample ``n`` responses per problem with their own seeded generator; verify them; optionally take the
    MEDS fingerprints of the wrong ones (a second forward over those rows only, as the trainer's capture).

    ``prompt_format`` (``train.prompts.PromptFormat``) renders the prompts as in training; None sends the problem
    text after the tokenizer's BOS. ``bar`` (``train.progress.progress_bar``) counts finished rollouts."""
    if not problems:
        raise ValueError("problems must not be empty")
    model.eval()
    flat = [p for p in problems for _ in range(n)]
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(seed)
    texts: list[str] = []
    correct_parts, length_parts, trunc_parts, fp_parts = [], [], [], []
    for start in range(0, len(flat), batch_size):
        chunk = flat[start : start + batch_size]
        questions = [p.prompt for p in chunk]
        ids, mask = encode_questions(tokenizer, questions, prompt_format)
        ro = sample(
            model,
            ids.to(device),
            mask.to(device),
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
            on_finished=None if bar is None else bar.update,
        )
        chunk_texts = tokenizer.batch_decode(ro.response_ids, skip_special_tokens=True)
        verdicts = verifier.verify([p.answer for p in chunk], chunk_texts)
        correct = np.array([bool(v.correct) for v in verdicts]) & ~ro.truncated.cpu().numpy()
        texts += chunk_texts
        correct_parts.append(correct)
        if bar is not None:  # the bar counts finished rollouts; only whole chunks are verified: say over how many
            solved, verified = int(sum(c.sum() for c in correct_parts)), start + len(chunk)
            bar.set_postfix(acc=f"{solved / verified:.3f} of {verified} verified")
        length_parts.append(ro.lengths.cpu().numpy())
        trunc_parts.append(ro.truncated.cpu().numpy())
        if fingerprint_layers is not None:
            fp_parts.append(wrong_fingerprints(model, tokenizer, ro, ~correct, layers=fingerprint_layers))
    return Samples(
        flat,
        texts,
        np.concatenate(correct_parts),
        np.concatenate(length_parts).astype(np.int64),
        np.concatenate(trunc_parts),
        np.concatenate(fp_parts) if fp_parts else None,
    )


def passk_problems(problems: Sequence[Problem], cfg: EvalConfig, world: World) -> list[Problem]:
    """The pass@k subset: the problems ``cfg.passk_keys`` names, in that order, or the world's hard-and-trap
    choice when it names none. A key missing from ``problems`` is refused (the subset was fixed on this split)."""
    if cfg.passk_keys is None:
        return world.passk_subset(problems, cfg.passk_hard, cfg.passk_trap)
    by_key = {p.key: p for p in problems}
    missing = [k for k in cfg.passk_keys if k not in by_key]
    if missing:
        raise ValueError(
            f"eval.passk_keys names {len(missing)} problem(s) not in the evaluated problems "
            f"(split {cfg.split!r}, max_problems {cfg.max_problems}): {missing[:5]}"
        )
    return [by_key[k] for k in cfg.passk_keys]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    cfg: EvalConfig,
    verifier: Any,
    *,
    world: World,
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
    ({d: {accuracy, mean_length, truncated_frac}}), ``n_samples``, ``n_problems``; on the chain world also
    ``shortcut_frac`` (and per difficulty), ``error_modes`` (share of the wrong answers per mode),
    ``mode_entropy`` (nats, mean over prompts), ``wrong_eigen_ratio`` (top-1 eigen ratio of the wrong answers'
    fingerprints, ``cfg.fingerprint_layers`` layers) and ``pass_at_k_hard`` (k up to ``cfg.passk_samples`` on
    ``world.passk_subset``). The draws use their own generators seeded with ``cfg.seed``, so the base and the final
    model see the same random streams.

    ``per_problem`` holds the per-problem results the comparison's bootstrap resamples, lists in the order of
    the evaluated problems: ``difficulty``, ``is_trap``, ``n_correct`` (of ``n_samples``) and ``mean_length``;
    ``per_problem_hard`` the same counts (of ``passk_samples``) on the pass@k subset.
    """
    from dynashape.runtime.progress import progress_bar

    if not problems:
        raise ValueError("problems must not be empty")
    problems = select_problems(problems, cfg.max_problems)
    n = cfg.n_samples
    layers = cfg.fingerprint_layers if world.labels_errors and cfg.fingerprint_layers else None
    if layers is not None:
        from dynashape.meds.model_parts import find_model_parts

        layers = min(layers, find_model_parts(model).num_layers)
    bar = progress_bar(len(problems) * n, desc, progress, unit="rollouts")
    try:
        s = sample_responses(
            model,
            tokenizer,
            problems,
            verifier,
            n=n,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            fingerprint_layers=layers,
            device=device,
            prompt_format=prompt_format,
            bar=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    out = _summary(s, problems, cfg)
    out.update(_stats_into(world.stats(s), out["per_difficulty"]))
    if cfg.passk_samples:
        subset = passk_problems(problems, cfg, world)
        if subset:
            h = sample_responses(
                model,
                tokenizer,
                subset,
                verifier,
                n=cfg.passk_samples,
                max_new_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                seed=cfg.seed + 1,
                batch_size=cfg.batch_size,
                device=device,
                prompt_format=prompt_format,
            )
            out.update(_hard_summary(h, subset, cfg.passk_samples))
    return out


def _stats_into(stats: dict[str, Any], per_difficulty: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The world's statistics, its per-difficulty shortcut share moved into ``per_difficulty``."""
    for d, v in stats.pop("shortcut_per_difficulty", {}).items():
        per_difficulty[d]["shortcut_frac"] = v
    return stats


def _summary(s: Any, problems: Sequence[Problem], cfg: EvalConfig) -> dict[str, Any]:
    """The main evaluation's figures from ``n = cfg.n_samples`` samples per problem (``Samples`` ``s``, rows
    problem-major): accuracy, length, pass@k, per difficulty and per problem."""
    from dynashape.core.metrics import pass_at_k_curve

    n = cfg.n_samples
    correct = s.correct.reshape(len(problems), n)
    lengths = s.lengths.reshape(len(problems), n).astype(np.float64)
    truncated = s.truncated.reshape(len(problems), n)
    curve = pass_at_k_curve(np.full(len(problems), n), correct.sum(1))
    difficulty = np.array([p.difficulty for p in problems])
    per_difficulty = {
        str(int(d)): {
            "accuracy": float(correct[difficulty == d].mean()),
            "mean_length": float(lengths[difficulty == d].mean()),
            "truncated_frac": float(truncated[difficulty == d].mean()),
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
        "length_histogram": {
            str(int(k)): int(v) for k, v in zip(*np.unique(s.lengths, return_counts=True), strict=True)
        },
        "max_new_tokens": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "per_problem": {
            "difficulty": [int(p.difficulty) for p in problems],
            "is_trap": [bool(p.is_trap) for p in problems],
            "n_correct": [int(c) for c in correct.sum(1)],
            "mean_length": [float(x) for x in lengths.mean(1)],
        },
    }


def _hard_summary(h: Any, subset: Sequence[Problem], samples: int) -> dict[str, Any]:
    """pass@k on the hard subset from ``samples`` draws per problem (``Samples`` ``h``, rows problem-major)."""
    from dynashape.core.metrics import pass_at_k_curve

    hc = h.correct.reshape(len(subset), samples)
    hard_curve = pass_at_k_curve(np.full(len(subset), samples), hc.sum(1))
    return {
        "pass_at_k_hard": {str(int(k)): float(v) for k, v in zip(hard_curve.ks, hard_curve.values, strict=True)},
        "pass_at_k_hard_problems": [p.prompt.strip() for p in subset],
        "per_problem_hard": {
            "difficulty": [int(p.difficulty) for p in subset],
            "is_trap": [bool(p.is_trap) for p in subset],
            "n_correct": [int(c) for c in hc.sum(1)],
            "n_samples": samples,
        },
    }
