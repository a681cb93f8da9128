"""``python -m dynashape.integrations.verl --check`` (also ``dynashape doctor``): is the verl plugin usable here?

verl loads plugins in ``verl/__init__.py`` and swallows any exception at debug level, so a plugin that fails to
import (a missing dependency, a version clash on one node image) shows up only after the first rollout, as
"Unknown advantage estimator". Run this on every node image instead. It:

1. finds our ``verl.plugins`` entry point and checks ``VERL_USE_EXTERNAL_PLUGINS`` lets verl load it;
2. loads it exactly as verl does (``EntryPoint.load()``), but lets an error through: traceback, exit status 1;
3. imports verl and lists the registered advantage estimators, ours marked, failing if one of ours is missing;
4. imports verl's v1 trainer, legacy trainer and FSDP engine modules, and checks that the ``dynashape`` trainer
   mode is registered and that the start-up checks, checkpoint hooks and fingerprint patch are in place;
5. with launch overrides after ``--check`` (``python -m dynashape.integrations.verl --check
   algorithm.adv_estimator=meds ...``), composes verl's own config from them as ``verl.trainer.main_ppo`` does
   and runs the start-up checks on it, so a configuration we cannot run fails before Ray is even started.

Exit status: 0 when everything is in place, 1 otherwise (the failing step is printed last, after its traceback).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, TextIO

__all__ = ["ENTRY_POINT_VALUE", "check_overrides", "main", "run_check"]

ENTRY_POINT_VALUE = "dynashape.integrations.verl"
_ESTIMATOR_MODULE = "dynashape.integrations.verl.estimators"


def _fail(out: TextIO, message: str) -> int:
    print(f"FAIL {message}", file=out)
    return 1


def _import(out: TextIO, module: str, why: str) -> object | None:
    try:
        return importlib.import_module(module)
    except Exception:  # whatever breaks the import is what the user must see
        traceback.print_exc(file=out)
        _fail(out, f"import {module} failed ({why})")
        return None


def check_overrides(overrides: Sequence[str], config_name: str = "ppo_trainer", out: TextIO | None = None) -> int:
    """Compose verl's `config_name` with Hydra `overrides` (as ``verl.trainer.main_ppo`` does); run the checks."""
    out = sys.stdout if out is None else out
    import verl
    from hydra import compose, initialize_config_dir

    from dynashape.integrations.verl.checks import config_problems

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = compose(config_name=config_name, overrides=list(overrides))
    except Exception as err:
        return _fail(out, f"verl cannot compose {config_name} with these overrides: {err}")
    problems = config_problems(config)
    for problem in problems:
        print(f"FAIL {problem}", file=out)
    if problems:
        return 1
    print(f"ok   configuration ({config_name} + {len(overrides)} overrides) passes the start-up checks", file=out)
    return 0


def run_check(out: TextIO | None = None) -> int:
    """Run the checks, printing one line per step to `out` (default stdout); returns the exit status."""
    out = sys.stdout if out is None else out
    if importlib.util.find_spec("verl") is None:
        return _fail(out, "verl is not importable in this environment (pip install 'dynashape[verl]')")
    ep = _entry_point(out)
    if ep is None:
        return 1
    for step in (_plugin_loads, _estimators_registered, _trainer_hooks_installed, _fsdp_patched):
        if step(out, ep) != 0:
            return 1
    import verl

    import dynashape

    version = getattr(dynashape, "__version__", "?")
    print(f"OK   dynashape {version} verl plugin ready (verl {getattr(verl, '__version__', '?')})", file=out)
    return 0


def _entry_point(out: TextIO) -> Any:
    """1. The entry point and the plugin policy, as verl/__init__.py reads them; None after a failure line."""
    ours = [ep for ep in entry_points(group="verl.plugins") if ep.value == ENTRY_POINT_VALUE]
    if not ours:
        _fail(
            out,
            f"no 'verl.plugins' entry point for {ENTRY_POINT_VALUE}: install dynashape as a package "
            "(pip install 'dynashape[verl]', or pip install -e . from a checkout) in this environment",
        )
        return None
    ep = ours[0]
    print(f"ok   entry point verl.plugins: {ep.name} = {ep.value}", file=out)
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        _fail(out, "VERL_USE_EXTERNAL_PLUGINS=none: verl loads no plugin; unset it or add ours to its list")
        return None
    if policy != "auto" and ep.name not in {p.strip() for p in policy.split(",")}:
        _fail(out, f"VERL_USE_EXTERNAL_PLUGINS={policy}: does not name '{ep.name}'; add it to the list")
        return None
    print(f"ok   VERL_USE_EXTERNAL_PLUGINS={policy} loads '{ep.name}'", file=out)
    return ep


def _plugin_loads(out: TextIO, ep: Any) -> int:
    """2. Load the plugin as verl does, without swallowing the error."""
    try:
        plugin = ep.load()
        # Under `python -m dynashape.integrations.verl` the plugin was imported before this ran, and kept its
        # registration error for this step to report.
        if getattr(plugin, "REGISTER_ERROR", None) is not None:
            raise plugin.REGISTER_ERROR
    except Exception:
        traceback.print_exc(file=out)
        return _fail(
            out,
            f"loading the plugin {ep.value} failed (traceback above). verl's own loader hides this error and the "
            "run would stop after its first rollout with 'Unknown advantage estimator'",
        )
    print(f"ok   plugin {ep.value} imports", file=out)
    return 0


def _estimators_registered(out: TextIO, ep: Any) -> int:
    """3. The estimators in verl's registry."""
    core_algos = _import(out, "verl.trainer.ppo.core_algos", "verl's advantage-estimator registry")
    if core_algos is None:
        return 1
    from dynashape.integrations.verl.estimators import estimator_names

    registry = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    mine = sorted(n for n, fn in registry.items() if getattr(fn, "__module__", "") == _ESTIMATOR_MODULE)
    expected = sorted(estimator_names())
    listing = ", ".join(f"{n}*" if n in mine else n for n in sorted(registry))
    print(f"ok   registered advantage estimators (* = dynashape): {listing}", file=out)
    missing = sorted(set(expected) - set(mine))
    if missing:
        return _fail(out, f"dynashape estimators missing from verl's registry: {', '.join(missing)}")
    return 0


def _trainer_hooks_installed(out: TextIO, ep: Any) -> int:
    """4. The trainer mode and the trainer hooks, in the modules verl's processes import."""
    v1 = _import(out, "verl.trainer.ppo.v1", "verl's v1 trainer; the dynashape trainer mode subclasses it")
    if v1 is None:
        return 1
    trainer_cls = v1.trainer_base.TRAINER_REGISTRY.get("dynashape")
    if trainer_cls is None or trainer_cls.__module__ != "dynashape.integrations.verl.trainer":
        return _fail(out, f"trainer mode 'dynashape' not registered with verl (found {trainer_cls!r})")
    print("ok   trainer mode 'dynashape' registered (trainer.use_v1=true trainer.v1.trainer_mode=dynashape)", file=out)
    legacy = _import(out, "verl.trainer.ppo.ray_trainer", "verl's legacy trainer")
    if legacy is None:
        return 1
    for cls in (v1.trainer_base.PPOTrainer, legacy.RayPPOTrainer):
        if not cls.__dict__.get("_dynashape_patched", False):
            return _fail(out, f"{cls.__module__}.{cls.__name__}: start-up checks and checkpoint hooks not installed")
    print("ok   start-up checks and shaper-state checkpoint hooks on PPOTrainer and RayPPOTrainer", file=out)
    return 0


def _fsdp_patched(out: TextIO, ep: Any) -> int:
    """5. The FSDP forward patched for MEDS fingerprints (or left alone on purpose)."""
    from dynashape.integrations.verl import PATCH_ENV

    fsdp = _import(out, "verl.workers.engine.fsdp.transformer_impl", "verl's FSDP engine; MEDS fingerprints")
    if fsdp is None:
        return 1
    patched = getattr(fsdp.FSDPEngineWithLMHead.forward_step, "_dynashape_patched", False)
    if os.environ.get(PATCH_ENV, "1") == "0":
        print(f"warn {PATCH_ENV}=0: the FSDP forward is left alone; meds and lead_meds are refused", file=out)
    elif not patched:
        return _fail(out, "FSDPEngineWithLMHead.forward_step is not patched: MEDS fingerprints would be missing")
    else:
        print("ok   FSDPEngineWithLMHead.forward_step patched for MEDS fingerprints", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dynashape.integrations.verl",
        description="Check that verl can load the dynashape plugin in this environment (run on every node image).",
    )
    parser.add_argument("--check", action="store_true", help="import the plugin as verl does and report")
    parser.add_argument(
        "--config-name", default="ppo_trainer", help="verl config the overrides apply to (e.g. ppo_megatron_trainer)"
    )
    parser.add_argument(
        "overrides", nargs="*", help="verl launch overrides (key=value, +key=value) to run the start-up checks on"
    )
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 2
    status = run_check()
    if status == 0 and args.overrides:
        status = check_overrides(args.overrides, args.config_name)
    return status
