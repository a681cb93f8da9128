"""Progress with an ETA: a tqdm bar on a terminal, a plain line every few seconds at most anywhere else.

A log file or a CI console gets no carriage-return redraws: ``LineProgress`` writes one line
(``eval base: 12/40 rollouts (30%), 0:41 elapsed, ETA 1:35, acc=0.25``) when at least ``interval`` seconds
have passed since the last one, and a last line when it closes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["LineProgress", "progress_bar"]


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress:
    """The part of tqdm's interface the trainer uses (``update``, ``set_postfix``, ``close``), as lines.

    Args:
        total: units of work (> 0).
        desc: what is measured (the line's start).
        unit: name of a unit.
        interval: least seconds between two lines.
        stream: where lines go (default: stderr).
        clock: a time source (tests pass a fake one).
    """

    def __init__(
        self,
        total: int,
        desc: str,
        *,
        unit: str = "it",
        interval: float = 10.0,
        stream: TextIO | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self.start = clock()
        self._last_line = self.start
        self._last_state: tuple[int, dict[str, Any]] | None = None
        self._closed = False

    def line(self) -> str:
        """The current state as one line; the ETA extrapolates the mean rate so far."""
        elapsed = self.clock() - self.start
        text = f"{self.desc}: {self.n}/{self.total} {self.unit}"
        if self.total:
            text += f" ({self.n / self.total:.0%})"
        text += f", {_clock(elapsed)} elapsed"
        if 0 < self.n < self.total:
            text += f", ETA {_clock(elapsed / self.n * (self.total - self.n))}"
        if self.postfix:
            text += ", " + ", ".join(f"{k}={v}" for k, v in self.postfix.items())
        return text

    def _emit(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._last_line = self.clock()
        self._last_state = (self.n, dict(self.postfix))

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self._last_line >= self.interval:
            self._emit()

    def set_postfix(self, values: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.postfix = {**(values or {}), **kwargs}

    def close(self) -> None:
        """A last line, unless the last one written already says the same or nothing moved (a cached base model
        leaves no warm-up line)."""
        if not self._closed:
            self._closed = True
            moved = self.n > 0 or self._last_state is not None
            if moved and self._last_state != (self.n, self.postfix):
                self._emit()


def progress_bar(total: int, desc: str, enabled: bool, *, unit: str = "it", interval: float = 10.0) -> Any:
    """A tqdm bar when stderr is a terminal, else a ``LineProgress``; None when disabled or ``total`` is 0."""
    if not enabled or total == 0:
        return None
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is not None and isatty():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
    return LineProgress(total, desc, unit=unit, interval=interval)
