"""Does a base model tolerate a budget prompt? Its accuracy and length on plain and on budget prompts.

    python scripts/budget_base_audit.py --base budget [--samples 8] [--out runs/budget-audit/budget.json]

Samples the named shipped base (``dynashape.train.warmup.BASES``; loaded as ``dynashape train`` loads it) ``samples``
times on each validation problem at the audit's cap, temperature and seed (``EvalConfig``, as ``dynashape audit``),
once with the plain prompts and once with each prompt naming a budget in L1's words (``world.budget_prompts``):
the budget uniform on 2..160, the union of the ranges L1's presets draw from in both regimes, drawn per problem
(``draw_budget``, seed 0), the form exact or maximum by a hash of the problem. The same sampling seed serves both, so
the two are paired by problem. Reports accuracy and mean length of each with their standard errors over problems
(per-problem means, sd / sqrt(problems)), and the paired differences (budget - plain) with theirs: a base that
tolerates the budget has differences within noise (|difference| < 2 standard errors).
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

BUDGET_LOW, BUDGET_HIGH = 2, 160
"""The budgets the audit's prompts name: ``WarmupConfig``'s default budget range (L1's presets, both regimes)."""


def budget_prompts(problems: list[Any]) -> list[Any]:
    """Each problem naming its own budget: ``draw_budget`` on 2..160 with seed 0, the form by a hash of its key."""
    from dynashape.world.budget_prompts import draw_budget, with_budget

    return [
        with_budget(
            p,
            draw_budget(p.key, low=BUDGET_LOW, high=BUDGET_HIGH, seed=0),
            random.Random(f"form:{p.key}").choice(("exact", "maximum")),
        )
        for p in problems
    ]


def _mean_se(per_problem: np.ndarray) -> dict[str, float]:
    """Mean and standard error (Bessel sd / sqrt n) of per-problem values [P]."""
    return {"mean": float(per_problem.mean()), "se": float(per_problem.std(ddof=1) / np.sqrt(len(per_problem)))}


def compare(plain: Any, budget: Any, n: int) -> dict[str, Any]:
    """Accuracy and length of two ``Samples`` of the same problems (problem-major, ``n`` draws each) and their paired
    differences (budget - plain), each with its standard error over problems."""
    out: dict[str, Any] = {"problems": len(plain.problems) // n, "samples": n}
    for name in ("correct", "lengths"):
        a = getattr(plain, name).astype(float).reshape(-1, n).mean(1)  # [P] per-problem means
        b = getattr(budget, name).astype(float).reshape(-1, n).mean(1)
        key = "accuracy" if name == "correct" else "mean_length"
        out[key] = {"plain": _mean_se(a), "budget": _mean_se(b), "budget_minus_plain": _mean_se(b - a)}
    return out


def audit(base: str, *, samples: int = 8, verifier: Any = None, cfg: Any = None) -> dict[str, Any]:
    """The audit of the shipped base ``base`` (or of ``cfg``'s base, tests) on plain and on budget prompts."""
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import load_base
    from dynashape.train.config import RunConfig
    from dynashape.train.evaluation import sample_responses
    from dynashape.train.warmup import BASES

    cfg = cfg or RunConfig(warmup=BASES[base])
    loaded = load_base(cfg)
    validation = loaded.world.split("validation")
    runs = {}
    with MathVerifier(timeout=5.0, workers=1) if verifier is None else contextlib.nullcontext(verifier) as judge:
        for kind, problems in (("plain", validation), ("budget", budget_prompts(validation))):
            runs[kind] = sample_responses(
                loaded.model,
                loaded.tokenizer,
                problems,
                judge,
                n=samples,
                max_new_tokens=cfg.eval.max_new_tokens,
                temperature=cfg.eval.temperature,
                seed=cfg.eval.seed,
                batch_size=cfg.eval.batch_size,
            )
    return {"base": base, "base_model": loaded.meta, **compare(runs["plain"], runs["budget"], samples)}


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="budget")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    result = audit(args.base, samples=args.samples)
    text = json.dumps(result, indent=1)
    if args.out:
        from dynashape.io import state

        state.make_folder(Path(args.out).parent)
        state.write_text(Path(args.out), text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
