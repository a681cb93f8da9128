"""MEDS fingerprints inside verl's FSDP actor, taken during the old-log-prob forward (no extra forward).

Flow (the ``sum_pi_squared`` output of verl is the template for a per-sample value returned to the driver):

1. Driver (:mod:`dynashape.integrations.verl.trainer`, MEDS estimators only): finds each response's answer
   position p (last ``\\boxed{``) and target y* (token at p + 1) with the tokenizer, writes them as per-sample
   fields ``dynashape_answer_pos`` / ``dynashape_answer_target`` and sets ``extra_info["dynashape_fingerprint"]``
   = {layers, diff, norm} for the old-log-prob call only.
2. Actor (this patch of ``FSDPEngineWithLMHead.forward_step``, installed when a process imports verl's FSDP
   engine): when the micro-batch carries the flag, maps p into the packed row (``cu_seqlens`` of the
   remove-padding path), attaches :class:`dynashape.meds.capture.FingerprintCapture` around the original
   forward and adds ``model_output["dynashape_fingerprints"]`` [b, layers] (NaN rows: no answer). Without the
   flag the original forward runs untouched.
3. verl concatenates model outputs over micro-batches and restores the order (``postprocess_batch_func``),
   writes the field back to TransferQueue, and the driver reads it in ``_compute_advantage``.

Unsupported (raises, rather than returning wrong fingerprints): Ulysses sequence parallelism (each rank sees a
slice of the packed row) and ``use_remove_padding=False``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from dynashape.meds.capture import OFFICIAL_FINGERPRINT_LAYERS, FingerprintCapture
from dynashape.meds.positions import answer_positions, answer_targets, packed_token_index

__all__ = [
    "ANSWER_POS_FIELD",
    "ANSWER_TARGET_FIELD",
    "FINGERPRINT_FIELD",
    "FLAG_KEY",
    "answer_fields",
    "capture_for_micro_batch",
    "patch_forward_step",
]

FLAG_KEY = "dynashape_fingerprint"
ANSWER_POS_FIELD = "dynashape_answer_pos"
ANSWER_TARGET_FIELD = "dynashape_answer_target"
FINGERPRINT_FIELD = "dynashape_fingerprints"


def answer_fields(
    responses: torch.Tensor, response_lengths: torch.Tensor, tokenizer: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Response-relative answer positions and targets for a right-padded response batch (driver side).

    Args:
        responses: LongTensor [bs, T] response tokens, right-padded.
        response_lengths: LongTensor [bs] real response tokens per row.
        tokenizer: The policy's Hugging Face tokenizer.

    Returns:
        (positions [bs], targets [bs]) LongTensors, -1 where a response has no ``\\boxed{`` answer.
    """
    steps = torch.arange(responses.shape[1], device=responses.device)
    mask = steps[None, :] < response_lengths.to(responses.device)[:, None]
    positions = answer_positions(responses, tokenizer, response_mask=mask)
    targets = answer_targets(responses.masked_fill(~mask, -1), positions)
    return positions, targets


def _non_tensor(micro_batch: Any, key: str, default: Any) -> Any:
    from verl.utils import tensordict_utils as tu

    return tu.get_non_tensor_data(data=micro_batch, key=key, default=default)


def capture_for_micro_batch(module: torch.nn.Module, micro_batch: Any, options: dict[str, Any]) -> FingerprintCapture:
    """A FingerprintCapture for the packed forward verl runs on this micro-batch.

    verl packs the micro-batch's nested ``input_ids`` [b, j] into one row [1, total] with
    ``cu_seqlens = input_ids.offsets()``; each sequence ends with its response, whose length is the nested
    length of ``responses``.
    """
    input_ids = micro_batch["input_ids"]
    if not getattr(input_ids, "is_nested", False):
        raise NotImplementedError("dynashape fingerprints need verl's nested (no-padding) input_ids")
    if "responses" in micro_batch.keys():
        response_lengths = micro_batch["responses"].offsets().diff()
    else:
        response_lengths = micro_batch["response_mask"].offsets().diff()
    cu_seqlens = input_ids.offsets().long()
    positions = micro_batch[ANSWER_POS_FIELD].reshape(-1).long()
    targets = micro_batch[ANSWER_TARGET_FIELD].reshape(-1).long()
    index = packed_token_index(positions, cu_seqlens, response_lengths.to(cu_seqlens.device))
    return FingerprintCapture(
        module,
        index.positions,
        targets,
        rows=index.rows,
        layers=int(options.get("layers", OFFICIAL_FINGERPRINT_LAYERS)),
        diff=bool(options.get("diff", False)),
        norm=options.get("norm", "raw"),
    )


def patch_forward_step(engine_cls: type) -> None:
    """Wrap ``engine_cls.forward_step`` (verl 0.9.1 ``FSDPEngineWithLMHead``) once; idempotent.

    Signature kept: ``forward_step(self, micro_batch: TensorDict, loss_function, forward_only)
    -> (loss, {"model_output": dict, "loss": float, "metrics": dict})``.
    """
    original: Callable[..., Any] = engine_cls.forward_step
    if getattr(original, "_dynashape_patched", False):
        return

    @functools.wraps(original)
    def forward_step(self: Any, micro_batch: Any, loss_function: Any, forward_only: Any) -> Any:
        options = _non_tensor(micro_batch, FLAG_KEY, None)
        if not options or ANSWER_POS_FIELD not in micro_batch.keys():
            return original(self, micro_batch, loss_function, forward_only)
        if getattr(self, "use_ulysses_sp", False):
            raise NotImplementedError("dynashape fingerprints do not support Ulysses sequence parallelism yet")
        if not _non_tensor(micro_batch, "use_remove_padding", True):
            raise NotImplementedError("dynashape fingerprints need actor_rollout_ref.model.use_remove_padding=True")
        capture = capture_for_micro_batch(self.module, micro_batch, dict(options))
        with capture:
            loss, output = original(self, micro_batch, loss_function, forward_only)
        output["model_output"][FINGERPRINT_FIELD] = capture.result()
        return loss, output

    forward_step._dynashape_patched = True  # type: ignore[attr-defined]
    engine_cls.forward_step = forward_step
