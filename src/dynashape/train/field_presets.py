"""The field's length methods as presets, their parameters carried from each paper's own setting by stated rules.

Every field preset shares the other presets' training (base model, seed, prompts per step, group size, steps,
learning rate, clip, no KL); only what the method itself changes differs. The rules, at training budget
B = ``max_new_tokens`` of the regime:

* a length (cap, target, budget, grid point) is the same fraction of B as of the paper's own training maximum
  response length P: round_half_up(value x B / P);
* a per-token coefficient keeps its scale against the correctness reward: coef x P / B;
* dimensionless values (bonuses, thresholds, accuracies, exponents, counts, step periods) stay.

P and the values, from the official code:

| method | P | paper -> here |
|---|---|---|
| l1_exact | 4096 | budgets randint(100, 4000) in the prompt; alpha 3e-4; evaluated at 512, 1024, 2048, 3600 |
| l1_max | 4500 | as l1_exact over P = 4500, "maximum" prompts; alpha 3e-4 (its script sets none: Exact's) |
| thinkprune | 4000 | caps 4000 -> 3000 -> 2000, one round per third of the run (steps per round unpublished) |
| laser | 16384 | L_T 4096, alpha 0.5 |
| laser_d | 16384 | grid 4096..16384 by 1024, initial 4096, refresh 20, n 8; monitor: the validation split |
| dler | 4000 | L = 4000 = P; its recipe's dynamic sampling (`filter_groups`) on |
| alp | 16384 (unconfirmed) | beta/N 1e-7 per token (a secondary reading; the paper's value was not checked) |
| adlp | 8192 | lambda0 1e-3 and eta 1e-3 per token, acc_ref 0.62 |
| aalc | 3072 | L_max 1024; beta 128, c 1e-6, A_target 1; validation every 10 steps |
| saw | - | grpo-h over correctness and the GDPO preset's length channel (T = B / 2); eps 1e-8, offset +3 |
| gfpo | - | G 16, keep the 8 shortest (the paper's Shortest 8/16 against GRPO's G 8) |

P's sources: `run_l1_exact.sh`, `run_l1_max.sh` (cmu-l3/l1), `multi_node_run_4k.sh` (ThinkPrune),
`laser-1.5b-l4096.sh` and `laser-d-1.5b-l4096.sh` (Laser), `dler_slurm.sh` (DLER), `scripts/train.sh` (A-DLP),
`train_grpo_math_LR.sh` (AALC), at the commits docs/field-methods.md names.

What does not carry over, said once here: the papers' KL terms (every preset trains without one), L1-Max's
start from an L1-Exact checkpoint and its 50/50 mix of exact and maximum prompts (here all "maximum"), DLER's
KL loss and batch of 512, SAW's format channel (the toy has none: the length channel stands in), and LASER-D's
500 monitor prompts drawn from the training data (here the validation split).
"""

from __future__ import annotations

import math
from typing import Any

from dynashape.train.config import TrainConfig

__all__ = ["EARLIER_FORMS", "FIELD_METHODS", "FIELD_SEEDS", "L1_EVAL_BUDGETS", "field_table", "scaled_length"]

#: The forms the committed field comparison (docs/results-field.md) trained, pinned so that its runs replay: the
#: 0/1 base score for LASER and LASER-D, DLER without the stop-properly multiplier and the advantage boost, and
#: AALC's reward in float64 (its official float32 arithmetic is now the default). GFPO's kept set under ties is
#: torch.topk's now and has no switch back: its committed rows kept the earlier row of a tie.
#: The shapers' defaults now follow the official code (docs/field-methods.md); a comparison of those forms is a new
#: study, not a replay of this one.
_AS_COMPARED: dict[str, dict[str, Any]] = {
    "laser": {"base": "binary"},
    "laser_d": {"base": "binary"},
    "dler": {"stop_properly_coef": None, "correct_boost": 0.0},
    "aalc": {"precision": "float64"},
}
EARLIER_FORMS: dict[str, tuple[dict[str, Any], str, str]] = {
    # preset -> (shaper_kwargs the committed field rows ran, absent keys counting as these: the runs' code predates
    # them; what that form is; what the shaper's default is now, docs/field-methods.md); the field page's caveats
    "laser": (_AS_COMPARED["laser"], "the paper's 0/1 base score",
              "the official code's 1 / -0.5 / -1 with its format check"),
    "laser_d": (_AS_COMPARED["laser_d"], "the paper's 0/1 base score",
                "the official code's 1 / -0.5 / -1 with its format check"),
    "dler": (_AS_COMPARED["dler"], "the form without the 0.1 multiplier on a cut response and the advantage boost",
             "the official run's multiplier 0.1 and boost 0.1"),
    "aalc": (_AS_COMPARED["aalc"], "the reward in float64 (the formula unrounded)",
             "the official float32 arithmetic"),
    "saw": ({"correctness_column": None}, "the 0/1 verdict as channel 0 (the documented fallback; this world has no "
            "graded correctness)", "ToolRL's graded correctness in [-3, 3] when a batch carries it"),
    "gfpo": ({}, "the earlier tie handling, the earlier row kept among equal lengths (no config key records it)",
             "torch.topk's kept set, ties included"),
}  # fmt: skip

FIELD_METHODS: tuple[str, ...] = (
    "l1_exact", "l1_max", "thinkprune", "laser", "laser_d", "dler", "alp", "adlp", "aalc", "saw", "gfpo",
)  # fmt: skip
FIELD_SEEDS: tuple[int, ...] = (5, 6, 7, 8, 9)
"""The field comparison's seeds: the follow-up's first five, so each run pairs with its GRPO and LEAD runs."""
L1_EVAL_BUDGETS: tuple[int, ...] = (512, 1024, 2048, 3600)
"""The budgets L1 evaluates at (cmu-l3/l1 ``scripts/replicate/eval_inference_exact.sh``)."""


def scaled_length(value: float, paper_max: int, budget: int) -> int:
    """``value`` tokens of a paper whose training maximum response length is ``paper_max``, as the same fraction
    of ``budget``: round half up (50.5 -> 51), at least 1."""
    return max(1, math.floor(value * budget / paper_max + 0.5))


def _l1(budget: int, paper_max: int, form: str) -> dict[str, Any]:
    return {
        "enabled": True,
        "form": form,
        "low": scaled_length(100, paper_max, budget),
        "high": scaled_length(4000, paper_max, budget),
        "eval_budgets": tuple(scaled_length(b, paper_max, budget) for b in L1_EVAL_BUDGETS),
    }


def field_table(budget: int, steps: int | None = None) -> dict[str, dict[str, Any]]:
    """The field presets' ``TrainConfig`` fields at training budget ``budget`` (and run length ``steps``, the
    default run's when None; ThinkPrune's rounds are thirds of it). See the module docstring for the rules."""
    steps = TrainConfig().steps if steps is None else steps
    b = budget
    grid = sorted({scaled_length(g, 16384, b) for g in range(4096, 16384 + 1, 1024)})
    return {
        "l1_exact": {
            "shaper": "l1_exact",
            "shaper_kwargs": {"alpha": 3e-4 * 4096 / b},
            "budget_prompt": _l1(b, 4096, "exact"),
        },
        "l1_max": {
            "shaper": "l1_max",
            "shaper_kwargs": {"alpha": 3e-4 * 4500 / b, "delta": 0.5},
            "budget_prompt": _l1(b, 4500, "maximum"),
        },
        "thinkprune": {
            "shaper": "thinkprune",
            "shaper_kwargs": {
                "max_length": scaled_length(4000, 4000, b),
                "schedule": (
                    (steps // 3, scaled_length(3000, 4000, b)),
                    (2 * steps // 3, scaled_length(2000, 4000, b)),
                ),
            },
        },
        "laser": {
            "shaper": "laser",
            "shaper_kwargs": {"alpha": 0.5, "target_length": scaled_length(4096, 16384, b), **_AS_COMPARED["laser"]},
        },
        "laser_d": {
            "shaper": "laser_d",
            "shaper_kwargs": {
                "alpha": 0.5,
                "initial_target": scaled_length(4096, 16384, b),
                "grid": tuple(grid),
                "refresh_every": 20,
                "n_rollout": 8,
                **_AS_COMPARED["laser_d"],
            },
        },
        "dler": {
            "shaper": "dler",
            "shaper_kwargs": {"max_length": scaled_length(4000, 4000, b), **_AS_COMPARED["dler"]},
            "dynamic_sampling": True,
        },
        "alp": {"shaper": "alp", "shaper_kwargs": {"beta": 1e-7 * 16384 / b}},
        "adlp": {
            "shaper": "adlp",
            "shaper_kwargs": {"lambda0": 1e-3 * 8192 / b, "eta": 1e-3 * 8192 / b, "acc_ref": 0.62},
        },
        "aalc": {
            "shaper": "aalc",
            "shaper_kwargs": {
                "l_max": scaled_length(1024, 3072, b),
                "beta": 128,
                "c": 1e-6,
                "a_target": 1.0,
                **_AS_COMPARED["aalc"],
            },
            "validation_every": 10,
        },
        "saw": {
            "shaper": "saw",
            "reward_columns": ("correct_short",),
            "length_threshold": b // 2,
            "shaper_kwargs": {"mode": "grpo"},
        },
        "gfpo": {"shaper": "gfpo", "group_size": 16, "shaper_kwargs": {"keep": 8, "by": "length"}},
    }
