"""The policy: a ``transformers`` Qwen2 causal LM built from a small config, or any local Hugging Face model.

``build_policy`` makes the tiny Qwen2 that the warm-up (``train.warmup``) turns into the chain world's base
model; ``load_pretrained`` takes any local causal LM instead (``--model``), so the same loop trains a real
model on a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["ModelConfig", "build_policy", "load_pretrained", "load_tokenizer"]


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
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).to(device)
    return model, tokenizer


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a local model folder, left-padding, with a pad token (the EOS when it has none)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

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
    return tokenizer
