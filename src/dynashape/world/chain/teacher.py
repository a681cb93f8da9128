"""The teacher that writes the chain world's warm-up traces, with independent habits the audit measures.

* W2 verbosity: the teacher's filler (restating the problem, repeating a result ``so 55``) follows the
  problem's trait. Filler never changes a step or the answer.
* W3 verification that buys accuracy: at a step with a carry or a borrow the teacher sometimes slips (a
  forgotten carry writes 47+8=45, a forgotten borrow 55-8=57). A careful trace follows every carry or borrow
  step with a check that works the step again in place (``check 47+8=55``); when the check's result differs
  from the line above, a repair line restores the right one (``fix 47+8=55``). Without a check a slip
  propagates into a wrong answer. (docs/world.md says why the check works in place rather than by the inverse.)
* W4 shortcuts: the bare answer (``\\boxed{46}``) or two operations merged per line, written correctly, more
  often on easy problems than on hard ones (as people skip steps on easy problems): the share of bare answers
  falls linearly from ``direct_prob_easy`` at the fewest operations to ``direct_prob_hard`` at the most. A
  small model's accuracy on them falls with difficulty through its capacity only.
* W5 recurring error modes per prompt: a forgotten carry (the answer 10 too small), a forgotten borrow (10
  too large) and on trap prompts the misconception that drops the parentheses (47+8-6+3), each deterministic
  given the problem and the step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from dynashape.world.base import Problem
from dynashape.world.chain.config import SHORTCUTS, ChainTaskConfig
from dynashape.world.chain.plan import apply_op, carry_or_borrow, expression, plan, slipped

__all__ = ["Trace", "teacher_trace"]


@dataclass(frozen=True)
class Trace:
    """A teacher trace: its text, the first error's mode ("" when the answer is right), and its choices."""

    text: str
    mode: str
    choices: dict[str, Any]


def teacher_trace(
    problem: Problem,
    rng: random.Random,
    cfg: ChainTaskConfig,
    *,
    shortcut: str | None = None,
    careful: bool | None = None,
    drop_paren: bool | None = None,
    slip_prob: float | None = None,
    filler: bool = True,
) -> Trace:
    """One teacher trace of ``problem``; every habit is drawn from ``cfg`` unless fixed by a keyword.

    Args:
        shortcut: "none", "direct" (bare answer) or "merged" (two chain operations per line).
        careful: check every carry / borrow step (and repair a slip).
        drop_paren: on a trap prompt, drop the parentheses (the misconception).
        slip_prob: per carry / borrow step, the probability of a slip (default ``cfg.slip_prob``).
        filler: write the trait's filler lines (restate, ``so r``).

    Returns:
        The trace; its ``mode`` is the mode of the first error that makes the answer wrong, as
        ``error_mode`` would label it ("" when the answer is right).
    """
    if not problem.operands:
        raise ValueError("teacher_trace needs a toy problem with operands")
    if shortcut is None:
        u, direct = rng.random(), cfg.direct_prob(problem.difficulty)
        shortcut = "direct" if u < direct else "merged" if u < direct + cfg.merged_prob else "none"
    if shortcut not in SHORTCUTS:
        raise ValueError(f"shortcut must be one of {SHORTCUTS}, got {shortcut!r}")
    if careful is None:
        careful = rng.random() < cfg.check_prob
    if drop_paren is None:
        drop_paren = problem.is_trap and rng.random() < cfg.paren_prob
    drop_paren = bool(drop_paren and problem.is_trap and shortcut == "none")  # a shortcut is its own habit
    slip = cfg.slip_prob if slip_prob is None else slip_prob
    restate_p = getattr(cfg, f"restate_{problem.verbosity}") if filler else 0.0
    repeat_p = getattr(cfg, f"repeat_{problem.verbosity}") if filler else 0.0
    choices = {"shortcut": shortcut, "careful": careful, "drop_paren": drop_paren}
    if shortcut == "direct":
        return Trace(f"\\boxed{{{problem.answer}}}", "", choices)
    ops, operands, group = problem.ops, problem.operands, problem.group
    lines: list[str] = []
    if rng.random() < restate_p:
        lines.append("problem " + expression(operands, ops, group))
    value, g, first_mode = operands[0], 0, ""
    lines_plan = plan(operands, ops, group, drop_paren=drop_paren)
    k = 0
    while k < len(lines_plan):
        line = lines_plan[k]
        if drop_paren and group is not None and k == group - 1 and not first_mode:
            first_mode = "parenthesis"  # the line where the group should have come first
        if shortcut == "merged" and line.left is None and line.right is not None and k + 1 < len(lines_plan):
            nxt = lines_plan[k + 1]
            if nxt.left is None and nxt.right is not None:  # two chain steps in one line, no slip
                new = apply_op(apply_op(value, line.op, line.right), nxt.op, nxt.right)
                lines.append(f"{value}{line.op}{line.right}{nxt.op}{nxt.right}={new}")
                value = new
                if rng.random() < repeat_p:
                    lines.append(f"so {value}")
                k += 2
                continue
        a = value if line.left is None else line.left
        b = (g if line.right is None else line.right) if line.left is None else line.right
        assert b is not None
        right = apply_op(a, line.op, b)
        written = right
        risky = carry_or_borrow(a, line.op, b)
        if risky and shortcut == "none" and rng.random() < slip:
            written = slipped(a, line.op, b)
        lines.append(f"{a}{line.op}{b}={written}")
        if risky and careful and shortcut == "none":
            lines.append(f"check {a}{line.op}{b}={right}")  # the step worked again, in place
            if written != right:
                lines.append(f"fix {a}{line.op}{b}={right}")
                written = right
        if written != right and not first_mode:
            first_mode = "carry" if line.op == "+" else "borrow"
        if line.left is None:
            value = written
        else:
            g = written
        if rng.random() < repeat_p:
            lines.append(f"so {written}")
        k += 1
    lines.append(f"\\boxed{{{value}}}")
    mode = "" if str(value) == problem.answer else first_mode or "other"
    return Trace("\n".join(lines), mode, choices)
