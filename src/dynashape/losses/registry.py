"""The reference trainer's policy losses: one registry of name -> loss, one signature for all of them.

    loss, diagnostics = get_loss(cfg.loss)(LossInputs(...), cfg)

A loss takes one mini-batch's tensors and the step configuration and returns the scalar to minimise with its
diagnostics, so the loop never branches on which loss a preset chose. The configuration is typed by what the
losses read (`LossSettings`, which ``train.config.TrainConfig`` satisfies), so this module needs nothing from
the config module, which validates its ``loss`` field against this registry. The math stays in the pure core
(:func:`dynashape.losses.policy_loss`, :func:`dynashape.losses.drpo.drpo_loss`): a registered loss only picks its
hyperparameters out of the config. ``register_loss(name)`` adds one; a taken name raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from torch import Tensor

from dynashape.losses.drpo import drpo_loss
from dynashape.losses.policy import entropy_advantage, policy_loss

__all__ = ["Loss", "LossInputs", "LossOutput", "LossSettings", "available_losses", "get_loss", "register_loss"]


class EntropyAdvantageSettings(Protocol):
    """What the clip loss reads of the entropy advantage section (``EntropyAdvantageConfig``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def alpha(self) -> float: ...
    @property
    def kappa(self) -> float: ...


class DrpoSettings(Protocol):
    """What the DRPO loss reads of its section (``DrpoConfig``)."""

    @property
    def tau(self) -> float: ...
    @property
    def lam(self) -> float: ...
    @property
    def beta(self) -> float: ...
    @property
    def delta(self) -> float: ...


class LossSettings(Protocol):
    """The fields of the step configuration (``TrainConfig``) that the built-in losses read."""

    @property
    def eps_low(self) -> float: ...
    @property
    def eps_high(self) -> float: ...
    @property
    def dual_clip(self) -> float | None: ...
    @property
    def loss_agg(self) -> str: ...
    @property
    def kl_coef(self) -> float: ...
    @property
    def kl_estimator(self) -> str: ...
    @property
    def entropy_coef(self) -> float: ...
    @property
    def entropy_advantage(self) -> EntropyAdvantageSettings: ...
    @property
    def drpo(self) -> DrpoSettings: ...
    @property
    def max_new_tokens(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class LossInputs:
    """One mini-batch of B rollouts with T response positions, as every loss receives it.

    Attributes:
        logprobs: float [B, T], log-probs of the sampled tokens under the current policy (with grad).
        old_logprobs: float [B, T], under the policy that sampled them (detached).
        response_mask: [B, T], 1 on the response tokens that count, 0 on padding.
        advantages: float [B], the shaper's advantage of each rollout.
        group_ids: long [B], the prompt each rollout answers.
        correct: bool [B], the verifier's verdict.
        lengths: long [B], response lengths in tokens.
        ref_logprobs: float [B, T] under the frozen reference policy, or None (no KL term).
        entropy: float [B, T] per-token policy entropy (with grad), or None when the forward did not compute it.
        keep: bool [B], the rows the shaper's filter keeps (``Shaped.keep``), or None for all; a dropped row
            carries no loss term and none of its tokens is counted.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    response_mask: Tensor
    advantages: Tensor
    group_ids: Tensor
    correct: Tensor
    lengths: Tensor
    ref_logprobs: Tensor | None
    entropy: Tensor | None
    keep: Tensor | None = None


class LossOutput(NamedTuple):
    """What a loss returns: the 0-dim loss (with grad) and named 0-dim diagnostics (the loop averages them)."""

    loss: Tensor
    diagnostics: Mapping[str, Tensor]


Loss = Callable[[LossInputs, LossSettings], LossOutput]
L = TypeVar("L", bound=Loss)

_REGISTRY: dict[str, Loss] = {}


def register_loss(name: str) -> Callable[[L], L]:
    """Decorator registering ``loss(inputs, cfg) -> LossOutput`` under ``name``; a taken name raises ValueError."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"loss name must be a non-empty str, got {name!r}")

    def decorate(fn: L) -> L:
        if not callable(fn):
            raise TypeError(f"register_loss({name!r}) decorates a callable, got {fn!r}")
        taken = _REGISTRY.get(name)
        if taken is not None and taken is not fn:
            raise ValueError(f"loss name {name!r} is already registered to {getattr(taken, '__qualname__', taken)}")
        _REGISTRY[name] = fn
        return fn

    return decorate


def get_loss(name: str) -> Loss:
    """The loss registered as ``name``; an unknown name raises ValueError listing the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; available: {', '.join(available_losses())}") from None


def available_losses() -> list[str]:
    return sorted(_REGISTRY)


# ------------------------------------------------------------------------------------------- built-ins
@register_loss("clip")
def clip_loss(inputs: LossInputs, cfg: LossSettings) -> LossOutput:
    """Clipped surrogate with clip-higher and optional dual clip, plus KL to the reference and the entropy bonus
    (``policy_loss``), on the shaper's advantages with the optional entropy advantage (Cheng et al.) per token."""
    adv = inputs.advantages
    if cfg.entropy_advantage.enabled:
        ent = cfg.entropy_advantage
        adv = entropy_advantage(adv, inputs.entropy, alpha=ent.alpha, kappa=ent.kappa).advantages  # type: ignore[arg-type]
    out = policy_loss(
        inputs.logprobs,
        inputs.old_logprobs,
        adv,
        inputs.response_mask,
        eps_low=cfg.eps_low,
        eps_high=cfg.eps_high,
        dual_clip=cfg.dual_clip,
        agg=cfg.loss_agg,  # type: ignore[arg-type]
        ref_log_prob=inputs.ref_logprobs,
        kl_coef=cfg.kl_coef,
        kl_estimator=cfg.kl_estimator,
        entropy=inputs.entropy if cfg.entropy_coef > 0 else None,
        entropy_coef=cfg.entropy_coef,
        keep=inputs.keep,
    )
    diagnostics = {
        "loss": out.loss,
        "pg_loss": out.pg_loss,
        "kl": out.kl,
        "clip_frac": out.surrogate.clip_frac,
        "approx_kl": out.surrogate.approx_kl,
    }
    return LossOutput(out.loss, diagnostics)


@register_loss("drpo")
def drpo(inputs: LossInputs, cfg: LossSettings) -> LossOutput:
    """DRPO (arXiv 2510.04474) with L_max = the training budget; it scores rollouts by their own log-probs, so
    the shaper's advantages are not used (the loop still logs them)."""
    if inputs.keep is not None and not bool(inputs.keep.all()):
        raise ValueError("loss 'drpo' scores whole groups and cannot drop rows; use a shaper without a filter")
    d = cfg.drpo
    out = drpo_loss(
        inputs.logprobs,
        inputs.old_logprobs,
        inputs.response_mask,
        group_ids=inputs.group_ids,
        correct=inputs.correct,
        max_length=cfg.max_new_tokens,
        lengths=inputs.lengths,
        tau=d.tau,
        lam=d.lam,
        beta=d.beta,
        delta=d.delta,
    )
    return LossOutput(out.loss, {"loss": out.loss, "kl": out.kl, "drpo/objective": out.objective})
