"""The arithmetic of a chain problem: its expression, the lines of the right computation, carries and borrows.

Shared by the generator (the gold answer), the teacher (the traces) and the labeller (replaying a response).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Line", "apply_op", "carry_or_borrow", "evaluate", "expression", "plan", "risky_steps", "slipped"]


def expression(operands: Sequence[int], ops: Sequence[str], group: int | None) -> str:
    """The problem as written: ``47+8-(6+3)``; ``group`` indexes the first operand of the parenthesised pair."""
    out = str(operands[0])
    for i, (op, x) in enumerate(zip(ops, operands[1:], strict=True), start=1):
        if i == group:
            out += f"{op}({x}"
        elif group is not None and i == group + 1:
            out += f"{op}{x})"
        else:
            out += f"{op}{x}"
    return out


def apply_op(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


class Line(NamedTuple):
    """One necessary line of the right computation: ``left op right``; ``left`` None = the running value."""

    left: int | None
    op: str
    right: int | None  # None = the group's value (the line after the group)


def plan(operands: Sequence[int], ops: Sequence[str], group: int | None, *, drop_paren: bool = False) -> list[Line]:
    """The lines of the right computation (or of the dropped-parenthesis misconception), in order."""
    lines: list[Line] = []
    i = 0
    while i < len(ops):
        if group is not None and not drop_paren and i == group - 1:
            lines.append(Line(operands[group], ops[group], operands[group + 1]))  # the group first
            lines.append(Line(None, ops[i], None))  # then value - group
            i += 2
        else:
            lines.append(Line(None, ops[i], operands[i + 1]))
            i += 1
    return lines


def evaluate(operands: Sequence[int], ops: Sequence[str], group: int | None, *, drop_paren: bool = False) -> int:
    """The value of the chain (with the parentheses dropped when ``drop_paren``)."""
    value, g = operands[0], 0
    for line in plan(operands, ops, group, drop_paren=drop_paren):
        if line.left is not None:
            g = apply_op(line.left, line.op, line.right)  # type: ignore[arg-type]
        else:
            value = apply_op(value, line.op, g if line.right is None else line.right)
    return value


def carry_or_borrow(a: int, op: str, b: int) -> bool:
    """True when ``a op b`` needs a carry (+) or a borrow (-) in the units column."""
    return (a % 10 + b % 10 >= 10) if op == "+" else (a % 10 < b % 10)


def slipped(a: int, op: str, b: int) -> int:
    """The result with the carry (into the tens) or the borrow (from the tens) forgotten: 10 off."""
    return a + b - 10 if op == "+" else a - b + 10


def risky_steps(operands: Sequence[int], ops: Sequence[str], group: int | None) -> int:
    """Carry / borrow steps of the right computation."""
    value, g, n = operands[0], 0, 0
    for line in plan(operands, ops, group):
        a = value if line.left is None else line.left
        b = (g if line.right is None else line.right) if line.left is None else line.right
        n += carry_or_borrow(a, line.op, b)  # type: ignore[arg-type]
        r = apply_op(a, line.op, b)  # type: ignore[arg-type]
        if line.left is None:
            value = r
        else:
            g = r
    return n
