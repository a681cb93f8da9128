"""A user's new method (tests/user_recipe.py: one recipe, 15 lines) as a verl advantage estimator, with the
real verl: registered by the plugin's ``register()`` and equal to the core shaper on verl's batch.

Run in the verl test environment (requirements/verl.txt, ci/integration.sh verl); skipped elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

verl = pytest.importorskip("verl")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations import verl as plugin  # noqa: E402
from dynashape.shapers import registry  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_verl_engine import make_data, run_verl  # noqa: E402

from user_recipe import register_lead_saw  # noqa: E402


def test_a_users_recipe_is_a_verl_estimator_equal_to_the_core_shaper(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    register_lead_saw()
    assert "lead_saw" not in core_algos.ADV_ESTIMATOR_REGISTRY
    assert "lead_saw" in plugin.register()  # the plugin reads the shaper registry on every call
    section = {"l_min": 5.0, "b_max": 40.0, "whiten": "sequence"}
    core = get_shaper("lead_saw", **section)
    for step in range(2):
        data, truth = make_data(seed=step)
        mask = data.batch["response_mask"].clone()
        out = run_verl(data, "lead_saw", section)
        expected = core(RolloutBatch(**truth)).advantages
        torch.testing.assert_close(out.batch["advantages"], expected[:, None] * mask, rtol=0, atol=0)
    with pytest.raises(Exception, match="lambda_min"):  # a key the recipe does not take is refused by name
        run_verl(make_data(seed=0)[0], "lead_saw", {**section, "lambda_min": 0.9})
