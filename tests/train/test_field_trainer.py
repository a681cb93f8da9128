"""The field's length methods in the reference trainer: budget prompts (L1), the validation accuracy (AALC),
the monitor set (LASER-D), ThinkPrune's schedule inside one run, and every field shaper for a few steps."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import torch

from dynashape.meds.keys import prompt_key
from dynashape.shapers import shaper_class
from dynashape.train import checkpoint as ckpt
from dynashape.train.base_model import prompted, world_of
from dynashape.train.config import BudgetPromptConfig, TrainConfig
from dynashape.train.run import read_metrics, train
from dynashape.world.base import Problem
from dynashape.world.budget_prompts import draw_budget, with_budget, with_drawn_budgets
from resume_check import assert_resumes_bit_identically, strip_time

# toy-scale parameters (the tiny runs' cap is 24 tokens): each method's own parameters, lengths shrunk
FIELD_KWARGS = {
    "l1_exact": {"alpha": 0.01},
    "l1_max": {"alpha": 0.01},
    "thinkprune": {"max_length": 24, "schedule": ((2, 16),)},
    "laser": {"target_length": 12},
    "laser_d": {"initial_target": 12, "grid": (8, 12, 16, 20, 24), "refresh_every": 2, "n_rollout": 2},
    "dler": {"max_length": 20},
    "alp": {"beta": 1e-3},
    "adlp": {},
    "aalc": {"l_max": 24},
    "saw": {},
    "gfpo": {"keep": 2},
}
FIELD_TRAIN = {  # what each needs from the trainer beyond the shaper
    "l1_exact": {"budget_prompt": {"enabled": True}},
    "l1_max": {"budget_prompt": {"enabled": True, "form": "maximum"}},
    "laser_d": {"validation_problems": 4},
    "aalc": {"validation_every": 2, "validation_problems": 4},
    "saw": {"reward_columns": ("correct_short",), "length_threshold": 12},
}


# ----------------------------------------------------------------------------------------- budget prompts
def test_a_budget_goes_before_the_prompts_newline_in_l1s_words():
    problem = Problem("47+8-(6+3)\n", "46", 3, prompt_key("47+8-(6+3)\n"))
    exact = with_budget(problem, 40)
    assert exact.prompt == "47+8-(6+3) Think for 40 tokens.\n"
    assert exact.budget == 40 and exact.answer == "46" and exact.difficulty == 3
    assert exact.key == prompt_key("47+8-(6+3) Think for 40 tokens.\n") != problem.key  # another prompt
    assert with_budget(problem, 7, "maximum").prompt == "47+8-(6+3) Think for maximum 7 tokens.\n"
    assert with_budget(Problem("no newline", "1", 0, "k"), 3).prompt == "no newline Think for 3 tokens."
    with pytest.raises(ValueError, match="already names a budget"):
        with_budget(exact, 40)
    for bad in (0, -5, True, 2.5):
        with pytest.raises(ValueError, match="budget must be an integer >= 1"):
            with_budget(problem, bad)
    with pytest.raises(ValueError, match="form must be one of"):
        with_budget(problem, 4, "min")


def test_drawn_budgets_are_fixed_by_seed_and_key_and_uniform_on_the_range():
    keys = [f"k{i}" for i in range(4000)]
    draws = [draw_budget(k, low=1, high=4, seed=0) for k in keys]
    assert draws == [draw_budget(k, low=1, high=4, seed=0) for k in keys]  # a function of (seed, key)
    counts = Counter(draws)
    assert set(counts) == {1, 2, 3, 4}
    # 1000 expected per value, sd ~27: a draw that favoured a value or missed an end would fail
    assert all(880 < c < 1120 for c in counts.values()), counts
    other = [draw_budget(k, low=1, high=4, seed=1) for k in keys]
    assert sum(a != b for a, b in zip(draws, other, strict=True)) > 2500  # ~3000 expected for independent draws
    problems = [Problem(f"{i}+1\n", str(i + 1), 1, prompt_key(f"{i}+1\n")) for i in range(20)]
    drawn = with_drawn_budgets(problems, low=5, high=9, seed=3)
    assert [p.budget for p in drawn] == [draw_budget(p.key, low=5, high=9, seed=3) for p in problems]
    with pytest.raises(ValueError, match="1 <= low <= high"):
        draw_budget("k", low=9, high=5, seed=0)


def test_the_default_budget_range_is_l1s_scaled_to_the_cap():
    assert BudgetPromptConfig().budget_range(4096) == (100, 4000)  # L1's randint(100, 4000) at its 4K context
    assert BudgetPromptConfig().budget_range(101) == (2, 99)
    assert BudgetPromptConfig(low=10, high=20).budget_range(101) == (10, 20)
    with pytest.raises(ValueError, match=r"budget_prompt\.low=30 must be <= budget_prompt\.high=20"):
        BudgetPromptConfig(low=30, high=20)
    with pytest.raises(ValueError, match=r"budget_prompt\.form"):
        BudgetPromptConfig(form="loose")


def test_following_error_hand_worked():
    import numpy as np

    from dynashape.train.budget_following import following_error

    # |8 - 10| + |12 - 10| + |20 - 10| = 14 over 3 responses, relative to 10
    assert following_error(np.array([8, 12, 20]), 10) == pytest.approx(14 / 30)
    assert following_error(np.array([10, 10]), 10) == 0.0
    with pytest.raises(ValueError, match="budget must be >= 1"):
        following_error(np.array([1]), 0)
    with pytest.raises(ValueError, match=r"budget_prompt\.eval_budgets must not repeat"):
        BudgetPromptConfig(eval_budgets=(4, 4))


def test_a_shaper_is_refused_what_the_trainer_would_not_hand_it():
    with pytest.raises(ValueError, match=r"budget_prompt.enabled=false: shaper 'l1_exact' reads"):
        TrainConfig(shaper="l1_exact")
    with pytest.raises(ValueError, match=r"validation_every=0: shaper 'aalc' reads the last validation accuracy"):
        TrainConfig(shaper="aalc")
    with pytest.raises(ValueError, match="validation_every must be >= 0"):
        TrainConfig(validation_every=-1)


def test_the_new_fields_leave_an_older_run_folders_hash_alone_while_off(tiny_config):
    cfg = tiny_config("grpo")
    written_before = cfg.to_dict()
    for key in ("budget_prompt", "validation_every", "validation_samples", "validation_problems"):
        del written_before["train"][key]
    assert ckpt.config_hash(written_before) == ckpt.config_hash(cfg.to_dict())
    for on in ({"budget_prompt": {"enabled": True}}, {"validation_every": 5}, {"validation_problems": 3}):
        assert ckpt.config_hash(tiny_config("grpo", **on).to_dict()) != ckpt.config_hash(cfg.to_dict()), on


# ------------------------------------------------------------------------------------------- the trainer
@pytest.mark.parametrize("name", list(FIELD_KWARGS))
def test_each_field_shaper_trains_in_the_reference_trainer(name, tiny_config, parity_verifier, tmp_path):
    cfg = tiny_config("grpo", shaper=name, shaper_kwargs=FIELD_KWARGS[name], **FIELD_TRAIN.get(name, {}))
    result = train(cfg, tmp_path / name, progress=False, verifier=parity_verifier, report=False)
    assert [m["step"] for m in result.metrics] == [1.0, 2.0, 3.0]
    for m in result.metrics:
        assert all(isinstance(v, float) and math.isfinite(v) for v in m.values()), m
    kept = [m for m in result.metrics if m["groups_kept"] > 0]
    assert kept and all(any(k.startswith(f"{name}/") for k in m) for m in kept), "the shaper's own metrics"


RESUMABLE = {  # every field shaper at its toy parameters, and the compute controls of the frontier study
    **{
        name: {"shaper": name, "shaper_kwargs": kwargs, **FIELD_TRAIN.get(name, {})}
        for name, kwargs in FIELD_KWARGS.items()
    },
    "grpo_dynamic_sampling": {"dynamic_sampling": True},
    "dler_dynamic_sampling": {"shaper": "dler", "shaper_kwargs": FIELD_KWARGS["dler"], "dynamic_sampling": True},
}


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_each_field_method_resumes_bit_identically(name, tiny_config, parity_verifier, tmp_path):
    """A run stopped after step 3 resumes from its step-2 checkpoint into the uninterrupted run's numbers: every
    metric, the weights and the evaluation (the frontier study's resumed runs rest on this)."""
    cfg = tiny_config("grpo", steps=4, checkpoint_every=2, **RESUMABLE[name])
    assert_resumes_bit_identically(cfg, tmp_path, parity_verifier)


def test_l1_gets_the_budget_each_rollouts_prompt_names(tiny_config, parity_verifier, tmp_path, monkeypatch):
    seen = []
    l1_exact = shaper_class("l1_exact")
    original = l1_exact.shape
    monkeypatch.setattr(l1_exact, "shape", lambda self, batch: seen.append(batch) or original(self, batch))
    budget_prompt = {"enabled": True, "eval_budgets": (6, 12)}
    cfg = tiny_config("grpo", shaper="l1_exact", shaper_kwargs={"alpha": 0.01}, budget_prompt=budget_prompt)
    result = train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)
    by_key = {p.key: p for p in prompted(cfg.train, world_of(cfg).split("train"), training=True)}
    assert len(seen) == 3
    for batch in seen:
        assert batch.budgets is not None and len(batch.budgets) == len(batch.lengths)
        # the number the prompt's text names, read back from the text itself
        named = [int(re.search(r"Think for (\d+) tokens\.", by_key[k].prompt).group(1)) for k in batch.prompt_keys]
        assert batch.budgets.tolist() == named
        assert all(1 <= b <= 23 for b in named)  # L1's range at a 24-token cap: 1..23
    # L1's fixed-budget evaluation: one per budget, in eval.json
    assert set(result.eval["at_budget"]) == {"6", "12"}
    for budget, at in result.eval["at_budget"].items():
        assert 0 <= at["accuracy"] <= 1 and 0 <= at["truncated_frac"] <= 1
        # mean |l - b| / b is at least |mean l - b| / b (equal only when every length lies on one side of b)
        assert at["following_error"] >= abs(at["mean_length"] - int(budget)) / int(budget) - 1e-12
    other = tiny_config("grpo", shaper="l1_exact", shaper_kwargs={"alpha": 0.01}, budget_prompt={"enabled": True})
    assert ckpt.config_hash(other.to_dict()) == ckpt.config_hash(cfg.to_dict()), "eval budgets train nothing"
    held_out = prompted(cfg.train, world_of(cfg).split("test"), training=False)
    assert all(p.budget is None for p in held_out), "no eval_budget: held-out prompts name none"
    with_eval = TrainConfig(shaper="l1_exact", budget_prompt={"enabled": True, "eval_budget": 9})
    assert {p.budget for p in prompted(with_eval, world_of(cfg).split("test"), training=False)} == {9}


def test_validations_run_on_schedule_reach_aalc_and_survive_a_resume(tiny_config, parity_verifier, tmp_path):
    cfg = tiny_config(
        "grpo",
        shaper="aalc",
        shaper_kwargs={"l_max": 24},
        validation_every=2,
        validation_problems=4,
        steps=4,
        checkpoint_every=2,
    )
    full = train(cfg, tmp_path / "full", progress=False, verifier=parity_verifier, report=False)
    # before steps 1 and 3 (step indices 0 and 2), not before 2 and 4
    assert ["val/accuracy" in m for m in full.metrics] == [True, False, True, False]
    last = None
    for m in full.metrics:
        last = m.get("val/accuracy", last)
        if m["groups_kept"] > 0:
            assert m["aalc/val_accuracy"] == last  # the shaper reads the latest validation
    # one sample of each validation problem: the accuracy is a multiple of 1 / (their count)
    n = len(world_of(cfg).split("validation")[:4])
    assert all(m["val/accuracy"] * n == round(m["val/accuracy"] * n) for m in full.metrics if "val/accuracy" in m)
    train(cfg, tmp_path / "part", progress=False, stop_after=3, verifier=parity_verifier, report=False)
    resumed = train(cfg, tmp_path / "part", progress=False, verifier=parity_verifier, report=False)
    assert resumed.resumed_from == 2
    assert strip_time(read_metrics(tmp_path / "part")) == strip_time(full.metrics)


def test_validation_does_not_move_the_training_draws(tiny_config, parity_verifier, tmp_path):
    plain = train(tiny_config("grpo"), tmp_path / "a", progress=False, verifier=parity_verifier, report=False)
    cfg = tiny_config("grpo", validation_every=1, validation_problems=3)
    validated = train(cfg, tmp_path / "b", progress=False, verifier=parity_verifier, report=False)
    assert all("val/accuracy" in m for m in validated.metrics)
    without = [{k: v for k, v in m.items() if not k.startswith("val/")} for m in strip_time(validated.metrics)]
    assert without == strip_time(plain.metrics)


def test_laser_d_refreshes_its_targets_from_the_monitor_set_on_its_schedule(tiny_config, parity_verifier, tmp_path):
    kwargs = FIELD_KWARGS["laser_d"]
    cfg = tiny_config("grpo", shaper="laser_d", shaper_kwargs=kwargs, validation_problems=4, steps=3)
    result = train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)
    assert ["monitor/accuracy" in m for m in result.metrics] == [True, False, True]  # steps 0 and 2
    state = ckpt.load(
        ckpt.latest_checkpoint(tmp_path / "run/checkpoints"), cfg_hash=ckpt.config_hash(cfg.to_dict())
    ).state["shaper"]
    assert state["buckets"]["refreshes"] == 2
    for target in state["buckets"]["targets"]:  # a grid length, or None (no grid length keeps enough answers)
        assert target is None or target in kwargs["grid"]


def test_thinkprune_runs_its_schedule_inside_one_run(tiny_config, parity_verifier, tmp_path):
    cfg = tiny_config("grpo", shaper="thinkprune", shaper_kwargs={"max_length": 24, "schedule": ((1, 16), (2, 8))})
    result = train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)
    caps = [m.get("thinkprune/max_length") for m in result.metrics if m["groups_kept"] > 0]
    expected = [cap for m, cap in zip(result.metrics, (24.0, 16.0, 8.0), strict=True) if m["groups_kept"] > 0]
    assert caps == expected and caps


def test_gfpo_dropped_rows_leave_the_trainers_loss(tiny_config, parity_verifier, tmp_path, monkeypatch):
    """The loop hands the loss GFPO's kept rows: the loss it computes is the kept rows' token mean, which differs
    from the all-rows one (a dropped row's advantage is 0, but its tokens would still count in the denominator).
    One on-policy update per step (one mini-batch, one epoch, fused): ratio 1, so pg_loss = -sum(A m) / sum(m)
    over the kept rows' tokens m, worked from the shaper's own keep and the tensors the loss received."""
    from dynashape.losses import registry as objectives

    GfpoShaper = shaper_class("gfpo")

    shaped, calls = [], []
    original_shape, clip = GfpoShaper.shape, objectives.get_loss("clip")
    monkeypatch.setattr(
        GfpoShaper, "shape", lambda self, batch: shaped.append(original_shape(self, batch)) or shaped[-1]
    )

    def recording_clip(inputs, cfg):
        out = clip(inputs, cfg)
        calls.append((inputs, float(out.diagnostics["pg_loss"].detach())))
        return out

    monkeypatch.setitem(objectives._REGISTRY, "clip", recording_clip)
    cfg = tiny_config("grpo", shaper="gfpo", shaper_kwargs={"keep": 2}, mini_batches=1, steps=2)
    train(cfg, tmp_path / "gfpo", progress=False, verifier=parity_verifier, report=False)
    assert len(calls) == len(shaped) == 2
    gaps = []
    for (inputs, pg_loss), out in zip(calls, shaped, strict=True):
        assert torch.equal(inputs.logprobs.detach(), inputs.old_logprobs)  # ratio 1
        keep = out.keep.to(inputs.response_mask.device)
        assert int(keep.sum()) == len(keep) // 2  # 2 of each group of 4
        adv_tokens = inputs.advantages.double().unsqueeze(1) * inputs.response_mask.double()
        mask = inputs.response_mask.double()
        kept = -adv_tokens[keep].sum() / mask[keep].sum()
        every_row = -adv_tokens.sum() / mask.sum()
        assert pg_loss == pytest.approx(float(kept), rel=1e-5, abs=1e-7)
        gaps.append(abs(float(kept - every_row)))
    assert max(gaps) > 1e-3, "the batch must tell kept-rows from all-rows losses apart"
