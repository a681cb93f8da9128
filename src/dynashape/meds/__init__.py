"""MEDS: answer fingerprints from the forward pass, a per-prompt error memory, the repeated-error penalty.

    from dynashape.meds import answer_positions, answer_targets, FingerprintCapture, fingerprint, ErrorMemory

Names load on first use, so a refit worker that only needs the clustering math never imports transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynashape.meds.capture import OFFICIAL_FINGERPRINT_LAYERS, FingerprintCapture, fingerprint
    from dynashape.meds.clustering import assign, fit_labels, knn_vote, voted_cluster_sizes
    from dynashape.meds.keys import prompt_key
    from dynashape.meds.memory import ErrorMemory, MemoryConfig, MemoryFileError
    from dynashape.meds.model_parts import ModelParts, find_model_parts
    from dynashape.meds.penalty import repeat_penalty
    from dynashape.meds.positions import (
        TokenIndex,
        answer_positions,
        answer_targets,
        packed_token_index,
        padded_token_index,
    )

_EXPORTS = {
    "OFFICIAL_FINGERPRINT_LAYERS": "capture",
    "FingerprintCapture": "capture",
    "fingerprint": "capture",
    "assign": "clustering",
    "fit_labels": "clustering",
    "knn_vote": "clustering",
    "voted_cluster_sizes": "clustering",
    "prompt_key": "keys",
    "ErrorMemory": "memory",
    "MemoryConfig": "memory",
    "MemoryFileError": "memory",
    "ModelParts": "model_parts",
    "find_model_parts": "model_parts",
    "repeat_penalty": "penalty",
    "TokenIndex": "positions",
    "answer_positions": "positions",
    "answer_targets": "positions",
    "packed_token_index": "positions",
    "padded_token_index": "positions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dynashape.meds' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dynashape.meds.{module}"), name)
