"""MEDS fingerprints inside TRL's forwards: hooks on the policy's old-log-prob forward, never on the reference's.

TRL 1.16 computes per-token log-probs in ``GRPOTrainer._get_per_token_logps_and_entropies``, chunking the rows by
``batch_size``. ``logps_with_fingerprints`` runs that same forward, chunk by chunk, inside a
:class:`dynashape.meds.capture.FingerprintCapture` at each completion's answer position (MEDS, arXiv 2604.11297),
and returns TRL's result unchanged beside the fingerprints. ``is_policy_forward`` tells the trained policy from
TRL's PEFT reference forward (the same module with its adapters disabled or a "ref" adapter active).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dynashape.meds.capture import FingerprintCapture
from dynashape.meds.positions import answer_positions, answer_targets

__all__ = ["is_policy_forward", "logps_with_fingerprints"]


def logps_with_fingerprints(
    forward: Callable[..., Any],
    model: Any,
    unwrapped: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None,
    *,
    tokenizer: Any,
    options: dict[str, Any],
    **kwargs: Any,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None], torch.Tensor]:
    """TRL's ``(logps, entropies, aux_loss)`` of the rows, and their fingerprints.

    Args:
        forward: TRL's own ``_get_per_token_logps_and_entropies`` (bound), called once per chunk of rows.
        model: the model as TRL passes it (wrapped); ``unwrapped``: the module the capture hooks.
        input_ids, attention_mask: LongTensor [B, P + C], prompts left-padded to one width, completions after.
        logits_to_keep: C, the completion width.
        batch_size: rows per forward (None: all at once).
        tokenizer: finds each completion's answer (``meds.positions.answer_positions``).
        options: the capture's ``layers``, ``diff`` and ``norm``.
        **kwargs: TRL's other arguments; only ``compute_entropy`` and ``compute_aux_loss`` may be set (text models).

    Returns:
        ``((logps [B, C], entropies [B, C] or None, aux_loss or None), fingerprints float32 [B, layers])``, a row of
        NaN where a completion has no answer.
    """
    batch_size = batch_size or input_ids.size(0)
    if any(v is not None for k, v in kwargs.items() if k not in ("compute_entropy", "compute_aux_loss")):
        raise NotImplementedError("dynashape fingerprints in TRL support text-only models")
    completion = input_ids[:, -logits_to_keep:]
    completion_mask = attention_mask[:, -logits_to_keep:].bool()
    positions = answer_positions(completion, tokenizer, response_mask=completion_mask)
    targets = answer_targets(completion.masked_fill(~completion_mask, -1), positions)
    offset = input_ids.size(1) - logits_to_keep  # prompts are left-padded to one width
    seq_positions = torch.where(positions >= 0, positions + offset, -1)
    outputs, prints = [], []
    for start in range(0, input_ids.size(0), batch_size):
        rows = slice(start, start + batch_size)
        with FingerprintCapture(unwrapped, seq_positions[rows], targets[rows], **options) as capture:
            outputs.append(forward(model, input_ids[rows], attention_mask[rows], logits_to_keep, None, **kwargs))
        prints.append(capture.result())
    logps = torch.cat([o[0] for o in outputs])
    entropies = None if outputs[0][1] is None else torch.cat([o[1] for o in outputs])
    aux = None if outputs[0][2] is None else torch.stack([o[2] for o in outputs]).mean()
    return (logps, entropies, aux), torch.cat(prints)


def is_policy_forward(unwrapped: Any, policy_adapter: str | None) -> bool:
    """Whether a forward of the trainer's own model runs the trained policy: with PEFT, its trained adapter
    active and the adapters enabled (TRL's reference forward disables them, or activates a "ref" adapter).

    Args:
        unwrapped: the trainer's model, unwrapped.
        policy_adapter: the adapter trained (``active_adapter`` at start), or None for a model without PEFT.
    """
    if policy_adapter is None:
        return True
    from peft.tuners.tuners_utils import BaseTunerLayer

    if unwrapped.active_adapter != policy_adapter:  # TRL's "ref" adapter
        return False
    tuner = next((m for m in unwrapped.modules() if isinstance(m, BaseTunerLayer)), None)
    return tuner is None or not tuner.disable_adapters  # disable_adapter(): the base model
