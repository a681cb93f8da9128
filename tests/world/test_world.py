"""The World interface: one place picks a world; the chain world and a dataset answer the same questions."""

import json
import random

import numpy as np
import pytest

from dynashape.world import BOXED_INSTRUCTION, ChainWorld, DatasetWorld, Problem, Samples, get_world
from dynashape.world.chain import ChainTaskConfig, make_problem, world_splits

SMALL = ChainTaskConfig(n_train=30, n_validation_per_difficulty=1, n_test_per_difficulty=2, max_ops=3)


def test_get_world_picks_the_dataset_when_a_path_is_given(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) + "\n" for i in range(20)))
    assert isinstance(get_world(SMALL), ChainWorld)
    world = get_world(SMALL, str(path))
    assert isinstance(world, DatasetWorld)
    assert world.prompt_suffix == BOXED_INSTRUCTION and not world.labels_errors
    s = world.splits()
    assert len(s.test) == 2 and len(s.train) == 18 and s.validation == []  # seeded 10 % held out
    with pytest.raises(ValueError, match="split 'validation': the dataset world has none"):
        world.split("validation")
    with pytest.raises(ValueError, match="no teacher"):
        world.teacher_trace(s.train[0], random.Random(0))
    assert world.identity() is None and world.shipped_base() is None
    assert world.passk_subset(s.test, 1, 1) == [] and world.stats(_samples(s.test, ["x"] * 2)) == {}


def test_chain_world_is_the_generator_and_the_teacher():
    world = ChainWorld(SMALL)
    assert world.splits() == world_splits(SMALL)
    assert world.split("validation") == world_splits(SMALL).validation
    with pytest.raises(ValueError, match="split must be one of"):
        world.split("dev")
    p = make_problem((47, 8), ("+",))  # 47+8 = 55 (carries)
    assert world.identity()["n_train"] == 30
    traces = {world.teacher_trace(p, random.Random(seed)) for seed in range(40)}
    assert "47+8=55\n\\boxed{55}" in traces and "\\boxed{55}" in traces  # concise and bare-answer habits
    assert world.error_mode(p, "47+8=45\n\\boxed{45}") == "carry"
    assert world.prompt_suffix == "" and world.labels_errors


def test_chain_world_passk_subset_hand_checked():
    """The first hardest problems, then the first trap prompts not already taken, in the split's order."""
    easy = make_problem((20, 1), ("+",))
    hard = [make_problem((30, 2, 1), ("+", "+")), make_problem((40, 5, 3, 1), ("-", "+", "+"), group=1)]
    trap = make_problem((60, 5, 4, 2), ("+", "-", "+"), group=2)
    problems = [easy, *hard, trap]
    assert ChainWorld().passk_subset(problems, 1, 2) == [hard[1], trap]  # hardest (3 ops): hard[1] and trap


def test_chain_world_stats_count_shortcuts_and_modes():
    p = make_problem((47, 8), ("+",))
    s = _samples([p, p, p, p], ["47+8=55\n\\boxed{55}", "\\boxed{45}", "47+8=45\n\\boxed{45}", "47+8=45\n\\boxed{45}"])
    s.correct = np.array([True, False, False, False])
    stats = ChainWorld().stats(s)
    assert stats["shortcut_frac"] == pytest.approx(1 / 4)
    assert stats["error_modes"]["carry"] == pytest.approx(2 / 3) and stats["error_modes"]["shortcut"] == pytest.approx(
        1 / 3
    )


def _samples(problems: list[Problem], texts: list[str]) -> Samples:
    n = len(problems)
    return Samples(list(problems), texts, np.zeros(n, bool), np.ones(n, np.int64), np.zeros(n, bool), None)
