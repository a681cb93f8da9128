"""The held-out evaluation's settings (``EvalConfig``, a run's ``eval`` section): samples per problem, the cap,
the sampling, the split, the pass@k subset and the MEDS fingerprints' width."""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.runtime.policy import ModelConfig
from dynashape.train.sections import _positive

__all__ = ["EVAL_SPLITS", "TRAINER_FINGERPRINT_LAYERS", "EvalConfig"]

EVAL_SPLITS: tuple[str, ...] = ("test", "validation")
TRAINER_FINGERPRINT_LAYERS: int = ModelConfig().num_layers
"""The reference trainer's MEDS fingerprint width (the presets', the evaluation's and the audit's): all decoder
layers of the chain world's base model, one value per layer (with 2 the L2-normalised fingerprint is a single
angle). The engines default to the paper's width, ``meds.capture.OFFICIAL_FINGERPRINT_LAYERS``."""


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Held-out evaluation: n samples per problem with a generous cap."""

    n_samples: int = 4
    """Samples per problem (accuracy = avg@n, pass@k for k <= n)."""
    max_new_tokens: int = 256
    """Evaluation cap, well above the training budget (the paper: 4K training, 32K evaluation)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus mass."""
    seed: int = 1234
    """Seed of the evaluation draws (the same for base and final)."""
    batch_size: int = 400
    """Rollouts per generation batch (the rows sampled together; lower it for a large model)."""
    max_problems: int | None = None
    """Evaluate on this many held-out problems, evenly spaced over the split so that every difficulty stays
    represented (None: all of them)."""
    passk_samples: int = 64
    """Samples per problem of the pass@k subset (hardest and trap problems; 0 = no subset)."""
    passk_hard: int = 6
    """Problems of the hardest difficulty in the pass@k subset."""
    passk_trap: int = 6
    """Trap prompts in the pass@k subset."""
    passk_keys: tuple[str, ...] | None = None
    """The pass@k subset named by problem keys (``Problem.key``) of the evaluated split, in this order, instead of
    the world's hard-and-trap choice (``passk_hard`` / ``passk_trap`` are then unused); a study fixes its subset
    by a stated rule before its runs (``study.preregistration``). None: the world's choice."""
    fingerprint_layers: int | None = TRAINER_FINGERPRINT_LAYERS
    """Layers of the wrong answers' MEDS fingerprints (eigen ratio); None = none."""
    split: str = "test"
    """Which held-out split of the world is evaluated: ``test`` (final numbers) or ``validation`` (tuning only;
    ``task.world_splits``). A dataset (``data_path``) has a test split only."""

    def __post_init__(self) -> None:
        if self.split not in EVAL_SPLITS:
            raise ValueError(f"split must be one of {EVAL_SPLITS}, got {self.split!r}")
        for name in ("passk_samples", "passk_hard", "passk_trap"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.passk_keys is not None:
            keys = tuple(self.passk_keys)
            object.__setattr__(self, "passk_keys", keys)
            if not keys or not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
                raise ValueError(f"passk_keys must be distinct non-empty problem keys, or None; got {keys!r}")
        if self.fingerprint_layers is not None and self.fingerprint_layers < 1:
            raise ValueError(f"fingerprint_layers must be >= 1 or None, got {self.fingerprint_layers}")
        for name in ("n_samples", "max_new_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be >= 1 or None, got {self.max_problems}")
        _positive("temperature", self.temperature)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
