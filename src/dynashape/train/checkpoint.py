"""Checkpoints of a training run: written atomically, read back exactly, refused when broken.

``checkpoints/step_N/`` holds ``model.pt`` (policy state dict), ``optimizer.pt``, ``state.pt`` (step, RNG
states, data position, shaper state: LEAD's EMA, MEDS's memory; plain values and tensors) and ``meta.json``
(format version, step, hash of the resolved config, file list). It is written to a temporary folder and
renamed into place, so a killed run leaves either a complete checkpoint or none. A checkpoint that cannot be
read or that belongs to a different config raises ``CheckpointError`` with what is wrong; nothing here ever
deletes or overwrites it. Every file is read with ``torch.load(weights_only=True)``: a file that would need
arbitrary unpickling (code run on load) is refused as corrupt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["CHECKPOINT_FILES", "Checkpoint", "CheckpointError", "config_hash", "latest_checkpoint", "load", "save"]

FORMAT = 1
CHECKPOINT_FILES: tuple[str, ...] = ("model.pt", "optimizer.pt", "state.pt", "meta.json")


class CheckpointError(RuntimeError):
    """A checkpoint is incomplete, corrupt or incompatible with the run's config."""


@dataclass
class Checkpoint:
    """What a checkpoint restores."""

    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    state: dict[str, Any]


def config_hash(config: dict[str, Any]) -> str:
    """Hash of the parts of a resolved config that change the trajectory (16 hex characters).

    ``checkpoint_every`` and ``steps`` are left out, so a finished run can be extended and checkpoint
    frequency changed without invalidating its checkpoints; so is ``eval.split`` (which held-out split the
    final evaluation reads never changes the training trajectory, and run folders from before the field keep
    their hash).
    """
    data = json.loads(json.dumps(config, sort_keys=True, default=str))
    for key in ("steps", "checkpoint_every"):
        data.get("train", {}).pop(key, None)
    data.get("eval", {}).pop("split", None)
    data.pop("cache_dir", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def save(
    directory: str | Path,
    *,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    cfg_hash: str,
) -> Path:
    """Write ``directory/step_<step>`` atomically; refuses to replace an existing checkpoint of that step."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    if final.exists():
        raise CheckpointError(f"checkpoint {final} already exists; refusing to overwrite it")
    tmp = root / f".step_{step}.tmp{os.getpid()}-{time.time_ns()}"
    tmp.mkdir()
    try:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp / "model.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(state, tmp / "state.pt")
        meta = {"format": FORMAT, "step": step, "config_hash": cfg_hash, "files": list(CHECKPOINT_FILES)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The ``step_N`` folder with the largest N, or None when there is none (temporary folders ignored)."""
    root = Path(directory)
    if not root.is_dir():
        return None
    steps = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step_"):
            suffix = p.name[len("step_") :]
            if not suffix.isdigit():
                raise CheckpointError(f"unexpected folder {p} among checkpoints (expected step_<N>)")
            steps.append((int(suffix), p))
    return max(steps)[1] if steps else None


def load(path: str | Path, *, cfg_hash: str, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a checkpoint written by ``save``; raises ``CheckpointError`` when it is broken or foreign."""
    path = Path(path)
    missing = [f for f in CHECKPOINT_FILES if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {missing}")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {path}: meta.json is unreadable ({err})") from err
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: format {meta.get('format')!r}, this version reads {FORMAT}")
    if meta.get("config_hash") != cfg_hash:
        raise CheckpointError(
            f"checkpoint {path} was written by a run with a different config (hash {meta.get('config_hash')}, "
            f"this run {cfg_hash}); use a new run folder or the original config"
        )
    try:
        model = torch.load(path / "model.pt", map_location=map_location, weights_only=True)
        optimizer = torch.load(path / "optimizer.pt", map_location=map_location, weights_only=True)
        # Plain values and tensors only (RNG states, data position, shaper state): a tampered or foreign file
        # (shared cluster folders, downloaded runs) must not run code when it is read.
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a truncated or garbled file
        raise CheckpointError(f"checkpoint {path} is corrupt: {type(err).__name__}: {err}") from err
    if int(state.get("step", -1)) != int(meta["step"]):
        raise CheckpointError(f"checkpoint {path}: state step {state.get('step')} != meta step {meta['step']}")
    return Checkpoint(step=int(meta["step"]), model=model, optimizer=optimizer, state=state)
