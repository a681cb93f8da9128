"""The plugin's verl version check (``dynashape.integrations.verl.versions``): it runs on the release CI tests and
refuses any other one with one line, naming what it overrides and the setting that skips the check (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl")

from dynashape.integrations.verl import versions

UNTESTED = "0.9.99"


def test_the_installed_verl_is_a_tested_release_and_passes():
    assert versions.installed_verl() in versions.TESTED_VERSIONS
    assert versions.version_problem(versions.installed_verl()) is None


def test_an_untested_release_is_refused_in_one_line_naming_the_overrides_and_the_skip(monkeypatch):
    monkeypatch.delenv(versions.ANY_VERSION_ENV, raising=False)
    problem = versions.version_problem(UNTESTED)
    assert "\n" not in problem
    assert problem.startswith(f"dynashape: verl {UNTESTED} is untested (tested: 0.9.1)")
    for overridden in ("_save_checkpoint", "_load_checkpoint", "_validate", "_compute_advantage", "forward_step"):
        assert overridden in problem
    assert problem.endswith(f"set {versions.ANY_VERSION_ENV}=1 to run it anyway")
    monkeypatch.setenv(versions.ANY_VERSION_ENV, "1")
    assert versions.version_problem(UNTESTED) is None


# A fresh interpreter in which verl's metadata reports an untested release, then verl imported as usual (its
# entry-point loader imports the plugin).
PROBE = textwrap.dedent(
    f"""
    import importlib.metadata as md
    real = md.version
    md.version = lambda name: {UNTESTED!r} if name == "verl" else real(name)
    import verl
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import PPOTrainerSync
    print("registered:", "lead" in core_algos.ADV_ESTIMATOR_REGISTRY)
    try:
        PPOTrainerSync(OmegaConf.create({{"algorithm": {{"adv_estimator": "lead"}}}}))
    except Exception as err:
        print("construction:", type(err).__name__, err)
    """
)


def _probe(*, skip: bool):
    env = {k: v for k, v in os.environ.items() if k != versions.ANY_VERSION_ENV}
    if skip:
        env[versions.ANY_VERSION_ENV] = "1"
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)


def test_on_an_untested_verl_nothing_registers_and_the_trainer_refuses_our_estimator():
    run = _probe(skip=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "registered: False" in run.stdout
    refusal = [line for line in run.stdout.splitlines() if line.startswith("construction:")]
    assert refusal == [f"construction: VerlVersionError {versions.version_problem(UNTESTED)}"], run.stdout
    logged = [line for line in run.stderr.splitlines() if "dynashape" in line]
    # one line (after verl's log prefix), no traceback
    assert len(logged) == 1 and logged[0].endswith(versions.version_problem(UNTESTED)), logged


def test_the_skip_setting_registers_on_an_untested_verl():
    run = _probe(skip=True)
    assert "registered: True" in run.stdout, run.stderr[-3000:]
    assert "VerlVersionError" not in run.stdout + run.stderr
