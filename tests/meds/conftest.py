"""Tiny tokenizers and models for the MEDS tests, built locally (no downloads).

Tokenizers (all wrapped in PreTrainedTokenizerFast):
- ``bpe_tokenizer``: GPT-2 style byte-level BPE with a hand-written vocabulary, so the token strings of the
  hand-worked cases are known exactly (``Ġ\\``, ``boxed``, ``{\\``, ...).
- ``char_tokenizer``: one token per character, no merges.
- ``sp_tokenizer``: SentencePiece style (``▁`` word prefix) with byte fallback and NO ``{`` piece, so a brace
  is the byte token ``<0x7B>`` whose vocabulary string does not contain ``{``.
Models: tiny randomly initialised Qwen2, Llama and GPT-2 causal LMs in float32.
"""

from __future__ import annotations

import string

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

# Byte-level strings ("Ġ" is a space) made single tokens by the merges below, in merge-priority order.
BPE_WORDS = [
    "boxed", "Ġ\\", "$\\", "{\\", "}{", "}}", "}$", "frac", "Ġis", "Ġanswer", "The", "Ġthe",
    "Ġboxed", "Ġ$\\", "sqrt", "Ġ{", "12", "Ġso", "Ġ\\\\",
]  # fmt: skip


def _bpe_vocab_and_merges(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges: list[tuple[str, str]] = []
    for word in words:
        current = word[0]
        for ch in word[1:]:
            if current + ch not in vocab:
                vocab[current + ch] = len(vocab)
                merges.append((current, ch))
            current += ch
    return vocab, merges


def make_bpe_tokenizer() -> PreTrainedTokenizerFast:
    vocab, merges = _bpe_vocab_and_merges(BPE_WORDS)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return fast


def make_char_tokenizer() -> PreTrainedTokenizerFast:
    chars = ["<pad>", "<unk>", *string.printable]
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def make_sp_tokenizer() -> PreTrainedTokenizerFast:
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += [*string.ascii_letters, *string.digits, *"\\}$.=+-", "▁"]
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
    merges: list[tuple[str, str]] = []
    for word in ["boxed", "▁boxed", "▁\\", "▁is", "▁the", "▁answer"]:
        current = word[0]
        for ch in word[1:]:
            if current + ch not in vocab:
                vocab[current + ch] = len(vocab)
                merges.append((current, ch))
            current += ch
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="</s>")


@pytest.fixture(scope="session")
def tiny_model():
    """The factory :func:`make_model` (tests build several variants)."""
    return make_model


@pytest.fixture(scope="session")
def bpe_tokenizer() -> PreTrainedTokenizerFast:
    return make_bpe_tokenizer()


@pytest.fixture
def fresh_bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A private instance, for tests that modify the tokenizer."""
    return make_bpe_tokenizer()


@pytest.fixture(scope="session")
def char_tokenizer() -> PreTrainedTokenizerFast:
    return make_char_tokenizer()


@pytest.fixture(scope="session")
def sp_tokenizer() -> PreTrainedTokenizerFast:
    return make_sp_tokenizer()


VOCAB = 160
HIDDEN = 32


def make_model(kind: str, *, num_layers: int = 5, tie: bool = False, seed: int = 0) -> torch.nn.Module:
    """A tiny random causal LM of the given family, float32, eval mode (no dropout)."""
    torch.manual_seed(seed)
    if kind == "qwen2":
        config = Qwen2Config(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=num_layers,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            tie_word_embeddings=tie,
        )  # fmt: skip
        model = Qwen2ForCausalLM(config)
    elif kind == "llama":
        config = LlamaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=num_layers,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
            tie_word_embeddings=tie,
        )  # fmt: skip
        model = LlamaForCausalLM(config)
    elif kind == "gpt2":
        config = GPT2Config(
            vocab_size=VOCAB, n_embd=HIDDEN, n_layer=num_layers, n_head=4, n_positions=128,
            tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(kind)
    # Random-init norms are all-ones/zero-bias; perturb them so applying the final norm actually matters.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "ln_" in name:
                param.add_(0.3 * torch.randn_like(param))
    return model.eval()
