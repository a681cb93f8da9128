"""The one place for state files: atomic writes, safe loads, one error type, and a lock for run folders.

Every file the package writes (checkpoints, MEDS memory, the verl and TRL shaper states, run folders, the
study's records) goes through here:

* ``write_bytes`` / ``write_text`` / ``write_json`` / ``torch_save``: a temporary file in the same folder,
  flushed and fsynced, ``os.replace``d onto the target, then the folder fsynced, so a kill or a full disk
  leaves the old file or the new one, never a torn one. ``atomic_folder`` does the same for a folder.
* ``read_json`` / ``read_yaml`` / ``torch_load``: every failure (missing, truncated, not the format, a file
  that would need arbitrary unpickling) is a ``StateFileError`` naming the file and what is wrong.
  ``torch_load`` uses ``weights_only=True``: plain values and tensors only, never code run on load.
* ``FolderLock``: an exclusive lock on a folder (``filelock``) that names the holder's pid when refused.

No torch at import: a helper process that writes JSON never pays for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "FolderBusyError",
    "FolderLock",
    "StateFileError",
    "atomic_folder",
    "read_json",
    "read_yaml",
    "remove_stale_temporaries",
    "torch_load",
    "torch_save",
    "write_bytes",
    "write_json",
    "write_text",
]

TMP_PREFIX = ".tmp-"
"""Every temporary file or folder this module makes starts with this, so leftovers can be told apart."""


class StateFileError(ValueError):
    """A state file is missing, truncated, corrupt, foreign or unsafe; ``path`` names it."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def _fsync_folder(folder: str) -> None:
    # The rename itself is durable only once the folder's entry is on disk (POSIX); Windows has no folder fds.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Yield a binary handle on a temporary file beside ``path``; on success it replaces ``path``."""
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.path.basename(target)}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (durable once this returns)."""
    with _replacing(path) as handle:
        handle.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any, *, indent: int | None = 1) -> None:
    """Replace ``path`` by ``data`` as JSON atomically (NaN refused: JSON has none)."""
    write_text(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


def torch_save(path: str | os.PathLike[str], obj: Any) -> None:
    """``torch.save`` of ``obj`` to ``path`` atomically."""
    import torch

    with _replacing(path) as handle:
        torch.save(obj, handle)


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in ``path``; a ``StateFileError`` naming it when it is missing or not JSON."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise StateFileError(path, f"cannot be read ({err.strerror or err})") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        what = "is empty" if not text.strip() else f"is not JSON (truncated or corrupt: {err})"
        raise StateFileError(path, what) from err


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The YAML value in ``path`` (``yaml.safe_load``: plain values only); ``StateFileError`` when unreadable."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise StateFileError(path, f"cannot be read ({err.strerror or err})") from err
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise StateFileError(path, f"is not valid YAML (truncated or corrupt: {str(err).splitlines()[0]})") from err


def torch_load(path: str | os.PathLike[str], *, map_location: Any = "cpu", expect: type | None = None) -> Any:
    """``torch.load(path, weights_only=True)``: plain values and tensors only.

    Args:
        expect: the type the top-level value must have (``dict`` for every state file we write).

    Raises:
        StateFileError: the file is missing, empty, truncated, corrupt, needs arbitrary unpickling (refused,
            never run), or its top-level value is not ``expect``.
    """
    import torch

    p = os.fspath(path)
    if not os.path.isfile(p):
        raise StateFileError(p, "does not exist")
    if os.path.getsize(p) == 0:
        raise StateFileError(p, "is empty (a write that never finished?)")
    try:
        value = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for a truncated, garbled or unsafe file
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise StateFileError(
            p, f"is not a plain torch file of values and tensors ({type(err).__name__}: {first})"
        ) from err
    if expect is not None and not isinstance(value, expect):
        raise StateFileError(p, f"holds a {type(value).__name__}, expected a {expect.__name__}")
    return value


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; fill it; on success it is renamed to ``path``.

    Each file written into it should be fsynced by its writer (``write_*`` and ``torch_save`` do); the folder
    and its parent are fsynced before and after the rename. An existing ``path`` is refused (FileExistsError).
    """
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise FileExistsError(f"{target} already exists; refusing to replace it")
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{target.name}.", dir=target.parent))
    try:
        yield tmp
        _fsync_folder(str(tmp))
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_folder(str(target.parent))


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove what interrupted writes left in ``folder`` (names starting with ``TMP_PREFIX``); returns them.

    Call it only while holding the folder's lock: a live writer's temporary file would go too."""
    root = Path(folder)
    if not root.is_dir():
        return []
    removed = []
    for p in root.iterdir():
        if p.name.startswith(TMP_PREFIX):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()
            removed.append(p)
    return removed


class FolderBusyError(RuntimeError):
    """Another process holds the folder's lock."""


class FolderLock:
    """An exclusive, non-blocking lock on ``folder`` (a ``.lock`` file through ``filelock``), held by one
    process at a time; the holder's pid is written beside it so that a refusal can name it.

    The operating system releases the lock when the holder dies (a kill -9 included), so a stale lock never
    blocks a rerun.
    """

    def __init__(self, folder: str | os.PathLike[str], *, what: str = "this folder") -> None:
        from filelock import FileLock

        self.folder = Path(folder)
        self.what = what
        self._lock = FileLock(str(self.folder / ".lock"), timeout=0)
        self._pid_file = self.folder / ".lock.pid"

    def acquire(self) -> FolderLock:
        from filelock import Timeout

        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            holder = self._pid_file.read_text().strip() if self._pid_file.exists() else "unknown"
            raise FolderBusyError(
                f"{self.folder} is in use by another process (pid {holder}) running {self.what}; wait for it to "
                "finish or stop it, or use another folder"
            ) from None
        self._pid_file.write_text(f"{os.getpid()}\n")
        return self

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self._pid_file.unlink()
        self._lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
