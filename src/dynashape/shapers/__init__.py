"""Advantage shapers: one registry, one signature `shaper(batch) -> Shaped`.

Importing this package registers the built-in shapers.
"""

from dynashape.shapers import grpo, lead, length_rewards, meds
from dynashape.shapers.base import Shaped, Shaper
from dynashape.shapers.registry import available_shapers, config_class, get_shaper, register_shaper

__all__ = ["Shaped", "Shaper", "available_shapers", "config_class", "get_shaper", "register_shaper"]
