"""scripts/budget_base_audit.py: accuracy and length on plain and on budget prompts, paired by problem."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from dynashape.world.chain import ChainWorld


def test_the_paired_comparison_by_hand(load_script):
    """2 problems x 2 draws. Accuracy plain [1, 0 | 1, 1] -> per problem 0.5, 1 (mean 0.75, se 0.25); budget
    [1, 1 | 0, 0] -> 1, 0; differences 0.5, -1: mean -0.25, sd 1.0607 / sqrt 2 = se 0.75. Lengths plain 10, 20 | 30,
    30 -> 15, 30; budget 12, 18 | 30, 34 -> 15, 32: differences 0, 2, mean 1, se 1."""
    compare = load_script("budget_base_audit").compare

    def samples(correct, lengths):
        return SimpleNamespace(problems=[0] * 4, correct=np.array(correct, bool), lengths=np.array(lengths))

    out = compare(samples([1, 0, 1, 1], [10, 20, 30, 30]), samples([1, 1, 0, 0], [12, 18, 30, 34]), 2)
    assert out["problems"] == 2 and out["samples"] == 2
    acc = out["accuracy"]
    assert acc["plain"] == pytest.approx({"mean": 0.75, "se": 0.25})
    assert acc["budget_minus_plain"] == pytest.approx({"mean": -0.25, "se": 0.75})
    assert out["mean_length"]["budget_minus_plain"] == pytest.approx({"mean": 1.0, "se": 1.0})


def test_the_budget_prompts_follow_the_stated_rule(load_script):
    """Every validation problem names a budget in 2..160, fixed by its key, in both of L1's forms."""
    budget_prompts = load_script("budget_base_audit").budget_prompts
    problems = ChainWorld().split("validation")
    prompted = budget_prompts(problems)
    assert [p.budget for p in prompted] == [p.budget for p in budget_prompts(problems)]
    assert all(2 <= p.budget <= 160 for p in prompted) and len({p.budget for p in prompted}) > 50
    forms = {bool(re.search(r"Think for maximum \d+ tokens\.", p.prompt)) for p in prompted}
    assert forms == {True, False}


def test_the_audit_runs_on_a_tiny_base(load_script, tiny_config, parity_verifier):
    out = load_script("budget_base_audit").audit("tiny", samples=2, verifier=parity_verifier, cfg=tiny_config("grpo"))
    assert out["problems"] == 3 and set(out["accuracy"]) == {"plain", "budget", "budget_minus_plain"}
    assert 0 <= out["accuracy"]["plain"]["mean"] <= 1 and out["mean_length"]["budget"]["mean"] > 0
