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
from dynashape.io.provenance import cpu_model
from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.world.base import Problem, World

__all__ = [
    "MANIFEST",
    "BaseModelInfo",
    "WarmupConfig",
    "base_model_key",
    "encode_sft_batch",
    "file_sha256",
    "load_or_train_base",
    "save_base",
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
    trait invites, sometimes checks and repairs, sometimes shortcuts, slips or drops a parenthesis.
    """
    rng = random.Random(f"warmup-{cfg.seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    losses: list[float] = []
    queue: list[tuple[list[Problem], list[str]]] = []
    for step in range(cfg.steps):
        if not queue:
            queue = _bucketed_batches(rng, problems, world, cfg.batch_size, cfg.bucket_batches)
        batch_problems, responses = queue.pop()
        batch = encode_sft_batch(tokenizer, [p.prompt for p in batch_problems], responses)
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
    blob = json.dumps(
        {
            "format": CACHE_FORMAT,
            "task": identity,
            "model": dataclasses.asdict(model_cfg),
            "warmup": dataclasses.asdict(warmup_cfg),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_folder(path: Path, device: str | torch.device) -> tuple[torch.nn.Module, Any]:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).to(device)
    model.eval()
    return model, tokenizer


def _shipped(world: World, key: str) -> tuple[Path, dict[str, Any]] | None:
    """The world's shipped base model folder and manifest when it is the base of ``key``; else None.

    A shipped file whose sha256 is not its manifest's is refused loudly: the package is damaged."""
    folder = world.shipped_base()
    if folder is None:
        return None
    manifest = state.read_json(folder / MANIFEST)
    if manifest.get("key") != key:
        return None  # another world, model or warm-up config: warm up and cache as usual
    digest = file_sha256(folder / WEIGHTS)
    if digest != manifest.get("sha256"):
        raise ValueError(
            f"{folder / WEIGHTS}: sha256 {digest} is not the manifest's {manifest.get('sha256')}; "
            "reinstall dynashape or rebuild it with `dynashape warmup --out DIR`"
        )
    return folder, manifest


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
