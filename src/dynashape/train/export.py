"""A training run's checkpoint as a Hugging Face model folder (``dynashape export``), and as a loaded model.

A checkpoint (``checkpoints/step_N/``) holds the policy's state dict beside the optimiser and the run's state;
it is not a model folder that ``dynashape evaluate``, transformers or vLLM can read. ``load_run`` rebuilds the
run's base model from its config.yaml (the shipped toy model, its warm-up cache, or the ``--model`` folder the
run started from) and loads the checkpoint's weights into it (``checkpoint.load``: a checkpoint of another
config is refused). ``export_run`` saves that model and its tokenizer with ``save_pretrained``, whole or not at
all (``state.atomic_folder``), with ``export.json`` naming the run, the step and the config hash.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from dynashape.io import state
from dynashape.train import checkpoint as ckpt
from dynashape.train.config import RunConfig

__all__ = ["TrainedRun", "export_run", "load_run"]


class TrainedRun(NamedTuple):
    """A run's config, its base (``train.base_model.Base``) with the checkpoint's weights, and that checkpoint
    (None: the run has none yet, and the model is the base)."""

    cfg: RunConfig
    base: Any
    checkpoint: Path | None


def _step_folder(run: Path, step: int | None) -> Path | None:
    if step is None:
        return ckpt.latest_checkpoint(run / "checkpoints")
    folder = run / "checkpoints" / f"step_{step}"
    if not folder.is_dir():
        steps = sorted(int(p.name[5:]) for p in ckpt.checkpoints_newest_first(run / "checkpoints"))
        raise ValueError(f"--step {step}: {run} has no such checkpoint; its steps: {steps or 'none'}")
    return folder


def load_run(
    run_dir: str | Path, *, step: int | None = None, adjust: Callable[[RunConfig], RunConfig] | None = None
) -> TrainedRun:
    """The model of ``run_dir`` at checkpoint ``step`` (None: the newest; the base when there is none).

    ``adjust`` changes the config before the base is loaded (``dynashape eval``'s evaluation overrides, the
    device); the checkpoint is checked against the config as the run wrote it.
    """
    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise ValueError(f"{str(run)!r}: not a dynashape train run folder (it has no config.yaml)")
    from dynashape.train.base_model import load_base

    written = state.read_yaml(run / "config.yaml") or {}
    # the hash its checkpoints carry: of config.yaml as the run wrote it (an older layout hashes differently
    # once from_dict has moved its keys), before any adjustment
    cfg_hash = ckpt.config_hash(written)
    cfg = RunConfig.from_dict(written)
    if adjust is not None:
        cfg = adjust(cfg)
    folder = _step_folder(run, step)
    base = load_base(cfg)
    if folder is not None:
        saved = ckpt.load(folder, cfg_hash=cfg_hash, map_location=cfg.device)
        base.model.load_state_dict(saved.model)
    return TrainedRun(cfg, base, folder)


def export_run(run_dir: str | Path, out_dir: str | Path, *, step: int | None = None) -> Path:
    """Write the model of ``run_dir`` at checkpoint ``step`` (None: the newest) as a Hugging Face folder.

    Raises:
        ValueError: not a run folder, no such step (or no checkpoint yet), or ``out_dir`` exists and is not empty.
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"OUT {str(out)!r}: exists and is not empty")
    run = load_run(run_dir, step=step, adjust=lambda cfg: dataclasses.replace(cfg, device="cpu"))
    if run.checkpoint is None:
        raise ValueError(f"{str(run_dir)!r}: the run has no checkpoint yet (dynashape train writes them)")
    meta = {
        "run": str(Path(run_dir).resolve()),
        "step": int(run.checkpoint.name.removeprefix("step_")),
        "config_hash": ckpt.config_hash(run.cfg.to_dict()),
        "method": run.cfg.train.method,
        "base": run.base.meta.get("source"),
    }
    try:
        with state.atomic_folder(out) as tmp:
            run.base.model.save_pretrained(str(tmp))
            run.base.tokenizer.save_pretrained(str(tmp))
            state.write_text(tmp / "export.json", json.dumps(meta, indent=1))
    except FileExistsError:  # filled meanwhile by another process
        raise ValueError(f"OUT {str(out)!r}: exists and is not empty") from None
    return out
