"""The field presets: each paper's values carried to the toy budgets by the stated rules, worked out by hand.

B = 101 (tight) and 164 (loose). Lengths: round_half_up(value x B / P); per-token coefficients: coef x P / B
(given to 3 significant digits here, hence the 0.5 % tolerance).
"""

from __future__ import annotations

import pytest

from dynashape.train.field_presets import FIELD_METHODS, field_table, scaled_length
from dynashape.train.presets import PRESETS, make_train_config, preset_values


def test_lengths_round_half_up_and_never_reach_zero():
    assert scaled_length(8192, 16384, 101) == 51  # 50.5
    assert scaled_length(2048, 16384, 164) == 21  # 20.5
    assert scaled_length(2000, 4000, 101) == 51  # 50.5
    assert scaled_length(100, 4096, 101) == 2  # 2.47
    assert scaled_length(1, 16384, 101) == 1  # 0.006, kept at one token


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (
            101,
            {
                "l1_exact": (
                    2,
                    99,
                    (13, 25, 51, 89),
                    0.0122,
                ),  # 100 * 101 / 4096 = 2.47; 3600 -> 88.8
                "l1_max": (2, 90, (11, 23, 46, 81), 0.0134),  # over P = 4500: 4000 -> 89.8; 3e-4 * 4500 / 101
                "thinkprune": (101, ((16, 76), (33, 51))),  # 3000 -> 75.75, 2000 -> 50.5; thirds of 50 steps
                "laser": 25,  # 4096 / 16384 = 1/4 of 101 = 25.25
                "laser_d": (25, 101, 13),  # 4096..16384 by 1024: 13 points, from B/4 to B
                "adlp": 0.0811,  # 1e-3 * 8192 / 101
                "aalc": 34,  # 1024 / 3072 = 1/3 of 101 = 33.7
                "alp": 1.62e-5,  # 1e-7 * 16384 / 101
                "saw": 50,
            },
        ),
        (
            164,
            {
                "l1_exact": (4, 160, (21, 41, 82, 144), 0.00749),  # 20.5 -> 21; 3600 -> 144.1
                "l1_max": (4, 146, (19, 37, 75, 131), 0.00823),
                "thinkprune": (164, ((16, 123), (33, 82))),
                "laser": 41,
                "laser_d": (41, 164, 13),
                "adlp": 0.0500,
                "aalc": 55,  # 54.7
                "alp": 9.99e-6,
                "saw": 82,
            },
        ),
    ],
)
def test_each_paper_value_lands_where_the_rule_puts_it(budget, expected):
    t = field_table(budget, steps=50)
    for name in ("l1_exact", "l1_max"):
        low, high, evals, alpha = expected[name]
        bp = t[name]["budget_prompt"]
        assert (bp["low"], bp["high"], bp["eval_budgets"]) == (low, high, evals), name
        assert t[name]["shaper_kwargs"]["alpha"] == pytest.approx(alpha, rel=5e-3), name
    assert t["l1_exact"]["budget_prompt"]["form"] == "exact" and t["l1_max"]["budget_prompt"]["form"] == "maximum"
    cap, schedule = expected["thinkprune"]
    assert t["thinkprune"]["shaper_kwargs"] == {"max_length": cap, "schedule": schedule}
    # the committed comparison's forms, pinned (the shapers' defaults are now the official ones)
    assert t["laser"]["shaper_kwargs"] == {"alpha": 0.5, "target_length": expected["laser"], "base": "binary"}
    assert t["laser_d"]["shaper_kwargs"]["base"] == "binary"
    assert t["dler"]["shaper_kwargs"]["stop_properly_coef"] is None and t["dler"]["shaper_kwargs"]["correct_boost"] == 0
    first, last, count = expected["laser_d"]
    grid = t["laser_d"]["shaper_kwargs"]["grid"]
    assert (grid[0], grid[-1], len(grid)) == (first, last, count)
    assert t["laser_d"]["shaper_kwargs"]["initial_target"] == first
    assert (t["laser_d"]["shaper_kwargs"]["refresh_every"], t["laser_d"]["shaper_kwargs"]["n_rollout"]) == (20, 8)
    assert t["dler"]["shaper_kwargs"]["max_length"] == budget and t["dler"]["dynamic_sampling"] is True
    adlp = t["adlp"]["shaper_kwargs"]
    assert adlp["lambda0"] == pytest.approx(expected["adlp"], rel=5e-3) == adlp["eta"] and adlp["acc_ref"] == 0.62
    assert t["aalc"]["shaper_kwargs"]["l_max"] == expected["aalc"] and t["aalc"]["validation_every"] == 10
    assert t["alp"]["shaper_kwargs"]["beta"] == pytest.approx(expected["alp"], rel=5e-3)
    assert t["saw"]["length_threshold"] == expected["saw"] and t["saw"]["reward_columns"] == ("correct_short",)
    assert t["gfpo"]["group_size"] == 16 and t["gfpo"]["shaper_kwargs"] == {"keep": 8, "by": "length"}


@pytest.mark.parametrize("regime", ["tight", "loose"])
@pytest.mark.parametrize("method", FIELD_METHODS)
def test_every_field_preset_is_a_valid_config_in_both_regimes(method, regime):
    assert method in PRESETS
    cfg = make_train_config(method, regime=regime)
    assert cfg.shaper == method and cfg.method == method
    # only what the method changes differs from the shared training of the other presets
    shared = make_train_config("grpo", regime=regime)
    for name in ("prompts_per_step", "steps", "lr", "kl_coef", "eps_low", "eps_high", "seed", "max_new_tokens"):
        assert getattr(cfg, name) == getattr(shared, name), (method, name)
    assert cfg.max_new_tokens == preset_values(method, cfg.max_new_tokens)["max_new_tokens"]


def test_the_field_plan_registers_every_method_in_both_regimes_at_the_followups_seeds_and_evaluation():

    from dynashape.study.compare import COMPARISON_PLAN, run_comparison

    plan = COMPARISON_PLAN["field"]
    assert dict(plan.rows) == {"tight": FIELD_METHODS, "loose": FIELD_METHODS} and len(FIELD_METHODS) == 11
    assert plan.seeds == (5, 6, 7, 8, 9) == COMPARISON_PLAN["v2"].seeds[:5]  # paired with the follow-up's GRPO and LEAD
    assert dict(plan.eval) == dict(COMPARISON_PLAN["v2"].eval) and plan.eval["n_samples"] == 16
    assert not plan.tune and not plan.fixed and not plan.row_seeds  # the presets as stated, never tuned
    lines: list[str] = []
    out = run_comparison(
        "unused", rows=plan.rows, seeds=plan.seeds, template=None, workers=2, tune=plan.tune,  # type: ignore[arg-type]
        row_seeds=plan.row_seeds, fixed=plan.fixed, log=lines.append, dry_run=True,
    )  # fmt: skip
    assert out["expected"] == 110 and sum(line.startswith("run ") for line in lines) == 110
    assert "run laser_d loose seed 9 -> runs/loose/laser_d-seed9" in lines
    assert not any("(tuning)" in line for line in lines)
