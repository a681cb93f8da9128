"""The toy world: chain arithmetic whose right reasoning length differs per problem.

A problem is ``a op b op c ...`` with 2..6 operands (difficulty = number of operands) and ops ``+``/``-``.
The correct, concise reasoning writes one line per operation with the running result (``47+38=85``) and
ends with ``\\boxed{answer}``. A small model cannot add several numbers in one go, so the steps are
*necessary* on hard problems, while on a 2-operand problem the single step and the answer carry the same
work. On top of that the teacher can write:

* redundant lines (a verbose teacher): restating the problem, re-checking a step by its inverse operation,
  repeating a result. They are true statements that never change the answer. The checks are written after
  steps with a carry or a borrow, so the amount of redundancy differs from problem to problem.
* shortcut traces: the answer with no steps, or two operations merged per line. Right when the teacher
  writes them; tempting for a policy pushed to be short, cheap on easy problems and fatal on hard ones.
* systematic slips: a forgotten carry or a dropped minus sign at the first step where one can happen. The
  same problem gives the same wrong value every time: the recurring errors MEDS remembers.

Everything is generated from a seed (no download). Train and held-out test problems are disjoint.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dynashape.meds.keys import prompt_key

__all__ = [
    "TRACE_STYLES",
    "ChainTaskConfig",
    "Problem",
    "make_problem",
    "make_splits",
    "teacher_trace",
]

TRACE_STYLES: tuple[str, ...] = ("concise", "verbose", "direct", "merged", "slip")


@dataclass(frozen=True, kw_only=True)
class ChainTaskConfig:
    """Parameters of the toy task; the task's identity (it keys the cached base model)."""

    min_operands: int = 2
    """Fewest operands of a problem (difficulty 2 = one operation)."""
    max_operands: int = 6
    """Most operands of a problem."""
    max_digits: int = 1
    """Operands have 1..max_digits digits (uniform over the digit count, then over the numbers). One digit by
    default: a 0.8M model warmed up for minutes learns single-digit steps on running sums (two-digit operands
    gave ~0 % held-out accuracy after 400 warm-up steps)."""
    n_train: int = 20000
    """Distinct training problems (warm-up and RL prompts)."""
    n_test_per_difficulty: int = 40
    """Held-out problems per difficulty level (disjoint from train)."""
    seed: int = 0
    """Seed of problem generation and of the teacher's choices."""
    verbose_prob: float = 0.85
    """Share of (non-shortcut, non-slip) teacher traces that are verbose. At the defaults the concise trace is
    ~60 % of the teacher mix's mean length (31.8 vs 52.9 characters): redundancy the policy can remove."""
    restate_prob: float = 0.7
    """In a verbose trace: probability of restating the problem first."""
    check_prob: float = 0.9
    """In a verbose trace: probability of re-checking a step that had a carry or a borrow."""
    repeat_prob: float = 0.5
    """In a verbose trace: probability of repeating the result after a step (``so 85``)."""
    shortcut_prob: float = 0.15
    """Share of teacher traces that take a shortcut (half direct answer, half merged steps)."""
    slip_prob: float = 0.1
    """Share of teacher traces that make the problem's systematic slip (a wrong answer)."""

    def __post_init__(self) -> None:
        if not 2 <= self.min_operands <= self.max_operands:
            raise ValueError(f"min_operands must be in [2, max_operands={self.max_operands}], got {self.min_operands}")
        if self.max_operands > 12:
            raise ValueError(f"max_operands must be <= 12, got {self.max_operands}")
        if not 1 <= self.max_digits <= 4:
            raise ValueError(f"max_digits must be in [1, 4], got {self.max_digits}")
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        if self.n_test_per_difficulty < 1:
            raise ValueError(f"n_test_per_difficulty must be >= 1, got {self.n_test_per_difficulty}")
        for name in ("verbose_prob", "restate_prob", "check_prob", "repeat_prob", "shortcut_prob", "slip_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.shortcut_prob + self.slip_prob > 1.0:
            raise ValueError(f"shortcut_prob + slip_prob must be <= 1, got {self.shortcut_prob} + {self.slip_prob}")

    @property
    def difficulties(self) -> tuple[int, ...]:
        return tuple(range(self.min_operands, self.max_operands + 1))


@dataclass(frozen=True)
class Problem:
    """One problem: the prompt text the policy sees and the gold answer the verifier checks."""

    prompt: str
    answer: str
    difficulty: int
    key: str
    operands: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()


def _expression(operands: tuple[int, ...], ops: tuple[str, ...]) -> str:
    return str(operands[0]) + "".join(op + str(x) for op, x in zip(ops, operands[1:], strict=True))


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def make_problem(operands: tuple[int, ...], ops: tuple[str, ...]) -> Problem:
    """Build a problem from its operands and operators (``len(ops) == len(operands) - 1``)."""
    if len(operands) < 2 or len(ops) != len(operands) - 1:
        raise ValueError(f"ops must have len(operands) - 1 = {len(operands) - 1} entries, got {len(ops)}")
    if any(op not in "+-" for op in ops):
        raise ValueError(f"ops must be '+' or '-', got {ops}")
    if any(x < 0 for x in operands):
        raise ValueError(f"operands must be non-negative, got {operands}")
    value = operands[0]
    for op, x in zip(ops, operands[1:], strict=True):
        value = _apply(value, op, x)
    expr = _expression(operands, ops)
    prompt = expr + "\n"
    return Problem(prompt, str(value), len(operands), prompt_key(prompt), tuple(operands), tuple(ops))


def _random_operand(rng: random.Random, max_digits: int) -> int:
    digits = rng.randint(1, max_digits)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def _random_problem(rng: random.Random, cfg: ChainTaskConfig, n_operands: int) -> Problem:
    operands = tuple(_random_operand(rng, cfg.max_digits) for _ in range(n_operands))
    ops = tuple(rng.choice("+-") for _ in range(n_operands - 1))
    return make_problem(operands, ops)


def make_splits(cfg: ChainTaskConfig) -> tuple[list[Problem], list[Problem]]:
    """Seeded train / held-out test problems; test is balanced over difficulties and disjoint from train.

    Returns:
        (train, test): ``n_train`` problems with uniform difficulty, and ``n_test_per_difficulty`` problems
        per difficulty, ordered by difficulty.
    """
    rng = random.Random(f"chain-task-{cfg.seed}")
    test: list[Problem] = []
    seen: set[str] = set()
    for d in cfg.difficulties:
        count, attempts = 0, 0
        while count < cfg.n_test_per_difficulty:
            p = _random_problem(rng, cfg, d)
            attempts += 1
            if p.prompt in seen and attempts < 100 * cfg.n_test_per_difficulty:
                continue  # tiny problem spaces (1 digit, 2 operands) may not hold enough distinct problems
            seen.add(p.prompt)
            test.append(p)
            count += 1
    train: list[Problem] = []
    attempts = 0
    while len(train) < cfg.n_train:
        p = _random_problem(rng, cfg, rng.choice(cfg.difficulties))
        attempts += 1
        if p.prompt in seen and attempts < 100 * cfg.n_train:
            continue
        seen.add(p.prompt)
        train.append(p)
    return train, test


# ---------------------------------------------------------------------------------------------------------
# The teacher
# ---------------------------------------------------------------------------------------------------------


def _has_carry_or_borrow(a: int, op: str, b: int) -> bool:
    """True when the step a op b needs a carry (+) or a borrow / sign change (-) digit by digit."""
    if op == "-" and (b > a or a < 0):
        return True
    x, y = abs(a), b
    while x or y:
        dx, dy = x % 10, y % 10
        if (op == "+" and a >= 0 and dx + dy >= 10) or (op == "-" and dx < dy):
            return True
        x, y = x // 10, y // 10
    return False


def _slip(a: int, op: str, b: int) -> int | None:
    """The systematic wrong result of a op b, or None when no slip applies.

    A forgotten carry: add digit by digit modulo 10 (47+38 -> 75). A dropped sign: a - b with b > a >= 0
    written as b - a (12-47 -> 35). Deterministic, so the same problem slips the same way every time.
    """
    if op == "+" and a >= 0:
        x, y, out, place = a, b, 0, 1
        while x or y:
            out += ((x % 10 + y % 10) % 10) * place
            x, y, place = x // 10, y // 10, place * 10
        return out if out != a + b else None
    if op == "-" and 0 <= a < b:
        return b - a
    return None


def teacher_trace(problem: Problem, style: str, rng: random.Random, cfg: ChainTaskConfig) -> str:
    """A response for ``problem`` written in ``style`` (one of TRACE_STYLES), ending in ``\\boxed{}``.

    All styles but ``slip`` end in the gold answer; ``slip`` makes the problem's first possible systematic
    slip and carries the wrong value on (when no slip is possible it writes the concise trace). Redundant
    lines of ``verbose`` are true statements that never alter a step.
    """
    if style not in TRACE_STYLES:
        raise ValueError(f"style must be one of {TRACE_STYLES}, got {style!r}")
    if not problem.operands:
        raise ValueError("teacher_trace needs a toy problem with operands")
    operands, ops = problem.operands, problem.ops
    if style == "direct":
        return f"\\boxed{{{problem.answer}}}"
    lines: list[str] = []
    if style == "merged":
        value, i = operands[0], 0
        while i < len(ops):
            j = min(i + 2, len(ops))
            new = value
            for k in range(i, j):
                new = _apply(new, ops[k], operands[k + 1])
            chunk = "".join(ops[k] + str(operands[k + 1]) for k in range(i, j))
            lines.append(f"{value}{chunk}={new}")
            value, i = new, j
        return "\n".join([*lines, f"\\boxed{{{value}}}"])
    verbose = style == "verbose"
    slipped = style != "slip"  # once True no (further) slip is made
    if verbose and rng.random() < cfg.restate_prob:
        lines.append("problem " + problem.prompt.strip())
    value = operands[0]
    for op, x in zip(ops, operands[1:], strict=True):
        result = _apply(value, op, x)
        if not slipped:
            wrong = _slip(value, op, x)
            if wrong is not None:
                result, slipped = wrong, True
        lines.append(f"{value}{op}{x}={result}")
        if verbose and _has_carry_or_borrow(value, op, x) and rng.random() < cfg.check_prob:
            inverse = "-" if op == "+" else "+"
            lines.append(f"check {result}{inverse}{x}={value}")
        if verbose and rng.random() < cfg.repeat_prob:
            lines.append(f"so {result}")
        value = result
    return "\n".join([*lines, f"\\boxed{{{value}}}"])


def sample_style(rng: random.Random, cfg: ChainTaskConfig) -> str:
    """Draw the teacher's style for one trace from the configured mix."""
    u = rng.random()
    if u < cfg.slip_prob:
        return "slip"
    if u < cfg.slip_prob + cfg.shortcut_prob:
        return "direct" if rng.random() < 0.5 else "merged"
    return "verbose" if rng.random() < cfg.verbose_prob else "concise"
