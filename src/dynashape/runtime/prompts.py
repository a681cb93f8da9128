"""How a problem becomes the text the policy sees: an instruction suffix, then the tokenizer's chat template.

The toy task's prompts go to the model as they are (``2+3\\n``; its character tokenizer has no chat template
and the default suffix is empty), so its runs are unchanged. A real instruct model is prompted the way it was
tuned: the question plus an instruction to box the final answer, as a user message rendered with the
tokenizer's chat template and its generation prompt (``apply_chat_template(..., add_generation_prompt=True)``).

BOS: a template writes the special tokens it wants (Llama 3 writes ``<|begin_of_text|>`` itself, SmolLM2 starts
with ``<|im_start|>``, which its tokenizer also calls BOS), so templated prompts are tokenized without adding
any, as ``apply_chat_template(tokenize=True)`` does. Plain prompts get the tokenizer's BOS, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

__all__ = ["BOXED_INSTRUCTION", "PromptConfig", "PromptFormat", "encode_questions", "select_problems"]

T = TypeVar("T")

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""The default suffix of dataset problems: DeepSeek-R1's recommended math instruction (also the prompt of the
R1-distilled models LEAD and MEDS train), after a newline."""


@dataclass(frozen=True, kw_only=True)
class PromptConfig:
    """Rendering of problems into prompts (``--set prompt.chat_template=false``, ``prompt.suffix=...``)."""

    chat_template: bool = True
    """Render the question as a user message with the tokenizer's chat template when it has one; False sends
    the plain text (question, suffix, newline)."""
    suffix: str | None = None
    """Text appended to every question, e.g. the instruction to box the answer. None: the data source's
    default, ``BOXED_INSTRUCTION`` for a dataset (``--data``) and nothing for the toy task."""
    system: str | None = None
    """A system message put before the question (templated prompts only); None leaves the template's own
    default (SmolLM2's names the assistant)."""

    def __post_init__(self) -> None:
        if not isinstance(self.chat_template, bool):
            raise ValueError(f"chat_template must be true or false, got {self.chat_template!r}")
        for name in ("suffix", "system"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string or null, got {value!r}")


class PromptFormat:
    """A ``PromptConfig`` bound to a tokenizer: ``render`` gives the prompt text, ``encode`` its ids.

    Args:
        tokenizer: the policy's tokenizer (``chat_template`` attribute, ``apply_chat_template``).
        cfg: the prompt configuration.
        default_suffix: the suffix used when ``cfg.suffix`` is None (the data source's default).
    """

    def __init__(self, tokenizer: Any, cfg: PromptConfig | None = None, *, default_suffix: str = "") -> None:
        cfg = cfg or PromptConfig()
        self.tokenizer = tokenizer
        self.suffix = default_suffix if cfg.suffix is None else cfg.suffix
        self.system = cfg.system
        self.templated = bool(cfg.chat_template and getattr(tokenizer, "chat_template", None))
        self._cache: dict[str, str] = {}  # prompts recur every epoch; a template is a Jinja render each time

    def render(self, question: str) -> str:
        """The prompt text for one question (its trailing newlines are replaced by the suffix and layout)."""
        text = self._cache.get(question)
        if text is None:
            content = question.rstrip("\n") + self.suffix
            if self.templated:
                messages = [{"role": "user", "content": content}]
                if self.system is not None:
                    messages.insert(0, {"role": "system", "content": self.system})
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            else:
                text = content + "\n"  # the response starts on a new line, as in the toy's prompts
            self._cache[question] = text
        return text

    def encode(self, questions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and mask [N, P] of the rendered questions (see ``rollout.encode_prompts``)."""
        from dynashape.runtime.sampler import encode_prompts

        return encode_prompts(self.tokenizer, [self.render(q) for q in questions], add_bos=not self.templated)


def encode_questions(
    tokenizer: Any, questions: Sequence[str], prompt_format: PromptFormat | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt ids and mask [N, P] of ``questions``: rendered by ``prompt_format``, or as they are after the
    tokenizer's BOS when it is None (the trainer and the evaluation share this one choice)."""
    if prompt_format is not None:
        return prompt_format.encode(questions)
    from dynashape.runtime.sampler import encode_prompts

    return encode_prompts(tokenizer, list(questions))


def select_problems(problems: Sequence[T], count: int | None) -> list[T]:
    """``count`` problems evenly spaced over ``problems`` (all when None or not fewer): index ``i * n // count``.

    Held-out splits are often ordered (the toy's by difficulty), so the first ``count`` would be the easiest.
    """
    n = len(problems)
    if count is None or count >= n:
        return list(problems)
    return [problems[i * n // count] for i in range(count)]
