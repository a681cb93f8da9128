"""The chain world's labeller: reads a response's lines and names the mode of its first error (evaluation only).

``error_mode`` replays a response's step lines against the right computation; it never feeds a reward.
``parse_lines``, ``is_shortcut`` and ``filler_chars`` are the readings the audit and the world metrics use.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from dynashape.world.base import Problem
from dynashape.world.chain.plan import apply_op, carry_or_borrow, plan

__all__ = ["ParsedLine", "error_mode", "filler_chars", "is_shortcut", "parse_lines"]

_STEP = re.compile(r"^(fix )?(-?\d+)((?:[+-]\d+)+)=(-?\d+)$")
_TERM = re.compile(r"([+-])(\d+)")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class ParsedLine(NamedTuple):
    """A step line of a response: ``left (op right)+ = result``; ``fix`` marks a repair line."""

    left: int
    terms: tuple[tuple[str, int], ...]
    result: int
    fix: bool


def parse_lines(response: str) -> tuple[list[ParsedLine], str | None, int]:
    """The step lines of a response (a ``fix`` line replaces the step before it), its boxed answer (None when
    there is none) and the count of check lines. Filler and unreadable lines are skipped."""
    steps: list[ParsedLine] = []
    checks = 0
    for raw in response.split("\n"):
        line = raw.strip()
        if line.startswith("check "):
            checks += 1
            continue
        m = _STEP.match(line)
        if not m:
            continue
        parsed = ParsedLine(int(m[2]), tuple((op, int(x)) for op, x in _TERM.findall(m[3])), int(m[4]), bool(m[1]))
        if parsed.fix and steps:
            steps[-1] = parsed
        else:
            steps.append(parsed)
    boxed = _BOXED.findall(response)
    return steps, (boxed[-1].strip() if boxed else None), checks


def is_shortcut(response: str) -> bool:
    """True when the response takes a shortcut: a boxed answer with no step line, or a merged line."""
    steps, boxed, _ = parse_lines(response)
    if boxed is None:
        return False
    return not steps or any(len(s.terms) > 1 for s in steps)


def filler_chars(response: str) -> int:
    """Characters (newlines included) of filler lines: restating the problem, ``so r`` repeats."""
    return sum(len(line) + 1 for line in response.split("\n") if line.startswith(("problem ", "so ")))


def error_mode(problem: Problem, response: str) -> str:
    """The mode of a response's first error ("" when its boxed answer is right): evaluation only.

    Replays the response's step lines against the right computation, line by line:

    * no boxed answer: ``truncated``; a bare wrong answer (no step line): ``shortcut``;
    * at the first line that deviates: a merged line with a wrong result -> ``shortcut``; on a trap prompt a
      line that follows the dropped-parenthesis computation instead of the group -> ``parenthesis``; a wrong
      result 10 short of a sum that carries -> ``carry``; 10 over a difference that borrows -> ``borrow``;
      any other wrong result, or a line that does not continue from the value before it -> ``other``;
    * every line right yet a wrong answer: ``other`` (``shortcut`` if a line was merged).
    """
    steps, boxed, _ = parse_lines(response)
    if boxed is None:
        return "truncated"
    if boxed == problem.answer:
        return ""
    if not steps:
        return "shortcut"
    if not problem.operands:
        return "other"
    right_plan = plan(problem.operands, problem.ops, problem.group)
    dropped_plan = plan(problem.operands, problem.ops, problem.group, drop_paren=True) if problem.is_trap else []
    value, g = problem.operands[0], None
    aligned = True  # the lines still map 1:1 onto the plan (no merged line so far)
    for i, s in enumerate(steps):
        merged = len(s.terms) > 1
        if merged:
            aligned = False
            true = s.left
            for op, x in s.terms:
                true = apply_op(true, op, x)
            if true != s.result:
                return "shortcut"
            value = s.result
            continue
        (op, b), a = s.terms[0], s.left
        true = apply_op(a, op, b)
        if aligned and i < len(right_plan):
            want = right_plan[i]
            is_group_line = want.left is not None
            matches_right = (a, op, b) == (want.left, want.op, want.right) if is_group_line else op == want.op
            if (
                problem.is_trap
                and not matches_right
                and i < len(dropped_plan)
                and dropped_plan[i].left is None
                and (op, b) == (dropped_plan[i].op, dropped_plan[i].right)
            ):
                return "parenthesis"
        if true != s.result:
            if op == "+" and carry_or_borrow(a, op, b) and s.result == true - 10:
                return "carry"
            if op == "-" and carry_or_borrow(a, op, b) and s.result == true + 10:
                return "borrow"
            return "other"
        # the line must continue from the running value (or be the group's own line)
        if aligned and i < len(right_plan) and right_plan[i].left is not None:
            g = s.result
        elif a != value:
            return "other"
        else:
            value = s.result
    del g
    return "shortcut" if not aligned else "other"
