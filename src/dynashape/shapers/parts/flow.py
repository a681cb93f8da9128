"""Parts of a shaper and the value that flows through them (docs/architecture.md).

A part is the idea of optax's gradient transformations applied to advantages: a pure ``init() -> state`` and
``update(flow, state) -> (flow, state)``, with its state plain values (floats, lists, dicts: what a JSON file
holds) and nothing stored on the part itself. A named method is a `Chain` of parts, which is itself a part whose
state is the tuple of its parts' states, so a composed shaper checkpoints for free.

    reward channels -> a weight controller -> a normalisation -> (a filter)

The value between parts is a `Flow`: the batch, its groups, and what the parts so far have written (raw reward
channels, the statistics mask of each channel, weights, the scalar reward, advantages, kept rows, metrics).
Every part writes only the fields it owns, through `Flow.but`, and names its metrics ``namespace/name``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.groups import Groups
from dynashape.shapers.base import Shaped

__all__ = ["Chain", "Flow", "Holds", "Part", "Stateless", "start"]

F64 = torch.float64


@dataclass(frozen=True)
class Flow:
    """What the parts of one shaper call have computed so far (float64 tensors on the batch's device).

    Attributes:
        batch: the validated `RolloutBatch`.
        groups: its `Groups`, numbered once.
        channels: [N, K] raw reward channels in the order the channel parts appended them, or None.
        ranges: each channel's declared (R_min, R_max), for controllers that need the range (LEAD's potential).
        stats_mask: [N, K] bool, the rollouts each channel's batch statistics read (LEAD: its efficiency
            channel over correct rollouts only); None means all rollouts.
        weights: [K] channel weights from a controller, or None (one channel, weight 1).
        reward: [N] the channels scalarised by a normalisation (GRPO's path), or None.
        advantages: [N] advantages, or None before a normalisation ran.
        keep: [N] bool, the rows a filter keeps (None: all of them).
        values: named intermediate tensors a caller may want (LEAD's per-group targets ``"targets"``).
        metrics: flat, namespaced floats.
    """

    batch: RolloutBatch
    groups: Groups
    channels: torch.Tensor | None = None
    ranges: tuple[tuple[float, float], ...] = ()
    stats_mask: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    reward: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    keep: torch.Tensor | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)

    def but(self, **changes: Any) -> Flow:
        """A copy with `changes`; ``metrics`` and ``values`` given here are merged into the existing ones."""
        if "metrics" in changes:
            changes["metrics"] = {**self.metrics, **changes["metrics"]}
        if "values" in changes:
            changes["values"] = {**self.values, **changes["values"]}
        unknown = set(changes) - _FIELDS
        if unknown:
            raise TypeError(f"Flow has no field {sorted(unknown)[0]!r}")
        # A shallow copy with the fields replaced: dataclasses.replace re-runs __init__, which a chain calls
        # a dozen times per batch for nothing (every field is already valid).
        new = object.__new__(Flow)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def with_channel(
        self, column: torch.Tensor, value_range: tuple[float, float], stats_mask: torch.Tensor | None = None
    ) -> Flow:
        """Append one reward channel [N] (float64), its declared range and the rollouts its statistics read."""
        n = column.shape[0]
        col = column.to(F64).unsqueeze(1)
        mask = torch.ones(n, 1, dtype=torch.bool, device=col.device) if stats_mask is None else stats_mask[:, None]
        if self.channels is None:
            return self.but(channels=col, ranges=(value_range,), stats_mask=mask)
        previous = self.stats_mask
        assert previous is not None  # channels and stats_mask are always set together
        return self.but(
            channels=torch.cat([self.channels, col], dim=1),
            ranges=(*self.ranges, value_range),
            stats_mask=torch.cat([previous, mask], dim=1),
        )

    def require(self, name: str, part: str) -> torch.Tensor:
        """Field `name`, or a ValueError saying which part needed it (a chain built in the wrong order)."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"part {part!r} needs {name} from an earlier part, got None (check the chain's order)")
        return value

    def shaped(self) -> Shaped:
        """The outer face's result: float32 advantages, the per-channel (or scalarised) rewards, metrics, keep."""
        advantages = self.require("advantages", "shaped")
        rewards = self.reward.unsqueeze(1) if self.reward is not None else self.require("channels", "shaped")
        metrics = dict(self.metrics)
        return Shaped(advantages=advantages.float(), rewards=rewards.float(), metrics=metrics, keep=self.keep)


_FIELDS = frozenset(f.name for f in fields(Flow))


def start(batch: RolloutBatch) -> Flow:
    """The flow at the head of a chain: the batch and its groups, nothing computed yet."""
    return Flow(batch=batch, groups=Groups.from_ids(batch.group_ids))


@runtime_checkable
class Part(Protocol):
    """One step of a shaper: ``init() -> state``, ``update(flow, state) -> (flow, state)``, both pure.

    ``state_key`` names its state in a shaper's ``state_dict`` (None for a stateless part, whose state is None).
    """

    state_key: str | None

    def init(self) -> Any: ...

    def update(self, flow: Flow, state: Any) -> tuple[Flow, Any]: ...


class Stateless:
    """Mixin of the parts without state: ``init`` gives None and ``state_key`` is None."""

    state_key: str | None = None

    def init(self) -> None:
        return None


class Holds:
    """Mixin of a part whose state is that of one layer-2 object (a `dynashape.methods` controller, the PSI
    controller): the subclass says how to build a fresh one (`fresh`), and the part's state is its
    ``state_dict()``, read back through its ``load_state_dict`` (which refuses corrupt state)."""

    def fresh(self) -> Any:
        raise NotImplementedError

    def held(self, state: Mapping[str, Any]) -> Any:
        """A fresh object holding `state`."""
        holder = self.fresh()
        holder.load_state_dict(dict(state))
        return holder

    def init(self) -> Any:
        return self.fresh().state_dict()

    def check_state(self, state: Mapping[str, Any]) -> Any:
        return self.held(state).state_dict()


class Chain:
    """Parts in sequence; itself a part, whose state is the tuple of its parts' states."""

    state_key: str | None = None

    def __init__(self, *parts: Part) -> None:
        for i, part in enumerate(parts):
            if not isinstance(part, Part):
                raise TypeError(f"Chain part {i} must have init, update and state_key, got {part!r}")
        keys = [p.state_key for p in parts if p.state_key is not None]
        if len(set(keys)) != len(keys):
            raise ValueError(f"Chain parts share a state key: {keys}")
        self.parts: tuple[Part, ...] = tuple(parts)

    def init(self) -> tuple[Any, ...]:
        return tuple(part.init() for part in self.parts)

    def update(self, flow: Flow, state: Sequence[Any]) -> tuple[Flow, tuple[Any, ...]]:
        if len(state) != len(self.parts):
            raise ValueError(f"chain state has {len(state)} entries for {len(self.parts)} parts")
        new_state = []
        for part, part_state in zip(self.parts, state, strict=True):
            flow, part_state = part.update(flow, part_state)
            new_state.append(part_state)
        return flow, tuple(new_state)

    def state_dict(self, state: Sequence[Any]) -> dict[str, Any]:
        """The stateful parts' states by their ``state_key`` (plain values, ready for a checkpoint)."""
        return {p.state_key: s for p, s in zip(self.parts, state, strict=True) if p.state_key is not None}

    def load_state(self, saved: Mapping[str, Any], current: Sequence[Any]) -> tuple[Any, ...]:
        """`current` with each stateful part's entry replaced by ``saved[state_key]`` (every key required),
        checked by the part's ``check_state`` when it has one (corrupt state is refused on load)."""
        missing = [p.state_key for p in self.parts if p.state_key is not None and p.state_key not in saved]
        if missing:
            raise ValueError(f"state lacks {missing}; it has {sorted(saved)}")
        return tuple(
            s if p.state_key is None else _checked(p, saved[p.state_key])
            for p, s in zip(self.parts, current, strict=True)
        )

    def __repr__(self) -> str:
        return f"Chain({', '.join(map(repr, self.parts))})"


def _checked(part: Part, state: Any) -> Any:
    """A part's saved state, through its own ``check_state`` when it has one (corrupt state refused on load)."""
    check = getattr(part, "check_state", None)
    return state if check is None else check(state)
