"""The worker pool: thread safety, a hung or crashed worker is replaced, lazy imports, config validation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dynashape.rewards import MathVerifier, Reason, Verdict
from dynashape.rewards._pool import KILL_GRACE_S

# Pairs that need math-verify (the fast path hands them over), with their mathematical verdicts.
SYMBOLIC = [
    ("x^2+2x+1", r"\boxed{(x+1)^2}", True),
    (r"2\sqrt{3}", r"\boxed{\sqrt{12}}", True),
    ("[0,1]", r"\boxed{[0,1)}", False),
    (r"\{1,2,3\}", r"\boxed{\{3,1,2\}}", True),
    ("(15,-29)", r"\boxed{(-29,15)}", False),
    ("6+9i", r"\boxed{9i+6}", True),
    (r"\sqrt{2}", r"\boxed{\sqrt{3}}", False),
    ("y=2x+3", r"\boxed{y=3+2x}", True),
]
NUMERIC = [("42", r"\boxed{42}", True), (r"\frac{1}{2}", r"\boxed{0.5}", True), ("7", r"\boxed{8}", False)]


def _worker_pids(verifier: MathVerifier) -> list[int]:
    return verifier._pool.worker_pids()


def test_verdicts_come_back_in_input_order(verifier: MathVerifier) -> None:
    pairs = SYMBOLIC + NUMERIC + SYMBOLIC[::-1]
    verdicts = verifier.verify([g for g, _, _ in pairs], [r for _, r, _ in pairs])
    assert [v.correct for v in verdicts] == [e for _, _, e in pairs]
    assert all(isinstance(v, Verdict) for v in verdicts)
    assert verdicts[0].pred == "(x+1)^2"


def test_eight_threads_give_the_serial_verdicts(verifier: MathVerifier) -> None:
    pairs = SYMBOLIC + NUMERIC
    golds, responses = [g for g, _, _ in pairs], [r for _, r, _ in pairs]
    serial = [verifier.verify([g], [r])[0] for g, r in zip(golds, responses)]
    barrier = threading.Barrier(8)

    def run(offset: int) -> list[Verdict]:
        barrier.wait()  # all eight threads submit at the same moment
        order = list(range(len(pairs)))
        order = order[offset:] + order[:offset]
        verdicts = verifier.verify([golds[i] for i in order], [responses[i] for i in order])
        return [verdicts[order.index(i)] for i in range(len(pairs))]

    with ThreadPoolExecutor(8) as threads:
        results = list(threads.map(run, range(8)))
    assert all(result == serial for result in results)
    assert [v.correct for v in serial] == [e for _, _, e in pairs]


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_hung_worker_is_killed_and_replaced_and_close_restarts() -> None:
    # A stopped process cannot run its own timer: only the dispatcher's kill ends the job.
    with MathVerifier(timeout=1.0, workers=1) as solo:
        assert solo.verify(["2"], [r"\boxed{\sqrt{4}}"])[0].correct  # the worker is up
        (pid,) = _worker_pids(solo)
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        (verdict,) = solo.verify(["2"], [r"\boxed{\sqrt{4}}"])
        elapsed = time.monotonic() - start
        assert verdict == Verdict(correct=False, pred=r"\sqrt{4}", reason=Reason.TIMEOUT)
        assert 1.0 <= elapsed < 1.0 + KILL_GRACE_S + 2.0
        assert solo.verify(["2"], [r"\boxed{\sqrt{4}}"])[0].correct  # a fresh worker took over
        assert _worker_pids(solo) != [pid]
        solo.close()
        assert solo.verify(["x+x"], [r"\boxed{3x}"])[0].reason is Reason.MISMATCH  # closed, then restarted


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_crashed_worker_scores_error_and_the_batch_continues(verifier: MathVerifier) -> None:
    verifier.verify(["2"], [r"\boxed{\sqrt{4}}"])
    pids = _worker_pids(verifier)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # both workers hang...

    def crash_later() -> None:
        time.sleep(0.3)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)  # ...then die, mid-job

    killer = threading.Thread(target=crash_later)
    killer.start()
    verdicts = verifier.verify([g for g, _, _ in SYMBOLIC[:2]], [r for _, r, _ in SYMBOLIC[:2]], timeout=30)
    killer.join()
    assert [v.reason for v in verdicts] == [Reason.ERROR, Reason.ERROR]
    assert not any(v.correct for v in verdicts)
    again = verifier.verify([g for g, _, _ in SYMBOLIC], [r for _, r, _ in SYMBOLIC])
    assert [v.correct for v in again] == [e for _, _, e in SYMBOLIC]


def test_fast_path_off_sends_everything_to_math_verify(math_verify_only: MathVerifier) -> None:
    verdicts = math_verify_only.verify(["42", r"\frac{1}{2}", "5"], [r"\boxed{42}", r"\boxed{0.5}", "none"])
    assert [v.reason for v in verdicts] == [Reason.MATCH, Reason.MATCH, Reason.NO_ANSWER]


def test_imports_stay_lazy_and_the_default_verifier_reads_the_environment() -> None:
    code = (
        "import sys, dynashape, dynashape.rewards, dynashape.world.dataset_files\n"
        "from dynashape.rewards import MathVerifier, default_verifier, extract_answer\n"
        "MathVerifier(); extract_answer('\\\\boxed{1}')\n"
        "config = default_verifier().config\n"
        "print(config.timeout, config.workers)\n"
        "print(sorted(m for m in ('math_verify', 'sympy', 'latex2sympy2_extended') if m in sys.modules))"
    )
    env = {**os.environ, "DYNASHAPE_VERIFY_TIMEOUT": "2.5", "DYNASHAPE_VERIFY_WORKERS": "3"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, env=env)
    assert out.stdout.split("\n")[:2] == ["2.5 3", "[]"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": "5"}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"fast_path": 1}, "fast_path"),
        ({"workers": 0}, "workers"),
        ({"workers": 2.5}, "workers"),
        ({"max_chars": 0}, "max_chars"),
        ({"max_memory_mb": 10}, "max_memory_mb"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        MathVerifier(**kwargs)  # type: ignore[arg-type]


def test_bad_inputs_name_the_field_and_index(verifier: MathVerifier) -> None:
    with pytest.raises(ValueError, match="same length"):
        verifier.verify(["1", "2"], ["1"])
    with pytest.raises(ValueError, match=r"responses\[1\]"):
        verifier.verify(["1", "2"], ["1", None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"golds\[0\]"):
        verifier.verify([3], ["1"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timeout"):
        verifier.verify(["1"], ["1"], timeout=0)
    assert verifier.verify([], []) == []
