"""Filter parts: they set the flow's ``keep`` [N], the rows that stay in the loss (GFPO).

A normalisation after a filter takes its statistics over the kept rows only (`GroupNormalise`), and the loss
leaves the dropped rows out entirely (`Shaped.keep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynashape.methods.gfpo import AdaptiveKeep, GfpoConfig, gfpo_keep_mask
from dynashape.shapers.parts.flow import Flow, Holds
from dynashape.shapers.parts.normalise import scalarise

__all__ = ["KeepBest"]


@dataclass(frozen=True)
class KeepBest(Holds):
    """GFPO's filter (arXiv 2508.09726): per group, keep the k shortest ("length") or the k highest reward per
    token ("reward_per_token") of the scalarised reward (`dynashape.methods.gfpo_keep_mask`: the rows
    trl's ``torch.topk`` keeps, ties included, run on the CPU so that every device keeps the same). With
    ``adaptive_keep`` set, k comes from the difficulty quartile of each group's mean reward over a window of
    recent groups (`dynashape.methods.AdaptiveKeep`), whose state is ``{"history": [floats]}``;
    otherwise the part is stateless. Logs ``namespace/kept_fraction``."""

    config: GfpoConfig
    namespace: str = "gfpo"

    @property
    def state_key(self) -> str | None:  # type: ignore[override]
        return "difficulty" if self.config.adaptive_keep is not None else None

    def fresh(self) -> AdaptiveKeep:
        return AdaptiveKeep(self.config)

    def init(self) -> dict[str, Any] | None:
        return None if self.config.adaptive_keep is None else super().init()

    def update(self, flow: Flow, state: Any) -> tuple[Flow, Any]:
        reward = scalarise(flow, "KeepBest")
        k: Any = self.config.keep
        if self.config.adaptive_keep is not None:
            adaptive = AdaptiveKeep(self.config)
            adaptive.history_ = list(state["history"])  # checked when it was loaded (check_state)
            k = adaptive.keep_for(reward, flow.groups)
            state = adaptive.state_dict()
        keep = gfpo_keep_mask(reward, flow.batch.lengths, flow.groups, keep=k, by=self.config.by)
        metrics = {f"{self.namespace}/kept_fraction": float(keep.double().mean())}
        return flow.but(keep=keep, metrics=metrics), state
