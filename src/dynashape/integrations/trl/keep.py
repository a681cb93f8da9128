"""A filter's dropped rows (GFPO's ``Shaped.keep``) taken out of TRL's loss entirely.

A dropped row's advantage is 0, but a zero advantage is not enough: TRL's normalisers would still count its
tokens or its row. So the generation output is changed once, after shaping:

- the dropped rows' ``completion_mask`` is zeroed, so every token-level sum and count in TRL 1.16's
  ``_compute_loss`` (the policy term, the KL term, the entropy bonus, ``bnpo``'s ``mask.sum()``) skips them;
- ``num_items_in_batch`` (the divisor of ``dapo``, ``cispo`` and ``vespo``: the loss tokens of the whole
  generation batch, summed over processes) is recounted over the kept rows;
- the local keep mask rides along under ``KEEP_KEY`` (TRL shuffles and splits the generation batch, and every
  tensor with it), so the loss can rescale the losses that average over rows (``grpo``, ``sapo``, ``luspo``;
  ``dr_grpo`` divides by rows x max_completion_length) from all rows of the micro-batch to its kept rows.

A dropped row's loss terms are multiplied by a zero mask, so its gradient is exactly zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["KEEP_KEY", "ROW_MEAN_LOSSES", "check_row_mean_loss", "drop_rows", "kept_share"]

KEEP_KEY = "dynashape_keep"
#: TRL 1.16 loss types whose divisor counts the micro-batch's rows, dropped ones included.
ROW_MEAN_LOSSES = ("grpo", "sapo", "luspo", "dr_grpo")


def check_row_mean_loss(loss_type: str, *, entropy_bonus: bool, aux_loss: bool) -> None:
    """Refuse a row-averaged loss with an added term the row rescale would also scale (entropy bonus, router
    aux loss): those terms average over kept tokens already, so the rescaled sum would overweight them."""
    if loss_type in ROW_MEAN_LOSSES and (entropy_bonus or aux_loss):
        extra = "the entropy bonus (entropy_coef)" if entropy_bonus else "the router aux loss"
        raise ValueError(
            f"ShapedGRPOTrainer: the shaper drops rows (Shaped.keep), and loss_type={loss_type!r} averages over rows, "
            f"so the kept rows are rescaled; with {extra} that rescale would be wrong. Use loss_type='dapo' or "
            "'bnpo' (token-level), or turn the extra term off"
        )


def drop_rows(output: dict[str, Any], keep: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Take the local rows with ``keep`` False out of a TRL generation output, in place.

    Args:
        output: what ``_generate_and_score_completions`` returns (``completion_mask`` [n, T], optional
            ``tool_mask`` [n, T], ``num_items_in_batch`` scalar).
        keep: BoolTensor [n], this process's slice of ``Shaped.keep``.
        gather: the accelerator's gather (concatenates one tensor from every process).
    """
    mask = output["completion_mask"]
    keep = keep.to(mask.device)
    output["completion_mask"] = mask * keep.unsqueeze(1).to(mask.dtype)
    loss_mask = output["completion_mask"]
    if output.get("tool_mask") is not None:
        loss_mask = loss_mask * output["tool_mask"]
    # TRL counts the loss tokens of every process (its dapo divisor is this / num_processes per process).
    output["num_items_in_batch"] = gather(loss_mask.sum()).sum()
    output[KEEP_KEY] = keep


def kept_share(inputs: dict[str, Any]) -> float | None:
    """Rows / kept rows of a micro-batch, the factor from TRL's all-rows mean to the kept rows' mean; None when
    nothing was dropped or nothing is kept (every term is then masked to zero already)."""
    keep = inputs.get(KEEP_KEY)
    if keep is None:
        return None
    kept = int(keep.sum())
    if kept == 0 or kept == keep.shape[0]:
        return None
    return keep.shape[0] / kept
