"""Prompts that name a token budget, as L1 trains with ("... Think for N tokens."): any world's problems.

L1 (arXiv 2503.04697) appends the budget to the instruction of every training prompt and draws it once per
problem, uniformly among the integers 100..4000 (cmu-l3/l1 at 93dd330, ``scripts/data/deepscaler_dataset.py``:
``random.randint(100, 4000)``, " Think for {n} tokens." for L1-Exact and " Think for maximum {n} tokens." for
L1-Max). Here the draw is a pure function of the seed and the problem's key, so a problem keeps its budget
across epochs, processes and a resume, as a dataset column would. Held-out prompts name one fixed budget, as
L1's evaluation does, or none.

The budget goes before the prompt's trailing newline (the chain world's prompts end with one; the policy's
response starts on the next line). The problem's key is recomputed from the new text: a prompt that names a
budget is a different prompt (MEDS keys its memory by the prompt).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Literal

from dynashape.meds.keys import prompt_key
from dynashape.world.base import Problem

__all__ = ["BUDGET_FORMS", "BudgetForm", "draw_budget", "with_budget", "with_drawn_budgets"]

BudgetForm = Literal["exact", "maximum"]
BUDGET_FORMS: dict[str, str] = {
    "exact": " Think for {budget} tokens.",
    "maximum": " Think for maximum {budget} tokens.",
}
"""L1's two instructions, by the form of the budget: an exact length (L1-Exact) or a cap (L1-Max)."""


def draw_budget(key: str, *, low: int, high: int, seed: int) -> int:
    """The budget of the problem keyed ``key``: uniform on the integers low..high, fixed by (seed, key)."""
    if not 1 <= low <= high:
        raise ValueError(f"budget range must satisfy 1 <= low <= high, got low={low}, high={high}")
    # a string seed is hashed with SHA-512 by random.Random: the same draw in every process and Python run
    return random.Random(f"budget:{seed}:{key}").randint(low, high)


def with_budget(problem: Problem, budget: int, form: BudgetForm = "exact") -> Problem:
    """``problem`` whose prompt names ``budget`` tokens in L1's words (``BUDGET_FORMS[form]``)."""
    if form not in BUDGET_FORMS:
        raise ValueError(f"form must be one of {tuple(BUDGET_FORMS)}, got {form!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an integer >= 1, got {budget!r}")
    if problem.budget is not None:
        raise ValueError(f"problem {problem.key} already names a budget ({problem.budget} tokens)")
    body = problem.prompt.rstrip("\n")
    prompt = body + BUDGET_FORMS[form].format(budget=budget) + problem.prompt[len(body) :]
    return dataclasses.replace(problem, prompt=prompt, key=prompt_key(prompt), budget=budget)


def with_drawn_budgets(
    problems: Sequence[Problem], *, low: int, high: int, seed: int, form: BudgetForm = "exact"
) -> list[Problem]:
    """Each problem with its own budget drawn by ``draw_budget`` (the training prompts of an L1 run)."""
    return [with_budget(p, draw_budget(p.key, low=low, high=high, seed=seed), form) for p in problems]
