"""The new method a user writes in at most 15 lines (issue 48's yardstick), shared by the tests that run it in
get_shaper, the reference trainer, verl's estimator and TRL: LEAD's channels with SAW's weights, its own
parameters."""

from dynashape import recipe
from dynashape.shapers.parts import BatchWhiten, Chain, Correctness, CVWeights, DecoupledNormalise, LeadEfficiency


def register_lead_saw():
    @recipe("lead_saw")
    def lead_saw(*, l_min: float = 1000.0, b_max: float = 4000.0, cv_eps: float = 1e-8, whiten: str = "sequence"):
        """LEAD's correctness and efficiency channels weighted by SAW's coefficients of variation."""
        return Chain(Correctness(), LeadEfficiency(l_min, b_max), CVWeights(eps=cv_eps), DecoupledNormalise(),
                     BatchWhiten(whiten))  # fmt: skip

    return lead_saw
