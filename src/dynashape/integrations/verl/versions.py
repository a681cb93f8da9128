"""Which verl versions the plugin runs on, checked when it registers (no verl import here).

The plugin overrides private methods of verl's trainers and FSDP engine (:data:`OVERRIDDEN`); their signatures
are verl's internals and change between releases without notice, so a verl the engine suite has not run is
refused rather than trusted. ``DYNASHAPE_VERL_ANY_VERSION=1`` (in the environment of every verl process: the
driver and, for a Ray cluster not started by the driver, ``ray_kwargs.ray_init.runtime_env.env_vars``) skips the
check, at the user's risk.
"""

from __future__ import annotations

from dynashape.integrations._versions import installed, untested

__all__ = ["ANY_VERSION_ENV", "OVERRIDDEN", "TESTED_VERSIONS", "VerlVersionError", "installed_verl", "version_problem"]

#: verl releases the engine suite runs (ci/integration.sh verl, requirements/verl.txt).
TESTED_VERSIONS: tuple[str, ...] = ("0.9.1",)
#: Set to "1" to run the plugin on a verl release not in TESTED_VERSIONS.
ANY_VERSION_ENV = "DYNASHAPE_VERL_ANY_VERSION"
#: What the plugin replaces inside verl, in words (named by the refusal).
OVERRIDDEN = (
    "PPOTrainer/RayPPOTrainer.__init__, _save_checkpoint, _load_checkpoint and _validate, "
    "PPOTrainer._compute_advantage, the v1 trainer's _compute_old_log_prob, ray_trainer.compute_advantage and "
    "FSDPEngineWithLMHead.forward_step"
)


class VerlVersionError(RuntimeError):
    """verl's installed release is not one the plugin was tested on (one line: what and how to skip)."""


def installed_verl() -> str | None:
    """verl's installed release (its distribution metadata), None when it is not installed."""
    return installed("verl")


def version_problem(found: str | None) -> str | None:
    """The one-line refusal for verl release `found`, or None when it may run (tested, absent, or skipped)."""
    return untested(
        "verl", found, TESTED_VERSIONS, ANY_VERSION_ENV, f"the plugin overrides {OVERRIDDEN}", "run it anyway"
    )
