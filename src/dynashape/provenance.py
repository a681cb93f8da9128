"""Which code ran: the git commit of the installed dynashape source, for the records a study keeps of its runs.

A study runs for days across sessions and machines; a run resumed on other code than it started on must say so,
so each run folder lists the commit of every invocation that trained it (``train.run_folder``)."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["code_version"]

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
    package = Path(__file__).resolve().parent
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
