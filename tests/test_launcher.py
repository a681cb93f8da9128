"""The tests' launcher helper: a timeout kills the launcher's workers too, not just the launcher."""

from __future__ import annotations

import os
import sys
import time

from launcher import run_launcher


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"  # a zombie has exited, only not yet been reaped
    except FileNotFoundError:
        return False


def test_a_timeout_kills_the_workers_of_the_launcher(tmp_path):
    pid_file = tmp_path / "worker.pid"
    # a "launcher" that starts a worker (as torchrun does) and waits on it
    code = (
        "import subprocess, sys\n"
        f"worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(worker.pid))\n"
        "worker.wait()\n"
    )
    start = time.monotonic()
    returncode, output = run_launcher([sys.executable, "-c", code], env=dict(os.environ), timeout=3)
    assert returncode == -9 and "killed with its whole process group after 3 s" in output
    assert time.monotonic() - start < 60
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the launcher's worker outlived the timeout"


def test_a_finished_launch_returns_its_code_and_output():
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    returncode, output = run_launcher([sys.executable, "-c", code], env=dict(os.environ), timeout=60)
    assert returncode == 3 and "to stdout" in output and "to stderr" in output
