"""The main job, run as its users run it (slow: minutes on 2 cores from an empty cache; the base model ships).

What LEAD does in the world is a finding, not a target (docs/world.md); this test checks that the default run
produces every number the evaluation promises, in the tight regime, with the audited budget.
"""

from __future__ import annotations

import pytest

from dynashape.train.config import RunConfig
from dynashape.train.presets import make_train_config, regime_budget
from dynashape.train.run import train


@pytest.mark.slow
def test_default_lead_run_reports_everything(tmp_path):
    cfg = RunConfig(train=make_train_config("lead"), cache_dir=str(tmp_path / "cache"))
    result = train(cfg, tmp_path / "run", progress=False)
    ev = result.eval
    assert ev is not None
    assert ev["method"] == "lead" and ev["steps"] == cfg.train.steps and ev["regime"] == "tight"
    assert ev["base_model"]["source"] == "shipped" and not ev["base_model"]["trained_now"]  # no warm-up
    assert ev["budget"] == regime_budget("tight") == cfg.train.max_new_tokens
    assert ev["base"]["max_new_tokens"] > regime_budget("loose")  # the evaluation cap sits above both budgets
    for part in ("base", "final"):
        e = ev[part]
        assert 0 <= e["accuracy"] <= 1 and e["mean_length"] > 0
        assert set(e["per_difficulty"]) == {str(d) for d in range(1, 9)}
        assert max(int(k) for k in e["pass_at_k_hard"]) == 64
        assert 0 <= e["shortcut_frac"] <= 1 and 0 <= e["truncated_at_budget"] <= 1
        assert abs(sum(e["error_modes"].values()) - 1) < 1e-9 or e["accuracy"] == 1
    traj = ev["lambda_trajectory"]
    assert len(traj["lambda_l"]) == cfg.train.steps and traj["lambda_l"][0] <= 0.5
    assert (tmp_path / "run" / "report.md").read_text().count("grpo") >= 1
