"""dynashape: dynamic reward shaping for RL of LLM reasoners (LEAD, MEDS and baselines)."""

__version__ = "0.1.0"
