"""DRPO: Decoupled Reward Policy Optimization (arXiv 2510.04474; official code: GitHub Optimization-AI/DRPO).

DRPO never gives a correct rollout a negative learning signal for being long. Within each group that has both
correct and wrong rollouts it maximises a discriminative objective: the score s_i (mean token log-prob) of every
correct rollout against a soft maximum of the wrong rollouts' scores, with the correct rollouts weighted by a
length-based softmax (the closed-form optimum of "maximise length reward under a KL constraint"). A trust-region
penalty on the KL between the sampling policy and the current one replaces PPO clipping.

Layer 1: a pure function on a flat batch with group ids (any ints, groups of unequal size), vectorised with
the deterministic segment reductions of :class:`dynashape.core.groups.Groups` (per-group sums) and
``scatter_reduce`` "amax"; no Python loop over groups. Computed in float32 or wider whatever the log-probs'
dtype (token counts and length weights are exact; see :mod:`dynashape.losses`).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from dynashape.core.groups import Groups
from dynashape.losses.tokens import check_token_tensors, masked_mean

__all__ = ["DrpoLoss", "drpo_loss"]

# Overflow guard of the trust region's exp: the log-ratio is clamped to [-20, 20] before exp (verl's clamp
# for the PPO ratio). The official code leaves it unclamped; the two agree wherever |log pi - log pi_old| <= 20
# (a ratio within [2e-9, 4.9e8]), and past that the official value overflows to inf in float32 (from 88.7).
_LOG_RATIO_CLAMP = 20.0


class DrpoLoss(NamedTuple):
    """Result of :func:`drpo_loss`. ``loss`` and ``objective`` carry gradients; the rest is detached."""

    loss: Tensor
    """0-dim: -objective + penalty (to minimise)."""
    objective: Tensor
    """0-dim: mean over ALL groups of the per-group objective (groups without both kinds count as 0)."""
    penalty: Tensor
    """0-dim: beta * max(kl - delta, 0) * kl (the coefficient is detached, as in the official code)."""
    kl: Tensor
    """0-dim: token-mean estimate of KL(pi_old || pi) over every valid token of the batch."""
    group_objective: Tensor
    """[G]: per-group objective, groups ordered by ascending group id (``torch.unique`` order)."""
    scores: Tensor
    """[N]: s_i, the mean token log-prob of each rollout under the current policy."""
    weights: Tensor
    """[N]: w_i, softmax weight of each correct rollout within its group; 0 for wrong rollouts and for
    rollouts of groups without both kinds."""
    valid_group_frac: Tensor
    """0-dim: fraction of groups that have both correct and wrong rollouts."""
    penalty_active: Tensor
    """0-dim: 1.0 when kl > delta (the official code logs this as ``pg_clipfrac``), else 0.0."""


def _segment_max(values: Tensor, segment: Tensor, num_segments: int, include: Tensor) -> Tensor:
    """Max of ``values`` over the entries of each segment where ``include``; -inf for an empty segment."""
    source = torch.where(include, values, torch.full_like(values, -math.inf))
    out = values.new_full((num_segments,), -math.inf)
    return out.scatter_reduce(0, segment, source, reduce="amax", include_self=True)


def drpo_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    response_mask: Tensor,
    *,
    group_ids: Tensor,
    correct: Tensor,
    max_length: int,
    lengths: Tensor | None = None,
    tau: float = 10.0,
    lam: float = 0.1,
    beta: float = 1e3,
    delta: float = 1e-4,
    kl_estimator: Literal["k3", "k1"] = "k3",
) -> DrpoLoss:
    """DRPO loss on a flat batch of N rollouts (arXiv 2510.04474 and its official code).

    For each group q that has at least one correct (P_q) and one wrong (N_q) rollout:
        s_i   = (1 / |y_i|) sum_t log pi(y_it)                                   (sequence score)
        r_l,i = 1 - l_i / L_max                                                  (length reward)
        w_i   = exp(r_l,i / lam) / sum_{k in P_q} exp(r_l,k / lam),  i in P_q    (closed-form positive weights)
        J_q   = sum_{i in P_q} w_i (s_i - tau log( (1/|N_q|) sum_{j in N_q} exp(s_j / tau) ))
    Groups without both kinds have J_q = 0 but still count: objective = (1 / #groups) sum_q J_q.
    KL = token-mean over the batch of the k3 estimate of KL(pi_old || pi) (``kl_estimator="k1"``: log pi_old -
    log pi); k3's log-ratio is clamped to [-20, 20] against exp overflow (the official code does not clamp;
    the values agree inside that bound); penalty = beta * max(KL - delta, 0).detach() * KL.
    loss = -objective + penalty.

    The official code computes the log-mean-exp through the surrogate ``S / S.detach()`` whose gradient equals
    that of log S; here the true value is computed, so ``objective`` reads as the paper's J while the gradients
    match the official implementation. Its logsumexp is stabilised with a per-group max (``scatter_reduce``).

    Args:
        log_prob: float Tensor [N, T], log-probs of the sampled tokens under the current policy (with grad).
        old_log_prob: float Tensor [N, T], under the sampling policy.
        response_mask: Tensor [N, T], 1 / True on valid response tokens; every row needs at least one.
        group_ids: integer Tensor [N], the prompt each rollout answers (any ints, need not be sorted).
        correct: bool or 0/1 Tensor [N], the verifier verdict.
        max_length: L_max of the length reward (the training response budget; official: padded width T).
        lengths: integer or float Tensor [N] of response lengths in tokens, each in [0, max_length];
            default ``response_mask.sum(-1)`` (as the official code).
        tau: temperature of the soft maximum over wrong rollouts, > 0 (paper: 10).
        lam: temperature lambda of the length weights, > 0 (paper: 0.1; larger = weaker length preference).
        beta: trust-region penalty weight, >= 0 (paper: 1e3).
        delta: KL threshold of the trust region, >= 0 (paper: 1e-4).
        kl_estimator: ``k3`` (official default ``low_var_kl``) or ``k1`` (official ``kl``).

    Returns:
        :class:`DrpoLoss`.
    """
    _check_settings(tau=tau, lam=lam, beta=beta, delta=delta, max_length=max_length, kl_estimator=kl_estimator)
    mask, log_prob, old_log_prob, tokens, lens = _check_rollouts(
        log_prob,
        old_log_prob,
        response_mask,
        group_ids=group_ids,
        correct=correct,
        lengths=lengths,
        max_length=max_length,
    )

    # ---- groups and their composition (dense numbering in ascending id order, as torch.unique) ----------
    groups = Groups.from_ids(group_ids.to(mask.device))
    pos = correct.to(device=mask.device, dtype=torch.bool)
    neg = ~pos
    n_pos = groups.sum(pos.to(mask.dtype))
    n_neg = groups.sum(neg.to(mask.dtype))
    valid_group = (n_pos > 0) & (n_neg > 0)

    # ---- sequence scores s_i (carry the gradient) -------------------------------------------------------
    scores = (log_prob * mask).sum(dim=-1) / tokens
    weights = _length_weights(lens, groups, pos & valid_group[groups.index], max_length=max_length, lam=lam)
    soft_max_neg = _soft_max_of_wrong(scores, groups, neg, valid_group, n_neg, tau=tau)

    # ---- per-group objective and the batch objective over ALL groups ------------------------------------
    term = weights * (scores - soft_max_neg[groups.index])  # weights is 0 outside correct rollouts of valid groups
    group_objective = groups.sum(term)
    objective = group_objective.sum() / groups.num_groups

    # ---- trust region on KL(pi_old || pi) ----------------------------------------------------------------
    kl = _kl(log_prob, old_log_prob, mask, kl_estimator)
    penalty = (beta * (kl - delta)).clamp(min=0.0).detach() * kl
    loss = -objective + penalty

    return DrpoLoss(
        loss=loss,
        objective=objective,
        penalty=penalty.detach(),
        kl=kl.detach(),
        group_objective=group_objective.detach(),
        scores=scores.detach(),
        weights=weights,
        valid_group_frac=valid_group.to(mask.dtype).mean(),
        penalty_active=(kl.detach() > delta).to(mask.dtype),
    )


def _check_settings(*, tau: float, lam: float, beta: float, delta: float, max_length: int, kl_estimator: str) -> None:
    """Refuse a hyperparameter out of its range, naming it."""
    for name, value, low_ok in (("tau", tau, False), ("lam", lam, False), ("beta", beta, True), ("delta", delta, True)):
        if not math.isfinite(value) or value < 0.0 or (value == 0.0 and not low_ok):
            raise ValueError(f"{name} must be a finite number {'>=' if low_ok else '>'} 0, got {value}")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0:
        raise ValueError(f"max_length must be a positive int, got {max_length!r}")
    if kl_estimator not in ("k3", "k1"):
        raise ValueError(f"kl_estimator must be 'k3' or 'k1', got {kl_estimator!r}")


def _check_rollouts(
    log_prob: Tensor,
    old_log_prob: Tensor,
    response_mask: Tensor,
    *,
    group_ids: Tensor,
    correct: Tensor,
    lengths: Tensor | None,
    max_length: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Validate the rollouts; returns (mask, log_prob, old_log_prob in the mask's dtype, tokens [N] per row,
    lengths [N] in the mask's dtype, ``tokens`` when ``lengths`` is None)."""
    mask = check_token_tensors(response_mask, log_prob=log_prob, old_log_prob=old_log_prob)
    log_prob, old_log_prob = log_prob.to(mask.dtype), old_log_prob.to(mask.dtype)
    n = mask.shape[0]
    if n == 0:
        raise ValueError("response_mask must hold at least one rollout, got N = 0")
    for name, value in (("group_ids", group_ids), ("correct", correct)):
        if value.shape != (n,):
            raise ValueError(f"{name} must have shape [N] = ({n},), got {tuple(value.shape)}")
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got dtype {group_ids.dtype}")
    bad = ((correct != 0) & (correct != 1)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"correct must be 0/1, got {correct[i].item()} at index {i}")
    tokens = mask.sum(dim=-1)
    empty = (tokens == 0).nonzero()
    if empty.numel():
        raise ValueError(f"response_mask has no valid token at index {int(empty[0])}")
    lens = tokens if lengths is None else lengths.to(device=mask.device, dtype=mask.dtype)
    if lens.shape != (n,):
        raise ValueError(f"lengths must have shape [N] = ({n},), got {tuple(lens.shape)}")
    bad = (~torch.isfinite(lens) | (lens < 0) | (lens > max_length)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"lengths must lie in [0, max_length={max_length}], got {lens[i].item()} at index {i}")
    return mask, log_prob, old_log_prob, tokens, lens


def _length_weights(lens: Tensor, groups: Groups, used: Tensor, *, max_length: int, lam: float) -> Tensor:
    """w_i [N]: the softmax of r_l / lam over the correct rollouts of each group that has both kinds (``used``),
    0 elsewhere. No gradient."""
    with torch.no_grad():
        seg, num_groups = groups.index, groups.num_groups
        logits = (1.0 - lens / max_length) / lam
        w_max = _segment_max(logits, seg, num_groups, used)
        # Where a group has no such rollout w_max is -inf; those entries are masked out below.
        w_max = torch.where(torch.isfinite(w_max), w_max, torch.zeros_like(w_max))
        w_num = torch.where(used, torch.exp(logits - w_max[seg]), torch.zeros_like(logits))
        w_den = groups.sum(w_num)
        return w_num / w_den.clamp(min=torch.finfo(w_den.dtype).tiny)[seg]


def _soft_max_of_wrong(
    scores: Tensor, groups: Groups, neg: Tensor, valid_group: Tensor, n_neg: Tensor, *, tau: float
) -> Tensor:
    """Per group [G]: tau * log mean_j exp(s_j / tau) over the wrong rollouts j, stabilised by the group's max."""
    seg = groups.index
    z = scores / tau
    z_max = _segment_max(z.detach(), seg, groups.num_groups, neg)
    z_max = torch.where(torch.isfinite(z_max), z_max, torch.zeros_like(z_max))
    shifted = torch.where(neg, z - z_max[seg], torch.full_like(z, -math.inf))
    sum_exp = groups.sum(torch.exp(shifted))
    # Groups without a wrong rollout have sum_exp 0: substitute 1 so log() stays finite; they are not used.
    safe_sum = torch.where(valid_group, sum_exp, torch.ones_like(sum_exp))
    safe_count = torch.where(valid_group, n_neg, torch.ones_like(n_neg))
    return tau * (torch.log(safe_sum) + z_max - torch.log(safe_count))


def _kl(log_prob: Tensor, old_log_prob: Tensor, mask: Tensor, kl_estimator: str) -> Tensor:
    """Token-mean over the batch of the KL(pi_old || pi) estimate (k3 or k1); a scalar with gradient."""
    log_ratio = log_prob - old_log_prob  # log (pi / pi_old) on tokens sampled from pi_old
    if kl_estimator == "k3":
        bounded = log_ratio.clamp(min=-_LOG_RATIO_CLAMP, max=_LOG_RATIO_CLAMP)  # exp overflow guard
        token_kl = torch.exp(bounded) - 1.0 - bounded
    else:
        token_kl = -log_ratio
    return masked_mean(token_kl, mask)
