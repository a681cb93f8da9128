"""First-class parts of a shaper (docs/architecture.md): reward channels, weight controllers,
normalisations and filters, each a pure ``init`` plus ``update(flow, state) -> (flow, state)``.

A new method is a few lines: LEAD's channels with static weights instead of its PSI controller,

    >>> from dynashape.shapers.parts import (
    ...     BatchWhiten, Chain, Correctness, DecoupledNormalise, LeadEfficiency, StaticWeights, start)
    >>> import torch
    >>> from dynashape import RolloutBatch
    >>> chain = Chain(Correctness(), LeadEfficiency(l_min=10, b_max=40), StaticWeights((0.7, 0.3)),
    ...               DecoupledNormalise(), BatchWhiten("sequence"))
    >>> batch = RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]),
    ...                      lengths=torch.tensor([20, 30, 12, 36]))
    >>> flow, state = chain.update(start(batch), chain.init())
    >>> flow.shaped().advantages.shape
    torch.Size([4])

`dynashape.shapers.composed.ComposedShaper` turns such a chain into a registered shaper with a state_dict.
"""

from dynashape.shapers.parts.channels import (
    Correctness,
    DistanceToShortest,
    EfficiencyMetrics,
    GradedCorrectness,
    LeadEfficiency,
    LengthWithin,
    RewardColumns,
    ScalarReward,
)
from dynashape.shapers.parts.field_channels import (
    AalcReward,
    BudgetDistance,
    CappedCorrect,
    CorrectBoost,
    L1MaxScore,
    LaserBonus,
    LaserDBonus,
    LengthPenalty,
    ScheduledCap,
    SolveRateLength,
)
from dynashape.shapers.parts.filters import KeepBest
from dynashape.shapers.parts.flow import Chain, Flow, Part, Stateless, start
from dynashape.shapers.parts.length_channels import (
    CosineLength,
    KimiLength,
    LengthZscore,
    PassRateLinear,
    SumRewardColumns,
)
from dynashape.shapers.parts.normalise import (
    AdvantageAbsMean,
    BaselineWhiten,
    BatchWhiten,
    DecoupledNormalise,
    Float32GroupNormalise,
    GroupNormalise,
    weighted_sum,
)
from dynashape.shapers.parts.penalties import PENALTY_KEYS, Overlong, StopProperly, penalty_parts, with_penalties
from dynashape.shapers.parts.weights import CVWeights, DualAscent, PSIWeights, StaticWeights

__all__ = [
    "PENALTY_KEYS",
    "AalcReward",
    "AdvantageAbsMean",
    "BaselineWhiten",
    "BatchWhiten",
    "BudgetDistance",
    "CVWeights",
    "CappedCorrect",
    "Chain",
    "CorrectBoost",
    "Correctness",
    "CosineLength",
    "DecoupledNormalise",
    "DistanceToShortest",
    "DualAscent",
    "EfficiencyMetrics",
    "Float32GroupNormalise",
    "Flow",
    "GradedCorrectness",
    "GroupNormalise",
    "KeepBest",
    "KimiLength",
    "L1MaxScore",
    "LaserBonus",
    "LaserDBonus",
    "LeadEfficiency",
    "LengthPenalty",
    "LengthWithin",
    "LengthZscore",
    "Overlong",
    "PSIWeights",
    "Part",
    "PassRateLinear",
    "RewardColumns",
    "ScalarReward",
    "ScheduledCap",
    "SolveRateLength",
    "Stateless",
    "StaticWeights",
    "StopProperly",
    "SumRewardColumns",
    "penalty_parts",
    "start",
    "weighted_sum",
    "with_penalties",
]
