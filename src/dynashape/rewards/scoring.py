"""Engine-facing reward functions: verl's ``compute_score`` and a TRL reward function.

Both score with the process-wide ``default_verifier()`` (one worker pool per process, shared by every
thread), so they are safe in verl's reward thread pool and cheap to call once per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynashape.rewards.answers import extract_answer, has_boxed_answer
from dynashape.rewards.verifier import default_verifier

__all__ = ["compute_score", "correctness_reward"]


def _golds_of(ground_truth: Any) -> list[str]:
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return [str(ground_truth)]
    if isinstance(ground_truth, Sequence) or hasattr(ground_truth, "tolist"):  # list, tuple, numpy array
        items = ground_truth.tolist() if hasattr(ground_truth, "tolist") else list(ground_truth)
        golds = [str(item) for item in items if isinstance(item, (str, int, float))]
        if golds:
            return golds
    raise ValueError(f"ground_truth must be a str, a number or a list of them, got {ground_truth!r}")


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl custom reward function: 1.0 when the response's final answer equals the ground truth.

    Configure with ``reward.custom_reward_function.path=pkg://dynashape.integrations.verl`` and
    ``reward.custom_reward_function.name=compute_score``. verl calls it once per sample from a thread pool.

    Args:
        data_source: the dataset name (unused: every source is scored as a math answer).
        solution_str: the decoded response.
        ground_truth: the gold answer (``reward_model.ground_truth``); a list of accepted answers also works.
        extra_info: verl's per-sample extras (unused).
        **kwargs: extra keywords verl passes to reward functions (unused).

    Returns:
        ``{"score": float, "acc": bool, "pred": str, "formatted": bool}`` with the same keys for every sample
        (verl turns them into ``reward_extra_info``); ``pred`` is ``""`` when the response has no answer;
        ``formatted`` says whether it answers in a closed ``\\boxed{}`` (LASER's official score reads it).
    """
    golds = _golds_of(ground_truth)
    verdicts = default_verifier().verify(golds, [solution_str] * len(golds))
    correct = any(verdict.correct for verdict in verdicts)
    pred = verdicts[0].pred
    formatted = bool(verdicts[0].formatted) if verdicts[0].formatted is not None else has_boxed_answer(solution_str)
    return {
        "score": 1.0 if correct else 0.0,
        "acc": correct,
        "pred": pred if pred is not None else "",
        "formatted": formatted,
    }


def completion_text(completion: Any, index: int) -> str:
    """The text of TRL completion `index`: a string, or the last message of a chat (ValueError otherwise)."""
    if isinstance(completion, str):
        return completion
    # Conversational datasets: a list of {"role", "content"} messages; score the assistant's last message.
    if isinstance(completion, (list, tuple)) and completion:
        last = completion[-1]
        if isinstance(last, dict) and isinstance(last.get("content"), str):
            return last["content"]
    raise ValueError(f"completions[{index}] must be a str or a list of chat messages, got {completion!r:.80}")


def correctness_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 for a completion whose final answer equals the dataset's gold answer.

    Reads the ``answer`` column, or else the boxed answer of the ``solution`` column. Pass it to
    ``GRPOTrainer(reward_funcs=[correctness_reward])``; TRL logs it as ``rewards/correctness_reward``.

    Args:
        prompts: [B] prompts (unused).
        completions: [B] completions: strings, or chat message lists (the last message is scored).
        **kwargs: dataset columns (``answer`` or ``solution``, [B] each) and TRL's extras.

    Returns:
        [B] rewards in {0.0, 1.0}; a completion without an answer, or one that timed out, gets 0.0.
    """
    if "answer" in kwargs and kwargs["answer"] is not None:
        golds = [str(answer) for answer in kwargs["answer"]]
    elif "solution" in kwargs and kwargs["solution"] is not None:
        golds = []
        for solution in kwargs["solution"]:
            solution = str(solution)
            golds.append(extract_answer(solution) or solution)
    else:
        columns = sorted(key for key in kwargs if key not in ("trainer_state", "log_metric", "completion_ids"))
        raise ValueError(f"correctness_reward needs an 'answer' or 'solution' dataset column, got {columns}")
    if len(golds) != len(completions):
        raise ValueError(f"got {len(golds)} gold answers for {len(completions)} completions")
    texts = [completion_text(completion, index) for index, completion in enumerate(completions)]
    return [1.0 if verdict.correct else 0.0 for verdict in default_verifier().verify(golds, texts)]
