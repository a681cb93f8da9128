"""A shaper built from parts: the outer face `shaper(batch) -> Shaped` over a `Chain` of parts.

A named method is written as a recipe (`dynashape.shapers.recipe.recipe`): a function whose keywords are its
config and which returns the chain; the decorator makes the `ComposedShaper` subclass. Subclass it by hand only
for a shaper that needs more than a chain (its own `shape`).

The chain is built once from the config (`reset`), with the engines' penalties given to the constructor
(``penalties``: `Overlong`, `StopProperly`, from ``get_shaper(name, overlong=..., stop_properly=...)``) put right
after its first part, on the method's reward channel. Its state is the tuple of the parts' states, advanced
exactly once per call and only when the whole chain succeeded (a refused batch moves nothing). `state_dict`
holds the stateful parts' plain-value states by their ``state_key``, under a version number. A method that applies
one of those penalties itself, from its config (DLER's stop-properly multiplier), names it in ``own_penalties``
and is refused the keyword rather than given the penalty twice.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from dynashape.core.batch import RolloutBatch
from dynashape.shapers._common import reject_rewards
from dynashape.shapers.base import Shaped, Shaper
from dynashape.shapers.parts.flow import Chain, Flow, Part, start
from dynashape.shapers.parts.penalties import penalty_key, with_penalties

__all__ = ["ComposedShaper"]


class ComposedShaper(Shaper):
    """Base of the shapers that are a chain of parts; subclasses implement `chain` (from ``self.config``)."""

    state_version: ClassVar[int] = 1
    own_penalties: ClassVar[tuple[str, ...]] = ()
    """The engines' penalties (``PENALTY_KEYS``) this method applies itself, from its config."""

    def __init__(self, config: Any = None, *, penalties: tuple[Part, ...] = ()) -> None:
        self.check_penalties(penalties)
        self.penalties = tuple(penalties)
        super().__init__(config)

    @classmethod
    def check_penalties(cls, penalties: tuple[Part, ...]) -> None:
        """Refuse a penalty the method applies itself (``own_penalties``): it would act twice."""
        for part in penalties:
            key = penalty_key(part)
            if key in cls.own_penalties:
                raise ValueError(
                    f"{cls.name} applies its own {key.replace('_', '-')} penalty from its config: set it there, "
                    f"not with {key}"
                )

    @abstractmethod
    def chain(self) -> Chain:
        """The parts of this method, in order, from ``self.config``."""

    def reset(self) -> None:
        self.chain_ = with_penalties(self.chain(), self.penalties)
        self.state_ = self.chain_.init()

    def held(self, state_key: str) -> Any:
        """A snapshot of one stateful part's state as the layer-2 object it holds (LEAD's ``"controller"``: a
        `PSIController`, to read its ``ema_`` and ``n_updates_``); changing it changes nothing here."""
        for part, state in zip(self.chain_.parts, self.state_, strict=True):
            if part.state_key == state_key and hasattr(part, "held"):
                return part.held(state)  # type: ignore[attr-defined]
        keys = [p.state_key for p in self.chain_.parts if hasattr(p, "held")]
        raise KeyError(f"shaper {self.name!r} has no part holding {state_key!r}; it has {keys}")

    def run(self, flow: Flow) -> Flow:
        """Run the chain on `flow`, advancing the state once when every part succeeded."""
        flow, state = self.chain_.update(flow, self.state_)
        self.state_ = state
        return flow

    def shape(self, batch: RolloutBatch) -> Shaped:
        if self.needs.reward_channels == "refused":
            reject_rewards(self.name, batch)
        return self.run(start(batch)).shaped()

    def observe(self, **signals: Any) -> None:
        """Pass each signal to the parts that read it (``observes``); a signal no part reads raises."""
        unread = set(signals) - {name for p in self.chain_.parts for name in getattr(p, "observes", ())}
        if unread:
            super().observe(**{name: signals[name] for name in unread})
        state = list(self.state_)
        for i, part in enumerate(self.chain_.parts):
            mine = {name: signals[name] for name in getattr(part, "observes", ()) if name in signals}
            if mine:
                state[i] = part.observe(state[i], **mine)  # type: ignore[attr-defined]
        self.state_ = tuple(state)

    def state_dict(self) -> dict[str, Any]:
        parts = self.chain_.state_dict(self.state_)
        return {"version": self.state_version, **parts} if parts else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        keys = sorted(self.chain_.state_dict(self.state_))
        if not keys:
            super().load_state_dict(state)
            return
        if state.get("version") != self.state_version or any(k not in state for k in keys):
            raise ValueError(
                f"not a {self.name} shaper state (version {state.get('version')!r}, keys {sorted(state)}); "
                f"expected version {self.state_version} with {', '.join(map(repr, keys))}"
            )
        self.state_ = self.chain_.load_state(state, self.state_)
