"""The toy world (version ``WORLD_VERSION``): chain arithmetic where length and repeated errors matter.

A problem is a chain of 1..8 operations (its difficulty) on a two-digit running value: ``47+8-3``, with
one-digit operands, and on *trap* prompts one parenthesised pair after a minus: ``47+8-(6+3)``. The concise
trace writes one line per operation with the running value (``47+8=55``), the group first (``6+3=9``,
``55-9=46``), and ends with ``\\boxed{46}``: from 19 tokens at one operation to ~75 at eight (W1).

The teacher that writes the warm-up traces has these independent habits, each a property the audit measures:

* W2 verbosity, a trait of the problem: every problem has a phrasing drawn from a hash of its expression
  (terse ``47+8-3``, plain ``compute 47+8-3``, chatty ``please work out 47+8-3 step by step``), independent of
  its difficulty, and the teacher's filler (restating the problem, repeating a result ``so 55``) follows the
  trait. Filler never changes a step or the answer.
* W3 verification that buys accuracy: at a step with a carry or a borrow the teacher sometimes slips (a
  forgotten carry writes 47+8=45, a forgotten borrow 55-8=57). A careful trace follows every carry or borrow
  step with a check that works the step again in place (``check 47+8=55``); when the check's result differs
  from the line above, a repair line restores the right one (``fix 47+8=55``). Without a check a slip
  propagates into a wrong answer. (chain-v2 checked by the inverse operation, ``check 45-8=37``; its audit
  found that the small model repaired 9 of 181 checked slips: the inverse needs a second risky computation and
  a comparison with a value two lines up. A check in place compares two results on adjacent lines.)
* W4 shortcuts: the bare answer (``\\boxed{46}``) or two operations merged per line, written correctly by the
  teacher, more often on easy problems than on hard ones (as people skip steps on easy problems): the share of
  bare answers falls linearly from ``direct_prob_easy`` at the fewest operations to ``direct_prob_hard`` at
  the most. A small model's accuracy on them falls with difficulty through its capacity only. (chain-v2 drew
  8 % bare answers at every difficulty; its audit found them wrong even at one operation, where the model had
  seen one bare answer in a hundred traces.)
* W5 recurring error modes per prompt: a forgotten carry (the answer 10 too small), a forgotten borrow (10
  too large) and on trap prompts the misconception that drops the parentheses (47+8-6+3), each deterministic
  given the problem and the step. ``error_mode`` names the mode of any wrong response by replaying its lines
  against the right computation: for evaluation only, never the reward.

Everything is generated from a seed (no download); train, validation and test problems are disjoint.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dynashape.meds.keys import prompt_key

__all__ = [
    "ERROR_MODES",
    "SHORTCUTS",
    "VERBOSITY",
    "WORLD_VERSION",
    "ChainTaskConfig",
    "Problem",
    "Splits",
    "Trace",
    "error_mode",
    "filler_chars",
    "is_shortcut",
    "make_problem",
    "make_splits",
    "parse_lines",
    "teacher_trace",
    "world_splits",
]

WORLD_VERSION = "chain-v3"
"""Bump when the meaning of a problem, a trace or a label changes (it keys the saved budget rules)."""
VERBOSITY: tuple[str, ...] = ("terse", "plain", "chatty")
SHORTCUTS: tuple[str, ...] = ("none", "direct", "merged")
ERROR_MODES: tuple[str, ...] = ("carry", "borrow", "parenthesis", "shortcut", "truncated", "other")
_PHRASING = {"terse": "{}", "plain": "compute {}", "chatty": "please work out {} step by step"}


@dataclass(frozen=True, kw_only=True)
class ChainTaskConfig:
    """Parameters of the toy world; the world's identity (it keys the cached base model)."""

    min_ops: int = 1
    """Fewest operations of a problem (its difficulty)."""
    max_ops: int = 8
    """Most operations of a problem."""
    n_train: int = 20000
    """Distinct training problems (warm-up and RL prompts), uniform over difficulties."""
    n_validation_per_difficulty: int = 25
    """Validation problems per difficulty (baselines are tuned on these only)."""
    n_test_per_difficulty: int = 25
    """Held-out test problems per difficulty."""
    seed: int = 0
    """Seed of problem generation."""
    trap_prob: float = 0.3
    """Share of problems with >= 2 operations that hold a parenthesised pair after a minus (trap prompts)."""
    slip_prob: float = 0.15
    """Per step with a carry or a borrow: probability that the teacher slips (forgets the carry / borrow)."""
    check_prob: float = 0.5
    """Share of careful teacher traces: they check every carry / borrow step and repair a slip."""
    paren_prob: float = 0.3
    """On a trap prompt: probability that the teacher drops the parentheses (the misconception)."""
    direct_prob_easy: float = 0.3
    """Share of teacher traces that give the bare answer on the easiest problems (``min_ops``)."""
    direct_prob_hard: float = 0.04
    """Share of teacher traces that give the bare answer on the hardest problems (``max_ops``); linear between."""
    merged_prob: float = 0.08
    """Share of teacher traces that merge two chain operations per line."""
    # The filler per verbosity trait (W2): probability of restating the problem first, and of repeating the
    # result after each step (``so 55``).
    restate_terse: float = 0.0
    """Terse problems: probability of restating the problem."""
    restate_plain: float = 0.5
    """Plain problems: probability of restating the problem."""
    restate_chatty: float = 1.0
    """Chatty problems: probability of restating the problem."""
    repeat_terse: float = 0.0
    """Terse problems: per step, probability of repeating the result."""
    repeat_plain: float = 0.25
    """Plain problems: per step, probability of repeating the result."""
    repeat_chatty: float = 0.7
    """Chatty problems: per step, probability of repeating the result."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_ops <= self.max_ops:
            raise ValueError(f"min_ops must be in [1, max_ops={self.max_ops}], got {self.min_ops}")
        if self.max_ops > 12:
            raise ValueError(f"max_ops must be <= 12, got {self.max_ops}")
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        for name in ("n_validation_per_difficulty", "n_test_per_difficulty"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        probs = (
            "trap_prob",
            "slip_prob",
            "check_prob",
            "paren_prob",
            "direct_prob_easy",
            "direct_prob_hard",
            "merged_prob",
        )
        fillers = tuple(f"{kind}_{trait}" for kind in ("restate", "repeat") for trait in VERBOSITY)
        for name in probs + fillers:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name in ("direct_prob_easy", "direct_prob_hard"):
            if getattr(self, name) + self.merged_prob > 1.0:
                raise ValueError(f"{name} + merged_prob must be <= 1, got {getattr(self, name)} + {self.merged_prob}")

    def direct_prob(self, difficulty: int) -> float:
        """Share of bare answers among the teacher's traces at ``difficulty`` operations (linear in it)."""
        if self.max_ops == self.min_ops:
            return self.direct_prob_easy
        t = (min(max(difficulty, self.min_ops), self.max_ops) - self.min_ops) / (self.max_ops - self.min_ops)
        return self.direct_prob_easy + t * (self.direct_prob_hard - self.direct_prob_easy)

    @property
    def difficulties(self) -> tuple[int, ...]:
        return tuple(range(self.min_ops, self.max_ops + 1))


@dataclass(frozen=True)
class Problem:
    """One problem: the prompt the policy sees, the gold answer, and the world's metadata.

    ``group`` is the index i of the first operand of the parenthesised pair ``(operands[i] ops[i]
    operands[i+1])`` on trap prompts (then ``ops[i-1] == "-"``), else None. ``verbosity`` is the problem's
    trait (hidden from the methods; the phrasing of the prompt shows it). Problems of a real dataset have
    no operands and an empty trait.
    """

    prompt: str
    answer: str
    difficulty: int
    key: str
    operands: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()
    group: int | None = None
    verbosity: str = ""

    @property
    def expression(self) -> str:
        return _expression(self.operands, self.ops, self.group)

    @property
    def is_trap(self) -> bool:
        return self.group is not None


def _expression(operands: Sequence[int], ops: Sequence[str], group: int | None) -> str:
    out = str(operands[0])
    for i, (op, x) in enumerate(zip(ops, operands[1:], strict=True), start=1):
        if i == group:
            out += f"{op}({x}"
        elif group is not None and i == group + 1:
            out += f"{op}{x})"
        else:
            out += f"{op}{x}"
    return out


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def _trait(expression: str) -> str:
    """The verbosity trait: a hash of the expression, so independent of the difficulty by construction."""
    h = int(hashlib.sha256(f"verbosity:{expression}".encode()).hexdigest()[:8], 16)
    return VERBOSITY[h % len(VERBOSITY)]


# --------------------------------------------------------------------------------------------- the plan
class _Line(NamedTuple):
    """One necessary line of the right computation: ``left op right``; ``left`` None = the running value."""

    left: int | None
    op: str
    right: int | None  # None = the group's value (the line after the group)


def _plan(operands: Sequence[int], ops: Sequence[str], group: int | None, *, drop_paren: bool = False) -> list[_Line]:
    """The lines of the right computation (or of the dropped-parenthesis misconception), in order."""
    lines: list[_Line] = []
    i = 0
    while i < len(ops):
        if group is not None and not drop_paren and i == group - 1:
            lines.append(_Line(operands[group], ops[group], operands[group + 1]))  # the group first
            lines.append(_Line(None, ops[i], None))  # then value - group
            i += 2
        else:
            lines.append(_Line(None, ops[i], operands[i + 1]))
            i += 1
    return lines


def _evaluate(operands: Sequence[int], ops: Sequence[str], group: int | None, *, drop_paren: bool = False) -> int:
    value, g = operands[0], 0
    for line in _plan(operands, ops, group, drop_paren=drop_paren):
        if line.left is not None:
            g = _apply(line.left, line.op, line.right)  # type: ignore[arg-type]
        else:
            value = _apply(value, line.op, g if line.right is None else line.right)
    return value


def make_problem(operands: Sequence[int], ops: Sequence[str], group: int | None = None) -> Problem:
    """Build a problem from operands, operators and the optional parenthesised pair's index (see ``Problem``)."""
    operands, ops = tuple(int(x) for x in operands), tuple(ops)
    if len(operands) < 2 or len(ops) != len(operands) - 1:
        raise ValueError(f"ops must have len(operands) - 1 = {len(operands) - 1} entries, got {len(ops)}")
    if any(op not in "+-" for op in ops):
        raise ValueError(f"ops must be '+' or '-', got {ops}")
    if any(x < 0 for x in operands):
        raise ValueError(f"operands must be non-negative, got {operands}")
    if group is not None and not (1 <= group <= len(ops) - 1 and ops[group - 1] == "-"):
        raise ValueError(f"group must index a pair after a '-' (1 <= group < {len(ops)}), got {group} for {ops}")
    expr = _expression(operands, ops, group)
    trait = _trait(expr)
    prompt = _PHRASING[trait].format(expr) + "\n"
    answer = str(_evaluate(operands, ops, group))
    return Problem(prompt, answer, len(ops), prompt_key(prompt), operands, ops, group, trait)


def _random_problem(rng: random.Random, cfg: ChainTaskConfig, n_ops: int) -> Problem:
    """A chain of ``n_ops`` operations whose right running value stays in [10, 99] (two digits throughout)."""
    while True:
        group = None
        if n_ops >= 2 and rng.random() < cfg.trap_prob:
            group = rng.randint(1, n_ops - 1)
        value = rng.randint(10, 99)
        operands, ops = [value], []
        ok = True
        i = 0
        while i < n_ops:
            if group is not None and i == group - 1:
                c = rng.randint(1, 9)
                gop = rng.choice("+-")
                d = rng.randint(1, 9) if gop == "+" else rng.randint(1, max(1, c - 1))
                if gop == "-" and d >= c:
                    gop = "+"
                g = _apply(c, gop, d)
                if value - g < 10:
                    ok = False
                    break
                ops += ["-", gop]
                operands += [c, d]
                value -= g
                i += 2
                continue
            x = rng.randint(1, 9)
            choices = [op for op in "+-" if 10 <= _apply(value, op, x) <= 99]
            if not choices:
                ok = False
                break
            op = rng.choice(choices)
            ops.append(op)
            operands.append(x)
            value = _apply(value, op, x)
            i += 1
        if ok:
            return make_problem(operands, ops, group)


class Splits(NamedTuple):
    """Disjoint problem splits: train (warm-up and RL prompts), validation (tuning), test (held out)."""

    train: list[Problem]
    validation: list[Problem]
    test: list[Problem]


def world_splits(cfg: ChainTaskConfig) -> Splits:
    """Seeded train / validation / test problems, pairwise disjoint by prompt.

    Validation and test hold ``n_*_per_difficulty`` problems per difficulty, ordered by difficulty; train
    holds ``n_train`` problems of uniform difficulty.
    """
    rng = random.Random(f"chain-world-{WORLD_VERSION}-{cfg.seed}")
    seen: set[str] = set()

    def draw(n_ops: int, tries: int = 1000) -> Problem | None:
        for _ in range(tries):
            p = _random_problem(rng, cfg, n_ops)
            if p.prompt not in seen:
                seen.add(p.prompt)
                return p
        return None

    held: list[list[Problem]] = []
    for per in (cfg.n_test_per_difficulty, cfg.n_validation_per_difficulty):
        part = [draw(d) for d in cfg.difficulties for _ in range(per)]
        if any(p is None for p in part):
            raise ValueError(f"cannot draw {per} distinct problems per difficulty {cfg.difficulties}")
        held.append(part)  # type: ignore[arg-type]
    train: list[Problem] = []
    while len(train) < cfg.n_train:
        # One operation on a two-digit value allows ~1500 distinct problems: once they are used up, the
        # draw moves on to another difficulty (train is then a little short of one-operation problems).
        p = draw(rng.choice(cfg.difficulties), tries=50)
        if p is not None:
            train.append(p)
    return Splits(train, held[1], held[0])


def make_splits(cfg: ChainTaskConfig) -> tuple[list[Problem], list[Problem]]:
    """(train, test) of ``world_splits`` (the validation split is drawn and left out)."""
    s = world_splits(cfg)
    return s.train, s.test


# ------------------------------------------------------------------------------------------- the teacher
def _carry_or_borrow(a: int, op: str, b: int) -> bool:
    """True when ``a op b`` needs a carry (+) or a borrow (-) in the units column."""
    return (a % 10 + b % 10 >= 10) if op == "+" else (a % 10 < b % 10)


def _slipped(a: int, op: str, b: int) -> int:
    """The result with the carry (into the tens) or the borrow (from the tens) forgotten: 10 off."""
    return a + b - 10 if op == "+" else a - b + 10


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
        lines.append("problem " + problem.expression)
    value, g, first_mode = operands[0], 0, ""
    plan = _plan(operands, ops, group, drop_paren=drop_paren)
    k = 0
    while k < len(plan):
        line = plan[k]
        if drop_paren and group is not None and k == group - 1 and not first_mode:
            first_mode = "parenthesis"  # the line where the group should have come first
        if shortcut == "merged" and line.left is None and line.right is not None and k + 1 < len(plan):
            nxt = plan[k + 1]
            if nxt.left is None and nxt.right is not None:  # two chain steps in one line, no slip
                new = _apply(_apply(value, line.op, line.right), nxt.op, nxt.right)
                lines.append(f"{value}{line.op}{line.right}{nxt.op}{nxt.right}={new}")
                value = new
                if rng.random() < repeat_p:
                    lines.append(f"so {value}")
                k += 2
                continue
        a = value if line.left is None else line.left
        b = (g if line.right is None else line.right) if line.left is None else line.right
        assert b is not None
        right = _apply(a, line.op, b)
        written = right
        risky = _carry_or_borrow(a, line.op, b)
        if risky and shortcut == "none" and rng.random() < slip:
            written = _slipped(a, line.op, b)
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


# ----------------------------------------------------------------------------------------- the labeller
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
    right_plan = _plan(problem.operands, problem.ops, problem.group)
    dropped_plan = _plan(problem.operands, problem.ops, problem.group, drop_paren=True) if problem.is_trap else []
    value, g = problem.operands[0], None
    aligned = True  # the lines still map 1:1 onto the plan (no merged line so far)
    for i, s in enumerate(steps):
        merged = len(s.terms) > 1
        if merged:
            aligned = False
            true = s.left
            for op, x in s.terms:
                true = _apply(true, op, x)
            if true != s.result:
                return "shortcut"
            value = s.result
            continue
        (op, b), a = s.terms[0], s.left
        true = _apply(a, op, b)
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
            if op == "+" and _carry_or_borrow(a, op, b) and s.result == true - 10:
                return "carry"
            if op == "-" and _carry_or_borrow(a, op, b) and s.result == true + 10:
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
