"""Policy losses and the loss registry that the reference trainer, verl and TRL share.

- :mod:`dynashape.losses.policy`: the clipped surrogate (GRPO, Dr. GRPO, DAPO aggregation) and KL estimates.
- :mod:`dynashape.losses.entropy`: the entropy advantage (arXiv 2506.14758).
- :mod:`dynashape.losses.tokens`: the token tensors' checks, precision and masks that every loss shares.
- :mod:`dynashape.losses.drpo`: DRPO's decoupled loss (arXiv 2510.04474).
- :mod:`dynashape.losses.registry`: ``register_loss`` / ``get_loss``, one signature for every loss.

Names load on first use, as the package root's do, so importing one loss never loads the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = ("tokens", "entropy", "policy", "drpo", "registry")


def _exports() -> dict[str, str]:
    names: dict[str, str] = {}
    for sub in _SUBMODULES:
        module = importlib.import_module(f"dynashape.losses.{sub}")
        names.update({name: sub for name in module.__all__})
    return names


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in _SUBMODULES:
        raise AttributeError(name)
    sub = _exports().get(name)
    if sub is None:
        raise AttributeError(f"module 'dynashape.losses' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dynashape.losses.{sub}"), name)
