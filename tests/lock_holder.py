"""Hold a folder's ``FolderLock`` in a real second process: for the tests of refusals and of a kill -9 holder.

The holder process takes the lock, prints ``held`` and waits on its stdin, so it also goes away when the test
process dies (its stdin closes).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dynashape

_HOLD = (
    "import sys\n"
    "from dynashape.io.state import FolderLock\n"
    "lock = FolderLock(sys.argv[1], what=sys.argv[2]).acquire()\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def child_env() -> dict[str, str]:
    """This environment, with the dynashape this test imports first on the child's PYTHONPATH."""
    src = str(Path(dynashape.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}


def start_holder(folder: str | os.PathLike[str], what: str = "a test's lock holder") -> subprocess.Popen:
    """A process that holds ``FolderLock(folder)`` once this returns (kill it to release the lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, os.fspath(folder), what],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        raise RuntimeError(f"the lock holder did not take the lock: {line}{proc.stderr.read()}")
    return proc


def stop_holder(proc: subprocess.Popen) -> None:
    """kill -9 the holder and reap it."""
    proc.kill()
    proc.wait(timeout=60)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def held_by_another_process(folder: str | os.PathLike[str], what: str = "a test's lock holder") -> Iterator[int]:
    """Hold ``folder``'s lock in another process for the ``with`` block; yields that process's pid."""
    proc = start_holder(folder, what)
    try:
        yield proc.pid
    finally:
        stop_holder(proc)
