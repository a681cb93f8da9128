"""The chain world's base model ships with the package: the one every committed comparison run started from."""

import dataclasses
import glob
import json
import shutil
from pathlib import Path

import pytest
import torch

from dynashape.runtime.policy import ModelConfig
from dynashape.train.config import RunConfig
from dynashape.train.rebuild import rebuild_base
from dynashape.train.warmup import MANIFEST, WarmupConfig, base_model_key, file_sha256, load_or_train_base
from dynashape.world.chain import ChainTaskConfig, ChainWorld
from dynashape.world.chain.world import BASE_MODEL_DIR

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_base_is_the_default_worlds_and_its_checksum_holds():
    manifest = json.loads((BASE_MODEL_DIR / MANIFEST).read_text())
    assert manifest["key"] == base_model_key(ChainWorld(), ModelConfig(), WarmupConfig())
    assert file_sha256(BASE_MODEL_DIR / "model.safetensors") == manifest["sha256"]
    assert manifest["warmup_steps"] == WarmupConfig().steps
    assert {"platform", "processor", "torch"} <= set(manifest["machine"]) and manifest["command"]


def test_the_shipped_base_is_the_one_the_committed_comparison_used():
    """Every committed eval.json records the warm-up's final loss of its base; the shipped file's is the same."""
    files = glob.glob(str(REPO / "results" / "comparison" / "**" / "eval.json"), recursive=True)
    if not files:
        pytest.skip("no committed comparison in this checkout")
    manifest = json.loads((BASE_MODEL_DIR / MANIFEST).read_text())
    recorded = {(ev["base_model"]["key"], ev["base_model"]["warmup_final_loss"]) for ev in map(_read, files)}
    assert recorded == {(manifest["key"], manifest["warmup_final_loss"])}


def test_default_configs_load_the_shipped_base_without_a_warm_up(tmp_path):
    cfg = RunConfig()
    steps = []
    model, tokenizer, info = load_or_train_base(
        ChainWorld(cfg.task), cfg.model, cfg.warmup, [], cache_dir=tmp_path, on_step=lambda s, loss: steps.append(s)
    )
    assert steps == [] and info.shipped and not info.trained_now
    assert info.path == tmp_path / f"base-{info.key}"  # its base evaluations are cached there, never in the package
    assert info.losses == (json.loads((BASE_MODEL_DIR / MANIFEST).read_text())["warmup_final_loss"],)
    assert sum(p.numel() for p in model.parameters()) > 500_000 and next(model.parameters()).dtype == torch.float32
    assert tokenizer("47+8\n", add_special_tokens=False)["input_ids"]  # the chain world's character tokenizer


class _Shipping(ChainWorld):
    """A chain world whose shipped base is a folder of the test's."""

    def __init__(self, cfg, folder):
        super().__init__(cfg)
        self.folder = folder

    def shipped_base(self):
        return self.folder if (self.folder / MANIFEST).is_file() else None


def test_a_damaged_shipped_file_is_refused(tmp_path):
    folder = tmp_path / "base"
    shutil.copytree(BASE_MODEL_DIR, folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    cfg = RunConfig()
    with pytest.raises(ValueError, match=r"sha256 .* is not the manifest's"):
        load_or_train_base(_Shipping(cfg.task, folder), cfg.model, cfg.warmup, [], cache_dir=tmp_path / "cache")


TINY = dataclasses.replace(
    RunConfig(),
    task=ChainTaskConfig(n_train=60, n_validation_per_difficulty=1, n_test_per_difficulty=1, max_ops=3),
    model=ModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32),
    warmup=WarmupConfig(steps=6, batch_size=4),
)


def test_the_rebuild_is_deterministic_and_says_whether_it_equals_the_shipped_file(tmp_path):
    first = rebuild_base(out=tmp_path / "shipped", cfg=TINY, progress=False, world=ChainWorld(TINY.task))
    assert first.equal is None  # nothing of this key ships
    world = _Shipping(TINY.task, tmp_path / "shipped")
    again = rebuild_base(out=tmp_path / "again", cfg=TINY, progress=False, world=world)
    assert again.equal is True and again.sha256 == first.sha256 and "equals the shipped base" in again.summary()
    # the shipped folder is now what a run of this config loads, without a warm-up
    _, _, info = load_or_train_base(world, TINY.model, TINY.warmup, [], cache_dir=tmp_path / "cache")
    assert info.shipped and info.sha256 == first.sha256
    # a different shipped file (another machine's arithmetic) is reported, not hidden
    manifest = json.loads((tmp_path / "shipped" / MANIFEST).read_text())
    (tmp_path / "shipped" / MANIFEST).write_text(json.dumps({**manifest, "sha256": "0" * 64}))
    other = rebuild_base(cfg=TINY, progress=False, world=world)
    assert other.equal is False and "DIFFERS" in other.summary()


def _read(path):
    with open(path) as f:
        return json.load(f)
