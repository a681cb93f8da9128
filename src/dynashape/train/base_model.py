"""A run's starting point: its world, the base model (or a local Hugging Face model) and its held-out evaluation.

The base evaluation is cached next to the base model's cache entry (``cache_dir/base-<key>/eval-<key>.json``,
shared by every preset of the same setup) and in the run folder (``eval_base.json``, read back when the run
is started again: a real model's evaluation takes minutes).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

from dynashape.io import state
from dynashape.train.config import RunConfig, TrainConfig
from dynashape.world import Problem, World, get_world

__all__ = [
    "Base",
    "default_cache_dir",
    "eval_key",
    "evaluate_base",
    "evaluate_held_out",
    "load_base",
    "prompt_format",
    "prompted",
    "validation_problems",
    "world_of",
]


class Base(NamedTuple):
    """What a run starts from."""

    model: torch.nn.Module
    tokenizer: Any
    world: World
    train: list[Problem]
    held_out: list[Problem]
    """The split ``cfg.eval.split`` evaluates."""
    meta: dict[str, Any]
    """Where the base came from (recorded in eval.json)."""


def default_cache_dir() -> Path:
    """``$DYNASHAPE_CACHE`` or ``~/.cache/dynashape``."""
    return Path(os.environ.get("DYNASHAPE_CACHE", Path.home() / ".cache" / "dynashape"))


def world_of(cfg: RunConfig) -> World:
    """The world a run config names: its dataset (``data_path``) or the chain world of ``cfg.task``."""
    return get_world(cfg.task, cfg.data_path)


def prompted(cfg: TrainConfig, problems: list[Problem], *, training: bool) -> list[Problem]:
    """``problems`` as the run prompts them: with a token budget in each prompt when ``cfg.budget_prompt`` is on
    (training prompts: each its own drawn budget; held-out and validation prompts: ``eval_budget`` or none)."""
    from dynashape.world.budget_prompts import with_budget, with_drawn_budgets

    bp = cfg.budget_prompt
    if not bp.enabled:
        return problems
    if training:
        low, high = bp.budget_range(cfg.max_new_tokens)
        return with_drawn_budgets(problems, low=low, high=high, seed=cfg.seed, form=bp.form)  # type: ignore[arg-type]
    if bp.eval_budget is None:
        return problems
    return [with_budget(p, bp.eval_budget, bp.form) for p in problems]  # type: ignore[arg-type]


def validation_problems(cfg: RunConfig, world: World) -> list[Problem]:
    """The validation (and monitor) set of a run: the first ``validation_problems`` of the validation split."""
    problems = world.split("validation")[: cfg.train.validation_problems]
    return prompted(cfg.train, problems, training=False)


def load_base(cfg: RunConfig, *, progress: bool = False, world: World | None = None) -> Base:
    """The base model and tokenizer, the world's train problems and the held-out split ``cfg.eval.split``, as
    the run prompts them (``prompted``); ``world``: ``world_of(cfg)`` when the caller has it already."""
    from dynashape.runtime.policy import load_pretrained
    from dynashape.runtime.progress import progress_bar
    from dynashape.train.warmup import load_or_train_base

    world = world if world is not None else world_of(cfg)
    train_problems = world.split("train")
    held_out = prompted(cfg.train, world.split(cfg.eval.split), training=False)
    if cfg.model_path is not None:
        model, tokenizer = load_pretrained(cfg.model_path, device=cfg.device)
        rl_problems = prompted(cfg.train, train_problems, training=True)
        return Base(model, tokenizer, world, rl_problems, held_out, {"source": cfg.model_path, "cache": None})
    bar = progress_bar(cfg.warmup.steps, "warm-up", progress)
    model, tokenizer, info = load_or_train_base(
        world,
        cfg.model,
        cfg.warmup,
        train_problems,
        cache_dir=cfg.cache_dir or default_cache_dir(),
        device=cfg.device,
        on_step=lambda step, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")) if bar else None,
    )
    if bar:
        bar.close()
    meta = {
        "source": "shipped" if info.shipped else "warm-up",
        "cache": str(info.path),
        "key": info.key,
        "trained_now": info.trained_now,
        "warmup_seconds": info.seconds,
        "warmup_final_loss": info.losses[-1] if info.losses else None,
    }
    if info.sha256 is not None:
        meta["sha256"] = info.sha256
    # the warm-up above read the world's own prompts (the base model's key); the RL prompts may name budgets
    return Base(model, tokenizer, world, prompted(cfg.train, train_problems, training=True), held_out, meta)


def prompt_format(cfg: RunConfig, tokenizer: Any, world: World | None = None) -> Any:
    """How this run turns problems into prompts: ``cfg.prompt`` on ``tokenizer``, with the world's suffix as
    the default (a dataset's asks for a boxed answer; the chain world's is empty)."""
    from dynashape.runtime.prompts import PromptFormat

    world = world or world_of(cfg)
    return PromptFormat(tokenizer, cfg.prompt, default_suffix=world.prompt_suffix)


def eval_key(cfg: RunConfig, problems: list[Problem], fmt: Any = None) -> str:
    """Hash of the evaluation config and the prompts as the model sees them (``fmt``) and the result layout."""
    from dynashape.train.evaluation import EVAL_FORMAT

    rendered = [(p.prompt if fmt is None else fmt.render(p.prompt), p.answer) for p in problems]
    blob = json.dumps({"eval": cfg.to_dict()["eval"], "problems": rendered, "format": EVAL_FORMAT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def evaluate_held_out(
    cfg: RunConfig, base: Base, verifier: Any, *, fmt: Any, progress: bool = False, desc: str = "eval"
) -> dict[str, Any]:
    """``train.evaluation.evaluate`` of ``base.model`` (as it is now) on the run's held-out split."""
    from dynashape.train.evaluation import evaluate

    return evaluate(
        base.model,
        base.tokenizer,
        base.held_out,
        cfg.eval,
        verifier,
        world=base.world,
        device=cfg.device,
        prompt_format=fmt,
        progress=progress,
        desc=desc,
    )


def evaluate_base(
    cfg: RunConfig,
    base: Base,
    verifier: Any,
    *,
    use_cache: bool = True,
    fmt: Any = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The base model's held-out evaluation, from the shared cache when it holds this evaluation key."""
    path = None
    if base.meta.get("cache") and use_cache:
        path = Path(base.meta["cache"]) / f"eval-{eval_key(cfg, base.held_out, fmt)}.json"
        if path.exists():
            try:
                return state.read_json(path)
            except state.StateFileError:
                pass  # a torn cache entry: evaluate again and replace it
    result = evaluate_held_out(cfg, base, verifier, fmt=fmt, progress=progress, desc="eval base")
    if path is not None:
        state.write_text(path, json.dumps(result))
    return result


def base_eval_for_run(
    folder: Any, cfg: RunConfig, base: Base, verifier: Any, *, own_verifier: bool, fmt: Any, progress: bool
) -> dict[str, Any]:
    """The base evaluation of a run, written to its ``eval_base.json`` as soon as it exists (before any
    training step) and read back from there when the run is started again.

    A caller's own verifier (tests, custom rewards) may judge differently: it always evaluates anew and
    bypasses both caches.
    """
    key = eval_key(cfg, base.held_out, fmt)
    if own_verifier:
        stored = folder.read_eval_base(key)
        if stored is not None:
            return stored
    start = time.perf_counter()
    result = evaluate_base(cfg, base, verifier, use_cache=own_verifier, fmt=fmt, progress=progress)
    folder.write_eval_base(result, key=key, seconds=time.perf_counter() - start)
    return result
