"""The field's length-control methods as registered shapers, each a short chain of parts (docs/field-methods.md).

The maths is in `dynashape.methods` (one module per method, with the paper, the official code at the commit
read, and where code and paper differ); the configs are that package's. "GRPO" is the library's group
normalisation (Bessel std, eps 1e-6, 0 for a constant group or a group of one).

| name | chain |
|---|---|
| l1_exact | Correctness, BudgetDistance, StaticWeights(1, alpha), GroupNormalise |
| l1_max | L1MaxScore, GroupNormalise |
| thinkprune | ScheduledCap, GroupNormalise |
| laser | LaserBonus, GroupNormalise |
| laser_d | LaserDBonus, GroupNormalise |
| dler | CappedCorrect, StopProperly(0.1), BaselineWhiten, CorrectBoost(0.1) |
| alp | SolveRateLength, GroupNormalise |
| adlp | Correctness, LengthPenalty, DualAscent, GroupNormalise |
| aalc | AalcReward, Float32GroupNormalise (precision="float32", the default) or GroupNormalise |
| saw | Correctness, RewardColumns (or GradedCorrectness), CVWeights, GroupNormalise or (DecoupledNormalise, |
|     | BatchWhiten) |
| gfpo | ScalarReward, KeepBest, GroupNormalise over the kept rows |
"""

from __future__ import annotations

from dynashape.methods.aalc import AalcConfig
from dynashape.methods.adlp import AdlpConfig
from dynashape.methods.alp import AlpConfig
from dynashape.methods.dler import DlerConfig
from dynashape.methods.gfpo import GfpoConfig
from dynashape.methods.l1 import L1ExactConfig, L1MaxConfig
from dynashape.methods.laser import LaserConfig, LaserDConfig
from dynashape.methods.saw import SawConfig
from dynashape.methods.thinkprune import ThinkPruneConfig
from dynashape.shapers.base import ShaperNeeds
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts import (
    AalcReward,
    BaselineWhiten,
    BatchWhiten,
    BudgetDistance,
    CappedCorrect,
    Chain,
    CorrectBoost,
    Correctness,
    CVWeights,
    DecoupledNormalise,
    DualAscent,
    Float32GroupNormalise,
    GradedCorrectness,
    GroupNormalise,
    KeepBest,
    L1MaxScore,
    LaserBonus,
    LaserDBonus,
    LengthPenalty,
    Part,
    RewardColumns,
    ScalarReward,
    ScheduledCap,
    SolveRateLength,
    StaticWeights,
    StopProperly,
)
from dynashape.shapers.registry import register_shaper

__all__ = [
    "AalcShaper",
    "AdlpShaper",
    "AlpShaper",
    "DlerShaper",
    "GfpoShaper",
    "L1ExactShaper",
    "L1MaxShaper",
    "LaserDShaper",
    "LaserShaper",
    "SawShaper",
    "ThinkPruneShaper",
]


@register_shaper("l1_exact")
class L1ExactShaper(ComposedShaper):
    """L1 / LCPO-Exact (arXiv 2503.04697; cmu-l3/l1 `math_reward.py`): r = c - alpha |n_gold - n_y|, then GRPO.
    Reads each rollout's budget n_gold (``batch.budgets``)."""

    config_cls = L1ExactConfig
    needs = ShaperNeeds(budgets=True)

    def chain(self) -> Chain:
        return Chain(
            Correctness(),
            BudgetDistance(self.name),
            StaticWeights((1.0, self.config.alpha), self.name),
            GroupNormalise(namespace=self.name),
        )


@register_shaper("l1_max")
class L1MaxShaper(ComposedShaper):
    """L1 / LCPO-Max: r = c * clip(delta + (alpha / 2)(n_gold - n_y), 0, 1) (the code's
    `get_delta_score_linear_both`; form="paper" gives the paper's slope alpha), then GRPO."""

    config_cls = L1MaxConfig
    needs = ShaperNeeds(budgets=True)

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(L1MaxScore(cfg.alpha, cfg.delta, cfg.form, self.name), GroupNormalise(namespace=self.name))


@register_shaper("thinkprune")
class ThinkPruneShaper(ComposedShaper):
    """ThinkPrune (arXiv 2504.01296): r = 1[correct and l <= L_t], L_t = max_length, then each schedule pair's
    cap from its step on (the paper's rounds inside one run), then GRPO. State: the number of steps shaped."""

    config_cls = ThinkPruneConfig

    def chain(self) -> Chain:
        return Chain(ScheduledCap(self.config, self.name), GroupNormalise(namespace=self.name))


@register_shaper("laser")
class LaserShaper(ComposedShaper):
    """LASER (arXiv 2505.15612; hkust-nlp/Laser@c9e7c4ef `length_penalty.py`, `hf_math_verifier.py`):
    r = s + alpha 1[s = 1 and l <= L_T], s the official base score 1 correct / -0.5 wrong / -1 unformatted
    (reads ``batch.formatted``; ``base="binary"`` for the paper's 0/1), then GRPO."""

    config_cls = LaserConfig
    needs = ShaperNeeds(formatted=True)

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(LaserBonus(cfg.alpha, cfg.target_length, cfg.base, self.name), GroupNormalise(namespace=self.name))


@register_shaper("laser_d")
class LaserDShaper(ComposedShaper):
    """LASER-D: LASER's bonus (on the official base score, as `laser`) with the target of the rollout's
    difficulty bucket (share of the group scoring 1: >= 2/3, >= 1/3, below), each bucket's target the smallest
    grid length that keeps the expected correct answers on a monitor set; then GRPO. Hand it the monitor's
    rollouts with ``observe(monitor=batch)`` before the first step and every ``refresh_every`` steps; until then
    every target is ``initial_target``."""

    config_cls = LaserDConfig
    needs = ShaperNeeds(monitor_rollouts=True, formatted=True)

    def chain(self) -> Chain:
        return Chain(LaserDBonus(self.config, self.name), GroupNormalise(namespace=self.name))


@register_shaper("dler")
class DlerShaper(ComposedShaper):
    """DLER (arXiv 2510.15110; NVlabs/DLER@ea7d4f7b, verl-dler `core_algos.py` and the dapo reward manager):
    r = 1[correct and l <= L], times 0.1 where the response was truncated (``batch.truncated``, the official
    stop-properly penalty; ``stop_properly_coef=None`` for the paper's 0/1 reward); A = batch-whitening of
    (r - group mean), verl's ``reinforce_plus_plus_baseline``, plus 0.1 for the responses scoring 1 before the
    multiplier (the official run's advantage boost; ``correct_boost=0`` for none). Refuses a batch without
    ``truncated``."""

    config_cls = DlerConfig
    needs = ShaperNeeds(truncated=True)

    def chain(self) -> Chain:
        cfg = self.config
        if any(isinstance(p, StopProperly) for p in self.penalties):
            raise ValueError("dler applies its own stop-properly penalty: set stop_properly_coef, not stop_properly")
        parts: list[Part] = [CappedCorrect(cfg.max_length)]
        if cfg.stop_properly_coef is not None:
            parts.append(StopProperly(cfg.stop_properly_coef, namespace=self.name))
        parts.append(BaselineWhiten(cfg.whiten, cfg.eps, self.name))
        if cfg.correct_boost:
            parts.append(CorrectBoost(cfg.correct_boost, self.name))
        return Chain(*parts)


@register_shaper("alp")
class AlpShaper(ComposedShaper):
    """ALP (arXiv 2506.05256; no official code found): r = c - beta |y| max(p_solved, 1/K), then GRPO."""

    config_cls = AlpConfig

    def chain(self) -> Chain:
        return Chain(SolveRateLength(self.config.beta), GroupNormalise(namespace=self.name))


@register_shaper("adlp")
class AdlpShaper(ComposedShaper):
    """A-DLP (arXiv 2505.18298; JinyanSu1/A-DLP `ray_trainer.py`): r = c - lambda_t l, then GRPO;
    lambda_{t+1} = max(0, lambda_t + eta (batch accuracy - acc_ref)). State: lambda (checkpointed, where the
    official code resets it at every start). Logs ``adlp/lambda``."""

    config_cls = AdlpConfig

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(
            Correctness(),
            LengthPenalty(),
            DualAscent(cfg.lambda0, cfg.eta, cfg.acc_ref, self.name),
            GroupNormalise(namespace=self.name),
        )


@register_shaper("aalc")
class AalcShaper(ComposedShaper):
    """AALC (arXiv 2506.20160; du-nlp-lab/AALC `length_reward.py`): r = alpha_t c + c_len R_len with
    a = min(1, A_val / A_target), alpha_t = 0.9 + 0.1 (1 - a), R_len = 1 - min(a^beta, min(1, l / l_max)); then
    GRPO. Hand it each validation accuracy with ``observe(validation_accuracy=a)``; before the first, r = c.
    precision="float32" (the default, the official code's): the reward and GRPO in float32 as AALC's code
    computes them (a group of one: r / (1 + 1e-6)); "float64": the formula unrounded, the library's GRPO."""

    config_cls = AalcConfig
    needs = ShaperNeeds(validation_accuracy=True)

    def chain(self) -> Chain:
        if self.config.precision == "float32":
            return Chain(AalcReward(self.config, self.name), Float32GroupNormalise(namespace=self.name))
        return Chain(AalcReward(self.config, self.name), GroupNormalise(namespace=self.name))


@register_shaper("saw")
class SawShaper(ComposedShaper):
    """SAW (arXiv 2606.07705; Zhaolutuan/SAW `ray_trainer.py`): channels correctness and the batch's reward
    columns, correctness the graded column ``rewards[:, correctness_column]`` in [-3, 3] (the official ToolRL
    score) when set, else the 0/1 verdict; w_k = K CV_k / (sum_j CV_j + eps) over the batch (correctness shifted
    by +3 for its CV).
    mode "grpo": GRPO on sum_k w_k r_k; "gdpo": sum_k w_k A_k of per-channel GRPO, then token-whitened."""

    config_cls = SawConfig
    needs = ShaperNeeds(reward_channels="optional")

    def chain(self) -> Chain:
        cfg = self.config
        if cfg.correctness_column is None:  # the documented fallback: channel 0 is the 0/1 verdict
            channels: tuple[Part, ...] = (Correctness(), RewardColumns(self.name, required=False, metrics=False))
        else:  # the official channel 0: ToolRL's graded correctness in [-3, 3]
            channels = (GradedCorrectness(cfg.correctness_column, self.name),)
        head = (*channels, CVWeights(cfg.eps, cfg.correctness_offset, self.name))
        # SAW's code sums the weighted channels as one matrix-vector product
        if cfg.mode == "grpo":
            return Chain(*head, GroupNormalise(eps=cfg.grpo_eps, namespace=self.name, order="matmul"))
        return Chain(*head, DecoupledNormalise(cfg.grpo_eps, order="matmul"), BatchWhiten("token", cfg.whiten_eps))


@register_shaper("gfpo")
class GfpoShaper(ComposedShaper):
    """GFPO (arXiv 2508.09726; trl `experimental/gfpo`): keep the k best rollouts of each group (shortest, or
    highest reward per token; adaptive k per difficulty quartile), A = (r - mean_S) / (std_S + eps) on the kept
    rows, 0 elsewhere; ``Shaped.keep`` marks the kept rows so the loss drops the others. The reward is the
    batch's single reward column if given, else correctness."""

    config_cls = GfpoConfig
    needs = ShaperNeeds(drops_rows=True, reward_channels="optional")

    def chain(self) -> Chain:
        return Chain(
            ScalarReward(self.name),
            KeepBest(self.config, self.name),
            GroupNormalise(eps=self.config.eps, namespace=self.name),
        )
