"""The verl compute_score and the TRL reward function, including calls from many threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dynashape.rewards import compute_score, correctness_reward, default_verifier

RESPONSES = [
    r"The sum is $\boxed{\frac{1}{2}}$.",  # equal to 0.5
    r"So we get \boxed{(x+1)^2}.",  # equal to x^2+2x+1 (needs math-verify)
    r"I conclude \boxed{7}.",  # wrong for 8
    "I am not sure.",  # no answer
    r"\boxed{[0,1)}",  # wrong for [0,1]
]
GOLDS = ["0.5", "x^2+2x+1", "8", "3", "[0,1]"]
EXPECTED = [1.0, 1.0, 0.0, 0.0, 0.0]


def test_formatted_is_a_closed_box_not_an_answer_line() -> None:
    assert compute_score("math", "Answer: 8", "8") == {"score": 1.0, "acc": True, "pred": "8", "formatted": False}
    assert compute_score("math", r"so \boxed{8", "8")["formatted"] is False  # a box that never closes


def test_compute_score_values_and_keys() -> None:
    results = [compute_score("math", r, g) for r, g in zip(RESPONSES, GOLDS)]
    assert [r["score"] for r in results] == EXPECTED
    assert [r["acc"] for r in results] == [bool(e) for e in EXPECTED]
    assert [r["pred"] for r in results] == [r"\frac{1}{2}", "(x+1)^2", "7", "", "[0,1)"]
    assert [r["formatted"] for r in results] == [True, True, True, False, True]  # a closed \boxed answer
    assert all(set(r) == {"score", "acc", "pred", "formatted"} for r in results)  # verl needs the same keys
    assert all(type(r["score"]) is float and type(r["acc"]) is bool and type(r["pred"]) is str for r in results)


def test_compute_score_accepts_verl_extras_and_lists_of_golds() -> None:
    result = compute_score("math_dapo", r"\boxed{4}", ["3", "4"], extra_info={"index": 7}, reward_router_address=None)
    assert result["score"] == 1.0
    assert compute_score("math", r"\boxed{4}", np.array(["3", "5"]))["score"] == 0.0
    assert compute_score("gsm8k", r"\boxed{72}", 72)["score"] == 1.0
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("math", r"\boxed{4}", None)


def test_compute_score_from_many_threads_matches_serial() -> None:
    calls = [(r, g) for r, g in zip(RESPONSES, GOLDS)] * 8
    serial = [compute_score("math", r, g) for r, g in calls]
    with ThreadPoolExecutor(16) as threads:  # verl scores samples from a thread pool
        threaded = list(threads.map(lambda call: compute_score("math", *call), calls))
    assert threaded == serial


def test_trl_reward_with_answer_column() -> None:
    rewards = correctness_reward(prompts=["p"] * 5, completions=RESPONSES, answer=GOLDS, trainer_state=None)
    assert rewards == EXPECTED


def test_trl_reward_with_solution_column_and_chat_completions() -> None:
    solutions = [rf"Worked solution ... so the answer is $\boxed{{{g}}}$." for g in GOLDS]
    chats = [[{"role": "assistant", "content": r}] for r in RESPONSES]
    assert correctness_reward(prompts=["p"] * 5, completions=chats, solution=solutions) == EXPECTED


def test_trl_reward_from_threads_matches_serial() -> None:
    serial = correctness_reward(prompts=[""] * 5, completions=RESPONSES, answer=GOLDS)
    with ThreadPoolExecutor(8) as threads:
        results = list(
            threads.map(lambda _: correctness_reward(prompts=[""] * 5, completions=RESPONSES, answer=GOLDS), range(8))
        )
    assert all(result == serial for result in results)


def test_trl_reward_bad_inputs() -> None:
    with pytest.raises(ValueError, match="'answer' or 'solution'"):
        correctness_reward(prompts=["p"], completions=["x"], question=["q"])
    with pytest.raises(ValueError, match="gold answers"):
        correctness_reward(prompts=["p"], completions=["x", "y"], answer=["1"])
    with pytest.raises(ValueError, match=r"completions\[0\]"):
        correctness_reward(prompts=["p"], completions=[42], answer=["1"])


def test_default_verifier_is_shared() -> None:
    assert default_verifier() is default_verifier()
