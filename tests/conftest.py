"""Shared test settings: a hypothesis profile sized for a 2-core CI machine; a tiny Llama with SmolLM2's real
tokenizer and chat template (the trainer's and ``dynashape evaluate``'s real-model tests); tiny end-to-end runs
shared by the trainer's and the study's tests (a tiny config, a shared base-model cache, a local Ray, a parity
verifier)."""

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

    from dynashape.runtime.models import packaged_gguf

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


@pytest.fixture(scope="session")
def base_cache(tmp_path_factory):
    """One base-model cache for every tiny run, as ``~/.cache/dynashape`` is for real runs."""
    return tmp_path_factory.mktemp("base-cache")


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray of 2 CPUs for the study tests that run in this process: a study uses a Ray it finds
    running and leaves it running, which saves each comparison the seconds of starting its own. The tests of
    the command (subprocesses) start their own Ray, as a user's ``dynashape compare`` does."""
    import ray

    # address="local": a new Ray, whatever a `ray start` elsewhere left in /tmp/ray as the current cluster
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def tiny_config(base_cache):
    """``tiny_config(method, task_kw=None, **train_overrides)``: a RunConfig of a few seconds on CPU."""

    from dynashape.runtime.policy import ModelConfig
    from dynashape.train.config import EvalConfig, RunConfig
    from dynashape.train.presets import PRESETS, make_train_config
    from dynashape.train.warmup import WarmupConfig
    from dynashape.world.chain import ChainTaskConfig

    tiny_model = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)

    def make(method: str, task_kw=None, **overrides):
        train_kw = {
            "steps": 3,
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 24,
            "overlong": {"buffer": 4},
            "mini_batches": 2,
            "checkpoint_every": 0,
            **overrides,
        }
        if PRESETS[method].get("fingerprint_layers"):
            train_kw.setdefault("fingerprint_layers", 2)
        return RunConfig(
            task=ChainTaskConfig(
                n_train=100, n_validation_per_difficulty=1, n_test_per_difficulty=1, max_ops=3, **(task_kw or {})
            ),
            model=tiny_model,
            warmup=WarmupConfig(steps=40, batch_size=16, lr=1e-2),
            train=make_train_config(method, **train_kw),
            eval=EvalConfig(n_samples=2, max_new_tokens=24, passk_samples=4, passk_hard=1, passk_trap=1),
            cache_dir=str(base_cache),
        )

    return make


class ParityVerifier:
    """Deterministic stand-in for the math verifier: a response is 'correct' when its character sum is even.

    A tiny, barely trained model never solves a problem, so with the real verifier every group is uniform and
    dynamic sampling, MEDS memory and the length channels would never see a mixed group.
    """

    def verify(self, golds, responses):
        from dynashape.rewards import Reason, Verdict

        return [
            Verdict(sum(map(ord, r)) % 2 == 0, None, Reason.MATCH if sum(map(ord, r)) % 2 == 0 else Reason.MISMATCH)
            for r in responses
        ]


@pytest.fixture
def parity_verifier():
    return ParityVerifier()
