"""dynashape: dynamic reward shaping for RL of LLM reasoners (LEAD, MEDS and the baselines they compare against).

    from dynashape import RolloutBatch, get_shaper
    shaper = get_shaper("lead", b_max=4000)
    out = shaper(RolloutBatch(group_ids=..., correct=..., lengths=...))
    out.advantages  # float32 [N]

`import dynashape` imports torch and numpy only: engines, plotting and clustering load lazily.
"""

from dynashape.batch import RolloutBatch
from dynashape.shapers import Shaped, Shaper, available_shapers, config_class, get_shaper, register_shaper

__version__ = "0.1.0"

__all__ = [
    "RolloutBatch",
    "Shaped",
    "Shaper",
    "__version__",
    "available_shapers",
    "config_class",
    "get_shaper",
    "register_shaper",
]
