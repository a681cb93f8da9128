"""Token-level policy losses: clipped surrogate, loss aggregation, KL estimators (the token checks they share
are :mod:`dynashape.losses.tokens`; the entropy advantage, :mod:`dynashape.losses.entropy`, is re-exported here).

Layer 1 of dynashape: pure functions, tensors in, named results out, explicit keyword hyperparameters.
The reference trainer and the TRL adapter call these; the DRPO objective lives in :mod:`dynashape.losses.drpo`.

Shapes: ``B`` sequences (rollouts) of ``T`` response positions. ``response_mask`` [B, T] is 1 (or True) on the
response tokens that count, 0 on padding. Every diagnostic is a detached 0-dim tensor (no host sync here;
the caller decides when to call ``.item()``).

Precision: everything is computed in float32 or wider (``torch.promote_types(dtype, float32)``) whatever the
log-probs' dtype, and returned in that dtype. In bf16 a token count stops being exact past 256 (a sum of 4001
ones is 4000) and an advantage keeps 3 significant digits; bf16 log-probs are upcast, and their gradient
flows back through the cast.

Conventions follow verl's ``core_algos.py`` (``compute_policy_loss_vanilla``, ``agg_loss``, ``kl_penalty``) so
that a run with our trainer and a run with verl optimise the same numbers.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from dynashape.losses.entropy import EntropyAdvantage, entropy_advantage
from dynashape.losses.tokens import (
    broadcast_advantages,
    check_token_tensors,
    compute_dtype,
    kept_mask,
    masked_mean,
)

__all__ = [
    "AGG_MODES",
    "KL_ESTIMATORS",
    "EntropyAdvantage",
    "PolicyLoss",
    "SurrogateLoss",
    "aggregate_loss",
    "clipped_surrogate_loss",
    "compute_dtype",
    "entropy_advantage",
    "kept_mask",
    "kl_estimate",
    "masked_mean",
    "policy_loss",
]

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

# Aliases as verl spells them: k1 = "kl", k2 = "mse", k3 = "low_var_kl".
KL_ESTIMATORS: dict[str, str] = {
    "k1": "k1",
    "kl": "k1",
    "k2": "k2",
    "mse": "k2",
    "k3": "k3",
    "low_var_kl": "k3",
}

# verl clamps the log-ratio before exp() so that one token with a huge ratio cannot overflow to inf.
_LOG_RATIO_CLAMP = 20.0
# verl clamps the k3 value itself to [-10, 10] (k3 >= 0, so only the upper bound can bind).
_K3_VALUE_CLAMP = 10.0


# ----------------------------------------------------------------------------------------------------------
# aggregation
# ----------------------------------------------------------------------------------------------------------
def aggregate_loss(
    loss_mat: Tensor,
    response_mask: Tensor,
    *,
    mode: AggMode = "token-mean",
    denominator: float | Tensor | None = None,
) -> Tensor:
    """Reduce a per-token loss matrix to a scalar, as verl's ``agg_loss``.

    Modes (m = response_mask, L = loss_mat):
      - ``token-mean`` (DAPO's token-level loss, arXiv 2503.14476): sum_{b,t} L m / sum_{b,t} m. Every valid token of
        the batch weighs the same, so long responses weigh more.
      - ``seq-mean-token-mean`` (GRPO, arXiv 2402.03300): mean over sequences of (sum_t L m / sum_t m).
      - ``seq-mean-token-sum``: mean over sequences of sum_t L m.
    In both ``seq-mean`` modes a sequence without any valid token is left out of the denominator (verl >= 0.7).

    Args:
        loss_mat: float Tensor [B, T].
        response_mask: Tensor [B, T], 1 / True on valid tokens.
        mode: one of :data:`AGG_MODES`.
        denominator: the global count to divide by when a batch is split into micro-batches for gradient
            accumulation (valid tokens of the whole batch for ``token-mean``, non-empty sequences for the
            ``seq-mean`` modes; verl's ``batch_num_tokens`` / ``global_batch_size``). Default: this batch's own
            count, which makes the result the plain mean.

    Returns:
        0-dim tensor. A batch without any valid token gives 0 (verl would give NaN).
    """
    mask = check_token_tensors(response_mask, loss_mat=loss_mat)
    loss_mat = loss_mat.to(mask.dtype)
    # A tensor denominator is not checked here: reading its value would force a device sync per micro-batch.
    if denominator is not None and not isinstance(denominator, Tensor) and not (denominator > 0.0):
        raise ValueError(f"denominator must be > 0, got {denominator}")
    if mode == "token-mean":
        total = (loss_mat * mask).sum()
        own_count = mask.sum()
    elif mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        tokens_per_seq = mask.sum(dim=-1)
        seq_loss = (loss_mat * mask).sum(dim=-1)
        if mode == "seq-mean-token-mean":
            # An empty row has seq_loss 0; clamp avoids 0/0 without changing non-empty rows.
            seq_loss = seq_loss / tokens_per_seq.clamp(min=1.0)
        total = seq_loss.sum()
        own_count = (tokens_per_seq > 0).to(loss_mat.dtype).sum()
    else:
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    if denominator is None:
        # clamp: an all-padding batch gives 0 / 1 = 0 rather than verl's 0 / 0 = NaN.
        return total / own_count.clamp(min=1.0)
    return total / denominator


# ----------------------------------------------------------------------------------------------------------
# KL estimators
# ----------------------------------------------------------------------------------------------------------
def kl_estimate(
    log_prob: Tensor,
    ref_log_prob: Tensor,
    *,
    estimator: str = "k3",
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (J. Schulman, "Approximating KL
    divergence", 2020; verl ``kl_penalty``).

    With x = log pi(y) - log pi_ref(y) and r = pi_ref(y) / pi(y) = exp(-x):
      - ``k1`` (alias ``kl``): x. Unbiased, high variance, can be negative.
      - ``k2`` (alias ``mse``): 0.5 x^2. Biased, low variance, >= 0; its gradient is the KL gradient.
      - ``k3`` (alias ``low_var_kl``): r - 1 - log r = exp(-x) + x - 1. Unbiased, >= 0, low variance.
        As verl: -x is clamped to [-20, 20] before exp and the value to [-10, 10] (only the upper bound can
        bind, since k3 >= 0), so one runaway token cannot produce inf.

    Args:
        log_prob: float Tensor [...], log-probs of the sampled tokens under pi (carries the gradient).
        ref_log_prob: float Tensor, same shape, under pi_ref.
        estimator: ``k1``/``kl``, ``k2``/``mse`` or ``k3``/``low_var_kl``.

    Returns:
        float Tensor, same shape: the per-token estimate (aggregate it with :func:`aggregate_loss`).
    """
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"ref_log_prob must have the shape of log_prob {tuple(log_prob.shape)}, got {tuple(ref_log_prob.shape)}"
        )
    kind = KL_ESTIMATORS.get(estimator)
    if kind is None:
        raise ValueError(f"estimator must be one of {sorted(KL_ESTIMATORS)}, got {estimator!r}")
    dtype = compute_dtype(torch.promote_types(log_prob.dtype, ref_log_prob.dtype))
    log_prob, ref_log_prob = log_prob.to(dtype), ref_log_prob.to(dtype)
    if kind == "k1":
        return log_prob - ref_log_prob
    if kind == "k2":
        return 0.5 * (log_prob - ref_log_prob).square()
    log_r = (ref_log_prob - log_prob).clamp(min=-_LOG_RATIO_CLAMP, max=_LOG_RATIO_CLAMP)
    return (torch.exp(log_r) - log_r - 1.0).clamp(min=-_K3_VALUE_CLAMP, max=_K3_VALUE_CLAMP)


# ----------------------------------------------------------------------------------------------------------
# clipped surrogate
# ----------------------------------------------------------------------------------------------------------
class SurrogateLoss(NamedTuple):
    """Result of :func:`clipped_surrogate_loss`. Every field but ``loss`` and ``token_loss`` is detached."""

    loss: Tensor
    """0-dim: the aggregated clipped surrogate loss (to minimise)."""
    token_loss: Tensor
    """[B, T]: the per-token loss before aggregation (0 on padding)."""
    clip_frac: Tensor
    """Fraction of valid tokens where the clipped term is the active one (verl ``pg_clipfrac``)."""
    clip_frac_high: Tensor
    """Fraction of valid tokens with A > 0 and ratio > 1 + eps_high."""
    clip_frac_low: Tensor
    """Fraction of valid tokens with A < 0 and ratio < 1 - eps_low."""
    dual_clip_frac: Tensor
    """Fraction of valid tokens with A < 0 where the dual clip binds (verl ``pg_clipfrac_lower``); 0 if off."""
    approx_kl: Tensor
    """Token-mean of log pi_old - log pi (k1 estimate of KL(pi_old || pi); verl ``ppo_kl``)."""
    ratio_mean: Tensor
    """Token-mean of the importance ratio pi / pi_old."""


def clipped_surrogate_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = None,
    agg: AggMode = "token-mean",
    denominator: float | Tensor | None = None,
) -> SurrogateLoss:
    """PPO clipped surrogate with decoupled clip range and optional dual clip.

    Per token, with r = exp(log_prob - old_log_prob) (log-ratio clamped to [-20, 20] as verl does):
        l = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))    (PPO, arXiv 1707.06347, Eq. 7, with DAPO's
                                                                decoupled clip-higher range, arXiv 2503.14476)
        if A < 0 and dual_clip = c:  l = min(l, -A c)            (dual-clip PPO, Ye et al., arXiv 1912.09729)
    The dual clip bounds the loss of a negative-advantage token whose ratio exploded (r > c) at |A| c.
    The defaults are DAPO's clip-higher (0.2 / 0.28); pass ``eps_high=0.2`` for the symmetric PPO/GRPO range.

    Args:
        log_prob: float Tensor [B, T], log-probs of the sampled tokens under the current policy (with grad).
        old_log_prob: float Tensor [B, T], under the policy that sampled them (no grad needed).
        advantages: float Tensor [B] (broadcast over tokens) or [B, T].
        response_mask: Tensor [B, T], 1 / True on valid response tokens.
        eps_low: lower clip range, ratio floor 1 - eps_low; in [0, 1).
        eps_high: upper clip range, ratio ceiling 1 + eps_high; >= 0.
        dual_clip: the constant c > 1 of dual-clip PPO (MEDS/DAPO recipe: 10; verl default 3), or None for off.
        agg: aggregation mode, see :func:`aggregate_loss`.
        denominator: global count for micro-batching, see :func:`aggregate_loss`.

    Returns:
        :class:`SurrogateLoss`.
    """
    if not (0.0 <= eps_low < 1.0):
        raise ValueError(f"eps_low must be in [0, 1), got {eps_low}")
    if not (eps_high >= 0.0 and math.isfinite(eps_high)):
        raise ValueError(f"eps_high must be a finite number >= 0, got {eps_high}")
    if dual_clip is not None and not (dual_clip > 1.0 and math.isfinite(dual_clip)):
        raise ValueError(f"dual_clip must be a finite number > 1 or None, got {dual_clip}")
    mask = check_token_tensors(response_mask, log_prob=log_prob, old_log_prob=old_log_prob)
    adv = broadcast_advantages(advantages, response_mask).to(mask.dtype)
    log_prob, old_log_prob = log_prob.to(mask.dtype), old_log_prob.to(mask.dtype)

    log_ratio = (log_prob - old_log_prob).clamp(min=-_LOG_RATIO_CLAMP, max=_LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(min=1.0 - eps_low, max=1.0 + eps_high)
    token_loss = torch.maximum(unclipped, clipped)
    negative = adv < 0
    if dual_clip is not None:
        dual = -adv * dual_clip
        dual_binds = negative & (token_loss > dual)
        token_loss = torch.where(negative, torch.minimum(token_loss, dual), token_loss)
    else:
        dual_binds = torch.zeros_like(negative)
    token_loss = token_loss * mask
    loss = aggregate_loss(token_loss, response_mask, mode=agg, denominator=denominator)

    with torch.no_grad():
        ratio_d = ratio.detach()
        clip_frac = masked_mean((clipped > unclipped).to(mask.dtype), mask)
        clip_frac_high = masked_mean(((adv > 0) & (ratio_d > 1.0 + eps_high)).to(mask.dtype), mask)
        clip_frac_low = masked_mean((negative & (ratio_d < 1.0 - eps_low)).to(mask.dtype), mask)
        dual_clip_frac = masked_mean(dual_binds.to(mask.dtype), mask)
        approx_kl = masked_mean(-log_ratio.detach(), mask)
        ratio_mean = masked_mean(ratio_d, mask)
    return SurrogateLoss(
        loss=loss,
        token_loss=token_loss,
        clip_frac=clip_frac,
        clip_frac_high=clip_frac_high,
        clip_frac_low=clip_frac_low,
        dual_clip_frac=dual_clip_frac,
        approx_kl=approx_kl,
        ratio_mean=ratio_mean,
    )


# ----------------------------------------------------------------------------------------------------------
# full policy loss: surrogate + KL to a reference - entropy bonus
# ----------------------------------------------------------------------------------------------------------
class PolicyLoss(NamedTuple):
    """Result of :func:`policy_loss`: ``loss = pg_loss + kl_coef * kl - entropy_coef * entropy``."""

    loss: Tensor
    """0-dim: the total loss to minimise."""
    pg_loss: Tensor
    """0-dim: the clipped surrogate part."""
    kl: Tensor
    """0-dim: aggregated KL estimate to the reference (0 when no ``ref_log_prob``)."""
    entropy: Tensor
    """0-dim: aggregated token entropy (0 when no ``entropy``)."""
    surrogate: SurrogateLoss
    """The surrogate's diagnostics (clip fractions, approx KL, ...)."""


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = None,
    agg: AggMode = "token-mean",
    denominator: float | Tensor | None = None,
    ref_log_prob: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    keep: Tensor | None = None,
) -> PolicyLoss:
    """Clipped surrogate plus optional KL-to-reference penalty and entropy bonus, as verl's actor update.

    loss = agg(surrogate) + kl_coef * agg(kl_estimate(log_prob, ref_log_prob)) - entropy_coef * agg(H)
    (the KL term enters with a + sign, as verl's ``use_kl_loss``; all terms use the same aggregation).

    Args:
        log_prob, old_log_prob, advantages, response_mask, eps_low, eps_high, dual_clip, agg, denominator:
            see :func:`clipped_surrogate_loss`.
        ref_log_prob: float Tensor [B, T] under the frozen reference policy, or None. Given with
            ``kl_coef == 0`` the KL is still computed and reported (a diagnostic, no gradient effect).
        kl_coef: weight of the KL term, >= 0; > 0 requires ``ref_log_prob``.
        kl_estimator: see :func:`kl_estimate`.
        entropy: float Tensor [B, T] of per-token policy entropy (with grad for a bonus), or None. Given with
            ``entropy_coef == 0`` it is reported only.
        entropy_coef: weight of the entropy bonus, >= 0; > 0 requires ``entropy``.
        keep: BoolTensor [B] of the rows a filter keeps, or None for all (see :func:`kept_mask`): a dropped
            row leaves every term and every token count. A ``denominator`` given with it must count kept
            tokens only.

    Returns:
        :class:`PolicyLoss`.
    """
    if not (kl_coef >= 0.0 and math.isfinite(kl_coef)):
        raise ValueError(f"kl_coef must be a finite number >= 0, got {kl_coef}")
    if not (entropy_coef >= 0.0 and math.isfinite(entropy_coef)):
        raise ValueError(f"entropy_coef must be a finite number >= 0, got {entropy_coef}")
    if kl_coef > 0.0 and ref_log_prob is None:
        raise ValueError(f"kl_coef={kl_coef} > 0 needs ref_log_prob, got None")
    if entropy_coef > 0.0 and entropy is None:
        raise ValueError(f"entropy_coef={entropy_coef} > 0 needs entropy, got None")
    response_mask = kept_mask(response_mask, keep)
    sur = clipped_surrogate_loss(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        agg=agg,
        denominator=denominator,
    )
    zero = sur.loss.new_zeros(())
    kl = zero
    if ref_log_prob is not None:
        check_token_tensors(response_mask, ref_log_prob=ref_log_prob)
        kl = aggregate_loss(
            kl_estimate(log_prob, ref_log_prob, estimator=kl_estimator),
            response_mask,
            mode=agg,
            denominator=denominator,
        )
    ent = zero
    if entropy is not None:
        check_token_tensors(response_mask, entropy=entropy)
        ent = aggregate_loss(entropy, response_mask, mode=agg, denominator=denominator)
    loss = sur.loss + kl_coef * kl - entropy_coef * ent
    return PolicyLoss(loss=loss, pg_loss=sur.loss, kl=kl, entropy=ent, surrogate=sur)
