"""Every named method as one recipe (docs/architecture.md "Add a method"): a function whose keyword arguments are
its config and which returns its chain of parts, registered by `recipe`, after optax's ``alias.py``.

A method whose parameters need more checks than their types keeps its frozen config dataclass in
`dynashape.methods` (one module per paper, with its maths, the official code and where code and paper differ)
and passes it as ``config=``: the keywords here are its fields and the defaults are the config's, written once.
Metrics are namespaced by the method's name. "GRPO" below is the library's group normalisation (Bessel std, eps
1e-6, 0 for a constant group or a group of one).

| name | chain |
|---|---|
| grpo | ScalarReward, GroupNormalise |
| grpo_length | Correctness, LengthWithin, StaticWeights(w_c, w_l), GroupNormalise |
| gdpo | RewardColumns, StaticWeights, DecoupledNormalise, BatchWhiten, AdvantageAbsMean |
| shorterbetter | Correctness, DistanceToShortest, StaticWeights(alpha, beta), GroupNormalise |
| lead | Correctness, LeadEfficiency, RewardColumns (declared), EfficiencyMetrics, PSIWeights, DecoupledNormalise, |
|      | BatchWhiten |
| cosine, kimi_length, pass_rate_linear, length_zscore | the length reward (CosineLength, KimiLength, |
|      | PassRateLinear, LengthZscore), SumRewardColumns, GroupNormalise |
| l1_exact | Correctness, BudgetDistance, StaticWeights(1, alpha), GroupNormalise |
| l1_max | L1MaxScore, GroupNormalise |
| thinkprune | ScheduledCap, GroupNormalise |
| laser, laser_d | LaserBonus or LaserDBonus, GroupNormalise |
| dler | CappedCorrect, StopProperly(0.1), BaselineWhiten, CorrectBoost(0.1) |
| alp | SolveRateLength, GroupNormalise |
| adlp | Correctness, LengthPenalty, DualAscent, GroupNormalise |
| aalc | AalcReward, Float32GroupNormalise (precision="float32", the default) or GroupNormalise |
| saw | Correctness, RewardColumns (or GradedCorrectness), CVWeights, GroupNormalise or (DecoupledNormalise, |
|     | BatchWhiten) |
| gfpo | ScalarReward, KeepBest, GroupNormalise over the kept rows |

Two methods stay whole `Shaper` classes (`dynashape.shapers.meds`): ``meds`` and ``lead_meds``. Their state is
the MEDS error memory, an object that fits HDBSCAN clusterings as it is visited and may run refit workers in
other processes (``close`` stops them); a part's state is plain values updated by a pure function, so the memory
would have to bend to be one. ``lead_meds`` runs this page's ``lead`` chain after the memory's penalty.
"""

from __future__ import annotations

from dynashape.methods.aalc import AalcConfig
from dynashape.methods.adlp import AdlpConfig
from dynashape.methods.alp import AlpConfig
from dynashape.methods.cosine import CosineConfig
from dynashape.methods.dler import DlerConfig
from dynashape.methods.gfpo import GfpoConfig
from dynashape.methods.grpo import GdpoConfig, GrpoConfig, GrpoLengthConfig
from dynashape.methods.kimi import KimiLengthConfig
from dynashape.methods.l1 import L1ExactConfig, L1MaxConfig
from dynashape.methods.laser import LaserConfig, LaserDConfig
from dynashape.methods.lead.config import LeadConfig
from dynashape.methods.length_zscore import LengthZscoreConfig
from dynashape.methods.pass_rate import PassRateLinearConfig
from dynashape.methods.saw import SawConfig
from dynashape.methods.shorterbetter import ShorterBetterConfig
from dynashape.methods.thinkprune import ThinkPruneConfig
from dynashape.shapers import declarations as declared
from dynashape.shapers import parts
from dynashape.shapers.base import ShaperNeeds
from dynashape.shapers.parts import Chain, Part
from dynashape.shapers.recipe import recipe

OPTIONAL_REWARDS = ShaperNeeds(reward_channels="optional")


# ------------------------------------------------------------------------------------------ the GRPO family
@recipe("grpo", config=GrpoConfig, needs=OPTIONAL_REWARDS, display="GRPO", reference=True)
def grpo(*, std: str, eps: float) -> Chain:
    """GRPO (DeepSeekMath, arXiv 2402.03300): (r - mean_q r) / (std_q r + eps) of one scalar reward:
    rewards[:, 0] if given (K must be 1), else correctness as 0/1; std="none" centres only (Dr. GRPO)."""
    return Chain(parts.ScalarReward("grpo"), parts.GroupNormalise(std, eps, "grpo"))


@recipe("grpo_length", config=GrpoLengthConfig)
def grpo_length(*, mode: str, threshold: float, weights: tuple[float, float], eps: float) -> Chain:
    """LEAD's scalarised length baseline (docs/algorithms.md "Baselines"): r = w_c c + w_l r_len with
    r_len = 1[l <= T] ("classic") or 1[correct and l <= T] ("conditioned"), then GRPO, no whitening."""
    return Chain(
        parts.Correctness(),
        parts.LengthWithin(threshold, conditioned=mode == "conditioned"),
        parts.StaticWeights(weights, "grpo_length"),
        parts.GroupNormalise("unbiased", eps, "grpo_length"),
    )


@recipe("gdpo", config=GdpoConfig, needs=ShaperNeeds(reward_channels="required"), display="GDPO")
def gdpo(*, weights: tuple[float, ...] | None, whiten: str, eps: float) -> Chain:
    """GDPO (NVlabs, arXiv 2601.05242): GRPO-normalise each reward column on its own, weighted sum, whiten."""
    return Chain(
        parts.RewardColumns("gdpo", required=True, metrics=True),
        parts.StaticWeights(weights, "gdpo"),
        parts.DecoupledNormalise(eps, order="columns"),
        parts.BatchWhiten(whiten),
        parts.AdvantageAbsMean("gdpo"),
    )


@recipe("shorterbetter", config=ShorterBetterConfig, display="ShorterBetter")
def shorterbetter(*, alpha: float, beta: float, eps: float) -> Chain:
    """ShorterBetter (arXiv 2504.21370): SOL_q = shortest correct length of the group, or the group's mean
    length when none is correct; r = alpha c - beta |l - SOL_q|; GRPO normalisation."""
    return Chain(
        parts.Correctness(),
        parts.DistanceToShortest("shorterbetter"),
        parts.StaticWeights((alpha, beta), "shorterbetter"),
        parts.GroupNormalise("unbiased", eps, "shorterbetter"),
    )


# ----------------------------------------------------------------------------------------------------- LEAD
@recipe("lead", config=LeadConfig, needs=OPTIONAL_REWARDS, display="LEAD", trajectory=declared.LEAD_WEIGHT)
def lead(
    *,
    l_min: float,
    b_max: float,
    alpha: float,
    beta: float,
    lambda_min: float,
    eps: float,
    target: str,
    efficiency: str,
    static_lambda_c: float | None,
    whiten: str,
    reward_ranges: tuple[tuple[float, float], ...],
) -> Chain:
    """LEAD (arXiv 2605.09806, Algorithm 1; CrazyMint/LEAD `ray_trainer.compute_advantage`, branch `lead`): r_l
    from an online per-prompt target length, the declared extra reward columns, PSI-controlled weights (EMA and
    floor), decoupled GRPO normalisation (one matrix-vector product, as the official code), parts.BatchWhiten. State:
    the controller's EMA (``shaper.held("controller")`` reads it as a `PSIController`)."""
    return Chain(
        parts.Correctness(),
        parts.LeadEfficiency(l_min, b_max, target, efficiency, "lead"),
        parts.RewardColumns("lead", ranges=reward_ranges, required=False, metrics=False, declared=True),
        parts.EfficiencyMetrics("lead"),
        parts.PSIWeights(
            alpha=alpha,
            beta=beta,
            lambda_min=lambda_min,
            eps=eps,
            static_lambda_0=static_lambda_c,
            channels=2 + len(reward_ranges),
            namespace="lead",
        ),
        parts.DecoupledNormalise(1e-6, order="matmul"),
        parts.BatchWhiten(whiten),
    )


# ------------------------------------------------------------------------- length rewards engines ship
# Each: its reward on channel 0, the batch's further reward columns added with weight 1 (TRL's reward_weights),
# then GRPO's normalisation (a group of one and a constant group get exactly 0, docs/algorithms.md).
@recipe("cosine", config=CosineConfig, needs=OPTIONAL_REWARDS)
def cosine(
    *,
    min_value_wrong: float,
    max_value_wrong: float,
    min_value_correct: float,
    max_value_correct: float,
    max_len: float,
    exceed_length: float | None,
    exceed_margin: float,
    std: str,
    eps: float,
) -> Chain:
    """The cosine length-scaled reward (Yeo et al., arXiv 2502.03373; Hugging Face open-r1
    `get_cosine_scaled_reward`), then GRPO. An all-correct group ranks its rollouts by length (shorter better),
    an all-wrong group the other way (a longer wrong answer is punished less); equal lengths give 0."""
    reward = parts.CosineLength(
        min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len, exceed_length, exceed_margin
    )
    return Chain(reward, parts.SumRewardColumns(), parts.GroupNormalise(std, eps, "cosine"))


@recipe("kimi_length", config=KimiLengthConfig, needs=OPTIONAL_REWARDS)
def kimi_length(*, weight: float, std: str, eps: float) -> Chain:
    """Kimi k1.5 (arXiv 2501.12599, "Length Penalty"): r = c + weight * lambda, lambda = 0.5 - (l - min_q l) /
    (max_q l - min_q l) for a correct answer, min(0, lambda) for a wrong one, min and max over each group (the
    paper's; open-r1's `len_reward` takes them over the whole batch and counts characters); then GRPO."""
    return Chain(parts.KimiLength(weight), parts.SumRewardColumns(), parts.GroupNormalise(std, eps, "kimi_length"))


@recipe("pass_rate_linear", config=PassRateLinearConfig, needs=OPTIONAL_REWARDS)
def pass_rate_linear(*, coef: float, budget: float, only_correct: bool, scale: str, std: str, eps: float) -> Chain:
    """prime-rl's difficulty-aware linear length penalty (`LinearLengthPenaltyConfig`, PR #2702; docs/algorithms.md
    "Length rewards engines ship"): r = c - coef p_q l / budget, p_q the group's pass rate; then centring (prime-rl) or
    GRPO normalisation. PipelineRL's difficulty-aware overlong penalty is the same idea on DAPO's overlong term; it is
    not a method here."""
    penalised = parts.PassRateLinear(coef, budget, only_correct, scale)
    return Chain(penalised, parts.SumRewardColumns(), parts.GroupNormalise(std, eps, "pass_rate_linear"))


@recipe("length_zscore", config=LengthZscoreConfig, needs=OPTIONAL_REWARDS)
def length_zscore(*, alpha: float, wrong_reward: float, z_eps: float, std: str, eps: float) -> Chain:
    """GRPO-LEAD's length-dependent accuracy reward (arXiv 2504.09696; aeroplanepaper/GRPO-LEAD `main_ppo.py`),
    then GRPO. Only this reward: not GRPO-LEAD's difficulty reweighting or training stages, nor its code's gate
    that skips the scaling where a group's three shortest answers average at most 4000 tokens; a group of one
    gets 0 here (the code: r / (1 + eps))."""
    reward = parts.LengthZscore(alpha, wrong_reward, z_eps)
    return Chain(reward, parts.SumRewardColumns(), parts.GroupNormalise(std, eps, "length_zscore"))


# ----------------------------------------------------------------------------- the field's length methods
@recipe(
    "l1_exact",
    config=L1ExactConfig,
    needs=ShaperNeeds(budgets=True),
    display="L1-Exact",
    strength=declared.L1_EXACT_STRENGTH,
)
def l1_exact(*, alpha: float) -> Chain:
    """L1 / LCPO-Exact (arXiv 2503.04697; cmu-l3/l1 `math_reward.py`): r = c - alpha |n_gold - n_y|, then GRPO.
    Reads each rollout's budget n_gold (``batch.budgets``)."""
    return Chain(
        parts.Correctness(),
        parts.BudgetDistance("l1_exact"),
        parts.StaticWeights((1.0, alpha), "l1_exact"),
        parts.GroupNormalise(namespace="l1_exact"),
    )


@recipe(
    "l1_max", config=L1MaxConfig, needs=ShaperNeeds(budgets=True), display="L1-Max", strength=declared.L1_MAX_STRENGTH
)
def l1_max(*, alpha: float, delta: float, form: str) -> Chain:
    """L1 / LCPO-Max (arXiv 2503.04697; cmu-l3/l1 `math_reward.py`): r = c clip(delta + (alpha / 2)(n_gold -
    n_y), 0, 1) (the code's `get_delta_score_linear_both`; form="paper" gives the paper's slope alpha), then GRPO."""
    return Chain(parts.L1MaxScore(alpha, delta, form, "l1_max"), parts.GroupNormalise(namespace="l1_max"))


@recipe(
    "thinkprune",
    config=ThinkPruneConfig,
    display="ThinkPrune",
    trajectory=declared.THINKPRUNE_CAP,
    strength=declared.THINKPRUNE_STRENGTH,
)
def thinkprune(*, max_length: int, schedule: tuple[tuple[int, int], ...]) -> Chain:
    """ThinkPrune (arXiv 2504.01296): r = 1[correct and l <= L_t], L_t = max_length, then each schedule pair's
    cap from its step on (the paper's rounds inside one run), then GRPO. State: the number of steps shaped."""
    cap = parts.ScheduledCap(ThinkPruneConfig(max_length=max_length, schedule=schedule), "thinkprune")
    return Chain(cap, parts.GroupNormalise(namespace="thinkprune"))


@recipe(
    "laser", config=LaserConfig, needs=ShaperNeeds(formatted=True), display="LASER", strength=declared.LASER_STRENGTH
)
def laser(*, alpha: float, target_length: int, base: str) -> Chain:
    """LASER (arXiv 2505.15612; hkust-nlp/Laser@c9e7c4ef `length_penalty.py`, `hf_math_verifier.py`):
    r = s + alpha 1[s = 1 and l <= L_T], s the official base score 1 correct / -0.5 wrong / -1 unformatted
    (reads ``batch.formatted``; ``base="binary"`` for the paper's 0/1), then GRPO."""
    return Chain(parts.LaserBonus(alpha, target_length, base, "laser"), parts.GroupNormalise(namespace="laser"))


@recipe(
    "laser_d",
    config=LaserDConfig,
    needs=ShaperNeeds(monitor_rollouts=True, formatted=True),
    display="LASER-D",
    trajectory=declared.LASER_D_TARGETS,
    strength=declared.LASER_D_STRENGTH,
)
def laser_d(
    *,
    alpha: float,
    initial_target: int,
    grid: tuple[int, ...],
    refresh_every: int,
    n_rollout: int,
    expected_n_correct: float,
    round_method: str,
    base: str,
) -> Chain:
    """LASER-D (arXiv 2505.15612; hkust-nlp/Laser@c9e7c4ef): LASER's bonus with the target of the rollout's difficulty
    bucket (share of the group scoring 1: >= 2/3, >= 1/3, below), each bucket's target the smallest grid length that
    keeps the expected correct answers on a monitor set; then GRPO. Hand it the monitor's rollouts with
    ``observe(monitor=batch)`` before the first step and every ``refresh_every`` steps; until then every target is
    ``initial_target``."""
    config = LaserDConfig(
        alpha=alpha,
        initial_target=initial_target,
        grid=grid,
        refresh_every=refresh_every,
        n_rollout=n_rollout,
        expected_n_correct=expected_n_correct,
        round_method=round_method,  # type: ignore[arg-type]
        base=base,  # type: ignore[arg-type]
    )
    return Chain(parts.LaserDBonus(config, "laser_d"), parts.GroupNormalise(namespace="laser_d"))


@recipe(
    "dler",
    config=DlerConfig,
    needs=ShaperNeeds(truncated=True),
    own_penalties=("stop_properly",),
    display="DLER",
    strength=declared.DLER_STRENGTH,
)
def dler(*, max_length: int, whiten: str, eps: float, stop_properly_coef: float | None, correct_boost: float) -> Chain:
    """DLER (arXiv 2510.15110; NVlabs/DLER@ea7d4f7b, verl-dler `core_algos.py` and the dapo reward manager):
    r = 1[correct and l <= L], times 0.1 where the response was truncated (``batch.truncated``, the official
    stop-properly penalty; ``stop_properly_coef=None`` for the paper's 0/1 reward); A = batch-whitening of
    (r - group mean), verl's ``reinforce_plus_plus_baseline``, plus 0.1 for the responses scoring 1 before the
    multiplier (the official run's advantage boost; ``correct_boost=0`` for none). Refuses a batch without
    ``truncated``, and the ``stop_properly`` keyword (it applies its own)."""
    steps: list[Part] = [parts.CappedCorrect(max_length)]
    if stop_properly_coef is not None:
        steps.append(parts.StopProperly(stop_properly_coef, namespace="dler"))
    steps.append(parts.BaselineWhiten(whiten, eps, "dler"))
    if correct_boost:
        steps.append(parts.CorrectBoost(correct_boost, "dler"))
    return Chain(*steps)


@recipe("alp", config=AlpConfig, display="ALP", strength=declared.ALP_STRENGTH)
def alp(*, beta: float) -> Chain:
    """ALP (arXiv 2506.05256; no official code found): r = c - beta |y| max(p_solved, 1/K), then GRPO."""
    return Chain(parts.SolveRateLength(beta), parts.GroupNormalise(namespace="alp"))


@recipe("adlp", config=AdlpConfig, display="A-DLP", trajectory=declared.ADLP_WEIGHT, strength=declared.ADLP_STRENGTH)
def adlp(*, lambda0: float, eta: float, acc_ref: float) -> Chain:
    """A-DLP (arXiv 2505.18298; JinyanSu1/A-DLP `ray_trainer.py`): r = c - lambda_t l, then GRPO;
    lambda_{t+1} = max(0, lambda_t + eta (batch accuracy - acc_ref)). State: lambda (checkpointed, where the
    official code resets it at every start). Logs ``adlp/lambda``."""
    return Chain(
        parts.Correctness(),
        parts.LengthPenalty(),
        parts.DualAscent(lambda0, eta, acc_ref, "adlp"),
        parts.GroupNormalise(namespace="adlp"),
    )


@recipe(
    "aalc",
    config=AalcConfig,
    needs=ShaperNeeds(validation_accuracy=True),
    display="AALC",
    trajectory=declared.AALC_ALPHA,
    strength=declared.AALC_STRENGTH,
)
def aalc(*, beta: float, c: float, l_max: float, a_target: float, precision: str) -> Chain:
    """AALC (arXiv 2506.20160; du-nlp-lab/AALC `length_reward.py`): r = alpha_t c + c_len R_len with
    a = min(1, A_val / A_target), alpha_t = 0.9 + 0.1 (1 - a), R_len = 1 - min(a^beta, min(1, l / l_max)); then
    GRPO. Hand it each validation accuracy with ``observe(validation_accuracy=a)``; before the first, r = c.
    precision="float32" (the default, the official code's): the reward and GRPO in float32 as AALC's code
    computes them (a group of one: r / (1 + 1e-6)); "float64": the formula unrounded, the library's GRPO."""
    config = AalcConfig(beta=beta, c=c, l_max=l_max, a_target=a_target, precision=precision)  # type: ignore[arg-type]
    normalise = (
        parts.Float32GroupNormalise(namespace="aalc")
        if precision == "float32"
        else parts.GroupNormalise(namespace="aalc")
    )
    return Chain(parts.AalcReward(config, "aalc"), normalise)


@recipe("saw", config=SawConfig, needs=OPTIONAL_REWARDS, display="SAW", strength=declared.SAW_STRENGTH)
def saw(
    *,
    mode: str,
    eps: float,
    correctness_offset: float,
    grpo_eps: float,
    whiten_eps: float,
    correctness_column: int | None,
) -> Chain:
    """SAW (arXiv 2606.07705; Zhaolutuan/SAW `ray_trainer.py`): channels correctness and the batch's reward
    columns, correctness the graded column ``rewards[:, correctness_column]`` in [-3, 3] (the official ToolRL
    score) when set, else the 0/1 verdict; w_k = K CV_k / (sum_j CV_j + eps) over the batch (correctness shifted
    by +3 for its CV). mode "grpo": GRPO on sum_k w_k r_k; "gdpo": sum_k w_k A_k of per-channel GRPO, then
    token-whitened. SAW's code sums the weighted channels as one matrix-vector product."""
    if correctness_column is None:  # the documented fallback: channel 0 is the 0/1 verdict
        channels: tuple[Part, ...] = (parts.Correctness(), parts.RewardColumns("saw", required=False, metrics=False))
    else:  # the official channel 0: ToolRL's graded correctness in [-3, 3]
        channels = (parts.GradedCorrectness(correctness_column, "saw"),)
    head = (*channels, parts.CVWeights(eps, correctness_offset, "saw"))
    if mode == "grpo":
        return Chain(*head, parts.GroupNormalise(eps=grpo_eps, namespace="saw", order="matmul"))
    return Chain(*head, parts.DecoupledNormalise(grpo_eps, order="matmul"), parts.BatchWhiten("token", whiten_eps))


@recipe(
    "gfpo",
    config=GfpoConfig,
    needs=ShaperNeeds(drops_rows=True, reward_channels="optional"),
    display="GFPO",
    strength=declared.GFPO_STRENGTH,
)
def gfpo(*, keep: int, by: str, eps: float, adaptive_keep: tuple[int, int, int, int] | None, history: int) -> Chain:
    """GFPO (arXiv 2508.09726; trl `experimental/gfpo`): keep the k best rollouts of each group (shortest, or
    highest reward per token; adaptive k per difficulty quartile), A = (r - mean_S) / (std_S + eps) on the kept
    rows, 0 elsewhere; ``Shaped.keep`` marks the kept rows so the loss drops the others. The reward is the
    batch's single reward column if given, else correctness."""
    config = GfpoConfig(keep=keep, by=by, eps=eps, adaptive_keep=adaptive_keep, history=history)  # type: ignore[arg-type]
    return Chain(
        parts.ScalarReward("gfpo"), parts.KeepBest(config, "gfpo"), parts.GroupNormalise(eps=eps, namespace="gfpo")
    )
