"""Which code ran, and on which arithmetic: the records a study keeps of its runs.

A study runs for days across sessions and machines; a run resumed on other code than it started on must say so,
so each run folder lists the commit of every invocation that trained it (``train.run_folder``). The same code on
another CPU need not give the same floats: torch picks its CPU kernels by the instruction set it finds, and
float sums taken in another order round differently (the follow-up's determinism check met this: its first 8 runs,
on a machine since replaced, differ from step 0 in the last digits). So each invocation also records the CPU and
the kernel level torch chose."""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["code_version", "cpu_model", "file_sha256", "numeric_platform"]

_GIT_TIMEOUT_S = 10.0


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):  # no git on the machine, or a hung filesystem
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"version", "commit", "dirty"}`` of the dynashape this process imported.

    ``commit`` is HEAD of the git checkout the package was imported from (an editable install), or None for an
    installed wheel; ``dirty`` says whether the package's source differs from that commit (None without git).
    Computed once per process: a study's driver and its workers import the code once."""
    package = Path(__file__).resolve().parent.parent  # dynashape/, not this io/ folder: a change anywhere counts
    try:
        version = metadata.version("dynashape")
    except metadata.PackageNotFoundError:
        version = None
    commit = _git(["rev-parse", "HEAD"], package)
    dirty = None
    if commit is not None:
        status = _git(["status", "--porcelain", "--untracked-files=no", "--", "."], package)
        dirty = None if status is None else bool(status)
    return {"version": version, "commit": commit, "dirty": dirty}


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def numeric_platform() -> dict[str, Any]:
    """``{"cpu", "torch", "cpu_capability"}``: what decides the floats a CPU run computes besides the code.

    ``cpu_capability`` is the instruction set torch's CPU kernels dispatch to ("AVX512", "AVX2", "DEFAULT", ...;
    ``ATEN_CPU_CAPABILITY`` lowers it), the part of the machine that changed the follow-up's seed-5 numbers."""
    import torch

    return {"cpu": cpu_model(), "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
