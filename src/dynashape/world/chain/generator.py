"""Chain problems: drawn from a seed, phrased by their verbosity trait, split into train / validation / test.

A problem is a chain of 1..8 operations (its difficulty) on a two-digit running value: ``47+8-3``, with
one-digit operands, and on *trap* prompts one parenthesised pair after a minus: ``47+8-(6+3)``. Every problem
has a phrasing drawn from a hash of its expression (terse ``47+8-3``, plain ``compute 47+8-3``, chatty
``please work out 47+8-3 step by step``): its verbosity trait (W2), independent of its difficulty by
construction. Everything is generated from a seed (no download); the splits are disjoint by prompt.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from dynashape.meds.keys import prompt_key
from dynashape.world.base import Problem, Splits
from dynashape.world.chain.config import VERBOSITY, WORLD_VERSION, ChainTaskConfig
from dynashape.world.chain.plan import apply_op, evaluate, expression

__all__ = ["make_problem", "world_splits"]

_PHRASING = {"terse": "{}", "plain": "compute {}", "chatty": "please work out {} step by step"}


def _trait(expr: str) -> str:
    """The verbosity trait: a hash of the expression, so independent of the difficulty by construction."""
    h = int(hashlib.sha256(f"verbosity:{expr}".encode()).hexdigest()[:8], 16)
    return VERBOSITY[h % len(VERBOSITY)]


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
    expr = expression(operands, ops, group)
    trait = _trait(expr)
    prompt = _PHRASING[trait].format(expr) + "\n"
    answer = str(evaluate(operands, ops, group))
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
                g = apply_op(c, gop, d)
                if value - g < 10:
                    ok = False
                    break
                ops += ["-", gop]
                operands += [c, d]
                value -= g
                i += 2
                continue
            x = rng.randint(1, 9)
            choices = [op for op in "+-" if 10 <= apply_op(value, op, x) <= 99]
            if not choices:
                ok = False
                break
            op = rng.choice(choices)
            ops.append(op)
            operands.append(x)
            value = apply_op(value, op, x)
            i += 1
        if ok:
            return make_problem(operands, ops, group)


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
