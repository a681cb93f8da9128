"""MEDS shapers (arXiv 2604.11297): `meds` (penalised scalar reward, GRPO normalisation) and `lead_meds` (the penalty
on LEAD's correctness channel, then LEAD's chain from `dynashape.shapers.recipes`).

Both stay whole `Shaper` classes rather than recipes: their state is the error memory, an object that fits HDBSCAN
clusterings as it is visited and may run refit workers in other processes (``close`` stops them), where a part's
state is plain values advanced by a pure update. One call = one memory visit for every prompt in the batch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_normalize
from dynashape.meds.memory import DEFAULT_MAX_PER_BANK, DEFAULT_MAX_POINTS
from dynashape.meds.penalty import repeat_penalty
from dynashape.methods.lead.config import LeadConfig
from dynashape.methods.lead.psi import ControllerStep, PSIController
from dynashape.shapers._common import F64, metrics_dict
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds
from dynashape.shapers.parts import Chain, Flow, start
from dynashape.shapers.recipes import lead as lead_recipe
from dynashape.shapers.registry import register_shaper

if TYPE_CHECKING:
    from dynashape.meds.memory import ErrorMemory, MemoryConfig

__all__ = [
    "LeadMedsConfig",
    "LeadMedsShaper",
    "LeadOutput",
    "MedsConfig",
    "MedsShaper",
    "check_lead_batch",
    "lead_advantages",
    "lead_metrics",
]

_STATE_VERSION = 1
TARGETS = ("wrong", "right", "both")


@dataclass(frozen=True, kw_only=True)
class MedsConfig:
    alpha: float = 0.1
    """Slope of the penalty min(alpha * ln(|C| + 1), beta) (official 0.1; 0.02 for Qwen3-8B)."""
    beta: float | None = None
    """Cap of the penalty; None = 2 * alpha (the official pairing)."""
    k: int = 3
    """Neighbours in the kNN vote that assigns a new fingerprint to a stored cluster."""
    min_cluster_size: int = 2
    """HDBSCAN min_cluster_size."""
    min_samples: int = 1
    """HDBSCAN min_samples."""
    target: str = "wrong"
    """Which rollouts are remembered and penalised: wrong (official), right, or both (one bank per verdict)."""
    cluster_method: str = "hdbscan"
    """hdbscan (official) or single (paper ablation: the whole bank is one cluster)."""
    backend: str = "sklearn"
    """HDBSCAN implementation: sklearn (scikit-learn) or hdbscan (the package the official code uses)."""
    max_per_bank: int | None = DEFAULT_MAX_PER_BANK
    """Keep at most this many fingerprints per bank, oldest dropped first; None = never prune (the official
    code; the default never binds in the papers' settings, see ``MemoryConfig``)."""
    max_points: int | None = DEFAULT_MAX_POINTS
    """Keep at most this many fingerprints in all banks, forgetting the least recently visited banks; None = no
    bound (the official code; the default never binds in the papers' settings, see ``MemoryConfig``)."""
    background: bool = False
    """Refit banks off the step's critical path (awaited at a bank's next visit); same penalties."""
    workers: int = 0
    """Worker processes for refits (0 = in this process)."""
    wrong_reward: float = 0.0
    """Base reward of a wrong answer (a correct one scores 1): 0 as the verifier gives; -1 reproduces the +1/-1
    scores of DAPO's reward manager that the official MEDS recipe trains with (the penalty's weight relative
    to the correctness gap halves with 0/1). Used by the `meds` shaper only; lead_meds keeps LEAD's 0/1."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_range("wrong_reward", self.wrong_reward, None, 1.0, high_open=True)
        if self.beta is None:
            object.__setattr__(self, "beta", 2.0 * self.alpha)
        require_range("beta", self.beta, 0.0, None)
        require_choice("target", self.target, TARGETS)
        self.memory_config()  # the memory's own config validates the rest, naming the field

    def memory_config(self) -> MemoryConfig:
        from dynashape.meds.memory import MemoryConfig

        return MemoryConfig(
            k=self.k,
            min_cluster_size=self.min_cluster_size,
            min_samples=self.min_samples,
            cluster_method=self.cluster_method,  # type: ignore[arg-type]
            backend=self.backend,  # type: ignore[arg-type]
            max_per_bank=self.max_per_bank,
            max_points=self.max_points,
            workers=self.workers,
            background=self.background,
        )

    def memory(self) -> ErrorMemory:
        from dynashape.meds.memory import ErrorMemory

        return ErrorMemory.from_config(self.memory_config())


@dataclass(frozen=True)
class LeadOutput:
    """Everything one LEAD step computed (float64 unless noted), for the shaper, tests and plots."""

    advantages: torch.Tensor  # [N], after whitening
    channels: torch.Tensor  # [N, K] raw channel rewards: correctness, r_l, extras
    channel_advantages: torch.Tensor  # [N, K] group-normalised
    targets: torch.Tensor  # [G] L*_q
    step: ControllerStep
    mu: torch.Tensor  # [K]
    sigma: torch.Tensor  # [K]
    groups: Groups
    metrics: dict[str, float]  # LEAD's logged metrics (docs/algorithms.md "LEAD"), namespaced "lead/"


def check_lead_batch(batch: RolloutBatch, config: LeadConfig) -> None:
    """Refuse a batch LEAD cannot use, before any state moves: `rewards` columns must match `reward_ranges`."""
    if config.reward_ranges:
        if batch.rewards is None or batch.rewards.shape[1] != len(config.reward_ranges):
            got = None if batch.rewards is None else tuple(batch.rewards.shape)
            raise ValueError(
                f"lead reward_ranges declares {len(config.reward_ranges)} extra channels but batch rewards "
                f"has shape {got}"
            )
    elif batch.rewards is not None:
        raise ValueError(
            f"shaper 'lead' got rewards of shape {tuple(batch.rewards.shape)} but reward_ranges is empty; "
            "declare each column's [R_min, R_max] in reward_ranges to use them as channels"
        )


def _lead_output(flow: Flow) -> LeadOutput:
    values = flow.values
    return LeadOutput(
        advantages=flow.require("advantages", "lead"),
        channels=flow.require("channels", "lead"),
        channel_advantages=values["channel_advantages"],
        targets=values["targets"],
        step=values["controller_step"],
        mu=values["mu"],
        sigma=values["sigma"],
        groups=flow.groups,
        metrics=dict(flow.metrics),
    )


def lead_advantages(
    batch: RolloutBatch,
    correctness: torch.Tensor,
    controller: PSIController,
    config: LeadConfig,
) -> LeadOutput:
    """One LEAD step on a batch, with the correctness channel given (0/1, or minus MEDS's penalty).

    correctness: float Tensor [N]. Target lengths and the efficiency channel's controller mask always use the
    verifier's verdict `batch.correct`. Advances `controller` once, after `check_lead_batch` accepted the batch.
    """
    check_lead_batch(batch, config)
    # this page's lead chain without its Correctness part: the flow arrives with the correctness channel set
    chain = Chain(*lead_recipe(**{f.name: getattr(config, f.name) for f in fields(LeadConfig)}).parts[1:])
    head = start(batch).with_channel(correctness.to(F64), (0.0, 1.0))
    state = tuple(controller.state_dict() if p.state_key else None for p in chain.parts)
    flow, state = chain.update(head, state)
    controller.load_state_dict(chain.state_dict(state)["controller"])
    return _lead_output(flow)


def lead_metrics(out: LeadOutput, batch: RolloutBatch, prefix: str = "lead") -> dict[str, float]:
    """LEAD's logged metrics (docs/algorithms.md "LEAD") (plus one lambda per extra channel), under `prefix`."""
    return {f"{prefix}/{key.partition('/')[2]}": value for key, value in out.metrics.items()}


class _MemoryPenalty:
    """Glue shared by both shapers: pick the rows to remember, visit the memory, turn |C| into penalties."""

    def __init__(self, config: MedsConfig) -> None:
        self.config = config
        self.memory_ = config.memory()

    def __call__(self, batch: RolloutBatch, name: str) -> tuple[torch.Tensor, dict[str, float]]:
        if batch.prompt_keys is None or batch.fingerprints is None:
            missing = [f for f in ("prompt_keys", "fingerprints") if getattr(batch, f) is None]
            raise ValueError(f"shaper {name!r} needs {' and '.join(missing)} in the batch (MEDS memory)")
        t0 = time.perf_counter()
        correct = batch.correct
        targeted = {"wrong": ~correct, "right": correct, "both": torch.ones_like(correct)}[self.config.target]
        # a rollout without a fingerprint (no \boxed{} in its answer) is never stored and never penalised
        rows = torch.nonzero(targeted & ~torch.isnan(batch.fingerprints).all(dim=1)).reshape(-1)
        idx = rows.cpu().numpy()
        sizes = self.memory_.update(
            [batch.prompt_keys[i] for i in idx],
            correct[rows].cpu().numpy(),
            batch.fingerprints[rows].detach().cpu().to(torch.float32).numpy(),
        )
        penalty = torch.zeros(len(batch), dtype=F64, device=batch.device)
        sizes_t = torch.from_numpy(np.asarray(sizes)).to(batch.device)
        penalty[rows] = repeat_penalty(sizes_t, alpha=self.config.alpha, beta=self.config.beta)  # type: ignore[arg-type]
        stats = self.memory_.stats()
        metrics = {
            "meds/penalized_frac": float((penalty > 0).to(F64).mean()),
            "meds/penalty_mean": float(penalty.mean()),
            "meds/cluster_size_mean": float(sizes_t.to(F64).mean()) if len(idx) else 0.0,
            "meds/banks": stats["banks"],
            "meds/points": stats["points"],
            "meds/clusters_per_bank": stats["clusters_per_bank"],
            "meds/noise_frac": stats["noise_frac"],
            "meds/memory_bytes": stats["memory_bytes"],
            "meds/seconds": time.perf_counter() - t0,
        }
        return penalty, metrics

    def state_dict(self) -> dict[str, Any]:
        return self.memory_.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.memory_.load_state_dict(dict(state))

    def close(self) -> None:
        self.memory_.close()


def _check_state(state: Mapping[str, Any], name: str, keys: tuple[str, ...]) -> None:
    if state.get("version") != _STATE_VERSION or any(k not in state for k in keys):
        raise ValueError(
            f"not a {name} shaper state (version {state.get('version')!r}, keys {sorted(state)}); "
            f"expected version {_STATE_VERSION} with {', '.join(keys)}"
        )


@register_shaper("meds")
class MedsShaper(Shaper):
    """MEDS: r~ = r - min(alpha ln(|C| + 1), beta) on the targeted rollouts, then GRPO normalisation
    (unbiased std, eps 1e-6). r = correctness (1, or `wrong_reward` for a wrong answer) plus the sum of the
    batch's `rewards` columns (e.g. DAPO's overlong term). Needs `prompt_keys` and `fingerprints` in the batch.
    State: the error memory.

    The official code divides a correct rollout's score by (1 + penalty) when correct answers are targeted
    (`target="right"/"both"`); we subtract, as the paper's equation does. The default (`target="wrong"`) is identical.
    Only targeted banks are stored (the official code also fills the untargeted bank, which never affects a
    penalty). A whole class, not a recipe: the memory is no part's plain-value state (the module docstring)."""

    display_name = "MEDS"

    config_cls = MedsConfig
    needs = ShaperNeeds(fingerprints=True, prompt_keys=True, reward_channels="optional")

    def reset(self) -> None:
        if getattr(self, "penalty_", None) is not None:
            self.penalty_.close()
        self.penalty_ = _MemoryPenalty(self.config)

    def shape(self, batch: RolloutBatch) -> Shaped:
        reward = torch.where(batch.correct, 1.0, self.config.wrong_reward).to(F64)
        if batch.rewards is not None:
            reward = reward + batch.rewards.to(F64).sum(dim=1)
        penalty, metrics = self.penalty_(batch, self.name)
        shaped = reward - penalty
        groups = Groups.from_ids(batch.group_ids)
        adv = group_normalize(shaped, groups, eps=1e-6)
        metrics.update(metrics_dict(self.name, ["reward_mean", "shaped_reward_mean"], [reward.mean(), shaped.mean()]))
        return Shaped(advantages=adv.float(), rewards=shaped.float().unsqueeze(1), metrics=metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "memory": self.penalty_.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, ("memory",))
        self.penalty_.load_state_dict(state["memory"])

    def close(self) -> None:
        """Stop background refit workers, if any."""
        self.penalty_.close()


@dataclass(frozen=True, kw_only=True)
class LeadMedsConfig(LeadConfig):
    """All LEAD fields, plus the MEDS settings nested under `meds` (LEAD and MEDS both have alpha, beta and
    target, so they cannot share one flat namespace): get_shaper("lead_meds", b_max=4000, meds={"alpha": 0.02})."""

    meds: MedsConfig = field(default_factory=MedsConfig)
    """The memory and penalty settings (a MedsConfig, or a dict of its fields)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.meds, Mapping):
            try:
                object.__setattr__(self, "meds", MedsConfig(**self.meds))
            except (TypeError, ValueError) as err:  # name the nested field the user typed
                raise type(err)(f"meds.{err}") from None
        if not isinstance(self.meds, MedsConfig):
            raise ValueError(f"meds must be a MedsConfig or a dict of its fields, got {type(self.meds).__name__}")

    def lead(self) -> LeadConfig:
        return LeadConfig(**{f.name: getattr(self, f.name) for f in fields(LeadConfig)})


@register_shaper("lead_meds")
class LeadMedsShaper(Shaper):
    """LEAD with MEDS: the repeated-error penalty is subtracted from the correctness channel before LEAD's
    decoupled normalisation (the ``lead`` recipe's chain after its Correctness part); target lengths and the
    efficiency mask still use the verifier's verdict. State: LEAD's controller and the error memory. A whole class,
    not a recipe: the memory is no part's plain-value state (the module docstring)."""

    display_name = "LEAD-MEDS"

    config_cls = LeadMedsConfig
    needs = ShaperNeeds(fingerprints=True, prompt_keys=True, reward_channels="optional")

    def reset(self) -> None:
        if getattr(self, "penalty_", None) is not None:
            self.penalty_.close()
        self.lead_config_ = self.config.lead()
        self.controller_ = self.lead_config_.controller()
        self.penalty_ = _MemoryPenalty(self.config.meds)

    def shape(self, batch: RolloutBatch) -> Shaped:
        check_lead_batch(batch, self.lead_config_)  # before the memory stores anything: a refused batch changes nothing
        penalty, metrics = self.penalty_(batch, self.name)
        out = lead_advantages(batch, batch.correct.to(F64) - penalty, self.controller_, self.lead_config_)
        metrics.update(lead_metrics(out, batch, "lead"))
        return Shaped(advantages=out.advantages.float(), rewards=out.channels.float(), metrics=metrics)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "controller": self.controller_.state_dict(),
            "memory": self.penalty_.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, ("controller", "memory"))
        self.controller_.load_state_dict(state["controller"])
        self.penalty_.load_state_dict(state["memory"])

    def close(self) -> None:
        self.penalty_.close()
