"""A pool of math-verify worker processes with a hard per-job deadline.

``concurrent.futures.ProcessPoolExecutor`` cannot kill one hung worker (killing any breaks the whole pool), so
this is a small dispatcher instead: one daemon thread per pool owns N worker processes, each behind its own
socket pair, and a queue of jobs. Callers (any thread) append jobs and wait on futures. The dispatcher gives a
job to an idle worker; a worker that has not answered by ``timeout + KILL_GRACE_S`` is SIGKILLed and replaced.
Workers also time themselves out (``setitimer``) at ``timeout``, which covers Python-level loops without the
cost of a restart; the kill is for hangs inside one C call (a big-int power).

Workers are fresh interpreters running this file as a script (spawn semantics, never fork: the trainer has
torch threads). Unlike multiprocessing's spawn they do not re-import the caller's ``__main__`` (an unguarded
script would recurse) nor the ``dynashape`` package (which imports torch): this file imports only the standard
library at module level. Messages are plain bytes (JSON to the worker, a reason word back), so the parent
never unpickles anything a worker that handled model text sends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

__all__ = ["KILL_GRACE_S", "REASONS", "WorkerPool"]

KILL_GRACE_S = 0.5
"""Extra time a worker gets beyond the job timeout before it is killed (its own timer fires first)."""
REASONS = frozenset({"match", "mismatch", "timeout", "error"})
_READY = b"ready"
_MAX_START_FAILURES = 3
_START_TIMEOUT_S = 120.0  # importing sympy on a loaded machine takes seconds, not minutes
_log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    gold: str
    pred: str
    timeout: float
    future: Future[str] = field(default_factory=Future)


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False
    job: _Job | None = None
    deadline: float = field(default_factory=lambda: time.monotonic() + _START_TIMEOUT_S)


class WorkerPool:
    """Runs ``(gold, pred)`` jobs through math-verify in killable worker processes; see the module doc."""

    def __init__(self, *, workers: int, max_memory_mb: int | None) -> None:
        self.workers = workers
        self.max_memory_mb = max_memory_mb
        self._reset_state()

    def _reset_state(self) -> None:
        # Also called in a forked child: the parent's workers, sockets and thread are not ours to touch.
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._queue: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._broken: str | None = None
        self._wake_r, self._wake_w = -1, -1
        self._workers: list[_Worker] = []  # owned by the dispatcher thread

    # ----------------------------------------------------------------------------------------- caller side

    def submit(self, pairs: list[tuple[str, str]], timeout: float) -> list[Future[str]]:
        """Queue ``(gold, pred)`` pairs; each future resolves to a reason word (``match``, ``mismatch``,
        ``timeout``, ``error``). Raises RuntimeError if the workers cannot start."""
        jobs = [_Job(gold, pred, timeout) for gold, pred in pairs]
        with self._lock:
            if self._owner_pid != os.getpid():
                self._reset_state()
            if self._broken is not None:
                raise RuntimeError(self._broken)
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                os.set_blocking(self._wake_w, False)
                self._thread = threading.Thread(target=self._run, name="dynashape-verifier", daemon=True)
                self._thread.start()
            self._queue.extend(jobs)
            self._wake()
        return [job.future for job in jobs]

    def close(self) -> None:
        """Stop the dispatcher and its workers; jobs still queued resolve to ``error``."""
        with self._lock:
            if self._owner_pid != os.getpid():
                self._reset_state()
                return
            thread = self._thread
            self._closing = True
            if thread is not None:
                self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring and tests)."""
        return [worker.process.pid for worker in list(self._workers)]

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe already wakes the dispatcher
            os.write(self._wake_w, b"\0")

    # ------------------------------------------------------------------------------------ dispatcher side

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # The worker must import what this process imports (math-verify may come from a path entry).
        env["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
        memory = "none" if self.max_memory_mb is None else str(self.max_memory_mb)
        with theirs:
            process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(theirs.fileno()), memory],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        return _Worker(process, Connection(ours.detach()))

    def _dispatch(self, workers: list[_Worker]) -> None:
        for worker in workers:
            if worker.ready and worker.job is None and self._queue:
                job = self._queue.popleft()
                try:
                    worker.conn.send_bytes(json.dumps([job.gold, job.pred, job.timeout]).encode())
                except OSError:  # died since it reported ready: the read side will notice
                    self._queue.appendleft(job)
                    continue
                worker.job, worker.deadline = job, time.monotonic() + job.timeout + KILL_GRACE_S

    def _run(self) -> None:
        self._workers = workers = []
        start_failures = 0
        try:
            for _ in range(self.workers):
                workers.append(self._spawn())
            while True:
                with self._lock:
                    if self._closing:
                        break
                    self._dispatch(workers)
                # A job's deadline, or a worker's start-up deadline (an import that never finishes).
                deadlines = [w.deadline for w in workers if w.job is not None or not w.ready]
                wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                ready = set(wait([self._wake_r, *(w.conn for w in workers)], timeout=wait_s))
                if self._wake_r in ready:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                now = time.monotonic()
                for i, worker in enumerate(workers):
                    outcome = None
                    if worker.conn in ready:
                        try:
                            message = worker.conn.recv_bytes(maxlength=64)
                        except (EOFError, OSError):
                            outcome = "error"  # died: crash, memory limit, signal, or a bad message
                        else:
                            if message == _READY and not worker.ready:
                                worker.ready, start_failures = True, 0
                            elif worker.job is not None and message.decode(errors="replace") in REASONS:
                                worker.job.future.set_result(message.decode())
                                worker.job = None
                            else:
                                outcome = "error"
                    if outcome is None and (worker.job is not None or not worker.ready) and now >= worker.deadline:
                        outcome = "timeout"
                    if outcome is None:
                        continue
                    start_failures += 0 if worker.ready else 1
                    if worker.job is not None:
                        worker.job.future.set_result(outcome)
                        worker.job = None
                    code = _stop(worker, kill=True)
                    if start_failures >= _MAX_START_FAILURES:
                        raise RuntimeError(f"verifier workers die while starting (last exit code {code})")
                    workers[i] = self._spawn()
        except BaseException as exc:  # callers must never wait forever on a dead dispatcher
            _log.exception("verifier dispatcher stopped")
            with self._lock:
                self._broken = f"verifier pool is broken: {exc}"
        finally:
            failure = RuntimeError(self._broken) if self._broken else None
            for worker in workers:
                if worker.job is not None:
                    _resolve(worker.job.future, failure)
                _stop(worker, kill=False)
            with self._lock:
                while self._queue:
                    _resolve(self._queue.popleft().future, failure)
                for fd in (self._wake_r, self._wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self._wake_r, self._wake_w = -1, -1
                # From here on a submit starts a new dispatcher instead of queueing for this finished one.
                self._thread = None


def _resolve(future: Future[str], failure: BaseException | None) -> None:
    if future.done():
        return
    if failure is None:
        future.set_result("error")  # the pool was closed while the job waited
    else:
        future.set_exception(failure)


def _stop(worker: _Worker, *, kill: bool) -> int | None:
    """Stop a worker (politely unless ``kill``) and return its exit code."""
    if not kill:
        with contextlib.suppress(OSError):
            worker.conn.send_bytes(b"")  # empty message = exit once the current job is done
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=1.0)
    if worker.process.poll() is None:
        worker.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=5.0)
    with contextlib.suppress(OSError):
        worker.conn.close()
    return worker.process.returncode


# ---------------------------------------------------------------------------------------------------------
# Worker process (this file run as a script; standard library and math-verify only)
# ---------------------------------------------------------------------------------------------------------


class _JobTimeout(BaseException):
    """Raised by the worker's interval timer. A BaseException so that math-verify's and sympy's
    ``except Exception`` blocks cannot swallow it and carry on past the deadline."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _JobTimeout


# Audit events a verifier never needs: running programs, networking, changing files. PermissionError (an
# OSError) lets importlib's bytecode-cache writer fail quietly, as on a read-only disk.
_BLOCKED_EVENTS = frozenset(
    {
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
        "os.killpg", "subprocess.Popen", "socket.connect", "socket.bind", "socket.sendto", "os.remove",
        "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.truncate", "os.chmod",
        "shutil.rmtree", "shutil.copyfile", "shutil.move", "ctypes.dlopen", "webbrowser.open",
    }
)  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in _BLOCKED_EVENTS:
        raise PermissionError(f"blocked in verifier worker: {event}")
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        if isinstance(mode, str):
            writes = any(c in mode for c in "wax+")
        else:
            writes = isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        if writes:
            raise PermissionError("blocked in verifier worker: open for writing")


def _limit_memory(extra_mb: int | None) -> None:
    """Cap the address space at what the imports use plus ``extra_mb``, so that a big-int tower fails with
    MemoryError instead of swapping the machine."""
    if extra_mb is None:
        return
    try:
        import resource

        with open("/proc/self/status") as status:
            vm_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = vm_kb * 1024 + extra_mb * 1024 * 1024
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):
        pass  # not Linux: the parent's kill deadline still bounds the time


_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("(x+1)^2", "x^2+2x+1"),
    ("[0,1]", "[0,1)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("y=2x", "y=2x"),
)


def _worker_main(fd: int, max_memory_mb: int | None) -> None:
    """Import math-verify, harden the process, then judge jobs until told to stop."""
    import signal
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's; the parent stops us
    with contextlib.suppress(Exception):  # die with the parent even if it is SIGKILLed (Linux)
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    conn = Connection(fd)
    logging.disable(logging.CRITICAL)  # math-verify warns on every call without its signal timeout
    warnings.simplefilter("ignore")
    sys.dont_write_bytecode = True
    from math_verify import LatexExtractionConfig, parse, verify

    # LaTeX extraction only: ExprExtractionConfig would hand model text to sympy.parse_expr, i.e. to eval.
    config = [LatexExtractionConfig(boxed_match_priority=0)]

    def judge(gold: str, pred: str) -> str:
        parsed_gold = parse("\\boxed{" + gold + "}", config, parsing_timeout=None)
        if not parsed_gold:
            return "error"
        parsed_pred = parse("\\boxed{" + pred + "}", config, parsing_timeout=None)
        if not parsed_pred:
            return "mismatch"
        return "match" if verify(parsed_gold, parsed_pred, timeout_seconds=None) else "mismatch"

    # Load the lazy imports (numbers, simplify, sets, intervals, matrices) before the limits go on, so that the
    # first real job does not pay for them out of its timeout.
    for gold, pred in _WARM_UP:
        judge(gold, pred)
    _limit_memory(max_memory_mb)
    sys.addaudithook(_audit)
    signal.signal(signal.SIGALRM, _on_alarm)
    conn.send_bytes(_READY)
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not message:
            return
        try:
            gold, pred, timeout = json.loads(message)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                reason = judge(gold, pred)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _JobTimeout:
            reason = "timeout"
        except Exception:  # RecursionError, MemoryError, whatever sympy raises on hostile input
            reason = "error"
        try:
            conn.send_bytes(reason.encode())
        except OSError:
            return


if __name__ == "__main__":
    # Run as a script, Python put this file's folder first on sys.path; its sibling modules must not shadow
    # anything math-verify imports.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    _worker_main(int(sys.argv[1]), None if sys.argv[2] == "none" else int(sys.argv[2]))
