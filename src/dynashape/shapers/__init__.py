"""Advantage shapers: one registry, one signature `shaper(batch) -> Shaped`, and each shaper's declaration of
what it reads (`Shaper.needs`, `shaper_needs(name)`).

Importing this package registers the built-in shapers.
"""

from dynashape.shapers import field, grpo, lead, length_rewards, meds
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds
from dynashape.shapers.recipe import recipe
from dynashape.shapers.registry import (
    available_shapers,
    check_shaper_params,
    config_class,
    get_shaper,
    register_shaper,
    shaper_needs,
)

__all__ = [
    "Shaped",
    "Shaper",
    "ShaperNeeds",
    "available_shapers",
    "check_shaper_params",
    "config_class",
    "get_shaper",
    "recipe",
    "register_shaper",
    "shaper_needs",
]
