"""Shared test settings: a hypothesis profile sized for a 2-core CI machine; a tiny Llama with SmolLM2's real
tokenizer and chat template (the trainer's and ``dynashape evaluate``'s real-model tests)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def smol_tokenizer_dir(tmp_path_factory):
    """SmolLM2's tokenizer read from the packaged GGUF, saved once as a Hugging Face folder."""
    from transformers import AutoTokenizer

    from dynashape.train.models import packaged_gguf

    path = packaged_gguf("smollm2")
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    out = tmp_path_factory.mktemp("smol-tokenizer")
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(smol_tokenizer_dir, tmp_path_factory):
    """A randomly initialised 2-layer Llama (width 32) with SmolLM2's tokenizer, saved like a real checkpoint."""
    import shutil

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(smol_tokenizer_dir))
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(str(out))
    for f in smol_tokenizer_dir.iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def load_script():
    """``load_script("replay_run")``: a file of ``scripts/`` as a module (they are scripts, not part of the
    package, so the tests import them by path)."""
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
