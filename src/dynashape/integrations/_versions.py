"""The engines' version checks, one rule for all: an engine release the adapter was not tested on is refused in
one line naming what the adapter relies on and the setting that skips the check (verl's and SkyRL's
``versions.py`` hold their tested releases and what they rely on)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

__all__ = ["installed", "untested"]


def installed(distribution: str) -> str | None:
    """The installed release of ``distribution`` (its metadata), None when it is not installed."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def untested(
    engine: str, found: str | None, tested: Sequence[str], skip_env: str, reason: str, action: str
) -> str | None:
    """The one-line refusal for ``engine`` release ``found``, or None when it may go on (tested, absent, or the
    check skipped with ``skip_env=1``). ``reason``: what the adapter relies on; ``action``: what the skip allows."""
    if found is None or found in tested or os.environ.get(skip_env, "") == "1":
        return None
    return (
        f"dynashape: {engine} {found} is untested (tested: {', '.join(tested)}); {reason}; set {skip_env}=1 to {action}"
    )
