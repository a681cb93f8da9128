"""The end-to-end verl test's reward function: dynashape's ``compute_score``, with a score that is not its verdict.

verl loads it by file path (``reward.custom_reward_function.path``) in its reward workers. A wrong answer that is
boxed scores 0.7, so ``sum(token_level_rewards) > 0.5`` (the threshold verdict of verl's plain ``sync`` mode) and
``acc`` (the verifier's verdict, handed over by the ``dynashape`` trainer mode) disagree on those rows: a case
that read the wrong one would not match the test's reference.
"""

from __future__ import annotations

from typing import Any

BOXED_WRONG_SCORE = 0.7


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> dict:
    from dynashape.integrations.verl import compute_score as verifier

    result = dict(verifier(data_source, solution_str, ground_truth, extra_info, **kwargs))
    if not result["acc"] and "\\boxed{" in solution_str:
        result["score"] = BOXED_WRONG_SCORE
    return result
