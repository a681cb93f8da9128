"""The hand-written shapers as they were before they became chains of parts: the reference that the composed
shapers must equal bit for bit (tests/shapers/test_composed_parity.py). Plain functions, registered nowhere."""

from __future__ import annotations

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.groups import Groups, group_count, group_mean, group_min, group_normalize, total_variance_stats
from dynashape.methods.lead.efficiency import efficiency_reward, target_lengths
from dynashape.shapers._common import F64, batch_whiten, metrics_dict, zero_advantage_frac
from dynashape.shapers.base import Shaped


def _scalar_shaped(name, reward, groups, std, eps):
    adv = group_normalize(reward, groups, std=std, eps=eps)
    metrics = metrics_dict(
        name,
        ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac"],
        [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, groups)],
    )
    return Shaped(advantages=adv.float(), rewards=reward.float().unsqueeze(1), metrics=metrics)


def grpo(batch: RolloutBatch, std="unbiased", eps=1e-6) -> Shaped:
    reward = batch.rewards[:, 0].to(F64) if batch.rewards is not None else batch.correct.to(F64)
    return _scalar_shaped("grpo", reward, Groups.from_ids(batch.group_ids), std, eps)


def grpo_length(batch: RolloutBatch, mode="classic", threshold=2000, weights=(1.0, 1.0), eps=1e-6) -> Shaped:
    correct = batch.correct.to(F64)
    within = (batch.lengths <= threshold).to(F64)
    r_len = within * correct if mode == "conditioned" else within
    reward = weights[0] * correct + weights[1] * r_len
    return _scalar_shaped("grpo_length", reward, Groups.from_ids(batch.group_ids), "unbiased", eps)


def gdpo(batch: RolloutBatch, weights=None, whiten="token", eps=1e-6) -> Shaped:
    rewards = batch.rewards.to(F64)
    k = rewards.shape[1]
    weights = weights or (1.0,) * k
    groups = Groups.from_ids(batch.group_ids)
    combined = torch.zeros(rewards.shape[0], dtype=F64, device=rewards.device)
    for j, w in enumerate(weights):
        combined = combined + w * group_normalize(rewards[:, j], groups, eps=eps)
    adv = batch_whiten(combined, batch.lengths, whiten)
    names = [f"reward_mean_{j}" for j in range(k)] + ["advantage_abs_mean"]
    metrics = metrics_dict("gdpo", names, [*rewards.mean(0).unbind(), adv.abs().mean()])
    return Shaped(advantages=adv.float(), rewards=rewards.float(), metrics=metrics)


def shorterbetter(batch: RolloutBatch, alpha=2.0, beta=0.001, eps=1e-6) -> Shaped:
    groups = Groups.from_ids(batch.group_ids)
    length = batch.lengths.to(F64)
    solved = group_count(groups, batch.correct) > 0
    sol = torch.where(solved, group_min(length, groups, batch.correct), group_mean(length, groups))
    reward = alpha * batch.correct.to(F64) - beta * (length - groups.gather(sol)).abs()
    shaped = _scalar_shaped("shorterbetter", reward, groups, "unbiased", eps)
    shaped.metrics["shorterbetter/sol_mean"] = float(sol.mean())
    return shaped


class Lead:
    """LEAD as one hand-written step with its own PSIController (the pre-parts LeadShaper)."""

    def __init__(self, config) -> None:
        self.config = config
        self.controller = config.controller()

    def __call__(self, batch: RolloutBatch) -> Shaped:
        cfg = self.config
        groups = Groups.from_ids(batch.group_ids)
        correct = batch.correct
        targets = target_lengths(batch.lengths, correct, groups, mode=cfg.target, l_min=cfg.l_min, b_max=cfg.b_max)
        r_l = efficiency_reward(batch.lengths, groups.gather(targets), mode=cfg.efficiency)
        columns = [correct.to(F64), r_l]
        if batch.rewards is not None:
            columns += list(batch.rewards.to(F64).unbind(1))
        channels = torch.stack(columns, dim=1)
        channel_adv = group_normalize(channels, groups, eps=1e-6)
        selected = torch.ones_like(channels, dtype=torch.bool)
        selected[:, 1] = correct
        mu, sigma = total_variance_stats(channels, groups, selected)
        step = self.controller.update(mu, sigma)
        combined = channel_adv @ step.weights.to(channel_adv.device)
        advantages = batch_whiten(combined, batch.lengths, cfg.whiten)
        t, w = step.targets, step.weights
        r_l = channels[:, 1]  # the metrics read the channels matrix's column, as lead_metrics did
        n_correct = group_count(groups, correct)
        eff_correct = (r_l * correct).sum() / correct.sum().clamp_min(1)
        names = [
            "lambda_c", "lambda_l", "target_lambda_c", "cv_c", "cv_l", "potential_c", "potential_l", "psi_c",
            "psi_l", "mu_c", "mu_l", "target_len_mean", "target_len_min", "target_len_max", "efficiency_mean",
            "efficiency_correct_mean", "unsolved_frac", "solved_all_frac",
        ]  # fmt: skip
        values = [
            w[0], w[1], t.target[0], t.cv[0], t.cv[1], t.potential[0], t.potential[1], t.psi[0], t.psi[1],
            mu[0], mu[1], targets.mean(), targets.min(), targets.max(), r_l.mean(), eff_correct,
            (n_correct == 0).to(F64).mean(), (n_correct == groups.counts).to(F64).mean(),
        ]  # fmt: skip
        for j in range(2, w.numel()):
            names.append(f"lambda_r{j - 2}")
            values.append(w[j])
        metrics = metrics_dict("lead", names, values)
        return Shaped(advantages=advantages.float(), rewards=channels.float(), metrics=metrics)


# ------------------------------------------------ the four length-reward shapers, before they were recipes
def _length_normalised(name, shaped, batch, groups, std, eps, extra_names, extra_values):
    """Their shared tail: add the batch's reward columns, GRPO-normalise, one metrics dict."""
    reward = shaped if batch.rewards is None else shaped + batch.rewards.to(F64).sum(dim=1)
    adv = group_normalize(reward, groups, std=std, eps=eps)
    names = ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac", *extra_names]
    values = [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, groups)]
    metrics = metrics_dict(name, names, [*values, *extra_values])
    return Shaped(advantages=adv.float(), rewards=reward.float().unsqueeze(1), metrics=metrics)


def cosine(batch: RolloutBatch, cfg) -> Shaped:
    from dynashape.methods.cosine import cosine_length_reward

    reward = cosine_length_reward(
        batch.correct,
        batch.lengths,
        min_value_wrong=cfg.min_value_wrong,
        max_value_wrong=cfg.max_value_wrong,
        min_value_correct=cfg.min_value_correct,
        max_value_correct=cfg.max_value_correct,
        max_len=cfg.max_len,
        exceed_length=cfg.exceed_length,
        exceed_margin=cfg.exceed_margin,
    )
    groups = Groups.from_ids(batch.group_ids)
    beyond = (batch.lengths.to(F64) >= cfg.max_len).to(F64).mean()
    return _length_normalised("cosine", reward, batch, groups, cfg.std, cfg.eps, ["beyond_max_len_frac"], [beyond])


def kimi_length(batch: RolloutBatch, cfg) -> Shaped:
    from dynashape.methods.kimi import kimi_length_reward

    groups = Groups.from_ids(batch.group_ids)
    length_reward = kimi_length_reward(batch.correct, batch.lengths, groups)
    reward = batch.correct.to(F64) + cfg.weight * length_reward
    names, values = ["length_reward_mean"], [length_reward.mean()]
    return _length_normalised("kimi_length", reward, batch, groups, cfg.std, cfg.eps, names, values)


def pass_rate_linear(batch: RolloutBatch, cfg) -> Shaped:
    from dynashape.methods.pass_rate import pass_rate_linear_penalty

    groups = Groups.from_ids(batch.group_ids)
    penalty = pass_rate_linear_penalty(
        batch.correct,
        batch.lengths,
        groups,
        coef=cfg.coef,
        budget=cfg.budget,
        only_correct=cfg.only_correct,
        scale=cfg.scale,
    )
    reward = batch.correct.to(F64) - penalty
    return _length_normalised(
        "pass_rate_linear", reward, batch, groups, cfg.std, cfg.eps, ["penalty_mean"], [penalty.mean()]
    )


def length_zscore(batch: RolloutBatch, cfg) -> Shaped:
    from dynashape.methods.length_zscore import length_zscore_reward

    groups = Groups.from_ids(batch.group_ids)
    reward = length_zscore_reward(
        batch.correct, batch.lengths, groups, alpha=cfg.alpha, wrong_reward=cfg.wrong_reward, z_eps=cfg.z_eps
    )
    correct = batch.correct
    scale = torch.where(correct, reward, 0.0).sum() / correct.sum().clamp_min(1)
    return _length_normalised(
        "length_zscore", reward, batch, groups, cfg.std, cfg.eps, ["correct_reward_mean"], [scale]
    )
