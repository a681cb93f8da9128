"""dynashape: dynamic reward shaping for RL of LLM reasoners (LEAD, MEDS and the baselines they compare against).

    from dynashape import RolloutBatch, get_shaper
    shaper = get_shaper("lead", b_max=4000)
    out = shaper(RolloutBatch(group_ids=..., correct=..., lengths=...))
    out.advantages  # float32 [N]

Names load on first use (PEP 562), so `import dynashape` is instant and a helper process that needs one
submodule (a clustering or verifier worker) never pays for torch. Engines, plotting and clustering load lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynashape.core.batch import RolloutBatch
    from dynashape.shapers import (
        Shaped,
        Shaper,
        ShaperNeeds,
        available_shapers,
        config_class,
        get_shaper,
        recipe,
        register_shaper,
        shaper_class,
        shaper_needs,
    )

__version__ = "0.1.0"

_EXPORTS = {
    "RolloutBatch": "dynashape.core.batch",
    "Shaped": "dynashape.shapers",
    "Shaper": "dynashape.shapers",
    "ShaperNeeds": "dynashape.shapers",
    "available_shapers": "dynashape.shapers",
    "config_class": "dynashape.shapers",
    "get_shaper": "dynashape.shapers",
    "recipe": "dynashape.shapers",
    "register_shaper": "dynashape.shapers",
    "shaper_class": "dynashape.shapers",
    "shaper_needs": "dynashape.shapers",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dynashape' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
