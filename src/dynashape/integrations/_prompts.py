"""Stable prompt keys for the engines' prompt formats (MEDS memory is keyed by them across steps)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dynashape.meds.keys import prompt_key

__all__ = ["prompt_key", "prompt_key_of", "prompt_text"]


def prompt_text(prompt: Any) -> str:
    """The text of a prompt: a plain string, or a chat message list (verl ``raw_prompt``, TRL conversational
    prompts) whose message contents are joined with newlines."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if isinstance(prompt, (list, tuple)):
        parts = [m.get("content", "") if isinstance(m, dict) else m for m in prompt]
        return "\n".join(p if isinstance(p, str) else str(p) for p in parts)
    return str(prompt)


def prompt_key_of(prompt: Any) -> str:
    """First 16 hex chars of MD5 of the whitespace-normalised prompt text (the official MEDS key)."""
    return prompt_key(prompt_text(prompt))
