"""Advantage shapers: one registry, one signature `shaper(batch) -> Shaped`, and each shaper's declaration of
what it reads (`Shaper.needs`, `shaper_needs(name)`).

Importing this package registers the built-in shapers: every method a chain of parts as one recipe
(`dynashape.shapers.recipes`), MEDS and LEAD-MEDS as whole classes (`dynashape.shapers.meds`).
"""

from dynashape.shapers import meds, recipes
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds, Strength, Trajectory
from dynashape.shapers.recipe import recipe
from dynashape.shapers.registry import (
    available_shapers,
    check_shaper_params,
    config_class,
    display_name,
    get_shaper,
    reference_shaper,
    register_shaper,
    shaper_class,
    shaper_needs,
    shaper_strength,
    shaper_trajectory,
)

__all__ = [
    "Shaped",
    "Shaper",
    "ShaperNeeds",
    "Strength",
    "Trajectory",
    "available_shapers",
    "check_shaper_params",
    "config_class",
    "display_name",
    "get_shaper",
    "recipe",
    "reference_shaper",
    "register_shaper",
    "shaper_class",
    "shaper_needs",
    "shaper_strength",
    "shaper_trajectory",
]
