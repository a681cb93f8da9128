"""Tiny end-to-end runs shared by the run tests: a tiny config, a shared base-model cache, a parity verifier."""

from __future__ import annotations

import pytest

from dynashape.study.presets import PRESETS, make_train_config
from dynashape.train.config import EvalConfig, RunConfig
from dynashape.train.policy import ModelConfig
from dynashape.train.warmup import WarmupConfig
from dynashape.world.chain import ChainTaskConfig

TINY_MODEL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


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

    def make(method: str, task_kw=None, **overrides) -> RunConfig:
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
            model=TINY_MODEL,
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
