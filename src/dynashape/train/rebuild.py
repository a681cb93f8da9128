"""``dynashape warmup``: rebuild the chain world's base model and say whether it equals the shipped file.

The warm-up is deterministic on one machine (seeded initialisation, traces and batching); across CPUs its
float arithmetic differs (kernels, vector widths), which is why the base ships as a file. The rebuild is the
check that the shipped file is what the code makes here, and ``--out DIR`` writes a shippable folder.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from dynashape.io import state
from dynashape.train.config import RunConfig
from dynashape.train.warmup import BASES, base_model_key, shipped_manifest, train_base, write_manifest
from dynashape.world.base import World
from dynashape.world.chain import ChainWorld

__all__ = ["RebuildReport", "rebuild_base", "rebuild_command"]

REBUILD_COMMAND = "dynashape warmup --out DIR"


@dataclass(frozen=True)
class RebuildReport:
    """The rebuilt base model's key, checksum and final loss, against the shipped manifest's."""

    key: str
    sha256: str
    final_loss: float | None
    seconds: float
    shipped_sha256: str | None
    shipped_final_loss: float | None
    out: Path | None

    @property
    def equal(self) -> bool | None:
        """True when the rebuild's weights are the shipped file byte for byte; None with nothing shipped."""
        return None if self.shipped_sha256 is None else self.sha256 == self.shipped_sha256

    def summary(self) -> str:
        where = f"; written to {self.out}" if self.out else ""
        head = (
            f"base {self.key}: sha256 {self.sha256[:16]}, final warm-up loss {self.final_loss!r} ({self.seconds:.0f} s)"
        )
        if self.equal is None:
            return f"{head}; no shipped base of this key to compare with{where}"
        if self.equal:
            return f"{head}; equals the shipped base byte for byte{where}"
        return (
            f"{head}; DIFFERS from the shipped base (sha256 {self.shipped_sha256[:16]}, final loss "  # type: ignore[index]
            f"{self.shipped_final_loss!r}): this machine's arithmetic differs from the one that made it (runs use "
            f"the shipped file){where}"
        )


def rebuild_command(cfg: RunConfig) -> str:
    """The command that rebuilds the base of ``cfg``: ``--base NAME`` for a named base other than the plain one."""
    name = next((n for n, w in BASES.items() if w == cfg.warmup), None)
    return REBUILD_COMMAND if name in (None, "plain") else REBUILD_COMMAND.replace("--out", f"--base {name} --out")


def rebuild_base(
    *,
    out: Path | None = None,
    device: str = "cpu",
    progress: bool = True,
    cfg: RunConfig | None = None,
    world: World | None = None,
) -> RebuildReport:
    """Warm the chain world's base model up from scratch; write it to ``out`` (model, tokenizer, manifest) or a
    temporary folder; compare its checksum with the world's shipped base's.

    ``cfg`` (default: the defaults, whose base ships) sets the task, model and warm-up; ``world`` the world
    (default: ``ChainWorld(cfg.task)``)."""
    from dynashape.runtime.progress import progress_bar

    cfg = cfg or RunConfig()
    world = world or ChainWorld(cfg.task)
    key = base_model_key(world, cfg.model, cfg.warmup)
    bar = progress_bar(cfg.warmup.steps, "warm-up", progress)
    model, tokenizer, losses, seconds = train_base(
        world,
        cfg.model,
        cfg.warmup,
        world.split("train"),
        device=device,
        on_step=lambda step, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")) if bar else None,
    )
    if bar:
        bar.close()
    with tempfile.TemporaryDirectory() as scratch:
        folder = out if out is not None else Path(scratch) / "base_model"
        if folder.exists() and any(folder.iterdir()):
            raise ValueError(f"--out {folder}: exists and is not empty")
        with state.atomic_folder(folder) as tmp:  # a killed rebuild leaves no folder that looks shippable
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            manifest = write_manifest(tmp, key=key, losses=losses, seconds=seconds, command=rebuild_command(cfg))
    shipped_sha, shipped_loss = None, None
    shipped = shipped_manifest(world, key)
    if shipped is not None:
        shipped_sha, shipped_loss = shipped[1]["sha256"], shipped[1].get("warmup_final_loss")
    return RebuildReport(
        key, manifest["sha256"], manifest["warmup_final_loss"], seconds, shipped_sha, shipped_loss, out
    )
