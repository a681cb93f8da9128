"""Checkpoints of a training run: written atomically, read back exactly, refused when broken.

``checkpoints/step_N/`` holds ``model.pt`` (policy state dict), ``optimizer.pt``, ``state.pt`` (step, RNG
states, data position, shaper state: LEAD's EMA, MEDS's memory; plain values and tensors) and ``meta.json``
(format version, step, hash of the resolved config, file list). It is written with ``state.atomic_folder``
(each file fsynced, the folder renamed into place), so a killed run leaves either a complete checkpoint or
none. A checkpoint that cannot be read, whose files do not hold what they should, or that belongs to a
different config raises ``CheckpointError`` naming the folder or the file at fault; nothing here ever deletes
or overwrites it. Every file is read with ``state.torch_load`` (``weights_only=True``): a file that would need
arbitrary unpickling (code run on load) is refused as corrupt, and its code never runs.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dynashape.io.state import (
    TMP_PREFIX,
    StateFileError,
    atomic_folder,
    read_json,
    rename_aside,
    torch_load,
    torch_save,
    write_text,
)
from dynashape.runtime.model_folder import CHECKPOINT_FILES
from dynashape.train.warmup import BUDGET_FIELDS

__all__ = [
    "CHECKPOINT_FILES",
    "LEGACY_TEMPORARIES",
    "STATE_KEYS",
    "Checkpoint",
    "CheckpointError",
    "ForeignCheckpointError",
    "checkpoints_newest_first",
    "config_differences",
    "config_hash",
    "latest_checkpoint",
    "load",
    "restore",
    "save",
    "set_aside",
    "trajectory_part",
]

FORMAT = 1
STATE_KEYS: dict[str, type] = {
    "step": int,
    "stream": dict,
    "generator": torch.Tensor,
    "torch_rng": torch.Tensor,
    "shaper": dict,
}
"""What ``state.pt`` must hold (the trainer's ``state_dict``): key -> type of its value."""
LEGACY_TEMPORARIES: tuple[str, ...] = (".step_*.tmp*",)
"""Names of the temporary folders that writers before ``state.atomic_folder`` left behind when killed."""


class CheckpointError(StateFileError, RuntimeError):
    """A checkpoint is incomplete, corrupt or incompatible with the run's config.

    ``path`` is the checkpoint folder, or the file at fault. A ``StateFileError`` (a ``ValueError``) and, as
    it always was, a ``RuntimeError``.
    """


class ForeignCheckpointError(CheckpointError):
    """A readable checkpoint of another run's config: never a reason to fall back to an older checkpoint."""


@dataclass
class Checkpoint:
    """What a checkpoint restores (``path``: the folder it was read from)."""

    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    state: dict[str, Any]
    path: Path | None = None


def config_hash(config: dict[str, Any]) -> str:
    """Hash of the parts of a resolved config that change the trajectory (16 hex characters).

    ``checkpoint_every`` and ``steps`` are left out, so a finished run can be extended and checkpoint
    frequency changed without invalidating its checkpoints; so are ``eval.split`` and
    ``train.budget_prompt.eval_budgets`` (what the final evaluation reads never changes the training
    trajectory, and run folders from before the field keep their hash).
    """
    return hashlib.sha256(json.dumps(trajectory_part(config), sort_keys=True).encode()).hexdigest()[:16]


def _added_while_off() -> dict[str, Any]:
    """``train`` fields added after run folders existed, with the value that leaves them off (the default)."""
    import dataclasses

    from dynashape.train.config import BudgetPromptConfig

    off = {"budget_prompt": dataclasses.asdict(BudgetPromptConfig()), "validation_every": 0}
    del off["budget_prompt"]["eval_budgets"]  # left out of the hash always (trajectory_part)
    return json.loads(json.dumps({**off, "validation_samples": 1, "validation_problems": None}))


def trajectory_part(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that ``config_hash`` hashes (a JSON copy without the fields it leaves out).

    Fields added later are left out while they hold their off value, so a run folder written before them keeps
    its hash and its checkpoints resume."""
    data = json.loads(json.dumps(config, sort_keys=True, default=str))
    train = data.get("train", {})
    for key in ("steps", "checkpoint_every"):
        train.pop(key, None)
    if isinstance(train.get("budget_prompt"), dict):  # which budgets the final evaluation adds trains nothing
        train["budget_prompt"].pop("eval_budgets", None)
    for key, off in _added_while_off().items():
        if key in train and train[key] == off:
            del train[key]
    warmup = data.get("warmup", {})
    if isinstance(warmup, dict) and warmup.get("budget_prompt_share", 0) == 0:  # the plain base's warm-up
        for key in BUDGET_FIELDS:
            warmup.pop(key, None)
    data.get("eval", {}).pop("split", None)
    data.pop("cache_dir", None)
    return data


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``field: old -> new`` for every field of the trajectory (``trajectory_part``) where two configs differ,
    as dotted paths (``train.lr: 0.001 -> 0.0005``), sorted."""

    def flat(data: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(data, dict) or not data:
            return {prefix: data}
        return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}

    a = {k.rstrip("."): v for k, v in flat(trajectory_part(old)).items()}
    b = {k.rstrip("."): v for k, v in flat(trajectory_part(new)).items()}
    missing = "(absent)"
    return [
        f"{k}: {json.dumps(a.get(k, missing))} -> {json.dumps(b.get(k, missing))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, missing) != b.get(k, missing)
    ]


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
    final = Path(directory) / f"step_{step}"
    refused = "already exists; refusing to overwrite a checkpoint"
    if final.exists():
        raise CheckpointError(final, refused)
    meta = {"format": FORMAT, "step": step, "config_hash": cfg_hash, "files": list(CHECKPOINT_FILES)}
    try:
        with atomic_folder(final) as tmp:
            torch_save(tmp / "model.pt", {k: v.detach().cpu() for k, v in model.state_dict().items()})
            torch_save(tmp / "optimizer.pt", optimizer.state_dict())
            torch_save(tmp / "state.pt", state)
            write_text(tmp / "meta.json", json.dumps(meta, indent=1))
    except FileExistsError as err:  # another writer put that step in place meanwhile: theirs stays
        raise CheckpointError(final, refused) from err
    return final


def checkpoints_newest_first(directory: str | Path) -> list[Path]:
    """The ``step_N`` folders of ``directory``, largest N first ([] when there is none).

    Temporary folders (``state.TMP_PREFIX`` names, and the ``.step_N.tmp*`` of older writers) and folders set
    aside (``.broken-*``) are ignored: a killed write is no checkpoint."""
    root = Path(directory)
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        if p.name.startswith((TMP_PREFIX, ".")) or not p.is_dir():
            continue
        if p.name.startswith("step_"):
            suffix = p.name[len("step_") :]
            if not suffix.isdigit():
                raise CheckpointError(p, "unexpected folder among checkpoints (expected step_<N>)")
            steps.append((int(suffix), p))
    return [p for _, p in sorted(steps, reverse=True)]


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The ``step_N`` folder with the largest N, or None when there is none (see ``checkpoints_newest_first``)."""
    found = checkpoints_newest_first(directory)
    return found[0] if found else None


def set_aside(path: Path) -> Path:
    """Rename a broken checkpoint to ``.broken-step_N-<ns>`` beside it (kept for inspection, never deleted), so
    that the step can be written again and a later resume does not trip over it."""
    return rename_aside(path, f".broken-{path.name}-{time.time_ns()}")


def _read(file: Path, map_location: Any) -> dict[str, Any]:
    try:
        return torch_load(file, map_location=map_location, expect=dict)
    except StateFileError as err:
        raise CheckpointError(file, f"checkpoint file is corrupt: {err.problem}") from err


def _malformed(file: Path, what: str) -> CheckpointError:
    return CheckpointError(file, f"checkpoint file is corrupt: {what}")


def load(path: str | Path, *, cfg_hash: str, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a checkpoint written by ``save``; raises ``CheckpointError`` when it is broken or foreign."""
    path = Path(path)
    missing = [f for f in CHECKPOINT_FILES if not (path / f).is_file()]
    if missing:
        raise CheckpointError(path, f"checkpoint is incomplete: missing {missing}")
    meta_file = path / "meta.json"
    try:
        meta = read_json(meta_file)
    except StateFileError as err:
        raise CheckpointError(meta_file, f"checkpoint metadata is unreadable: {err.problem}") from err
    if not isinstance(meta, dict):
        raise _malformed(meta_file, f"holds a {type(meta).__name__}, expected a dict")
    if meta.get("format") != FORMAT:
        raise CheckpointError(meta_file, f"checkpoint format {meta.get('format')!r}, this version reads {FORMAT}")
    if meta.get("config_hash") != cfg_hash:
        raise ForeignCheckpointError(
            path,
            f"checkpoint was written by a run with a different config (hash {meta.get('config_hash')}, this run "
            f"{cfg_hash}); use a new run folder or the original config",
        )
    step = meta.get("step")
    if type(step) is not int:
        raise _malformed(meta_file, f"step {step!r} is not an int")

    model = _read(path / "model.pt", map_location)
    bad = next((k for k, v in model.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))), None)
    if bad is not None:
        raise _malformed(path / "model.pt", f"not a state dict of tensors (entry {bad!r})")
    optimizer = _read(path / "optimizer.pt", map_location)
    if not (isinstance(optimizer.get("state"), dict) and isinstance(optimizer.get("param_groups"), list)):
        raise _malformed(path / "optimizer.pt", f"not an optimizer state dict (keys {sorted(map(str, optimizer))})")
    # Plain values and tensors only (RNG states, data position, shaper state): a tampered or foreign file
    # (shared cluster folders, downloaded runs) must not run code when it is read.
    state = _read(path / "state.pt", "cpu")
    for key, kind in STATE_KEYS.items():
        if key not in state:
            raise _malformed(path / "state.pt", f"no {key!r} entry (keys {sorted(map(str, state))})")
        if not isinstance(state[key], kind) or (kind is int and isinstance(state[key], bool)):
            raise _malformed(
                path / "state.pt", f"{key!r} holds a {type(state[key]).__name__}, expected {kind.__name__}"
            )
    if state["step"] != step:
        raise _malformed(path / "state.pt", f"state step {state['step']} != meta step {step}")
    return Checkpoint(step=step, model=model, optimizer=optimizer, state=state, path=path)


def restore(
    saved: Checkpoint,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    load_state: Callable[[dict[str, Any]], None],
) -> None:
    """Load ``saved`` into ``model``, ``optimizer`` and, through ``load_state``, the rest of the trainer.

    Content that does not fit (a tampered file, or a state written by other code) raises ``CheckpointError``
    naming its file, not a KeyError from deep inside the trainer."""
    folder = saved.path if saved.path is not None else Path(".")
    parts: tuple[tuple[str, Callable[[Any], Any], Any], ...] = (
        ("model.pt", model.load_state_dict, saved.model),
        ("optimizer.pt", optimizer.load_state_dict, saved.optimizer),
        ("state.pt", load_state, saved.state),
    )
    for name, apply, value in parts:
        try:
            apply(value)
        except torch.cuda.OutOfMemoryError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise CheckpointError(
                folder / name, f"checkpoint does not fit this run ({type(err).__name__}: {first})"
            ) from err
