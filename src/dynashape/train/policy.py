"""The policy: a ``transformers`` Qwen2 causal LM from a small config, and its supervised warm-up.

The base model of every method is the same: a tiny Qwen2 trained with teacher forcing on a mix of teacher
traces (verbose, concise, shortcut, slip; see ``task.py``). It is cached on disk under a key that hashes the
task, model and warm-up configs, so every preset and every run of the same setup starts from identical
weights. ``load_pretrained`` takes any local Hugging Face causal LM instead (``--model``), so the same loop
trains a real model on a GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dynashape.train.task import ChainTaskConfig, Problem, teacher_trace

__all__ = [
    "BaseModelInfo",
    "ModelConfig",
    "WarmupConfig",
    "base_model_key",
    "build_policy",
    "encode_sft_batch",
    "load_or_train_base",
    "load_pretrained",
    "warm_up",
]

CACHE_FORMAT = 2  # bump when the meaning of a cached base model changes


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the tiny Qwen2 policy (about 0.8M parameters at the defaults)."""

    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Decoder layers (MEDS fingerprints read one logit per layer)."""
    num_heads: int = 4
    """Attention heads."""
    num_kv_heads: int = 4
    """Key/value heads (grouped-query attention when smaller than num_heads)."""
    intermediate_size: int = 384
    """Width of the MLP."""
    max_positions: int = 512
    """Longest prompt + response the rotary embedding is configured for."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be divisible by num_kv_heads={self.num_kv_heads}")
        if self.max_positions < 16:
            raise ValueError(f"max_positions must be >= 16, got {self.max_positions}")


@dataclass(frozen=True, kw_only=True)
class WarmupConfig:
    """Supervised warm-up on teacher traces that produces the base model."""

    steps: int = 4800
    """Optimiser steps (0 keeps the random initialisation). Base accuracy on the validation split, the
    same number of traces each (38 400): chain-v2 with batches sorted by trace length: 1200 x 32 at lr 3e-3
    0.22 (its audit), at 1.5e-3 0.31, at 1e-3 0.27, at 6e-3 0.02 (did not learn); 2400 x 16 at 1.5e-3 0.40;
    chain-v3 with batches sorted by problem: 2400 x 16 at 1.5e-3 0.45, 4800 x 8 at 1e-3 0.48 (4 samples per
    problem, cap 160; the first from the audit's 8 at cap 256). More, smaller steps at a lower rate learn
    more per trace. 3600 x 8 (with 32 batches per bucket) reached 0.37 and lost the one-operation bare
    answers (right 6 % of the time where 4800 steps get 89 %): the default keeps 4800 steps (421 s on 2 idle
    cores) and the RL defaults were shortened to keep the main job within 10 minutes."""
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
    """Where the base model came from: cache path and key, whether it was trained now, warm-up losses."""

    path: Path | None
    key: str | None
    trained_now: bool
    losses: tuple[float, ...]
    seconds: float


def build_policy(cfg: ModelConfig, tokenizer: Any, *, seed: int = 0) -> torch.nn.Module:
    """A freshly initialised ``Qwen2ForCausalLM`` for ``tokenizer`` (tied input/output embeddings)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model


def load_pretrained(path: str | Path, *, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, Any]:
    """Load any local Hugging Face causal LM and its tokenizer (no download: ``local_files_only``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    tokenizer_config = Path(path) / "tokenizer_config.json"
    declared = json.loads(tokenizer_config.read_text()).get("tokenizer_class") if tokenizer_config.exists() else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        # A plain tokenizers-backed tokenizer (ours): AutoTokenizer would pick the architecture's class from
        # config.json (Qwen2Tokenizer), whose own pre-tokenizer changes the ids.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # many causal LMs ship without a pad token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).to(device)
    return model, tokenizer


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
    rng: random.Random, problems: Sequence[Problem], task_cfg: ChainTaskConfig, batch_size: int, buckets: int
) -> list[tuple[list[Problem], list[str]]]:
    """``buckets`` batches of fresh teacher traces, grouped by problem (less padding), in a random order.

    Draws ``buckets * batch_size`` problems and one trace each, sorts them by the problem (its difficulty, then
    its prompt's length) and cuts the sorted list into batches. The key never looks at the drawn trace: sorting
    by the trace's length (chain-v2's warm-up) put the bare answers, the shortest traces, into batches of their
    own, and the base model then wrote bare answers at every difficulty about 45 % of the time where the teacher
    writes 4-30 %; sorted by the problem, the habits in a batch stay independent draws given the prompt.
    """
    items = []
    for _ in range(buckets * batch_size):
        p = problems[rng.randrange(len(problems))]
        items.append((p, teacher_trace(p, rng, task_cfg).text))
    items.sort(key=lambda it: (it[0].difficulty, len(it[0].prompt)))
    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    rng.shuffle(batches)
    return [([p for p, _ in b], [r for _, r in b]) for b in batches]


def warm_up(
    model: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[Problem],
    task_cfg: ChainTaskConfig,
    cfg: WarmupConfig,
    *,
    device: str | torch.device = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Supervised warm-up on freshly drawn teacher traces; returns the loss of every step.

    Each step trains on ``batch_size`` problems with one fresh teacher trace each (``task.teacher_trace``: its
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
            queue = _bucketed_batches(rng, problems, task_cfg, cfg.batch_size, cfg.bucket_batches)
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


def base_model_key(task_cfg: ChainTaskConfig, model_cfg: ModelConfig, warmup_cfg: WarmupConfig) -> str:
    """Hash of everything that determines the base model's weights (16 hex characters)."""
    blob = json.dumps(
        {
            "format": CACHE_FORMAT,
            "task": dataclasses.asdict(task_cfg),
            "model": dataclasses.asdict(model_cfg),
            "warmup": dataclasses.asdict(warmup_cfg),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_or_train_base(
    task_cfg: ChainTaskConfig,
    model_cfg: ModelConfig,
    warmup_cfg: WarmupConfig,
    train_problems: Sequence[Problem],
    *,
    cache_dir: str | Path,
    device: str | torch.device = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[torch.nn.Module, Any, BaseModelInfo]:
    """The cached base model for these configs, training and caching it on the first call.

    The cache entry ``cache_dir/base-<key>/`` is written to a temporary folder and renamed into place, so an
    interrupted warm-up never leaves a half-written model that a later run would trust.
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from dynashape.train.tokenizer import build_char_tokenizer

    key = base_model_key(task_cfg, model_cfg, warmup_cfg)
    path = Path(cache_dir) / f"base-{key}"
    if (path / "warmup.json").exists():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path)).to(device)
        model.eval()
        meta = json.loads((path / "warmup.json").read_text())
        return model, tokenizer, BaseModelInfo(path, key, False, tuple(meta["losses"]), meta["seconds"])
    tokenizer = build_char_tokenizer()
    model = build_policy(model_cfg, tokenizer, seed=warmup_cfg.seed).to(device)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(warmup_cfg.seed)
        losses = warm_up(model, tokenizer, train_problems, task_cfg, warmup_cfg, device=device, on_step=on_step)
    seconds = time.perf_counter() - start
    tmp = path.with_name(path.name + f".tmp{time.time_ns()}")
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / "warmup.json").write_text(json.dumps({"key": key, "losses": losses, "seconds": seconds}))
    try:
        tmp.rename(path)
    except OSError:  # another process cached the same key first; theirs is equivalent
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return model, tokenizer, BaseModelInfo(path, key, True, tuple(losses), seconds)
