"""Length rewards that engines and papers already ship: cosine, kimi_length, pass_rate_linear, length_zscore.

Each is a pure reward function (tensors in, float64 reward [N] out) plus a stateless shaper that adds any extra
reward columns, group-normalises the sum as GRPO does and reports metrics. The four differ only in the reward;
the shared tail is `_normalised`.

Conventions shared by the four shapers:
- Correctness comes from `batch.correct`; lengths are response tokens (`batch.lengths`).
- `batch.rewards` [N, K], when given, are further reward terms (format, DAPO overlong, ...) summed onto the
  length-shaped reward with weight 1 before normalisation, as TRL sums its reward functions
  (`reward_weights` defaults to 1).
- Normalisation is `groups.group_normalize`: (r - mean_q) / (std_q + eps) with Bessel's std ("unbiased"), or
  centring only ("none"). A group of one rollout and a constant group get advantage exactly 0 (the project's
  convention, docs/algorithms.md "Group statistics"), whatever the reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_count, group_max, group_mean, group_min, group_normalize, group_var
from dynashape.shapers._common import F64, metrics_dict, zero_advantage_frac
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds
from dynashape.shapers.registry import register_shaper

__all__ = [
    "CosineConfig",
    "CosineShaper",
    "KimiLengthConfig",
    "KimiLengthShaper",
    "LengthZscoreConfig",
    "LengthZscoreShaper",
    "PassRateLinearConfig",
    "PassRateLinearShaper",
    "cosine_length_reward",
    "kimi_length_reward",
    "length_zscore_reward",
    "pass_rate_linear_penalty",
]

STD_KINDS: tuple[str, ...] = ("unbiased", "none")


def _check_norm(std: str, eps: float) -> None:
    require_choice("std", std, STD_KINDS)
    require_range("eps", eps, 0.0, None, low_open=True)  # eps = 0 turns a constant group's 0 / 0 into NaN


def _extra_rewards(batch: RolloutBatch) -> torch.Tensor | None:
    """The sum of the batch's extra reward columns [N] in float64, or None without `rewards`."""
    return None if batch.rewards is None else batch.rewards.to(F64).sum(dim=1)


def _normalised(
    name: str,
    shaped: torch.Tensor,
    batch: RolloutBatch,
    groups: Groups,
    std: str,
    eps: float,
    extra_names: list[str],
    extra_values: list[torch.Tensor],
) -> Shaped:
    """Add the extra reward columns to `shaped` [N], GRPO-normalise per group, package with metrics."""
    extra = _extra_rewards(batch)
    reward = shaped if extra is None else shaped + extra
    adv = group_normalize(reward, groups, std=std, eps=eps)  # type: ignore[arg-type]
    names = ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac", *extra_names]
    values = [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, groups)]
    metrics = metrics_dict(name, names, [*values, *extra_values])
    return Shaped(advantages=adv.float(), rewards=reward.float().unsqueeze(1), metrics=metrics)


# -------------------------------------------------------------------------------------------------- cosine
def cosine_length_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    *,
    min_value_wrong: float,
    max_value_wrong: float,
    min_value_correct: float,
    max_value_correct: float,
    max_len: float,
    exceed_length: float | None = None,
    exceed_margin: float = 0.0,
) -> torch.Tensor:
    """Cosine length-scaled reward (Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning in LLMs",
    arXiv 2502.03373, its cosine length-scaling reward), as Hugging Face's `get_cosine_scaled_reward` computes it.

    With t = l / max_len and (lo, hi) = (min_value_correct, max_value_correct) for a correct answer,
    (max_value_wrong, min_value_wrong) for a wrong one (the source swaps the wrong pair on purpose):

        r = lo + 0.5 * (hi - lo) * (1 + cos(pi * t))

    so r = hi at l = 0 and r = lo at l = max_len: a short correct answer earns max_value_correct, a short wrong
    one is punished with min_value_wrong, a long wrong one only with max_value_wrong. Beyond max_len the
    reference function keeps following the cosine (it is periodic: l = 2 max_len gives hi again); with
    `exceed_length` set, every rollout with l + exceed_margin >= max_len gets exceed_length instead, as the
    paper's own code does (`CosineScaledSparseReward`, margin 16 there).

    Args:
        correct: BoolTensor [N]. lengths: integer or float Tensor [N], tokens.
    Returns:
        float64 Tensor [N] on the input's device.
    """
    length = lengths.to(F64)
    cosine = torch.cos(length * (math.pi / max_len))
    is_correct = correct.bool()
    # new_tensor: float64 on the input's device (a Python-scalar where() would round the values to float32)
    lo = torch.where(is_correct, length.new_tensor(min_value_correct), length.new_tensor(max_value_wrong))
    hi = torch.where(is_correct, length.new_tensor(max_value_correct), length.new_tensor(min_value_wrong))
    reward = lo + 0.5 * (hi - lo) * (1.0 + cosine)
    if exceed_length is not None:
        reward = torch.where(length + exceed_margin >= max_len, exceed_length, reward)
    return reward


@dataclass(frozen=True, kw_only=True)
class CosineConfig:
    """Defaults: the signature of `get_cosine_scaled_reward` in Hugging Face's open-r1 (`src/open_r1/rewards.py`),
    the TRL recipe the issue names (TRL itself does not ship the function in `trl.rewards`). open-r1's script
    arguments default min_value_wrong to 0.0 instead."""

    min_value_wrong: float = -1.0
    """Reward of a wrong answer of length 0 (the most punished: short and wrong)."""
    max_value_wrong: float = -0.5
    """Reward of a wrong answer of length max_len."""
    min_value_correct: float = 0.5
    """Reward of a correct answer of length max_len."""
    max_value_correct: float = 1.0
    """Reward of a correct answer of length 0."""
    max_len: float = 1000
    """Length (tokens) at which the cosine reaches its end value; the reference counts characters."""
    exceed_length: float | None = None
    """None: the cosine continues past max_len (open-r1). A value: the reward of every rollout with
    l + exceed_margin >= max_len (the paper's code; its runs used e.g. -10)."""
    exceed_margin: float = 0.0
    """Tokens added to l before comparing with max_len when exceed_length is set (16 in the paper's code)."""
    std: str = "unbiased"
    """Group normalisation: "unbiased" (GRPO, Bessel std, as TRL's GRPOTrainer) or "none" (centre only)."""
    eps: float = 1e-6
    """Added to the group std (outside the square root, as verl)."""

    def __post_init__(self) -> None:
        for field in ("min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct"):
            require_range(field, getattr(self, field))
        require_range("max_len", self.max_len, 0.0, None, low_open=True)
        if self.exceed_length is not None:
            require_range("exceed_length", self.exceed_length)
        require_range("exceed_margin", self.exceed_margin, 0.0, None)
        _check_norm(self.std, self.eps)


@register_shaper("cosine")
class CosineShaper(Shaper):
    """Cosine length-scaled reward (`cosine_length_reward`), then GRPO normalisation per group.

    Edge cases: a group of one rollout gets 0. An all-correct group ranks its rollouts by length (shorter is
    better, the cosine is decreasing on [0, max_len]); an all-wrong group ranks them the other way (a longer
    wrong answer is punished less, the paper's "explore when wrong"); equal lengths give 0.
    """

    config_cls = CosineConfig
    needs = ShaperNeeds(reward_channels="optional")

    def shape(self, batch: RolloutBatch) -> Shaped:
        cfg = self.config
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
        return _normalised(self.name, reward, batch, groups, cfg.std, cfg.eps, ["beyond_max_len_frac"], [beyond])


# --------------------------------------------------------------------------------------------- kimi_length
def kimi_length_reward(correct: torch.Tensor, lengths: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Kimi k1.5 length reward (arXiv 2501.12599, "Length Penalty"), per group q:

        lambda = 0.5 - (l - min_q l) / (max_q l - min_q l)
        len_reward = lambda if correct else min(0, lambda);   0 for the whole group when max_q l = min_q l

    lambda runs from 0.5 (the group's shortest) to -0.5 (its longest); a wrong answer is never rewarded for
    being short, only punished for being long. Invariant to a common shift of a group's lengths, and to a
    common positive scaling.

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N] in [-0.5, 0.5].
    """
    length = lengths.to(F64)
    lo = groups.gather(group_min(length, groups))
    span = groups.gather(group_max(length, groups)) - lo
    # span > 0 only where lengths differ; the clamp keeps the unused branch of where() finite
    lam = torch.where(span > 0, 0.5 - (length - lo) / span.clamp_min(1e-300), 0.0)
    return torch.where(correct.bool(), lam, lam.clamp_max(0.0))


@dataclass(frozen=True, kw_only=True)
class KimiLengthConfig:
    """Kimi k1.5 gives no value for the weight; 1.0 is what open-r1's `len_reward` gets beside its accuracy
    reward under TRL's default `reward_weights`."""

    weight: float = 1.0
    """Weight of the length reward in r = correct + weight * len_reward (Kimi ramps it up during a warm-up;
    schedule it from outside if wanted)."""
    std: str = "unbiased"
    """"unbiased": GRPO normalisation (open-r1 under TRL's GRPOTrainer); "none": centre only, closer to Kimi's
    own mean-baseline policy gradient."""
    eps: float = 1e-6
    """Added to the group std."""

    def __post_init__(self) -> None:
        require_range("weight", self.weight, 0.0, None)
        _check_norm(self.std, self.eps)


@register_shaper("kimi_length")
class KimiLengthShaper(Shaper):
    """r = correct + weight * kimi_length_reward, then GRPO normalisation per group.

    Min and max are taken over each group (prompt), as the paper states ("k sampled responses of problem x").
    open-r1's `len_reward`, the peer implementation, takes them over the whole list of completions it is
    handed (the whole batch under TRL) and over characters; we follow the paper's per-prompt definition and count
    tokens. Edge cases: a group of one rollout, or of equal lengths, has length reward 0 (so its advantage is
    plain GRPO's: 0 for a single rollout); an all-correct group gets r = 1 + weight * lambda (the shortest
    best); an all-wrong group gets r = weight * min(0, lambda) (answers past the midpoint of the group's length
    range punished, the others tied at 0).
    """

    config_cls = KimiLengthConfig
    needs = ShaperNeeds(reward_channels="optional")

    def shape(self, batch: RolloutBatch) -> Shaped:
        cfg = self.config
        groups = Groups.from_ids(batch.group_ids)
        length_reward = kimi_length_reward(batch.correct, batch.lengths, groups)
        reward = batch.correct.to(F64) + cfg.weight * length_reward
        return _normalised(
            self.name, reward, batch, groups, cfg.std, cfg.eps, ["length_reward_mean"], [length_reward.mean()]
        )


# ---------------------------------------------------------------------------------------- pass_rate_linear
def pass_rate_linear_penalty(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    coef: float,
    budget: float,
    only_correct: bool = False,
    scale: str = "budget",
) -> torch.Tensor:
    """Difficulty-aware linear length penalty (prime-rl's `LinearLengthPenaltyConfig`, PR #2702):

        penalty = coef * p_q * l / budget,     p_q = the group's mean correctness (its pass rate)

    times correct when `only_correct` (prime-rl's `gate_by_correctness`). An easy prompt (p_q near 1) is pushed
    hard towards short answers, a hard one barely, an unsolved one (p_q = 0) not at all. scale="group_max"
    divides by the group's longest length (at least 1) instead of the budget, as prime-rl's later
    `GRPOAlgorithm` (PR #2901) does.

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N] >= 0, the amount to subtract from the reward.
    """
    length = lengths.to(F64)
    c = correct.to(F64)
    pass_rate = groups.gather(group_mean(c, groups))
    denom = groups.gather(group_max(length, groups)).clamp_min(1.0) if scale == "group_max" else budget
    penalty = coef * pass_rate * (length / denom)
    return penalty * c if only_correct else penalty


@dataclass(frozen=True, kw_only=True)
class PassRateLinearConfig:
    """Defaults: prime-rl's (coef 0.25, not gated, mean baseline without std); budget = its orchestrator's
    default `seq_len` of 2048, the divisor of that version."""

    coef: float = 0.25
    """Penalty at l = budget for a prompt that is always solved."""
    budget: float = 2048
    """Tokens that l is divided by (scale="budget")."""
    only_correct: bool = False
    """Penalise correct answers only (prime-rl's gate_by_correctness)."""
    scale: str = "budget"
    """"budget": l / budget (the issue, prime-rl PR #2702); "group_max": l / max_q l (prime-rl PR #2901)."""
    std: str = "none"
    """"none": reward minus the group mean (prime-rl's GRPO, Dr. GRPO style); "unbiased": GRPO normalisation."""
    eps: float = 1e-6
    """Added to the group std when std="unbiased"."""

    def __post_init__(self) -> None:
        require_range("coef", self.coef, 0.0, None)
        require_range("budget", self.budget, 0.0, None, low_open=True)
        if not isinstance(self.only_correct, bool):
            raise ValueError(f"only_correct={self.only_correct!r} must be a bool")
        require_choice("scale", self.scale, ("budget", "group_max"))
        _check_norm(self.std, self.eps)


@register_shaper("pass_rate_linear")
class PassRateLinearShaper(Shaper):
    """r = correct - pass_rate_linear_penalty, then centring (prime-rl) or GRPO normalisation per group.

    PipelineRL's difficulty-aware overlong penalty is the same idea on DAPO's overlong term: it scales the
    penalty of successful rollouts by solve_rate ** gamma (`actor.py`, `difficulty_aware_penalty`); it is not a
    separate shaper here. Edge cases: a group of one rollout gets 0; an all-wrong group has p_q = 0, no
    penalty, advantage 0; an all-correct group has p_q = 1 and ranks rollouts by length (shorter better).
    Without only_correct, a common shift of a group's lengths changes every penalty of the group by the same
    amount and leaves the advantages unchanged.
    """

    config_cls = PassRateLinearConfig
    needs = ShaperNeeds(reward_channels="optional")

    def shape(self, batch: RolloutBatch) -> Shaped:
        cfg = self.config
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
        return _normalised(self.name, reward, batch, groups, cfg.std, cfg.eps, ["penalty_mean"], [penalty.mean()])


# ------------------------------------------------------------------------------------------- length_zscore
def length_zscore_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    alpha: float,
    wrong_reward: float,
    z_eps: float,
) -> torch.Tensor:
    """GRPO-LEAD's length-dependent accuracy reward (arXiv 2504.09696, "length-dependent accuracy reward"), per group q:

        z = (l - mu_q) / (sigma_q + z_eps),   mu_q, sigma_q over the group's CORRECT answers only
        r = exp(-alpha * z) if correct,  wrong_reward otherwise

    sigma_q is Bessel's std (n_c - 1), and 1 when the group has at most one correct answer, as the official
    code (`main_ppo.py`, `get_reweight_rewards`) sets it; a lone correct answer has z = 0 and gets 1. Since
    |z| <= (n_c - 1) / sqrt(n_c), the reward stays finite. Invariant to a common shift and to a common positive
    scaling of a group's lengths (when sigma_q >> z_eps).

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N].
    """
    length = lengths.to(F64)
    is_correct = correct.bool()
    n_correct = groups.gather(group_count(groups, is_correct))
    mu = groups.gather(group_mean(length, groups, is_correct))
    var = groups.gather(group_var(length, groups, is_correct, unbiased=True))
    sigma = torch.where(n_correct > 1, var.sqrt(), 1.0)
    z = (length - mu) / (sigma + z_eps)
    return torch.where(is_correct, torch.exp(-alpha * z), wrong_reward)


@dataclass(frozen=True, kw_only=True)
class LengthZscoreConfig:
    """Defaults: the official GRPO-LEAD code (aeroplanepaper/GRPO-LEAD): alpha 0.05, wrong answers -1
    (`rewards.append(-1)`), epsilon 1e-6, GRPO normalisation with Bessel's std."""

    alpha: float = 0.05
    """Strength of the length scaling exp(-alpha * z)."""
    wrong_reward: float = -1.0
    """Fixed reward of a wrong answer (GRPO-LEAD's explicit penalty)."""
    z_eps: float = 1e-6
    """Added to the correct answers' length std in the z-score."""
    std: str = "unbiased"
    """Group normalisation: "unbiased" (GRPO, the official code) or "none" (centre only)."""
    eps: float = 1e-6
    """Added to the group std of the reward."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_range("wrong_reward", self.wrong_reward)
        require_range("z_eps", self.z_eps, 0.0, None, low_open=True)
        _check_norm(self.std, self.eps)


@register_shaper("length_zscore")
class LengthZscoreShaper(Shaper):
    """GRPO-LEAD's length-scaled accuracy (`length_zscore_reward`), then GRPO normalisation per group.

    Only this reward is built; GRPO-LEAD's other two parts (difficulty-aware advantage reweighting with a
    logistic weight of the pass rate, and its training stages) are not. The official code also skips the length
    scaling in groups whose three shortest answers average at most 4000 tokens (a gate of its long-context
    stage, not in the paper's equation); we apply the paper's equation everywhere. It normalises a group of
    one by (r - 0) / (1 + eps); we give it 0 like every shaper here. Edge cases: a group of one rollout gets 0;
    an all-wrong group is constant (wrong_reward) and gets 0; an all-correct group ranks its rollouts by
    length through exp(-alpha z) (shorter better); equal correct lengths give z = 0 and reward 1.
    """

    config_cls = LengthZscoreConfig
    needs = ShaperNeeds(reward_channels="optional")

    def shape(self, batch: RolloutBatch) -> Shaped:
        cfg = self.config
        groups = Groups.from_ids(batch.group_ids)
        reward = length_zscore_reward(
            batch.correct, batch.lengths, groups, alpha=cfg.alpha, wrong_reward=cfg.wrong_reward, z_eps=cfg.z_eps
        )
        correct = batch.correct
        scale = torch.where(correct, reward, 0.0).sum() / correct.sum().clamp_min(1)
        return _normalised(self.name, reward, batch, groups, cfg.std, cfg.eps, ["correct_reward_mean"], [scale])
