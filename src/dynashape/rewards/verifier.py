"""MathVerifier: correct verdicts on untrusted model output, in a pool of killable worker processes.

Pipeline per (gold, response) pair, in the caller's thread: keep the response's tail (``max_chars``), extract
the answer (``answers.extract_answer``), try the fast path (``answers.fast_equivalent``). Only undecided pairs
go to math-verify, which runs in worker processes because

* math-verify's own timeout is ``signal.alarm``: it raises off the main thread (verl calls reward functions
  from a thread pool), while a worker runs it on its own main thread with a float ``setitimer`` budget;
* a C-level hang (``10^{10^{10}}`` is one CPython big-int power) cannot be interrupted by a signal handler, so
  the dispatcher SIGKILLs the worker at ``timeout + KILL_GRACE_S``, scores the item ``timeout`` and starts a
  replacement while the rest of the batch continues on the other workers;
* a crash (segfault, memory limit) takes down one worker, not the trainer.

Only ``math_verify.parse`` with ``LatexExtractionConfig`` sees model text (never ``ExprExtractionConfig``, which
calls ``sympy.parse_expr`` and so ``eval``); workers also refuse process, network and file-write audit events.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from enum import Enum

from dynashape.rewards import _pool
from dynashape.rewards.answers import (
    braces_balanced,
    extract_answer,
    fast_equivalent,
    has_boxed_answer,
    strip_delimiters,
)

__all__ = ["MathVerifier", "Reason", "Verdict", "VerifierConfig", "default_verifier", "verify_answer"]


class Reason(str, Enum):
    """Why a verdict is what it is."""

    MATCH = "match"
    MISMATCH = "mismatch"
    NO_ANSWER = "no_answer"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Verdict:
    """The verdict on one response.

    Attributes:
        correct: the response's final answer equals the gold answer.
        pred: the extracted answer (None when the response has none).
        reason: ``match`` iff correct; otherwise ``mismatch``, ``no_answer``, ``timeout`` (math-verify ran out
            of time or the worker was killed) or ``error`` (the gold answer could not be parsed, or a worker
            crashed).
        formatted: the response gives its answer in a closed ``\\boxed{}`` (`answers.has_boxed_answer`), the
            format the prompts ask for (LASER's official score reads it); None when a verifier does not say.
    """

    correct: bool
    pred: str | None
    reason: Reason
    formatted: bool | None = dataclass_field(default=None, compare=False)  # a judgement beside the verdict, not of it


@dataclass(frozen=True, kw_only=True)
class VerifierConfig:
    """Settings of a MathVerifier."""

    timeout: float = 5.0
    """Seconds math-verify may spend on one pair (parse gold, parse answer, compare); then it scores wrong."""
    workers: int | None = None
    """Worker processes; None = min(4, usable CPUs)."""
    max_chars: int = 32_768
    """Responses longer than this keep only their last ``max_chars`` characters (the answer is at the end)."""
    fast_path: bool = True
    """Decide common equivalences without sympy; False sends every answered pair to math-verify."""
    max_memory_mb: int | None = 1024
    """Address space a worker may add after its imports (RLIMIT_AS); None = no limit."""

    def __post_init__(self) -> None:
        _check_timeout(self.timeout)
        if self.workers is not None and not (_is_int(self.workers) and 1 <= self.workers <= 256):
            raise ValueError(f"workers must be None or an int in [1, 256], got {self.workers!r}")
        if not (_is_int(self.max_chars) and self.max_chars >= 1):
            raise ValueError(f"max_chars must be an int >= 1, got {self.max_chars!r}")
        if not isinstance(self.fast_path, bool):
            raise ValueError(f"fast_path must be a bool, got {self.fast_path!r}")
        if self.max_memory_mb is not None and not (_is_int(self.max_memory_mb) and self.max_memory_mb >= 64):
            raise ValueError(f"max_memory_mb must be None or an int >= 64, got {self.max_memory_mb!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_timeout(timeout: object) -> None:
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout <= 3600):
        raise ValueError(f"timeout must be a number in (0, 3600] seconds, got {timeout!r}")


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _gold_answer(gold: str) -> str:
    """A gold written as a solution or as ``\\boxed{...}`` is reduced to its boxed answer."""
    if "\\boxed" in gold or "\\fbox" in gold:
        boxed = extract_answer(gold)
        if boxed:
            return boxed
    return strip_delimiters(gold)


class MathVerifier:
    """Batch verifier: fast path in the calling thread, math-verify in a pool of killable processes.

    Safe to share between threads (one dispatcher thread owns the workers; callers only queue jobs and wait)
    and across ``fork`` (a forked child starts its own workers). Workers start on first use; ``close()``
    or the context manager stops them, as does garbage collection or interpreter exit.

    Example:
        >>> with MathVerifier(timeout=2.0) as verifier:  # doctest: +SKIP
        ...     verifier.verify(["\\frac{1}{2}"], ["... so the answer is \\boxed{0.5}."])
        [Verdict(correct=True, pred='0.5', reason=<Reason.MATCH: 'match'>, formatted=True)]
    """

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        workers: int | None = None,
        max_chars: int = 32_768,
        fast_path: bool = True,
        max_memory_mb: int | None = 1024,
    ) -> None:
        self.config = VerifierConfig(
            timeout=timeout,
            workers=workers,
            max_chars=max_chars,
            fast_path=fast_path,
            max_memory_mb=max_memory_mb,
        )
        self._pool = _pool.WorkerPool(
            workers=workers if workers is not None else max(1, min(4, _usable_cpus())),
            max_memory_mb=max_memory_mb,
        )
        self._finalizer = weakref.finalize(self, self._pool.close)

    def verify(self, golds: Sequence[str], responses: Sequence[str], *, timeout: float | None = None) -> list[Verdict]:
        """Judge each response against its gold answer.

        Args:
            golds: [N] gold answers (``"\\frac{1}{2}"``; a solution containing ``\\boxed{}`` also works).
            responses: [N] model outputs (untrusted, any length).
            timeout: seconds per pair for this call; None = ``config.timeout``.

        Returns:
            [N] verdicts in input order. Never raises on model output; raises ValueError on mismatched
            lengths or non-string entries.
        """
        if len(golds) != len(responses):
            raise ValueError(f"golds and responses must have the same length, got {len(golds)} and {len(responses)}")
        for field, values in (("golds", golds), ("responses", responses)):
            for index, value in enumerate(values):
                if not isinstance(value, str):
                    raise ValueError(f"{field}[{index}] must be a str, got {type(value).__name__}")
        cfg = self.config
        if timeout is None:
            timeout = cfg.timeout
        _check_timeout(timeout)
        verdicts: list[Verdict | None] = [None] * len(golds)
        # Pairs that reach math-verify, deduplicated: a GRPO group often repeats the same final answer.
        pending: dict[tuple[str, str], list[int]] = {}
        preds: list[str | None] = []
        boxed: list[bool] = []
        for index, (gold, response) in enumerate(zip(golds, responses)):
            tail = response[-cfg.max_chars :]
            pred = extract_answer(tail)
            preds.append(pred)
            boxed.append(has_boxed_answer(tail))
            if not pred:
                verdicts[index] = Verdict(correct=False, pred=pred, reason=Reason.NO_ANSWER, formatted=boxed[index])
                continue
            gold_answer = _gold_answer(gold)
            decided = fast_equivalent(gold_answer, pred) if cfg.fast_path else None
            if decided is None and not braces_balanced(pred):
                decided = False  # an "Answer:" line with stray braces can't be a well-formed answer
            if decided is not None:
                reason = Reason.MATCH if decided else Reason.MISMATCH
                verdicts[index] = Verdict(correct=decided, pred=pred, reason=reason, formatted=boxed[index])
            else:
                pending.setdefault((gold_answer, strip_delimiters(pred)), []).append(index)
        if pending:
            futures: list[Future[str]] = self._pool.submit(list(pending), float(timeout))
            for indices, future in zip(pending.values(), futures):
                reason = Reason(future.result())
                for index in indices:
                    verdicts[index] = Verdict(
                        correct=reason is Reason.MATCH, pred=preds[index], reason=reason, formatted=boxed[index]
                    )
        return verdicts  # type: ignore[return-value]  # every slot is filled above

    def close(self) -> None:
        """Stop the worker processes (a later ``verify`` starts new ones)."""
        self._pool.close()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_default_lock = threading.Lock()
_default: tuple[int, MathVerifier] | None = None


def default_verifier() -> MathVerifier:
    """The process-wide MathVerifier that ``verify_answer`` and the verl/TRL adapters share.

    Built on first use from the environment: ``DYNASHAPE_VERIFY_TIMEOUT`` (seconds, default 5) and
    ``DYNASHAPE_VERIFY_WORKERS`` (default min(4, CPUs)); the variables reach verl's Ray reward workers
    through ``runtime_env``. A forked child gets its own.
    """
    global _default
    with _default_lock:
        if _default is None or _default[0] != os.getpid():
            timeout_env = os.environ.get("DYNASHAPE_VERIFY_TIMEOUT", "5")
            workers_env = os.environ.get("DYNASHAPE_VERIFY_WORKERS", "")
            try:
                timeout = float(timeout_env)
                workers = int(workers_env) if workers_env else None
            except ValueError:
                raise ValueError(
                    f"DYNASHAPE_VERIFY_TIMEOUT={timeout_env!r} and DYNASHAPE_VERIFY_WORKERS={workers_env!r} must "
                    "be a number of seconds and an int"
                ) from None
            _default = (os.getpid(), MathVerifier(timeout=timeout, workers=workers))
        return _default[1]


def verify_answer(gold: str, response: str) -> Verdict:
    """Verdict on one response with the shared ``default_verifier()``.

    Example:
        >>> verify_answer("10", "The total is \\boxed{10}.").correct  # doctest: +SKIP
        True
    """
    return default_verifier().verify([gold], [response])[0]
