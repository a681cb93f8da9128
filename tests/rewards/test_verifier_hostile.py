"""Hostile model output: every item comes back wrong within its timeout plus a margin, the pool survives, and
nothing in the output is ever executed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dynashape.rewards import MathVerifier, Reason, extract_answer
from dynashape.rewards._pool import KILL_GRACE_S

HOSTILE_TIMEOUT_S = 1.0
# Scheduling slack on a loaded 2-core machine, plus the wait for a replacement worker after a kill.
MARGIN_S = 3.0


def hostile_cases(canary: Path) -> list[tuple[str, str]]:
    """(gold, response) pairs; every response is wrong for its gold. ``canary`` is a file that code in the
    response would create if anything executed it."""
    touch = f"__import__('os').system('touch {canary}')"
    write = f"open('{canary}', 'w').write('pwned')"
    return [
        # exponent towers and huge evaluations
        ("1", r"\boxed{10^{10^{10}}}"),
        ("1", r"\boxed{2^{2^{2^{2^{2^{2}}}}}}"),
        ("1", r"\boxed{9^{9^{9^{9}}}}"),
        ("1", r"\boxed{10^{10^{100}}} + 1"),
        ("1", r"\boxed{(10^{10})!}"),
        ("1", r"\boxed{(10^{9})!}"),
        ("1", r"\boxed{\binom{10^{10}}{10^{5}}}"),
        ("1", r"\boxed{\prod_{n=1}^{10^{7}} n}"),
        ("1", r"\boxed{\sum_{n=1}^{10^{8}} n^{n}}"),
        ("1", r"\boxed{x^{x^{x^{x^{x^{x^{x^{x}}}}}}}}"),
        ("1", r"\boxed{\int_0^{\infty} e^{-x^{101}} \sin(x^{7}) dx}"),
        # huge or deeply nested input
        ("1", r"\boxed{" + "9" * 100_000 + "}"),
        ("1", r"\boxed{" + "{" * 5000 + "2" + "}" * 5000 + "}"),
        ("1", r"\boxed{" + "(" * 5000 + "2" + ")" * 5000 + "}"),
        ("1", r"\boxed{" + r"\frac{1}{" * 500 + "2" + "}" * 500 + "}"),
        ("1", r"\boxed{" + r"\sqrt{" * 2000 + "2" + "}" * 2000 + "}"),
        ("1", r"\boxed{1" + "+1" * 50_000 + "}"),
        ("1", r"\boxed{\begin{pmatrix}" + "1&" * 20_000 + r"1\end{pmatrix}}"),
        ("1", r"\boxed{" * 20_000 + "2" + "}" * 20_000),
        ("1", r"\boxed{\text{" + "a" * 200_000 + "}}"),
        # unbalanced braces
        ("1", r"\boxed{" + "{" * 10_000),
        ("1", "}" * 1000 + r"\boxed{2}}}}"),
        ("1", r"\fbox{\boxed{\fbox{"),
        ("1", "Answer: 2}}}{{{"),
        # code in the box or the answer line
        ("1", r"\boxed{" + touch + "}"),
        ("1", r"\boxed{exec(\"" + write + '")}'),
        ("1", r"\boxed{eval('" + touch.replace("'", '"') + "')}"),
        ("1", r"\boxed{(lambda: " + touch + ")()}"),
        ("1", "Answer: " + touch),
        ("1", "Answer: " + write),
        ("1", r"\boxed{__import__('subprocess').run(['touch', '" + str(canary) + "'])}"),
        ("1", r"\boxed{\input{/etc/passwd}}"),
        # control characters, null bytes, surrogates
        ("1", "\\boxed{2\x00}"),
        ("1", "\x00" * 10_000 + "\\boxed{\x00}"),
        ("1", "\\boxed{\ud800\udfff\ud800}"),
        ("1", "\x1b[2J\x1b[31m\\boxed{\x07\x08}"),
        # megabytes of text
        ("1", "a" * 2_000_000 + r"\boxed{2}"),
        ("1", "{" * 1_000_000),
        ("1", r"\boxed{" * 200_000),
        ("1", "Answer: " * 200_000),
        ("1", "$" * 1_000_000 + "Answer: $2$"),
    ]


def test_hostile_batch_is_wrong_fast_and_harmless(verifier: MathVerifier, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    cases = hostile_cases(canary)
    assert len(cases) >= 30
    assert verifier.verify(["2"], [r"\boxed{\sqrt{4}}"])[0].correct  # workers up: time the batch, not start-up
    start = time.monotonic()
    verdicts = verifier.verify([g for g, _ in cases], [r for _, r in cases], timeout=HOSTILE_TIMEOUT_S)
    elapsed = time.monotonic() - start
    assert [v.correct for v in verdicts] == [False] * len(cases)
    assert all(v.reason is not Reason.MATCH for v in verdicts)
    # Two workers share the items that reach math-verify; each takes at most its timeout plus the kill grace.
    slow_items = sum(v.reason is Reason.TIMEOUT for v in verdicts)
    budget = (slow_items + 1) * (HOSTILE_TIMEOUT_S + KILL_GRACE_S) / 2 + 2 * MARGIN_S
    assert elapsed < budget, (elapsed, slow_items)
    assert not canary.exists()
    # The pool survived: a normal batch still gets the right verdicts.
    after = verifier.verify(["x^2-1", r"\frac{1}{2}"], [r"\boxed{(x-1)(x+1)}", r"\boxed{0.5}"])
    assert [v.correct for v in after] == [True, True]


@pytest.mark.slow
def test_each_hostile_item_returns_within_its_timeout(verifier: MathVerifier, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    for gold, response in hostile_cases(canary):
        start = time.monotonic()
        (verdict,) = verifier.verify([gold], [response], timeout=HOSTILE_TIMEOUT_S)
        elapsed = time.monotonic() - start
        assert not verdict.correct
        assert elapsed < HOSTILE_TIMEOUT_S + KILL_GRACE_S + MARGIN_S, (response[:80], elapsed, verdict)
    assert not canary.exists()


def test_tower_item_times_out_and_the_rest_of_the_batch_continues(verifier: MathVerifier) -> None:
    golds = ["1", "x^2+2x+1", "3"]
    responses = [r"\boxed{10^{10^{10}}}", r"\boxed{(x+1)^2}", r"\boxed{3}"]
    start = time.monotonic()
    verdicts = verifier.verify(golds, responses, timeout=HOSTILE_TIMEOUT_S)
    assert time.monotonic() - start < HOSTILE_TIMEOUT_S + KILL_GRACE_S + MARGIN_S
    assert verdicts[0].reason in (Reason.TIMEOUT, Reason.ERROR, Reason.MISMATCH)
    assert not verdicts[0].correct
    assert [v.correct for v in verdicts[1:]] == [True, True]


def test_long_responses_keep_their_tail() -> None:
    with MathVerifier(timeout=1.0, workers=1, max_chars=100) as small:
        head_box = r"\boxed{7}" + "x" * 500
        tail_box = "x" * 500 + r"\boxed{7}"
        verdicts = small.verify(["7", "7"], [head_box, tail_box])
    assert [v.reason for v in verdicts] == [Reason.NO_ANSWER, Reason.MATCH]


def test_code_in_the_box_is_never_run_by_extraction(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    for _, response in hostile_cases(canary):
        extract_answer(response)
    assert not canary.exists()
