"""The field page's caveats choose their rows by what a run declares (its config.yaml's shaper and that shaper's
needs, its dynamic sampling), never by a method's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynashape.study.caveats import _sampling_control, reads


def _ref(**train) -> dict:
    return {"config": {"train": train}, "dir": Path("/nowhere"), "eval": {}}


def test_a_run_reads_what_its_shaper_declares():
    assert reads(_ref(shaper="l1_max"), "budgets") and reads(_ref(shaper="l1_exact"), "budgets")
    assert not reads(_ref(shaper="grpo"), "budgets")
    assert reads(_ref(shaper="aalc"), "validation_accuracy") and not reads(_ref(shaper="adlp"), "validation_accuracy")
    assert not reads(_ref(shaper="retired_shaper"), "budgets")  # no longer registered: reads nothing
    assert not reads(_ref(), "budgets")


def test_the_sampling_control_reads_one_dynamic_sampler_per_regime():
    field = {("tight", "mine"): {5: _ref(shaper="alp", dynamic_sampling=True)},
             ("tight", "dler"): {5: _ref(shaper="dler", dynamic_sampling=True)}}  # fmt: skip
    with pytest.raises(
        ValueError, match=r"one dynamic sampler per regime, got \[\('tight', 'dler'\), \('tight', 'mine'\)\]"
    ):
        _sampling_control(field, Path("/nowhere"), "dapo")
    plain = {("tight", "dler"): {5: _ref(shaper="dler", dynamic_sampling=False)}}
    assert _sampling_control(plain, Path("/nowhere"), "dapo") == []  # a method named dler that samples as GRPO
    assert _sampling_control(field, Path("/nowhere"), None) == []  # a study without a sampling control
