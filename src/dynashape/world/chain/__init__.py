"""The chain-arithmetic world (``chain-v3``): generator, teacher, labeller, audit measurements, budget rules and
the shipped base model. ``ChainWorld`` puts them behind the ``World`` interface."""

from dynashape.world.chain.config import ERROR_MODES, SHORTCUTS, VERBOSITY, WORLD_VERSION, ChainTaskConfig
from dynashape.world.chain.generator import make_problem, world_splits
from dynashape.world.chain.labels import error_mode, filler_chars, is_shortcut, parse_lines
from dynashape.world.chain.plan import expression
from dynashape.world.chain.teacher import Trace, teacher_trace
from dynashape.world.chain.world import ChainWorld, hard_subset, world_stats

__all__ = [
    "ERROR_MODES",
    "SHORTCUTS",
    "VERBOSITY",
    "WORLD_VERSION",
    "ChainTaskConfig",
    "ChainWorld",
    "Trace",
    "error_mode",
    "expression",
    "filler_chars",
    "hard_subset",
    "is_shortcut",
    "make_problem",
    "parse_lines",
    "teacher_trace",
    "world_splits",
    "world_stats",
]
