"""Parts as a user meets them: a new method in a few lines, the chain's state as a tuple, and the registered
field shapers equal to the pure functions of dynashape.methods they are built from (bit for bit)."""

import doctest

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dynashape.shapers.parts as parts_module
from dynashape import RolloutBatch, ShaperNeeds, get_shaper
from dynashape.core.groups import Groups, group_normalize
from dynashape.methods import (
    AdlpConfig,
    AdlpController,
    dler_advantages,
    dler_boost,
    dler_reward,
    gfpo_advantages,
    l1_exact_reward,
    saw_advantages,
)
from dynashape.methods.lead.config import LeadConfig
from dynashape.rewards.length import stop_properly_scale
from dynashape.shapers import registry
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts import (
    BatchWhiten,
    Chain,
    Correctness,
    CVWeights,
    DecoupledNormalise,
    LeadEfficiency,
    PSIWeights,
    StaticWeights,
    start,
)
from strategies import batches


def test_the_docstring_example_runs():
    assert doctest.testmod(parts_module, raise_on_error=True).attempted >= 4


def test_a_user_builds_lead_with_saw_weights_in_a_few_lines(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @registry.register_shaper("lead_saw")
    class LeadSaw(ComposedShaper):
        config_cls = LeadConfig

        def chain(self):
            c = self.config
            return Chain(Correctness(), LeadEfficiency(c.l_min, c.b_max), CVWeights(), DecoupledNormalise(),
                         BatchWhiten(c.whiten))  # fmt: skip

    b = RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]),
                     lengths=torch.tensor([20, 30, 12, 36]))  # fmt: skip
    out = get_shaper("lead_saw", l_min=10, b_max=40)(b)
    # L* = 20 (A), 24 (B, mean of 12 and 36); r_l = 1 - |l - L*| / L*: A [1, .5], B [.5, .5]
    assert out.rewards[:, 1].tolist() == [1.0, 0.5, 0.5, 0.5]
    # SAW's CVs: correctness + 3 = [4, 3, 4, 4] (mean 3.75, Bessel std .5), r_l [1, .5, .5, .5] (mean .625, std .25)
    cv = torch.tensor([0.5 / 3.75, 0.25 / 0.625], dtype=torch.float64)
    w = 2 * cv / cv.sum()
    assert out.metrics["saw/weight_0"] == pytest.approx(float(w[0]))
    assert out.metrics["lead/target_len_mean"] == 22.0
    assert get_shaper("lead_saw").state_dict() == {}  # no stateful part
    assert isinstance(get_shaper("lead_saw").needs, ShaperNeeds)


def test_a_chain_state_is_the_tuple_of_its_parts_states():
    chain = Chain(Correctness(), LeadEfficiency(10, 40), PSIWeights(), DecoupledNormalise(), BatchWhiten())
    state = chain.init()
    assert state == (None, None, {"ema": [0.5, 0.5], "n_updates": 0}, None, None)
    b = RolloutBatch(group_ids=torch.tensor([0, 0]), correct=torch.tensor([1, 0]), lengths=torch.tensor([20, 30]))
    _, after = chain.update(start(b), state)
    assert after[2]["n_updates"] == 1 and state[2]["n_updates"] == 0  # pure: the input state is untouched
    assert chain.state_dict(after) == {"controller": after[2]}


def test_a_chain_refuses_two_parts_with_one_state_key():
    with pytest.raises(ValueError, match="share a state key"):
        Chain(PSIWeights(), PSIWeights())


def test_a_part_out_of_order_says_what_it_missed():
    with pytest.raises(ValueError, match="'DecoupledNormalise' needs channels"):
        b = RolloutBatch(group_ids=torch.tensor([0]), correct=torch.tensor([1]), lengths=torch.tensor([3]))
        Chain(DecoupledNormalise()).update(start(b), (None,))


def test_static_weights_name_the_mismatch():
    b = RolloutBatch(group_ids=torch.tensor([0]), correct=torch.tensor([1]), lengths=torch.tensor([3]))
    with pytest.raises(ValueError, match="weights has 2 entries but rewards has 1 columns"):
        Chain(Correctness(), StaticWeights((1.0, 2.0))).update(start(b), (None, None))


# --------------------------------------------------------------- the compositions equal the field's functions
def with_budgets(batch: RolloutBatch, budgets) -> RolloutBatch:
    return RolloutBatch(group_ids=batch.group_ids, correct=batch.correct, lengths=batch.lengths,
                        rewards=batch.rewards, budgets=torch.tensor(budgets[: len(batch)]))  # fmt: skip


@given(batches(), st.lists(st.integers(0, 8000), min_size=36, max_size=36), st.floats(0, 1e-2))
def test_l1_exact_is_grpo_of_the_field_reward(batch, budgets, alpha):
    b = with_budgets(batch, budgets)
    want = group_normalize(l1_exact_reward(b.correct, b.lengths, b.budgets, alpha=alpha), Groups.from_ids(b.group_ids))
    assert torch.equal(get_shaper("l1_exact", alpha=alpha)(b).advantages, want.float())


@given(st.lists(batches(), min_size=1, max_size=3))
def test_adlp_equals_the_field_controller_over_steps(steps):
    shaper, ctl = get_shaper("adlp", eta=0.05), AdlpController(AdlpConfig(eta=0.05))
    for b in steps:
        want = group_normalize(ctl.step(b.correct, b.lengths).rewards, Groups.from_ids(b.group_ids))
        assert torch.equal(shaper(b).advantages, want.float())
    assert shaper.state_dict()["controller"] == ctl.state_dict()


@given(batches(), st.sampled_from(["token", "sequence"]), st.integers(1, 8000))
def test_dler_equals_the_field_functions(batch, whiten, cap):
    truncated = batch.lengths >= cap  # the engine's cap: every response at it was cut (none ends exactly there)
    batch = RolloutBatch(group_ids=batch.group_ids, correct=batch.correct, lengths=batch.lengths, truncated=truncated)
    r = dler_reward(batch.correct, batch.lengths, max_length=cap) * stop_properly_scale(truncated, 0.1)
    want = dler_advantages(r, Groups.from_ids(batch.group_ids), batch.lengths if whiten == "token" else None)
    want = dler_boost(want, dler_reward(batch.correct, batch.lengths, max_length=cap), value=0.1)
    assert torch.equal(get_shaper("dler", max_length=cap, whiten=whiten)(batch).advantages, want.float())


@given(batches(with_rewards=2), st.sampled_from(["grpo", "gdpo"]))
def test_saw_equals_the_field_function(batch, mode):
    channels = torch.cat([batch.correct.double()[:, None], batch.rewards.double()], dim=1)
    want = saw_advantages(channels, Groups.from_ids(batch.group_ids), batch.lengths, mode=mode).advantages
    assert torch.equal(get_shaper("saw", mode=mode)(batch).advantages, want.float())


@given(batches(max_size=8), st.integers(1, 6), st.sampled_from(["length", "reward_per_token"]))
def test_gfpo_equals_the_field_function(batch, k, by):
    want = gfpo_advantages(batch.correct.double(), batch.lengths, Groups.from_ids(batch.group_ids), keep=k, by=by)
    out = get_shaper("gfpo", keep=k, by=by)(batch)
    assert torch.equal(out.keep, want.keep)
    assert torch.equal(out.advantages, want.advantages.float())
