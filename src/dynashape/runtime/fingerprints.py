"""MEDS fingerprints of wrong answers after sampling (MEDS, arXiv 2604.11297): what the trainer's evaluation and
``dynashape evaluate``'s transformers backend both take."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dynashape.runtime.sampler import Rollouts

__all__ = ["wrong_fingerprints"]


@torch.no_grad()
def wrong_fingerprints(
    model: torch.nn.Module, tokenizer: Any, rollouts: Rollouts, wrong: np.ndarray, *, layers: int
) -> np.ndarray:
    """MEDS fingerprints (MEDS, arXiv 2604.11297) of the ``wrong`` rollouts, from one forward over those rows
    only, as the trainer's capture takes them.

    Args:
        rollouts: N sampled responses (``rollout.sample``).
        wrong: bool [N], the rows to fingerprint.
        layers: the last ``layers`` decoder layers.

    Returns:
        float64 [N, layers]: NaN on the other rows and on wrong rows without a boxed answer.
    """
    from dynashape.meds.capture import FingerprintCapture
    from dynashape.meds.positions import answer_positions, answer_targets
    from dynashape.runtime.sampler import sequence_logprobs

    fp = np.full((len(wrong), layers), np.nan)
    index = torch.as_tensor(np.flatnonzero(wrong), dtype=torch.long)
    if len(index):
        sub = rollouts.select(index.to(rollouts.lengths.device))
        pos = answer_positions(sub.response_ids, tokenizer, response_mask=sub.response_mask)
        width = sub.prompt_ids.shape[1]
        with FingerprintCapture(
            model, torch.where(pos >= 0, pos + width, -1), answer_targets(sub.response_ids, pos), layers=layers
        ) as capture:
            sequence_logprobs(model, sub)
        fp[index.numpy()] = capture.result().float().cpu().numpy()
    return fp
