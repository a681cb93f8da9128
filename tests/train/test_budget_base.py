"""The base that tolerates a budget prompt: a share of its warm-up prompts name a budget over the same traces; the
plain base, its key and its runs' config hashes are as they were; a run selects the budget base by its config."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest

from dynashape.runtime.policy import ModelConfig
from dynashape.train import checkpoint as ckpt
from dynashape.train import warmup as warmup_module
from dynashape.train.config import RunConfig
from dynashape.train.rebuild import rebuild_base, rebuild_command
from dynashape.train.warmup import (
    BASES,
    MANIFEST,
    WarmupConfig,
    _prompts,
    base_model_key,
    load_or_train_base,
    train_base,
)
from dynashape.world.chain import ChainTaskConfig, ChainWorld
from dynashape.world.chain.world import BASE_MODEL_DIR

BUDGET_TEXT = re.compile(r" Think for (maximum )?(\d+) tokens\.")


def test_the_plain_base_keeps_its_key_and_its_runs_their_config_hash():
    """The shipped plain base's key is the manifest's whatever the budget fields hold at share 0; the budget base's
    differs. A config.yaml written before the fields existed hashes as a config of today's defaults."""
    manifest_key = json.loads((BASE_MODEL_DIR / MANIFEST).read_text())["key"]
    world, model = ChainWorld(), ModelConfig()
    assert base_model_key(world, model, WarmupConfig()) == manifest_key == "03888693d9937dd2"
    assert base_model_key(world, model, WarmupConfig(budget_low=7, budget_high=9)) == manifest_key
    assert base_model_key(world, model, BASES["budget"]) != manifest_key
    assert BASES["plain"] == WarmupConfig()
    today = RunConfig().to_dict()
    before = json.loads(json.dumps(today))
    for key in ("budget_prompt_share", "budget_low", "budget_high"):
        del before["warmup"][key]
    assert ckpt.config_hash(before) == ckpt.config_hash(today)
    budget = dataclasses.replace(RunConfig(), warmup=BASES["budget"]).to_dict()
    assert ckpt.config_hash(budget) != ckpt.config_hash(today)
    # the plain warm-up's budget fields are left out of the trajectory (as absent), so the refusal names them so
    assert 'warmup.budget_prompt_share: "(absent)" -> 0.5' in ckpt.config_differences(today, budget)


def test_warmup_budget_fields_are_checked_by_name():
    with pytest.raises(ValueError, match=r"budget_prompt_share must be in \[0, 1\], got 1.5"):
        WarmupConfig(budget_prompt_share=1.5)
    with pytest.raises(ValueError, match=r"budget_low and budget_high .* got 9, 3"):
        WarmupConfig(budget_low=9, budget_high=3)


def test_the_warmup_prompts_name_budgets_on_their_share():
    """Share 0: the plain prompts, nothing drawn. Share 1: every prompt names a budget in 2..160, in both of L1's
    forms, with its plain text around it. Share 0.5 over 4000 prompts: 0.5 within 4 standard errors (0.032)."""
    problems = ChainWorld(ChainTaskConfig(n_train=40)).split("train")
    rng = random.Random(1)
    state = rng.getstate()
    assert _prompts(problems, rng, WarmupConfig()) == [p.prompt for p in problems] and rng.getstate() == state
    prompts = _prompts(problems * 10, rng, WarmupConfig(budget_prompt_share=1.0))
    found = [BUDGET_TEXT.search(t) for t in prompts]
    assert all(found)
    assert all(2 <= int(m.group(2)) <= 160 for m in found) and {bool(m.group(1)) for m in found} == {True, False}
    assert [BUDGET_TEXT.sub("", t) for t in prompts] == [p.prompt for p in problems * 10]
    half = _prompts(problems * 100, rng, BASES["budget"])
    share = sum(bool(BUDGET_TEXT.search(t)) for t in half) / len(half)
    assert abs(share - 0.5) < 4 * (0.25 / len(half)) ** 0.5


TINY = dataclasses.replace(
    RunConfig(),
    task=ChainTaskConfig(n_train=60, n_validation_per_difficulty=1, n_test_per_difficulty=1, max_ops=3),
    model=ModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32),
    warmup=WarmupConfig(steps=6, batch_size=4, budget_prompt_share=0.5),
)


def test_a_short_budget_warmup_trains_on_the_plain_warmups_traces(monkeypatch):
    """6 steps of 4 traces: the same problems and traces as the plain warm-up's, some prompts with a budget."""
    seen = {}

    def spy(tokenizer, prompts, responses):
        seen.setdefault("prompts", []).extend(prompts)
        seen.setdefault("responses", []).extend(responses)
        return encode(tokenizer, prompts, responses)

    encode = warmup_module.encode_sft_batch
    monkeypatch.setattr(warmup_module, "encode_sft_batch", spy)
    world = ChainWorld(TINY.task)
    runs = {}
    for share in (0.0, 0.5):
        seen.clear()
        train_base(world, TINY.model, dataclasses.replace(TINY.warmup, budget_prompt_share=share), world.split("train"))
        runs[share] = dict(seen)
    assert runs[0.5]["responses"] == runs[0.0]["responses"] and len(runs[0.0]["responses"]) == 24
    assert [BUDGET_TEXT.sub("", p) for p in runs[0.5]["prompts"]] == runs[0.0]["prompts"]
    assert 0 < sum(bool(BUDGET_TEXT.search(p)) for p in runs[0.5]["prompts"]) < 24


class _Shipping(ChainWorld):
    """A chain world that ships the plain base and a folder of the test's beside it."""

    def __init__(self, cfg, folder):
        super().__init__(cfg)
        self.folder = folder

    def shipped_bases(self):
        return (BASE_MODEL_DIR, self.folder)


def test_a_run_selects_the_shipped_budget_base_by_its_warmup_config(tmp_path):
    """``rebuild_base`` of the budget config writes a shippable folder whose manifest names its command; shipped
    beside the plain base, it is what a config with ``warmup.budget_prompt_share`` loads (no warm-up), and the
    plain config still loads the plain base."""
    built = rebuild_base(out=tmp_path / "budget", cfg=TINY, progress=False, world=ChainWorld(TINY.task))
    manifest = json.loads((tmp_path / "budget" / MANIFEST).read_text())
    assert manifest["key"] == built.key == base_model_key(ChainWorld(TINY.task), TINY.model, TINY.warmup)
    world = _Shipping(TINY.task, tmp_path / "budget")
    steps = []
    _, _, info = load_or_train_base(
        world, TINY.model, TINY.warmup, [], cache_dir=tmp_path / "cache", on_step=lambda s, loss: steps.append(s)
    )
    assert info.shipped and info.sha256 == built.sha256 and steps == []
    again = rebuild_base(cfg=TINY, progress=False, world=world)
    assert again.equal is True  # the rebuild compares with the shipped base of its own key
    plain = RunConfig()
    default_world = _Shipping(plain.task, tmp_path / "budget")
    _, _, info = load_or_train_base(default_world, plain.model, plain.warmup, [], cache_dir=tmp_path / "cache")
    assert info.shipped and info.key == "03888693d9937dd2"
    assert rebuild_command(dataclasses.replace(plain, warmup=BASES["budget"])) == (
        "dynashape warmup --base budget --out DIR"
    )
    assert rebuild_command(plain) == "dynashape warmup --out DIR"


def test_the_command_line_selects_the_budget_base():
    """``--set warmup.budget_prompt_share=0.5`` is the budget base's warm-up (its key, so its shipped file);
    ``dynashape warmup --base`` refuses a name it does not ship, naming the ones it does."""
    from dynashape.cli import build_parser, main
    from dynashape.cli.commands import _run_config

    args = build_parser().parse_args(["train", "--set", "warmup.budget_prompt_share=0.5"])
    assert _run_config(args, args.method, args.seed).warmup == BASES["budget"]
    with pytest.raises(SystemExit, match=r"--base must be one of plain, budget, got 'nope'"):
        main(["warmup", "--base", "nope"])


def test_the_shipped_budget_base_is_the_budget_configs_and_package_data():
    """The folder beside the plain base: its manifest's key is ``BASES["budget"]``'s, its sha256 holds, it names the
    command that rebuilds it, and pyproject ships its files."""
    import fnmatch
    from pathlib import Path

    import tomllib

    from dynashape.train.warmup import file_sha256
    from dynashape.world.chain.world import BUDGET_BASE_MODEL_DIR

    if not (BUDGET_BASE_MODEL_DIR / MANIFEST).is_file():
        pytest.skip(
            "the budget base is not built yet: dynashape warmup --base budget --out " + str(BUDGET_BASE_MODEL_DIR)
        )
    manifest = json.loads((BUDGET_BASE_MODEL_DIR / MANIFEST).read_text())
    assert manifest["key"] == base_model_key(ChainWorld(), ModelConfig(), BASES["budget"]) != "03888693d9937dd2"
    assert file_sha256(BUDGET_BASE_MODEL_DIR / "model.safetensors") == manifest["sha256"]
    assert manifest["warmup_steps"] == 4800 and manifest["command"] == "dynashape warmup --base budget --out DIR"
    assert ChainWorld().shipped_bases() == (BASE_MODEL_DIR, BUDGET_BASE_MODEL_DIR)
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["dynashape"]
    for path in BUDGET_BASE_MODEL_DIR.iterdir():
        rel = str(path.relative_to(BUDGET_BASE_MODEL_DIR.parents[2]))
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not package data"
