"""The one place for state files: atomic writes, safe loads, one error type, and a lock for run folders.

Every file the package writes (checkpoints, MEDS memory, the verl and TRL shaper states, run folders, the
study's records) goes through here:

* ``write_bytes`` / ``write_text`` / ``write_json`` / ``torch_save``: a temporary file in the same folder,
  flushed and fsynced, ``os.replace``d onto the target, then the folder fsynced, so a kill or a full disk
  leaves the old file or the new one, never a torn one. ``atomic_folder`` does the same for a folder.
* ``read_json`` / ``read_yaml`` / ``torch_load`` (``dynashape.io.safe_reads``, re-exported here): every failure
  (missing, truncated, not the format, a file that would need arbitrary unpickling) is a ``StateFileError``
  naming the file and what is wrong. ``torch_load`` uses ``weights_only=True``: never code run on load.
* ``FolderLock``: an exclusive lock on a folder (``filelock``) that names the holder's pid when refused.

Temporary files and folders are created with the permissions of an ordinary file (``0o666`` / ``0o777`` less
the umask), not ``tempfile``'s private ``0o600``, so the file that replaces the target is readable as before.

No torch at import: a helper process that writes JSON never pays for it.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dynashape.io.safe_reads import StateFileError, read_json, read_yaml, torch_load

__all__ = [
    "TMP_PREFIX",
    "FolderBusyError",
    "FolderLock",
    "StateFileError",
    "append_text",
    "appending",
    "atomic_folder",
    "make_folder",
    "read_json",
    "read_yaml",
    "remove_stale_temporaries",
    "rename_aside",
    "save_figure",
    "torch_load",
    "torch_save",
    "write_bytes",
    "write_json",
    "write_text",
]

TMP_PREFIX = ".tmp-"
"""Every temporary file or folder this module makes starts with this, so leftovers can be told apart."""


def _fsync_path(path: str) -> None:
    """fsync a file or folder by path; best effort (Windows has no folder fds)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_folder(folder: str) -> None:
    # The rename itself is durable only once the folder's entry is on disk (POSIX).
    _fsync_path(folder)


def _temporary_name(folder: str, name: str) -> str:
    return os.path.join(folder, f"{TMP_PREFIX}{name}.{secrets.token_hex(4)}")


@contextlib.contextmanager
def _replacing(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Yield a binary handle on a temporary file beside ``path``; on success it replaces ``path``."""
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = _temporary_name(folder, os.path.basename(target))
        try:
            fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
            break
        except FileExistsError:  # a name already taken (2**32 of them): draw another
            continue
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
    """Replace ``path`` by ``data`` as JSON (and a final newline) atomically; NaN refused: JSON has none.

    The value is serialised before the temporary file exists: a value that cannot be written leaves ``path``
    as it was and nothing beside it."""
    write_text(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


def torch_save(path: str | os.PathLike[str], obj: Any) -> None:
    """``torch.save`` of ``obj`` to ``path`` atomically."""
    import torch

    with _replacing(path) as handle:
        torch.save(obj, handle)


def make_folder(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and its parents if missing (``mkdir -p``); return it as a Path."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig_kwargs: Any) -> None:
    """``fig.savefig`` to ``path`` atomically (a kill leaves the old image or the new one); the format is the
    suffix's (``.png``) unless ``format`` is given."""
    savefig_kwargs.setdefault("format", Path(path).suffix.lstrip(".") or None)
    with _replacing(path) as handle:
        fig.savefig(handle, **savefig_kwargs)


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` (UTF-8) to ``path`` and fsync, so it survives a kill once this returns.

    A torn last line (a kill mid-append: no final newline) is ended first, so it cannot swallow the first new
    line; a reader skips the torn line alone."""
    if not text:
        return
    target = Path(path)
    make_folder(target.parent)
    with target.open("ab") as handle:
        if handle.tell() > 0:
            with target.open("rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":
                    handle.write(b"\n")
        handle.write(text.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


@contextlib.contextmanager
def appending(path: str | os.PathLike[str]) -> Iterator[Any]:
    """A text handle appending to ``path`` (a log a loop writes line by line; the caller flushes each line)."""
    with Path(path).open("a") as handle:
        yield handle


def rename_aside(path: str | os.PathLike[str], new_name: str) -> Path:
    """Rename ``path`` to ``new_name`` in the same folder (kept, never deleted); return the new path."""
    target = Path(path).with_name(new_name)
    Path(path).rename(target)
    return target


def _umask() -> int:
    """The process's umask, read without setting it where Linux shows it (setting it, even back at once, would
    race with a file another thread creates meanwhile)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _settle_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (files written by others, e.g. ``save_pretrained``), and give
    each file the mode a file of ours gets (0666 less the umask): safetensors writes its files 0600, which
    would leave a model folder unreadable to the other users of a shared machine."""
    mode = 0o666 & ~_umask()
    for folder, _, files in os.walk(root):
        for name in files:
            p = os.path.join(folder, name)
            if not os.path.islink(p):
                os.chmod(p, mode)
                _fsync_path(p)
        _fsync_folder(folder)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; fill it; on success it is renamed to ``path``.

    Every file in it is fsynced before the rename (whoever wrote it), and the parent after it, so a kill
    leaves the complete folder or no folder at ``path``. An existing ``path`` is refused (FileExistsError),
    before the body runs or, when another process renamed its own folder into place meanwhile, at the end
    (the temporary folder is then removed and ``path`` is theirs); an existing empty folder is replaced.
    """
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise FileExistsError(errno.EEXIST, "already exists; refusing to replace it", str(target))
    while True:
        tmp = Path(_temporary_name(str(target.parent), target.name))
        try:
            os.mkdir(tmp, 0o777)  # the umask applies, as for any new folder
            break
        except FileExistsError:
            continue
    try:
        yield tmp
        _settle_tree(tmp)
        try:
            os.rename(tmp, target)  # POSIX: replaces an empty folder, refuses a non-empty one
        except OSError as err:
            if err.errno in (errno.EEXIST, errno.ENOTEMPTY) or target.exists():
                raise FileExistsError(errno.EEXIST, "appeared meanwhile; refusing to replace it", str(target)) from err
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_folder(str(target.parent))


def remove_stale_temporaries(folder: str | os.PathLike[str], *, also: Iterable[str] = ()) -> list[Path]:
    """Remove what interrupted writes left in ``folder`` (names starting with ``TMP_PREFIX``, and names that
    match one of the ``also`` glob patterns: another writer's temporaries); returns what was removed.

    Call it only while holding the folder's lock: a live writer's temporary file would go too."""
    root = Path(folder)
    if not root.is_dir():
        return []
    patterns = tuple(also)
    removed = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(TMP_PREFIX) or any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()
            removed.append(p)
    return removed


class FolderBusyError(RuntimeError):
    """Another holder has the folder's lock; ``folder`` names it and ``pid`` the holder (None if unknown)."""

    def __init__(self, folder: str | os.PathLike[str], pid: int | None, what: str) -> None:
        self.folder = os.fspath(folder)
        self.pid = pid
        self.what = what
        if pid is not None and pid == os.getpid():
            message = (
                f"{self.folder} is already locked by this process (pid {pid}) for {what}; a second FolderLock on "
                "the same folder is refused: share the one that holds it"
            )
        else:
            message = (
                f"{self.folder} is in use by another process (pid {'unknown' if pid is None else pid}) running "
                f"{what}; wait for it to finish or stop it, or use another folder"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.folder, self.pid, self.what)  # picklable (see StateFileError.__reduce__)


class FolderLock:
    """An exclusive, non-blocking lock on ``folder`` (a ``.lock`` file through ``filelock``), held by one
    holder at a time; the holder's pid is written beside it (``.lock.pid``) so that a refusal can name it.

    The operating system releases the lock when the holder dies (a kill -9 included), so a stale lock never
    blocks a rerun. The lock is reentrant for the same ``FolderLock`` object; a second ``FolderLock`` on the
    same folder is refused even in the same process (share the object instead).
    """

    LOCK_NAME = ".lock"
    PID_NAME = ".lock.pid"

    def __init__(self, folder: str | os.PathLike[str], *, what: str = "this folder") -> None:
        from filelock import FileLock

        self.folder = Path(folder)
        self.what = what
        # thread_local=False: the lock belongs to the process, so a thread pool may release what it acquired
        self._lock = FileLock(str(self.folder / self.LOCK_NAME), timeout=0, thread_local=False)
        self._pid_file = self.folder / self.PID_NAME

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._lock.is_locked

    def _holder(self) -> int | None:
        try:
            return int(self._pid_file.read_text().strip())
        except (OSError, ValueError):  # not written yet, or removed by a holder that is releasing it
            return None

    def acquire(self) -> FolderLock:
        """Take the lock (again, for the holder: reentrant); raises FolderBusyError when another holds it."""
        from filelock import Timeout

        self.folder.mkdir(parents=True, exist_ok=True)
        first = not self._lock.is_locked
        try:
            self._lock.acquire()
        except Timeout:
            raise FolderBusyError(self.folder, self._holder(), self.what) from None
        if first:
            try:
                write_text(self._pid_file, f"{os.getpid()}\n")
            except BaseException:
                self._lock.release()
                raise
        return self

    def release(self) -> None:
        """Give one acquisition back; the last one removes the pid file and unlocks. No-op when not held."""
        if not self._lock.is_locked:
            return
        if self._lock.lock_counter == 1:
            with contextlib.suppress(OSError):
                self._pid_file.unlink()
        self._lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
