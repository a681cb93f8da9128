"""The chain world's base model: a supervised warm-up on teacher traces, shipped, cached, rebuilt on demand.

The base model of every method is the same: a tiny Qwen2 (``policy.build_policy``) trained with teacher forcing
on fresh traces of the world's teacher (``World.teacher_trace``). Its key hashes the world, model and warm-up
configs. Where it comes from, in order:

1. the world's shipped base (``World.shipped_base()``: safetensors, tokenizer and ``manifest.json`` with key,
   sha256, the command and the machine that made it), when the key matches and the file's sha256 is the
   manifest's: every CPU then starts from the same weights (a warm-up's float arithmetic differs by CPU);
2. the cache ``cache_dir/base-<key>/``;
3. a warm-up now, written to a temporary folder and renamed into the cache (``state.atomic_folder``: an
   interrupted warm-up leaves nothing a later run would trust).

``dynashape warmup`` rebuilds the base deterministically and says whether the rebuild equals the shipped file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dynashape.io import state
from dynashape.io.provenance import cpu_model, file_sha256
from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.world.base import Problem, World

__all__ = [
    "BASES",
    "BUDGET_FIELDS",
    "MANIFEST",
    "BaseModelInfo",
    "WarmupConfig",
    "base_model_key",
    "encode_sft_batch",
    "file_sha256",
    "load_or_train_base",
    "save_base",
    "shipped_manifest",
    "train_base",
    "warm_up",
    "write_manifest",
]

CACHE_FORMAT = 2  # bump when the meaning of a cached base model changes
MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"


@dataclass(frozen=True, kw_only=True)
class WarmupConfig:
    """Supervised warm-up on teacher traces that produces the base model."""

    steps: int = 4800
    """Optimiser steps (0 keeps the random initialisation); docs/world-history.md has the sweep that chose them."""
    batch_size: int = 8
    """Traces per step."""
    lr: float = 1e-3
    """Peak AdamW learning rate (linear warm-up over 5 % of the steps, then cosine to 10 %)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    seed: int = 0
    """Seed of initialisation, trace sampling and batching."""
    bucket_batches: int = 8
    """Traces are drawn this many batches at a time and batched by problem (1 = no bucketing)."""
    budget_prompt_share: float = 0.0
    """Share of the warm-up prompts that name a token budget in L1's words (``world.budget_prompts``: " Think for
    N tokens." or " Think for maximum N tokens.", either form with probability 1/2), the trace the teacher wrote
    for the plain prompt unchanged: a base that tolerates a budget prompt without following it, as an
    instruction-tuned model does before L1 (arXiv 2503.04697) trains it to. 0 draws nothing: the base and its key
    are the plain base's. In [0, 1]."""
    budget_low: int = 2
    """Smallest budget a warm-up prompt names (tokens): the smallest low of L1's presets over both regimes
    (``field_presets._l1``: 100 of 4096 at the tight budget 101 is 2). Read only when ``budget_prompt_share > 0``."""
    budget_high: int = 160
    """Largest budget a warm-up prompt names (tokens): the largest high of L1's presets over both regimes (4000 of
    4096 at the loose budget 164 is 160). Budgets are uniform on the integers ``budget_low..budget_high``."""

    def __post_init__(self) -> None:
        if self.bucket_batches < 1:
            raise ValueError(f"bucket_batches must be >= 1, got {self.bucket_batches}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.budget_prompt_share <= 1.0:
            raise ValueError(f"budget_prompt_share must be in [0, 1], got {self.budget_prompt_share}")
        if not 1 <= self.budget_low <= self.budget_high:
            raise ValueError(
                f"budget_low and budget_high must satisfy 1 <= budget_low <= budget_high, got {self.budget_low}, "
                f"{self.budget_high}"
            )


BUDGET_FIELDS: tuple[str, ...] = ("budget_prompt_share", "budget_low", "budget_high")
"""The ``WarmupConfig`` fields of budget prompts: left out of the key when the share is 0 (they change nothing then),
so the plain base keeps the key it had before they existed."""

BASES: dict[str, WarmupConfig] = {
    "plain": WarmupConfig(),
    "budget": WarmupConfig(budget_prompt_share=0.5),
}
"""The chain world's shipped bases by name (``dynashape warmup --base NAME``): the plain base, and the base that
tolerates a budget prompt (half its warm-up prompts name one). A run picks the budget base with
``--set warmup.budget_prompt_share=0.5``."""


@dataclass(frozen=True)
class BaseModelInfo:
    """Where the base model came from: its folder and key, whether it was trained now, warm-up losses, and
    whether it is the world's shipped file (then ``sha256`` is the weights' checksum)."""

    path: Path | None
    key: str | None
    trained_now: bool
    losses: tuple[float, ...]
    seconds: float
    shipped: bool = False
    sha256: str | None = None


def encode_sft_batch(tokenizer: Any, prompts: Sequence[str], responses: Sequence[str]) -> dict[str, torch.Tensor]:
    """Teacher-forcing batch: ``<bos> prompt response <eos>``, right-padded; loss only on response + EOS.

    Returns ``input_ids``, ``attention_mask`` and ``labels`` (-100 on prompt and padding), all [B, T].
    """
    rows, label_rows = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        p = [tokenizer.bos_token_id, *tokenizer(prompt, add_special_tokens=False)["input_ids"]]
        r = [*tokenizer(response, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        rows.append(p + r)
        label_rows.append([-100] * len(p) + r)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lab) in enumerate(zip(rows, label_rows, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        labels[i, : len(r)] = torch.tensor(lab)
        mask[i, : len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _prompts(problems: Sequence[Problem], rng: random.Random, cfg: WarmupConfig) -> list[str]:
    """The warm-up prompts of ``problems``: each names a budget with probability ``cfg.budget_prompt_share``
    (uniform on ``budget_low..budget_high``, L1's exact or maximum form with probability 1/2 each), drawn from
    ``rng``, a stream of its own: the problems and traces are those of the plain warm-up. Share 0 draws nothing."""
    from dynashape.world.budget_prompts import with_budget

    if cfg.budget_prompt_share == 0:
        return [p.prompt for p in problems]
    out = []
    for p in problems:  # a batch of 8 prompts, not rollouts
        if rng.random() < cfg.budget_prompt_share:
            budget = rng.randint(cfg.budget_low, cfg.budget_high)
            p = with_budget(p, budget, "exact" if rng.random() < 0.5 else "maximum")
        out.append(p.prompt)
    return out


def _lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _bucketed_batches(
    rng: random.Random, problems: Sequence[Problem], world: World, batch_size: int, buckets: int
) -> list[tuple[list[Problem], list[str]]]:
    """``buckets`` batches of fresh teacher traces, grouped by problem (less padding), in a random order.

    Draws ``buckets * batch_size`` problems and one trace each, sorts them by the problem (its difficulty, then
    its prompt's length) and cuts the sorted list into batches. The key never looks at the drawn trace: sorted
    by the trace's length, the bare answers (the shortest traces) would share batches of their own and the base
    model would over-learn them; sorted by the problem, the habits in a batch stay independent draws given the
    prompt.
    """
    items = []
    for _ in range(buckets * batch_size):
        p = problems[rng.randrange(len(problems))]
        items.append((p, world.teacher_trace(p, rng)))
    items.sort(key=lambda it: (it[0].difficulty, len(it[0].prompt)))
    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    rng.shuffle(batches)
    return [([p for p, _ in b], [r for _, r in b]) for b in batches]


def warm_up(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    world: World,
    cfg: WarmupConfig,
    *,
    device: str | torch.device = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Supervised warm-up on freshly drawn teacher traces; returns the loss of every step.

    Each step trains on ``batch_size`` problems with one fresh teacher trace each (``world.teacher_trace``: its
    habits drawn from the world's mix), so the base model imitates the mix: it writes the filler its prompt's
    trait invites, sometimes checks and repairs, sometimes shortcuts, slips or drops a parenthesis. A share
    ``cfg.budget_prompt_share`` of the prompts names a budget (``_prompts``) over the same trace.
    """
    rng = random.Random(f"warmup-{cfg.seed}")
    budget_rng = random.Random(f"warmup-budget-{cfg.seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    losses: list[float] = []
    queue: list[tuple[list[Problem], list[str]]] = []
    for step in range(cfg.steps):
        if not queue:
            queue = _bucketed_batches(rng, problems, world, cfg.batch_size, cfg.bucket_batches)
        batch_problems, responses = queue.pop()
        batch = encode_sft_batch(tokenizer, _prompts(batch_problems, budget_rng, cfg), responses)
        batch = {k: v.to(device) for k, v in batch.items()}
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg.steps, cfg.lr)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def base_model_key(world: World, model_cfg: ModelConfig, warmup_cfg: WarmupConfig) -> str:
    """Hash of everything that determines the base model's weights (16 hex characters)."""
    identity = world.identity()
    if identity is None:
        raise ValueError(f"the {world.name} world has no teacher, so no warmed-up base model: give --model")
    warmup = dataclasses.asdict(warmup_cfg)
    if warmup_cfg.budget_prompt_share == 0:  # the plain base: its key as before the budget fields existed
        warmup = {k: v for k, v in warmup.items() if k not in BUDGET_FIELDS}
    blob = json.dumps(
        {
            "format": CACHE_FORMAT,
            "task": identity,
            "model": dataclasses.asdict(model_cfg),
            "warmup": warmup,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_folder(path: Path, device: str | torch.device) -> tuple[torch.nn.Module, Any]:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).to(device)
    model.eval()
    return model, tokenizer


def _shipped(world: World, key: str) -> tuple[Path, dict[str, Any]] | None:
    """The world's shipped base model folder and manifest when one is the base of ``key``; else None.

    A shipped file whose sha256 is not its manifest's is refused loudly: the package is damaged."""
    found = shipped_manifest(world, key)
    if found is None:
        return None  # another world, model or warm-up config: warm up and cache as usual
    folder, manifest = found
    digest = file_sha256(folder / WEIGHTS)
    if digest != manifest.get("sha256"):
        raise ValueError(
            f"{folder / WEIGHTS}: sha256 {digest} is not the manifest's {manifest.get('sha256')}; "
            "reinstall dynashape or rebuild it with `dynashape warmup --out DIR`"
        )
    return folder, manifest


def shipped_manifest(world: World, key: str) -> tuple[Path, dict[str, Any]] | None:
    """The folder and manifest of the world's shipped base whose manifest has ``key`` (``World.shipped_bases``),
    or None."""
    for folder in world.shipped_bases():
        manifest = state.read_json(folder / MANIFEST)
        if manifest.get("key") == key:
            return folder, manifest
    return None


def train_base(
    world: World,
    model_cfg: ModelConfig,
    warmup_cfg: WarmupConfig,
    train_problems: Sequence[Problem],
    *,
    device: str | torch.device = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[torch.nn.Module, Any, list[float], float]:
    """A fresh warm-up: (model, tokenizer, losses, seconds). Deterministic on one machine (seeded init, traces
    and batching; torch's global RNG is restored afterwards)."""
    tokenizer = world.build_tokenizer()
    model = build_policy(model_cfg, tokenizer, seed=warmup_cfg.seed).to(device)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(warmup_cfg.seed)
        losses = warm_up(model, tokenizer, train_problems, world, warmup_cfg, device=device, on_step=on_step)
    return model, tokenizer, losses, time.perf_counter() - start


def save_base(
    folder: str | Path, model: torch.nn.Module, tokenizer: Any, *, key: str, losses: Sequence[float], seconds: float
) -> Path:
    """Write a base model folder (weights, tokenizer, ``warmup.json``) next to ``folder`` and rename it into
    place (``state.atomic_folder``); returns ``folder``. An existing folder is kept (another process cached the
    same key first: theirs is equivalent, ours is dropped)."""
    path = Path(folder)
    try:
        with state.atomic_folder(path) as tmp:
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            state.write_text(tmp / "warmup.json", json.dumps({"key": key, "losses": list(losses), "seconds": seconds}))
    except FileExistsError:  # there before we began, or renamed into place while we wrote ours
        pass
    return path


def write_manifest(folder: str | Path, *, key: str, losses: Sequence[float], seconds: float, command: str) -> dict:
    """The manifest that makes a base model folder shippable: key, sha256 of the weights, the final warm-up
    loss, and the command and machine that made it."""
    folder = Path(folder)
    manifest = {
        "key": key,
        "sha256": file_sha256(folder / WEIGHTS),
        "warmup_final_loss": losses[-1] if losses else None,
        "warmup_steps": len(losses),
        "warmup_seconds": seconds,
        "command": command,
        "machine": {
            "platform": platform.platform(),
            "processor": cpu_model(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    }
    state.write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def load_or_train_base(
    world: World,
    model_cfg: ModelConfig,
    warmup_cfg: WarmupConfig,
    train_problems: Sequence[Problem],
    *,
    cache_dir: str | Path,
    device: str | torch.device = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[torch.nn.Module, Any, BaseModelInfo]:
    """The base model of these configs: the shipped one, else the cached one, else a warm-up now (cached).

    ``BaseModelInfo.path`` is the cache entry ``cache_dir/base-<key>/`` in every case (the base evaluations
    are cached there); a shipped base is read from the package and never written to.
    """
    key = base_model_key(world, model_cfg, warmup_cfg)
    path = Path(cache_dir) / f"base-{key}"
    shipped = _shipped(world, key)
    if shipped is not None:
        folder, manifest = shipped
        model, tokenizer = _load_folder(folder, device)
        losses = () if manifest.get("warmup_final_loss") is None else (manifest["warmup_final_loss"],)
        info = BaseModelInfo(path, key, False, losses, manifest["warmup_seconds"], True, manifest["sha256"])
        return model, tokenizer, info
    if (path / "warmup.json").exists():
        model, tokenizer = _load_folder(path, device)
        meta = state.read_json(path / "warmup.json")
        return model, tokenizer, BaseModelInfo(path, key, False, tuple(meta["losses"]), meta["seconds"])
    model, tokenizer, losses, seconds = train_base(
        world, model_cfg, warmup_cfg, train_problems, device=device, on_step=on_step
    )
    save_base(path, model, tokenizer, key=key, losses=losses, seconds=seconds)
    return model, tokenizer, BaseModelInfo(path, key, True, tuple(losses), seconds)
