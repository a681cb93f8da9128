"""Run a multi-process launcher (torchrun, accelerate launch) from a test, and clean up all of it on a timeout.

``subprocess.run(..., timeout=...)`` kills only the launcher: its worker processes live on, orphaned, and may hold
a lock (torch's JIT-extension build lock, a port) that blocks the next test until its own timeout; that is how one
slow DeepSpeed op build on a loaded CI machine failed two tests. Here the launcher starts its own process group
and a timeout kills the whole group, then reports the output so far.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def run_launcher(cmd: Sequence[str], *, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    """Run ``cmd`` to completion; returns (exit code, stdout + stderr). On a timeout the whole process group is
    killed and the exit code is -9, with a line saying so at the end of the output (the assertion shows it)."""
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env), start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        kill_group(proc)
        output, _ = proc.communicate()
        return -9, f"{output}\n[launcher] killed with its whole process group after {timeout:.0f} s: {list(cmd)}"


def kill_group(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and every process of its group (it must have been started with start_new_session=True)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass
