"""Verdicts on a table of (gold, response) pairs whose expected value is worked out from the mathematics.

``kind`` says which path must decide the pair: ``fast`` (the sympy-free fast path, checked directly),
``mv`` (only math-verify can: the fast path must hand it over), ``any``.
"""

from __future__ import annotations

import pytest

from dynashape.rewards import MathVerifier, Reason, fast_equivalent
from dynashape.rewards.verifier import _gold_answer


def B(answer: str) -> str:
    """A typical model response ending in a boxed answer."""
    return f"Let me work through this carefully.\nSo the final answer is $\\boxed{{{answer}}}$."


PMAT = r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}"
M1234 = r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"

# (gold, response, correct, kind)
CASES: list[tuple[str, str, bool, str]] = [
    # --- integers and signs
    ("42", B("42"), True, "fast"),
    ("42", B("43"), False, "fast"),
    ("-7", B("-7"), True, "fast"),
    ("-7", B("7"), False, "fast"),
    ("-7", B("- 7"), True, "fast"),
    ("0", B("-0"), True, "fast"),
    ("12", B("012"), True, "fast"),
    ("100", B("+100"), True, "fast"),
    ("1000", B("100"), False, "fast"),
    ("-3", B("\u22123"), True, "fast"),  # unicode minus sign
    # --- decimals
    ("0.5", B("0.50"), True, "fast"),
    ("0.5", B(".5"), True, "fast"),
    ("3", B("3.0"), True, "fast"),
    ("3", B("3.00"), True, "fast"),
    ("2.5", B("2.4"), False, "fast"),
    ("18.90", B("18.9"), True, "fast"),
    ("3.14", B("3.141"), False, "fast"),
    ("1.5", B("1.50000"), True, "fast"),
    ("10", B("10.001"), False, "fast"),
    ("3.5", B(r"\frac{7}{2}"), True, "fast"),
    ("-0.25", B(r"-\frac{1}{4}"), True, "fast"),
    # --- fractions: \frac, \dfrac, \tfrac, a/b, short forms, signs
    (r"\frac{1}{2}", B("0.5"), True, "fast"),
    (r"\frac{1}{2}", B(r"\dfrac{1}{2}"), True, "fast"),
    (r"\frac{1}{2}", B(r"\tfrac12"), True, "fast"),
    (r"\frac{1}{2}", B("1/2"), True, "fast"),
    (r"\frac{1}{2}", B(r"\frac{2}{4}"), True, "fast"),
    (r"\frac{3}{4}", B("0.75"), True, "fast"),
    (r"\frac{3}{4}", B(r"\frac{4}{3}"), False, "fast"),
    (r"-\frac{1}{3}", B(r"\frac{-1}{3}"), True, "fast"),
    (r"-\frac{1}{3}", B("-1/3"), True, "fast"),
    (r"-\frac{1}{3}", B(r"\frac{1}{3}"), False, "fast"),
    (r"\frac{1}{3}", B("0.33"), False, "fast"),  # near miss: 0.33 != 1/3
    (r"\frac{1}{3}", B("0.3333"), False, "fast"),
    (r"\frac{2}{3}", B(r"\frac{4}{6}"), True, "fast"),
    (r"\frac{10}{4}", B("2.5"), True, "fast"),
    (r"\dfrac{33}{100}", B("0.33"), True, "fast"),
    (r"\frac{7}{2}", B("7/2"), True, "fast"),
    (r"\frac{1}{8}", B("0.125"), True, "fast"),
    ("5", B(r"\frac{10}{2}"), True, "fast"),
    (r"\frac{1}{4}", B(r"\frac14"), True, "fast"),
    (r"\frac{5}{2}", B(r"\frac5{2}"), True, "fast"),
    (r"\frac{1}{2}", B(r"\frac{1}{3}"), False, "fast"),
    (r"\frac{1}{7}", B("1/7"), True, "fast"),
    (r"\frac{1}{7}", B("0.142"), False, "fast"),
    (r"\frac{9}{4}", B(r"2\frac{1}{4}"), True, "mv"),  # a mixed number is read as 2 + 1/4
    # --- thousands separators
    ("1000", B("1,000"), True, "fast"),
    ("1000000", B("1,000,000"), True, "fast"),
    ("1,000", B("1000"), True, "fast"),
    ("1{,}000", B("1000"), True, "fast"),
    ("1000", B(r"1\,000"), True, "fast"),
    ("12345", B("12,345"), True, "fast"),
    ("1000", B("1,001"), False, "fast"),
    ("27648", B("27,648"), True, "fast"),
    # --- percent
    (r"50\%", B("50"), True, "fast"),
    (r"50\%", B(r"50\%"), True, "fast"),
    (r"50\%", B("0.5"), True, "fast"),
    ("50", B(r"50\%"), True, "fast"),
    (r"25\%", B(r"50\%"), False, "fast"),
    (r"12.5\%", B("12.5"), True, "fast"),
    (r"40\%", B("30"), False, "fast"),
    (r"50\%", B("5"), False, "fast"),
    ("20", B("20%"), True, "fast"),
    # --- dollars
    (r"\$18.90", B("18.90"), True, "fast"),
    ("18.90", B(r"\$18.90"), True, "fast"),
    ("5", B(r"\$5"), True, "fast"),
    (r"\$5", B(r"\$6"), False, "fast"),
    ("1,250", B(r"\$1,250"), True, "fast"),
    # --- \left / \right and spacing
    ("(3, -1)", B(r"\left(3,-1\right)"), True, "fast"),
    (r"\left[ 0, 1 \right]", B("[0,1]"), True, "fast"),
    ("(1,2)", B(r"\left( 1, 2 \right)"), True, "fast"),
    ("x^2+1", B("x^2 + 1"), True, "fast"),
    (r"2\sqrt{3}", B(r"2 \sqrt{3}"), True, "fast"),
    (r"\frac{\sqrt{3}}{2}", B(r"\dfrac{\sqrt{3}}{2}"), True, "fast"),
    (r"2\pi", B(r"2 \pi"), True, "fast"),
    (r"\pi r^2", B(r"\pi r^2"), True, "fast"),
    ("x^5 - x^4 + x^3 - x^2 + x - 1", B("x^5-x^4+x^3-x^2+x-1"), True, "fast"),
    (r"\frac{1}{2}", B(r"\displaystyle\frac{1}{2}"), True, "fast"),
    ("7", B(r"\!7"), True, "fast"),
    # --- text wrappers and multiple choice
    ("5", B(r"\text{5}"), True, "fast"),
    (r"\text{(C)}", B("C"), True, "fast"),
    (r"\text{(C)}", B("(C)"), True, "fast"),
    ("C", B("D"), False, "fast"),
    (r"\text{(B)}", B(r"\text{(E)}"), False, "fast"),
    (r"\text{Evelyn}", B("Evelyn"), True, "fast"),
    (r"\textbf{7}", B("7"), True, "fast"),
    (r"\mbox{12}", B("12"), True, "fast"),
    (r"\text{Monday}", B(r"\text{Monday}"), True, "fast"),
    ("A", B(r"\textbf{(A)}"), True, "fast"),
    # --- trailing units
    (r"5\text{ cm}", B("5"), True, "fast"),
    ("5", B(r"5\text{ cm}"), True, "fast"),
    (r"15\mbox{ cm}^2", B("15"), True, "fast"),
    ("15", B(r"15 \text{cm}^2"), True, "fast"),
    ("12", B("12 inches"), True, "fast"),
    ("8", B("8 units"), True, "fast"),
    ("6", B("6 square units"), True, "fast"),
    (r"5\text{ cm}", B(r"6\text{ cm}"), False, "fast"),
    ("90", B(r"90 \text{ meters}"), True, "fast"),
    ("4.5", B(r"4.5\text{ hours}"), True, "fast"),
    # --- degrees
    (r"30^\circ", B("30"), True, "fast"),
    ("30", B(r"30^\circ"), True, "fast"),
    ("30", B(r"30^{\circ}"), True, "fast"),
    (r"76^\circ", B("76°"), True, "fast"),
    (r"45^\circ", B(r"135^\circ"), False, "fast"),
    ("30", B("30 degrees"), True, "fast"),
    # --- math delimiters around the answer
    ("5", "Answer: $5$", True, "fast"),
    ("7", r"So $$\boxed{7}$$", True, "fast"),
    (r"\frac{1}{2}", r"Answer: \( \frac{1}{2} \)", True, "fast"),
    ("2", r"Answer: \[2\]", True, "fast"),
    # --- assignments
    ("5", B("x=5"), True, "fast"),
    ("5", B("x = 5"), True, "fast"),
    ("x=5", B("5"), True, "fast"),
    ("5", B("x=6"), False, "fast"),
    ("-2", B("k = -2"), True, "fast"),
    # --- extraction: last box wins, Answer lines, bare \boxed, nesting
    ("3", r"First \boxed{2}, then corrected: \boxed{3}", True, "fast"),
    ("2", r"First \boxed{2}, then corrected: \boxed{3}", False, "fast"),
    ("3", r"\boxed{3} and an afterthought. Answer: 4", True, "fast"),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{3}} no wait \fbox{0.5}", True, "fast"),
    ("7", "We get \\boxed{7}. Let me restart: \\boxed{", True, "fast"),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", True, "fast"),
    (r"\{1,2\}", B(r"\{1, 2\}"), True, "fast"),
    ("5", r"The answer is \boxed 5", True, "fast"),
    ("5", r"so $\boxed 5$.", True, "fast"),
    ("10", r"The answer is \boxed{10.}", True, "fast"),
    ("42", "Reasoning...\nAnswer: 42", True, "fast"),
    ("42", "Answer: 41\nWait, recheck.\nAnswer: 42", True, "fast"),
    ("42", "Answer: 42\nHmm, no.\nAnswer: 41", False, "fast"),
    ("42", "Final Answer: The final answer is $42$. I hope it is correct.", True, "fast"),
    ("42", "**Answer:** 42", True, "fast"),
    ("42", "answer:\n42", True, "fast"),
    ("9", r"\boxed{\boxed{9}}", True, "fast"),
    # --- gold written as a solution
    (r"The area is $\boxed{16}$.", B("16"), True, "fast"),
    # --- sympy-only equivalences
    ("x^2+2x+1", B("(x+1)^2"), True, "mv"),
    ("(x+1)^2", B("x^2+2x+1"), True, "mv"),
    ("x^2+2x+1", B("(x+1)^3"), False, "mv"),
    (r"2\sqrt{3}", B(r"\sqrt{12}"), True, "mv"),
    (r"\sqrt{12}", B(r"2\sqrt{3}"), True, "mv"),
    (r"\frac{\sqrt{3}}{3}", B(r"\frac{1}{\sqrt{3}}"), True, "mv"),
    (r"\frac{\sqrt{2}}{2}", B(r"\frac{1}{\sqrt{2}}"), True, "mv"),
    (r"\sqrt{2}", B(r"\sqrt{3}"), False, "fast"),  # closed forms: floats prove them different
    (r"2\sqrt{5}", B(r"\sqrt{20}"), True, "mv"),
    (r"16\sqrt{3}", B(r"\sqrt{768}"), True, "mv"),
    (r"3\sqrt{2}", B(r"\sqrt{2}+\sqrt{8}"), True, "mv"),
    (r"3\sqrt{2}", B(r"3\sqrt2"), True, "fast"),
    (r"2\pi", B(r"\pi + \pi"), True, "mv"),
    (r"\pi", B("3.14"), False, "any"),
    ("6+9i", B("9i+6"), True, "mv"),
    ("1+2i", B("1-2i"), False, "mv"),
    ("x^2-1", B("(x-1)(x+1)"), True, "mv"),
    ("x^2-1", B("(x-1)^2"), False, "mv"),
    ("e^{2}", B("e^2"), True, "mv"),
    (r"\binom{5}{2}", B("10"), True, "mv"),
    ("2^{10}", B("1024"), True, "mv"),
    ("2", B(r"\sqrt{4}"), True, "mv"),
    ("4", B("2^2"), True, "mv"),
    ("4", B("2^3"), False, "fast"),
    (r"\frac{1}{2}", B(r"\frac{x}{2}"), False, "mv"),
    (r"\infty", B(r"\infty"), True, "fast"),
    (r"-\infty", B(r"\infty"), False, "mv"),
    # --- sets
    (r"\{1,2,3\}", B(r"\{3,2,1\}"), True, "mv"),
    (r"\{1,2\}", B(r"\{1,3\}"), False, "mv"),
    ("-2,1", B("1,-2"), True, "mv"),
    ("-2,1", B("-2, 1"), True, "fast"),
    ("-2,1", B("-2,2"), False, "mv"),
    # --- intervals
    ("[0,1]", B("[0,1)"), False, "mv"),  # near miss: the endpoint 1
    ("[0,1]", B("[0,1]"), True, "fast"),
    (r"(5,\infty)", B(r"(5, \infty)"), True, "fast"),
    (r"(5,\infty)", B(r"[5,\infty)"), False, "mv"),
    (r"(-\infty, 2) \cup (3, \infty)", B(r"(-\infty,2)\cup(3,\infty)"), True, "fast"),
    (r"(-\infty, 2) \cup (3, \infty)", B(r"(3,\infty)\cup(-\infty,2)"), True, "mv"),
    (r"(-\infty, 2) \cup (3, \infty)", B(r"(-\infty,2]\cup(3,\infty)"), False, "mv"),
    (r"(2,12) \cup (12,102)", B("(2,102)"), False, "mv"),  # misses that 12 is excluded
    # --- tuples
    ("(15,-29)", B("(15, -29)"), True, "fast"),
    ("(15,-29)", B("(-29,15)"), False, "mv"),
    (r"(3, \frac{\pi}{2})", B(r"\left(3,\frac{\pi}{2}\right)"), True, "fast"),
    ("(1,2,3)", B("(1,2,4)"), False, "mv"),
    ("(0.5, 2)", B(r"(\frac{1}{2}, 2)"), True, "mv"),
    # --- matrices and vectors
    (PMAT, B(r"\begin{pmatrix}-1&0\\0&-1\end{pmatrix}"), True, "fast"),
    (PMAT, B(r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}"), False, "mv"),
    (
        r"\begin{pmatrix} -18 \\ -49 \\ 96 \end{pmatrix}",
        B(r"\begin{pmatrix} -18 \\ -49 \\ 96 \end{pmatrix}"),
        True,
        "fast",
    ),
    (r"\begin{pmatrix} 1/2 \\ 1 \end{pmatrix}", B(r"\begin{pmatrix} 0.5 \\ 1 \end{pmatrix}"), True, "mv"),
    (M1234, B(r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}"), True, "mv"),
    (M1234, B(r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}"), False, "mv"),  # the transpose
    # --- equations
    ("y=2x+3", B("y = 3 + 2x"), True, "mv"),
    ("y=2x+3", B("y=2x-3"), False, "mv"),
    # --- strings and bases
    ("2516_8", B("2516_8"), True, "fast"),
    # --- more near misses
    (r"\frac{3}{5}", B("0.65"), False, "fast"),
    ("0.1", B("0.01"), False, "fast"),
    ("17", B("71"), False, "fast"),
    (r"\text{(A)}", B("B"), False, "fast"),
    ("x+1", B("x-1"), False, "mv"),
    (r"\frac{\pi}{4}", B(r"\frac{\pi}{2}"), False, "fast"),
    (r"2\sqrt{5}", B(r"2\sqrt{6}"), False, "fast"),
    (r"\frac{\sqrt{3}}{3}", B(r"\frac{\sqrt{3}}{2}"), False, "fast"),
    ("2", B(r"\sqrt{5}"), False, "fast"),
    (r"\sqrt{2}", B("1.41421"), False, "fast"),
    (r"1+2\sqrt{3}", B(r"1+3\sqrt{2}"), False, "fast"),
    (r"\sqrt[3]{8}", B("3"), False, "fast"),
    ("2,3", B("2,4"), False, "mv"),
    ("100", B("10^2"), True, "mv"),
    # --- no answer
    ("5", "I think it is 5", False, "no_answer"),
    ("5", "", False, "no_answer"),
    ("5", B(""), False, "no_answer"),
    ("5", r"\boxed{5", False, "no_answer"),
    ("5", "Answer:", False, "no_answer"),
    ("5", r"The boxed answer is \boxed{}", False, "no_answer"),
]


def test_table_is_large_and_balanced() -> None:
    assert len(CASES) >= 150
    assert sum(not correct for _, _, correct, _ in CASES) >= 50
    assert sum(kind == "mv" for *_, kind in CASES) >= 40


def test_verdicts_match_the_mathematics(verifier: MathVerifier) -> None:
    golds = [gold for gold, *_ in CASES]
    responses = [response for _, response, *_ in CASES]
    verdicts = verifier.verify(golds, responses)
    wrong = [
        (gold, response, expected, verdict)
        for (gold, response, expected, _), verdict in zip(CASES, verdicts)
        if verdict.correct != expected
    ]
    assert not wrong, "\n".join(map(repr, wrong))
    for (*_, expected, kind), verdict in zip(CASES, verdicts):
        if kind == "no_answer":
            assert verdict.reason is Reason.NO_ANSWER
        else:
            assert verdict.reason is (Reason.MATCH if expected else Reason.MISMATCH), verdict


@pytest.mark.parametrize(("gold", "response", "expected", "kind"), [c for c in CASES if c[3] in ("fast", "mv")])
def test_fast_path_decides_its_rules_and_hands_over_the_rest(
    gold: str, response: str, expected: bool, kind: str
) -> None:
    from dynashape.rewards import extract_answer

    pred = extract_answer(response)
    assert pred
    decided = fast_equivalent(_gold_answer(gold), pred)
    if kind == "fast":
        assert decided is expected
    else:
        assert decided is None


def test_fast_path_agrees_with_math_verify(math_verify_only: MathVerifier) -> None:
    """Wherever the fast path decides, math-verify alone gives the same verdict (where math-verify is right)."""
    decided = [(g, r, e) for g, r, e, kind in CASES if kind == "fast"]
    verdicts = math_verify_only.verify([g for g, _, _ in decided], [r for _, r, _ in decided])
    disagreements = [(g, r, e, v) for (g, r, e), v in zip(decided, verdicts) if v.correct != e]
    # Exactly math-verify's known gaps (which the fast path fixes) may disagree; the set is checked both ways
    # so that it stays true when math-verify changes.
    assert {(g, r) for g, r, *_ in disagreements} == MATH_VERIFY_GAPS, "\n".join(map(repr, disagreements))


# Pairs where math-verify 0.9.0 alone is wrong and the fast path is right.
MATH_VERIFY_GAPS: set[tuple[str, str]] = {
    ("1000", B(r"1\,000")),  # a thin space as thousands separator
    (r"12.5\%", B("12.5")),  # it accepts 50 for 50% but not 12.5 for 12.5%
    (r"76^\circ", B("76°")),  # the unicode degree sign
    ("10", r"The answer is \boxed{10.}"),  # a full stop inside the box
}
