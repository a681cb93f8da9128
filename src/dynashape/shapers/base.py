"""The one shaper interface: `shaper(batch) -> Shaped`, plus state for the stateful ones."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from dynashape.core.batch import RolloutBatch

__all__ = ["REWARD_CHANNELS", "Shaped", "Shaper", "ShaperNeeds", "Trajectory"]

RewardChannels = Literal["refused", "optional", "required"]
REWARD_CHANNELS: tuple[str, ...] = ("refused", "optional", "required")


@dataclass(frozen=True, kw_only=True)
class ShaperNeeds:
    """What a shaper reads from a ``RolloutBatch`` beyond ``group_ids``, ``correct`` and ``lengths``.

    Every shaper declares it (``Shaper.needs``), and the engines, the trainer config and the presets read it
    instead of lists of names: a shaper that needs fingerprints gets them captured wherever it runs.
    """

    fingerprints: bool = False
    """Reads ``fingerprints`` [N, D] (MEDS): the engine must capture them during its old-log-prob forward."""
    prompt_keys: bool = False
    """Reads ``prompt_keys`` [N]: a stable id of each prompt across steps (a memory keyed by prompt)."""
    budgets: bool = False
    """Reads ``budgets`` [N]: the token budget each rollout's prompt asked for (L1's n_gold); the engine passes
    it from the dataset (verl's extra info) or the trainer's prompt."""
    truncated: bool = False
    """Reads ``truncated`` [N]: whether each response was cut at the engine's length cap rather than ending by
    itself (DLER's stop-properly penalty). Every adapter fills it (the reference trainer, verl, TRL); a shaper
    that declares it refuses a batch without it, naming the field."""
    formatted: bool = False
    """Reads ``formatted`` [N]: whether each response gives its answer in the asked form (LASER's official base
    score). The adapters fill it from their verifier; a shaper that declares it refuses a batch without it."""
    validation_accuracy: bool = False
    """Reads the last held-out validation accuracy (AALC): the caller hands it to the shaper with
    ``shaper.observe(validation_accuracy=a)`` after each evaluation."""
    monitor_rollouts: bool = False
    """Reads a monitor set's rollouts every few steps (LASER-D): the caller samples the monitor prompts and
    hands them with ``shaper.observe(monitor=batch)``."""
    drops_rows: bool = False
    """May return ``Shaped.keep`` with rows dropped (GFPO): the engine must leave a dropped row out of the loss
    (its sum and its token count), not merely give it a zero advantage."""
    reward_channels: RewardChannels = "refused"
    """``rewards`` [N, K]: "refused" (the shaper raises when given extra channels), "optional" (read when
    given, where its config accepts them: lead declares each column's range) or "required"."""

    def __post_init__(self) -> None:
        flags = (
            "fingerprints",
            "prompt_keys",
            "budgets",
            "truncated",
            "formatted",
            "validation_accuracy",
            "monitor_rollouts",
            "drops_rows",
        )
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.reward_channels not in REWARD_CHANNELS:
            raise ValueError(f"reward_channels must be one of {REWARD_CHANNELS}, got {self.reward_channels!r}")


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """The controller state a shaper logs to its ``Shaped.metrics`` every step: what a study plots over training
    and reads at the horizon (``Shaper.trajectory``), declared by the method so that no page keeps a list of
    methods and their keys.

    Example: A-DLP's ``Trajectory(keys=("adlp/lambda",), title="length weight lambda")``.
    """

    keys: tuple[str, ...]
    """The metric keys, each in the shaper's namespace (``<name>/...``): ``register_shaper`` checks it."""
    title: str
    """What the keys are, in a few words (a plot's title after the method's display name)."""
    zero_means: str | None = None
    """What a logged 0 stands for, where 0 is no value of the state but a stand-in (LASER-D logs a target that is
    the batch's longest response as 0): a plot leaves it out of its means and says what it is. None: 0 is a value."""

    def __post_init__(self) -> None:
        if self.zero_means is not None and (not isinstance(self.zero_means, str) or not self.zero_means):
            raise ValueError(f"Trajectory.zero_means must be non-empty text or None, got {self.zero_means!r}")
        if not isinstance(self.keys, tuple) or not self.keys or not all(isinstance(k, str) and k for k in self.keys):
            raise ValueError(f"Trajectory.keys must be a non-empty tuple of metric keys, got {self.keys!r}")
        if not isinstance(self.title, str) or not self.title:
            raise ValueError(f"Trajectory.title must be non-empty text, got {self.title!r}")


STRENGTH_KINDS = ("penalty", "length", "kept", "final_cap", "grid")
"""How a method's main knob moves its strength (``Strength.kind``): ``penalty``, a weight on length (stronger when
larger); ``length``, a cap, target or threshold in tokens (stronger when smaller; at or beyond the training budget
it constrains nothing); ``kept``, rollouts kept of a group (stronger when smaller; all of them is no filter);
``final_cap``, a schedule of caps whose last one is the knob; ``grid``, a grid of candidate targets, scaled."""


@dataclass(frozen=True, kw_only=True)
class Strength:
    """A length-control method's main knob: what a frontier study sweeps to trace the method's accuracy against
    length (``study.strength_rule``), declared by the method so that no study keeps a list of methods and knobs.

    Example: ALP's ``Strength(key="shaper_kwargs.beta", kind="penalty", what="beta, the per-token penalty")``.
    """

    key: str
    """The knob in ``--set`` form: ``shaper_kwargs.<field>`` of the shaper's config, or a ``TrainConfig`` field."""
    kind: str
    """One of ``STRENGTH_KINDS``."""
    what: str
    """What it is, in a few words (a page's table)."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"Strength.key must be a --set key, got {self.key!r}")
        if self.kind not in STRENGTH_KINDS:
            raise ValueError(f"Strength.kind must be one of {STRENGTH_KINDS}, got {self.kind!r}")
        if not isinstance(self.what, str) or not self.what:
            raise ValueError(f"Strength.what must be non-empty text, got {self.what!r}")


@dataclass(frozen=True)
class Shaped:
    """What a shaper returns.

    Attributes:
        advantages: float32 Tensor [N], one scalar per rollout (engines broadcast it over response tokens).
        rewards: float32 Tensor [N, C], the shaped per-channel rewards that produced it (for logging).
        metrics: flat dict of floats, namespaced ("lead/lambda_c", ...), ready for any logger.
        keep: optional BoolTensor [N], the rows a filter keeps (GFPO); None keeps every row. A dropped row
            carries no loss term at all: the loss leaves it out of its sum and of its token count (a zero
            advantage is not the same, the token-mean would still count its tokens).
    """

    advantages: torch.Tensor
    rewards: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    keep: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.keep is not None:
            n = self.advantages.shape[0]
            if self.keep.dtype != torch.bool or tuple(self.keep.shape) != (n,):
                raise ValueError(
                    f"keep must be a BoolTensor [{n}], got dtype {self.keep.dtype} and shape {tuple(self.keep.shape)}"
                )


class Shaper(ABC):
    """Base class of every registered shaper.

    Subclasses set `config_cls` (a frozen keyword-only dataclass), declare `needs` when they read more than
    verdicts and lengths, and implement `shape`. Stateful shapers also override `reset`, `state_dict` and
    `load_state_dict`; calling a shaper advances its state exactly once.
    """

    name: ClassVar[str] = ""
    config_cls: ClassVar[type]
    needs: ClassVar[ShaperNeeds] = ShaperNeeds()
    display_name: ClassVar[str] = ""
    """How a page names the method ("A-DLP"); empty: its registry name."""
    trajectory: ClassVar[Trajectory | None] = None
    """The controller state it logs every step, for a study's plots over training; None: no controller."""
    strength: ClassVar[Strength | None] = None
    """The main knob of a length-control method (``Strength``); None: the method has none to sweep."""
    reference: ClassVar[bool] = False
    """The library's reference method (GRPO: correctness, group-normalised, no length term): the row a study
    compares every other with when its file names no control. Exactly one registered shaper is."""

    def __init__(self, config: Any = None) -> None:
        if config is None:
            config = self.config_cls()
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}, got {type(config).__name__}")
        self.config = config
        self.reset()

    def __call__(self, batch: RolloutBatch) -> Shaped:
        if not isinstance(batch, RolloutBatch):
            raise TypeError(f"a shaper takes a RolloutBatch, got {type(batch).__name__}")
        return self.shape(batch)

    @abstractmethod
    def shape(self, batch: RolloutBatch) -> Shaped:
        """Compute advantages for a validated batch."""

    def observe(self, **signals: Any) -> None:
        """Hand the shaper a signal that no batch carries, between calls: ``validation_accuracy=a`` (the last
        held-out accuracy, AALC), ``monitor=batch`` (a monitor set's rollouts, LASER-D). A shaper that reads
        none of the signals given raises ValueError rather than ignoring them."""
        if signals:
            raise ValueError(f"shaper {self.name!r} reads no {', '.join(sorted(signals))}")

    def reset(self) -> None:  # noqa: B027 - stateless shapers have nothing to reset
        """Forget learned state (nothing for a stateless shaper)."""

    def close(self) -> None:  # noqa: B027 - most shapers hold no worker
        """Stop what the shaper started (MEDS's refit workers); it may be called again, and a later call of
        the shaper starts them anew."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"shaper {self.name!r} is stateless but got state with keys {sorted(state)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"
