"""Which SkyRL versions the estimators register on, checked at registration (no skyrl import here).

The adapter relies on SkyRL internals that change between releases without notice (:data:`RELIES_ON`), so a
release the engine suite has not run is refused rather than trusted. ``DYNASHAPE_SKYRL_ANY_VERSION=1`` (in the
environment of the driver and of SkyRL's Ray entrypoint task) skips the check, at the user's risk.
"""

from __future__ import annotations

from dynashape.integrations._versions import installed, untested

__all__ = ["ANY_VERSION_ENV", "RELIES_ON", "TESTED_VERSIONS", "installed_skyrl", "version_problem"]

#: SkyRL releases the engine suite runs (ci/integration.sh skyrl, requirements/skyrl.txt).
TESTED_VERSIONS: tuple[str, ...] = ("0.4.0",)
#: Set to "1" to register on a SkyRL release not in TESTED_VERSIONS.
ANY_VERSION_ENV = "DYNASHAPE_SKYRL_ANY_VERSION"
#: What the adapter relies on inside SkyRL, in words (named by the refusal).
RELIES_ON = (
    "AdvantageEstimatorRegistry and ppo_utils.compute_advantages_and_returns' keywords, the padding uids of "
    "pad_training_input_batch, TrainingCallback.on_save/on_train_start and main_base.BasePPOExp"
)


def installed_skyrl() -> str | None:
    """skyrl's installed release (its distribution metadata), None when it is not installed."""
    return installed("skyrl")


def version_problem(found: str | None) -> str | None:
    """The one-line refusal for SkyRL release `found`, or None when it may register (tested, absent, skipped)."""
    return untested(
        "skyrl", found, TESTED_VERSIONS, ANY_VERSION_ENV, f"the adapter relies on {RELIES_ON}", "register anyway"
    )
