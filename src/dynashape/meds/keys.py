"""The stable prompt key that the MEDS memory is keyed by across steps (MEDS, arXiv 2604.11297)."""

from __future__ import annotations

import hashlib

__all__ = ["prompt_key"]


def prompt_key(text: str) -> str:
    """First 16 hex chars of MD5 of the whitespace-normalised prompt text (the official MEDS key).

    Whitespace is collapsed so that re-rendered prompts (a trailing newline, doubled spaces from a chat
    template) still find their bank; MD5 is an identifier here, not a security measure.
    """
    return hashlib.md5(" ".join(text.split()).encode(), usedforsecurity=False).hexdigest()[:16]
