"""Stopping cleanly: the first SIGTERM / SIGINT finishes a run's current step and saves a checkpoint, or cancels
a study's runs (``dynashape.study.scheduler``); a second one stops at once.

Light on purpose (no torch): the command line catches ``RunInterrupted`` without importing the trainer.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["RunInterrupted", "StudyInterrupted", "stop_requests"]

log = logging.getLogger(__name__)


class RunInterrupted(RuntimeError):
    """SIGTERM or SIGINT stopped a run after a whole step, whose checkpoint is saved: starting the run again
    on the same folder resumes from it."""

    def __init__(self, run_dir: Path, step: int, signum: int) -> None:
        self.run_dir, self.step, self.signum = run_dir, step, signum
        name = signal.Signals(signum).name
        super().__init__(
            f"{name} received: stopped after step {step}, checkpoint {run_dir / 'checkpoints' / f'step_{step}'} "
            f"saved; run the same command again (same --run-dir) to resume from it"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.run_dir, self.step, self.signum)  # picklable: rebuilt from its fields


class StudyInterrupted(RuntimeError):
    """SIGTERM or SIGINT stopped a study: its running runs were cancelled (their folders keep their last
    checkpoints), its finished runs are recorded; starting the same command again resumes it."""

    def __init__(self, signum: int, *, finished: int, cancelled: int) -> None:
        self.signum, self.finished, self.cancelled = signum, finished, cancelled
        super().__init__(
            f"{signal.Signals(signum).name} received: cancelled {cancelled} running runs (each resumes from its "
            f"last checkpoint), {finished} runs of this invocation finished and are recorded; run the same "
            f"command again (same --out) to resume"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return _study_interrupted, (self.signum, self.finished, self.cancelled)


def _study_interrupted(signum: int, finished: int, cancelled: int) -> StudyInterrupted:
    return StudyInterrupted(signum, finished=finished, cancelled=cancelled)  # keyword-only fields, for pickle


@contextlib.contextmanager
def stop_requests(message: str = "finishing this step, then saving a checkpoint") -> Iterator[list[int]]:
    """Turn the first SIGTERM / SIGINT into a request to stop (``message`` says how, in a warning); a second one
    stops at once, as the default handlers do. Yields a list that holds the signal number once one arrived."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield received
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def request(signum: int, _frame: Any) -> None:
        received.append(signum)
        for sig, handler in previous.items():  # a second signal: the usual behaviour
            signal.signal(sig, handler)
        log.warning("%s: %s", signal.Signals(signum).name, message)

    for sig in previous:
        signal.signal(sig, request)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
