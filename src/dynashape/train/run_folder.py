"""A run folder's layout and its files: what a training run writes, and how it reads them back.

    run_dir/config.yaml          resolved RunConfig
    run_dir/metrics.jsonl        one line per RL step
    run_dir/checkpoints/step_N/  model, optimiser, RNG, data position, shaper state (``checkpoint``)
    run_dir/eval_base.json       the base model's held-out evaluation (and its seconds), written before training
    run_dir/eval.json            base vs final on the held-out split, AES
    run_dir/history.jsonl        one line per invocation that trained: its start, the step it began at, the code
    run_dir/report.md, *.png     plots (``train.report``)
    run_dir/tb/                  TensorBoard scalars, when tensorboard is installed (``dynashape[tensorboard]``)
    run_dir/.lock, .lock.pid     the lock a training run holds on the folder, and the pid of its holder

Every file here is replaced atomically (``dynashape.io.state``), so a kill leaves the old file or the new one; the
temporaries a kill leaves behind are removed by the next run, under the folder's lock.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.train import checkpoint as ckpt

__all__ = ["RunFolder", "read_history", "read_metrics"]

log = logging.getLogger(__name__)


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """The metrics.jsonl lines of a run; a torn last line (a kill mid-write) is dropped with a warning."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1:
                log.warning("%s: dropping a torn last line (%s)", path, err)
                break
            raise state.StateFileError(path, f"line {i + 1} is not JSON ({err})") from err
    return out


def read_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """history.jsonl of a run (one object per invocation that trained it: ``started``, ``from_step`` and the
    code's ``version``, ``commit``, ``dirty``); [] for a run that has none (written before it existed)."""
    path = Path(run_dir) / "history.jsonl"
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise state.StateFileError(path, f"line {i + 1} is not JSON ({err})") from err
    return out


class RunFolder:
    """The files of one run folder (``run_dir``), each written whole or not at all."""

    def __init__(self, run_dir: str | Path) -> None:
        self.root = Path(run_dir)
        self.checkpoints = self.root / "checkpoints"
        self.config_path = self.root / "config.yaml"
        self.metrics_path = self.root / "metrics.jsonl"
        self.eval_path = self.root / "eval.json"
        self.eval_base_path = self.root / "eval_base.json"
        self.history_path = self.root / "history.jsonl"

    def create(self) -> None:
        state.make_folder(self.root)

    def lock(self) -> state.FolderLock:
        """The folder's lock (not yet taken): one training run at a time; a second one is refused with
        ``FolderBusyError`` naming the holder's pid."""
        return state.FolderLock(self.root, what="a training run (dynashape train)")

    def remove_stale_temporaries(self) -> list[Path]:
        """Remove what killed writes left in the folder and its checkpoints; only while holding ``lock()``."""
        removed = state.remove_stale_temporaries(self.root)
        removed += state.remove_stale_temporaries(self.checkpoints, also=ckpt.LEGACY_TEMPORARIES)
        if removed:
            log.info("%s: removed the temporaries of an interrupted run: %s", self.root, [p.name for p in removed])
        return removed

    # -- config ------------------------------------------------------------------------------------------
    def write_config(self, resolved: dict[str, Any]) -> str:
        """Write config.yaml and return its trajectory hash; refuse a folder that holds a different run."""
        import yaml

        self.check_resumable(resolved)
        state.write_text(self.config_path, yaml.safe_dump(resolved, sort_keys=False))
        return ckpt.config_hash(resolved)

    def check_resumable(self, resolved: dict[str, Any]) -> None:
        """Refuse a folder whose config.yaml holds another run, naming each differing field with its old and
        new value; read-only, so it runs before the lock is taken (and again under it)."""
        if not self.config_path.exists():
            return
        old = state.read_yaml(self.config_path) or {}
        if ckpt.config_hash(old) == ckpt.config_hash(resolved):
            return
        shown = ckpt.config_differences(old, resolved)
        more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
        raise ckpt.CheckpointError(
            self.config_path,
            f"holds another run ({'; '.join(shown[:6])}{more}; old -> new); only train.steps and "
            "train.checkpoint_every may change on resume: use a new --run-dir, or the old settings",
        )

    # -- metrics -----------------------------------------------------------------------------------------
    def read_metrics(self) -> list[dict[str, float]]:
        return read_metrics(self.root)

    def rewrite_metrics(self, metrics: list[dict[str, float]]) -> None:
        state.write_text(self.metrics_path, "".join(json.dumps(m) + "\n" for m in metrics))

    # -- history -----------------------------------------------------------------------------------------
    def read_history(self) -> list[dict[str, Any]]:
        """The invocations that trained this run, oldest first (``append_history``)."""
        return read_history(self.root)

    def append_history(self, entry: dict[str, Any]) -> None:
        """Add one invocation's line (rewritten whole, so a kill leaves the old file or the new one)."""
        lines = [json.dumps(e) for e in self.read_history()] + [json.dumps(entry)]
        state.write_text(self.history_path, "".join(line + "\n" for line in lines))

    # -- evaluations -------------------------------------------------------------------------------------
    def read_eval(self) -> dict[str, Any] | None:
        """The finished run's eval.json, or None when there is none or it is unreadable (then the run's final
        evaluation is made again from its last checkpoint, which replaces the file)."""
        if not self.eval_path.exists():
            return None
        try:
            ev = state.read_json(self.eval_path)
        except state.StateFileError as err:
            log.warning("%s; evaluating the final model again", err)
            return None
        return ev if isinstance(ev, dict) else None

    def write_eval(self, result: dict[str, Any]) -> None:
        state.write_text(self.eval_path, json.dumps(result, indent=1))

    def read_eval_base(self, key: str) -> dict[str, Any] | None:
        """The stored base evaluation when it was made with evaluation key ``key``; else None."""
        if not self.eval_base_path.exists():
            return None
        try:
            stored = state.read_json(self.eval_base_path)
        except state.StateFileError as err:  # a torn write: evaluate again
            log.warning("%s; evaluating the base again", err)
            return None
        stored.pop("seconds", None)
        return stored if stored.pop("eval_key", None) == key else None

    def write_eval_base(self, result: dict[str, Any], *, key: str, seconds: float) -> None:
        state.write_text(self.eval_base_path, json.dumps({**result, "eval_key": key, "seconds": seconds}, indent=1))

    # -- checkpoints -------------------------------------------------------------------------------------
    def save_checkpoint(self, trainer: Any, cfg_hash: str) -> None:
        """A checkpoint of ``trainer`` at its step, unless an earlier invocation wrote that step already."""
        if (self.checkpoints / f"step_{trainer.step_index}").exists():
            return
        ckpt.save(
            self.checkpoints,
            step=trainer.step_index,
            model=trainer.model,
            optimizer=trainer.optimizer,
            state=trainer.state_dict(),
            cfg_hash=cfg_hash,
        )

    # -- TensorBoard -------------------------------------------------------------------------------------
    def tensorboard(self, *, first_step: int) -> Any:
        """A writer on ``tb/`` whose steps start at ``first_step``; None when tensorboard is not installed.

        ``purge_step`` writes a restart marker at ``first_step``: TensorBoard drops the events that earlier
        invocations wrote at that step or later (the steps a resume redoes, or a run started over without a
        checkpoint) and keeps the ones before it. (It reads the files in name order, which begins with the
        second each was created in: two invocations started within the same second may not be told apart.)
        """
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is optional
            return None
        return SummaryWriter(str(self.root / "tb"), purge_step=first_step)
