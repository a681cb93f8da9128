"""The main job's claim, measured on the default run (slow: minutes on 2 cores).

On the held-out split the lead preset's final mean length is at most 70 % of the base model's, its accuracy
at least the base's minus 2 points, and lambda_l falls from 0.5 over training.
"""

from __future__ import annotations

import pytest

from dynashape.train.config import RunConfig
from dynashape.train.presets import make_train_config
from dynashape.train.run import train


@pytest.mark.slow
def test_default_lead_run_meets_targets(tmp_path):
    cfg = RunConfig(train=make_train_config("lead"), cache_dir=str(tmp_path / "cache"))
    result = train(cfg, tmp_path / "run", progress=False)
    ev = result.eval
    assert ev is not None
    base, final = ev["base"], ev["final"]
    assert final["mean_length"] <= 0.70 * base["mean_length"], (final["mean_length"], base["mean_length"])
    assert final["accuracy"] >= base["accuracy"] - 0.02, (final["accuracy"], base["accuracy"])
    lam = [m["lead/lambda_l"] for m in result.metrics if "lead/lambda_l" in m]
    assert lam[0] <= 0.5
    assert sum(lam[-10:]) / 10 < lam[0], "lambda_l falls over training"
