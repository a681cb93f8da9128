"""The shaper's state inside TRL's checkpoint folders (``checkpoint-N/dynashape_shaper.pt``).

TRL saves the model, optimiser and its own trainer state; no engine saves a shaper's. The callback writes it
with every checkpoint and ``load_shaper_state`` reads it back on resume (refusing a file of another step).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from transformers import TrainerCallback

from dynashape.io.state import StateFileError, torch_load, torch_save
from dynashape.shapers import Shaper

__all__ = ["STATE_FILE", "STATE_FORMAT", "ShaperStateCallback", "load_shaper_state", "restore_shaper_state"]

STATE_FILE = "dynashape_shaper.pt"
STATE_FORMAT = "dynashape-trl-shaper-state/1"

logger = logging.getLogger(__name__)


class ShaperStateCallback(TrainerCallback):
    """Writes the shaper state into each TRL checkpoint folder (``checkpoint-N/dynashape_shaper.pt``).

    Written by the processes that write the rest of the checkpoint: ``args.should_save`` (world process 0, or
    the main process of every node with ``save_on_each_node=True``, for nodes without a shared filesystem). The
    shaper runs on the gathered batch, so its state is the same on every process and any copy is the state.
    """

    def __init__(self, shaper: Shaper) -> None:
        self.shaper = shaper

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not args.should_save:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        payload = {
            "format": STATE_FORMAT,
            "global_step": int(state.global_step),
            "run": {"run_name": str(getattr(args, "run_name", None) or ""), "output_dir": str(args.output_dir)},
            "shaper": dict(self.shaper.state_dict()),
        }
        torch_save(os.path.join(folder, STATE_FILE), payload)  # atomic, fsynced


def load_shaper_state(path: str, *, global_step: int | None = None) -> dict[str, Any]:
    """The shaper state in ``path``, read with ``torch.load(weights_only=True)``: plain values and tensors only.

    The file records the step it was written at and the run (``run_name``, ``output_dir``); with
    ``global_step`` (the checkpoint being resumed) a state of another step is refused. A file of the earlier
    layout (the shaper state alone) is read as it is.

    Raises:
        StateFileError: (a ValueError) when the file is empty, truncated, holds anything else (a pickled
            object could run code on load: refused, never run) or was written at another step; the message
            names the file.
    """
    try:
        payload = torch_load(path, map_location="cpu", expect=dict)
    except StateFileError as err:
        raise StateFileError(path, f"not a dynashape shaper state (plain values and tensors): {err.problem}") from err
    if payload.get("format") != STATE_FORMAT:
        return payload  # the earlier layout: the shaper state itself
    if not isinstance(payload.get("shaper"), dict) or not isinstance(payload.get("global_step"), int):
        raise StateFileError(
            path, f"not a dynashape shaper state: malformed payload (keys {sorted(map(str, payload))})"
        )
    if global_step is not None and payload["global_step"] != global_step:
        raise StateFileError(
            path, f"written at global step {payload['global_step']}, but TRL resumes from step {global_step}"
        )
    return payload["shaper"]


def restore_shaper_state(shaper: Shaper, checkpoint: str) -> int | None:
    """On resume from TRL's ``checkpoint`` folder: load the shaper state saved there, on every process, and return
    the folder's step (``checkpoint-N``; None for a folder named otherwise).

    A missing file starts the shaper fresh, with a warning. Called on every process (a collective): a file that
    some processes find and others do not is refused, since processes resuming with different shaper states
    would slice different advantage vectors.
    """
    from accelerate.utils import gather_object

    path = os.path.join(checkpoint, STATE_FILE)
    found = gather_object([os.path.exists(path)])
    if any(found) and not all(found):
        missing = [rank for rank, ok in enumerate(found) if not ok]
        raise RuntimeError(
            f"dynashape: {path} exists on some processes but not on processes {missing}; the nodes do not share "
            "the checkpoint folder. Train with save_on_each_node=True (or a shared filesystem) and resume again"
        )
    step = re.fullmatch(r"checkpoint-(\d+)", os.path.basename(os.path.normpath(checkpoint)))
    if found[0]:
        shaper.load_state_dict(load_shaper_state(path, global_step=int(step[1]) if step else None))
        logger.info("dynashape: restored shaper state from %s", path)
    else:
        logger.warning("dynashape: %s not found; the shaper starts fresh", path)
    return int(step[1]) if step else None
