"""The penalties engines ship beside every method, as parts acting on a method's reward channel (channel 0).

`Overlong`: DAPO's soft overlong punishment, added to the reward (Yu et al., arXiv 2503.14476, Eq. 13; verl
``workers/reward_manager/dapo.py``, TRL ``get_soft_overlong_punishment``). `StopProperly`: ProRL's stop-properly
penalty, the reward of a response the engine cut at its cap multiplied by a coefficient (NVlabs/DLER@ea7d4f7b,
``verl-dler/verl/workers/reward_manager/dapo.py``, ``_apply_stop_properly_penalty``).

Both act on channel 0, the method's own reward for single-channel methods (DLER's capped score, LASER's bonus,
GRPO's verdict) and correctness for multi-channel ones (LEAD, GDPO, SAW, L1-Exact): in the engines these
penalties change the reward function's score, which is the verifier's. In the official reward manager the
overlong term is added to the score first and the stop-properly multiplier applied after, so that order is kept
when both are given. ``get_shaper(name, overlong={...}, stop_properly=0.1)`` puts them right after a method's
first part (`with_penalties`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.checks import require_range
from dynashape.rewards.length import (
    OVERLONG_BUFFER,
    OVERLONG_FACTOR,
    STOP_PROPERLY_COEF,
    overlong_penalty,
    stop_properly_scale,
)
from dynashape.shapers._common import F64
from dynashape.shapers.parts.flow import Chain, Flow, Part, Stateless

__all__ = ["PENALTY_KEYS", "Overlong", "StopProperly", "penalty_key", "penalty_parts", "with_penalties"]

#: The keyword parameters every composed shaper takes beside its config (``get_shaper``, verl, TRL).
PENALTY_KEYS: tuple[str, ...] = ("overlong", "stop_properly")


def require_input(flow: Flow, field: str, namespace: str, what: str) -> torch.Tensor:
    """The batch's optional input `field`, or a ValueError naming it (never a silent default)."""
    value = getattr(flow.batch, field)
    if value is None:
        raise ValueError(f"shaper {namespace!r} needs {field} [N] in the batch ({what}), got None")
    return value


def _channel0(flow: Flow, part: str) -> torch.Tensor:
    channels = flow.require("channels", part)
    return channels[:, 0]


def _with_channel0(flow: Flow, column: torch.Tensor, value_range: tuple[float, float]) -> Flow:
    channels = flow.channels.clone()  # type: ignore[union-attr]  # _channel0 checked it is set
    channels[:, 0] = column
    return flow.but(channels=channels, ranges=(value_range, *flow.ranges[1:]))


@dataclass(frozen=True)
class Overlong(Stateless):
    """r_0 + factor * R(l) with DAPO's R: 0 up to max_length - buffer, falling linearly to -1 at max_length
    (`dynashape.rewards.overlong_penalty`, float32 as verl's reward tensor; -1 beyond max_length, the paper's
    flat tail where the engine's cap is longer). Logs the share of penalised rollouts."""

    max_length: int
    buffer: int = OVERLONG_BUFFER
    factor: float = OVERLONG_FACTOR
    namespace: str = "overlong"

    def __post_init__(self) -> None:
        overlong_penalty(torch.zeros(1, dtype=torch.long), self.max_length, self.buffer, self.factor)  # validates

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = _channel0(flow, "Overlong")
        term = overlong_penalty(flow.batch.lengths, self.max_length, self.buffer, self.factor).to(reward.device, F64)
        low, high = flow.ranges[0]
        flow = _with_channel0(flow, reward + term, (low - self.factor, high))
        if "score" in flow.values:  # DAPO's manager adds the term to the score itself (DLER's boost reads it)
            flow = flow.but(values={"score": flow.values["score"] + term})
        return flow.but(metrics={f"{self.namespace}/penalised_frac": float((term < 0).to(F64).mean())}), None


@dataclass(frozen=True)
class StopProperly(Stateless):
    """r_0 * coef on the rollouts the engine truncated (``batch.truncated``), r_0 elsewhere
    (`dynashape.rewards.stop_properly_scale`). A batch without ``truncated`` is refused, naming it."""

    coef: float = STOP_PROPERLY_COEF
    namespace: str = "stop_properly"

    def __post_init__(self) -> None:
        require_range("stop_properly", self.coef, 0.0, None)

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = _channel0(flow, "StopProperly")
        what = "whether each response was cut at the engine's length cap"
        truncated = require_input(flow, "truncated", self.namespace, what)
        scaled = reward * stop_properly_scale(truncated, self.coef).to(reward.device)
        low, high = flow.ranges[0]
        ends = (low, high, low * self.coef, high * self.coef)
        finite = [e for e in ends if e == e]  # inf * 0 is NaN: an unbounded end stays unbounded
        value_range = (min(finite), max(finite)) if len(finite) == 4 else (low, high)
        flow = flow.but(metrics={f"{self.namespace}/truncated_frac": float(truncated.to(F64).mean())})
        return _with_channel0(flow, scaled, value_range), None


def penalty_parts(overlong: Any = None, stop_properly: Any = None) -> tuple[Part, ...]:
    """The parts for ``get_shaper``'s penalty keywords: ``overlong`` a mapping ``{max_length, buffer=4096,
    factor=1.0}`` (or an `Overlong`), ``stop_properly`` the truncated rows' multiplier (official 0.1; ``True``
    for 0.1). Overlong first, as DAPO's reward manager adds it to the score before the multiplier."""
    parts: list[Part] = []
    if overlong is not None:
        if isinstance(overlong, Mapping):
            unknown = sorted(set(overlong) - {"max_length", "buffer", "factor"})
            if unknown or "max_length" not in overlong:
                raise ValueError(
                    f"overlong={dict(overlong)!r}: give max_length (the engine's response cap) and optionally "
                    f"buffer (default {OVERLONG_BUFFER}) and factor (default {OVERLONG_FACTOR})"
                )
            overlong = Overlong(**dict(overlong))
        if not isinstance(overlong, Overlong):
            raise ValueError(f"overlong must be a mapping {{max_length, buffer, factor}}, got {overlong!r}")
        parts.append(overlong)
    if stop_properly is not None and stop_properly is not False:
        coef = STOP_PROPERLY_COEF if stop_properly is True else stop_properly
        parts.append(StopProperly(coef))
    return tuple(parts)


def penalty_key(part: Part) -> str | None:
    """The ``get_shaper`` keyword that gives `part` (``"overlong"``, ``"stop_properly"``), None for another part."""
    return {Overlong: "overlong", StopProperly: "stop_properly"}.get(type(part))  # type: ignore[call-overload]


def with_penalties(chain: Chain, parts: tuple[Part, ...]) -> Chain:
    """`chain` with `parts` right after its first part (the one that writes the method's reward, channel 0)."""
    if not parts:
        return chain
    return Chain(chain.parts[0], *parts, *chain.parts[1:])
