"""A user's new method (tests/user_recipe.py: one recipe, 15 lines) in ShapedGRPOTrainer with the real TRL:
two steps with the advantages the core shaper gives on the batches TRL built.

Run in the TRL test environment (requirements/trl.txt, ci/integration.sh trl); skipped elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from dynashape import get_shaper
from dynashape.shapers import registry

sys.path.insert(0, str(Path(__file__).parent))
from test_trl_field import assert_used, make_trainer, replay

from user_recipe import register_lead_saw


def test_a_users_recipe_trains_in_trl_with_its_own_advantages(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register_lead_saw()
    params = {"l_min": 2.0, "b_max": 8.0}
    trainer, _ = make_trainer(tmp_path, get_shaper("lead_saw", **params), max_steps=2)
    trainer.train()
    assert len(trainer.shaper.seen) == 2
    assert_used(trainer, replay(get_shaper("lead_saw", **params), trainer.shaper.seen))
