"""The composed shapers (chains of parts) equal the hand-written ones they replaced, bit for bit: advantages,
rewards and every metric, on random batches (tests/legacy_shapers.py holds the hand-written ones)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import legacy_shapers as legacy
from dynashape import RolloutBatch, get_shaper
from dynashape.methods.lead.config import LeadConfig
from strategies import batches


def same(got, ref):
    assert torch.equal(got.advantages, ref.advantages)
    assert torch.equal(got.rewards, ref.rewards)
    assert got.metrics == ref.metrics  # the same keys and the same floats
    assert got.keep is None


@given(batches(), st.sampled_from(["unbiased", "none"]), st.sampled_from([1e-6, 1e-3]))
def test_grpo_on_correctness(batch, std, eps):
    same(get_shaper("grpo", std=std, eps=eps)(batch), legacy.grpo(batch, std, eps))


@given(batches(with_rewards=1))
def test_grpo_on_its_reward_column(batch):
    same(get_shaper("grpo")(batch), legacy.grpo(batch))


@given(
    batches(),
    st.sampled_from(["classic", "conditioned"]),
    st.integers(0, 8000),
    st.tuples(st.floats(0, 4), st.floats(0, 4)),
)
def test_grpo_length(batch, mode, threshold, weights):
    got = get_shaper("grpo_length", mode=mode, threshold=threshold, weights=weights)(batch)
    same(got, legacy.grpo_length(batch, mode, threshold, weights))


@given(st.integers(1, 4).flatmap(lambda k: st.tuples(batches(with_rewards=k), st.just(k))), st.data())
def test_gdpo(batch_k, data):
    batch, k = batch_k
    weights = data.draw(st.none() | st.tuples(*[st.floats(-3, 3, allow_nan=False)] * k))
    whiten = data.draw(st.sampled_from(["token", "sequence", "none"]))
    same(get_shaper("gdpo", weights=weights, whiten=whiten)(batch), legacy.gdpo(batch, weights, whiten))


@given(batches(), st.floats(0, 4), st.floats(0, 0.01))
def test_shorterbetter(batch, alpha, beta):
    same(get_shaper("shorterbetter", alpha=alpha, beta=beta)(batch), legacy.shorterbetter(batch, alpha, beta))


@settings(max_examples=60)
@given(
    st.lists(batches(), min_size=1, max_size=3),
    st.sampled_from(["mean_correct", "min_correct", "median_correct", "mean_all"]),
    st.sampled_from(["symmetric", "upper_only"]),
    st.sampled_from(["token", "sequence", "none"]),
    st.none() | st.floats(0, 1),
)
def test_lead_over_several_steps(steps, target, efficiency, whiten, static):
    params = dict(l_min=100, b_max=4000, target=target, efficiency=efficiency, whiten=whiten, static_lambda_c=static)
    shaper, ref = get_shaper("lead", **params), legacy.Lead(LeadConfig(**params))
    for batch in steps:  # the controller's state carries over
        same(shaper(batch), ref(batch))
    assert shaper.state_dict() == {"version": 1, "controller": ref.controller.state_dict()}


@settings(max_examples=30)
@given(st.lists(batches(with_rewards=2), min_size=1, max_size=2))
def test_lead_with_extra_channels(steps):
    params = dict(l_min=100, b_max=4000, reward_ranges=((-5.0, 5.0), (-5.0, 5.0)))
    shaper, ref = get_shaper("lead", **params), legacy.Lead(LeadConfig(**params))
    for batch in steps:
        same(shaper(batch), ref(batch))


def test_lead_state_from_before_the_parts_loads_and_continues_the_same():
    b = RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]),
                     lengths=torch.tensor([1200, 3000, 1500, 2500]))  # fmt: skip
    ref = legacy.Lead(LeadConfig())
    ref(b)
    shaper = get_shaper("lead")
    shaper.load_state_dict({"version": 1, "controller": ref.controller.state_dict()})
    same(shaper(b), ref(b))


def test_a_refused_batch_moves_no_state():
    shaper = get_shaper("lead")
    before = shaper.state_dict()
    bad = RolloutBatch(group_ids=torch.tensor([0, 0]), correct=torch.tensor([1, 0]), lengths=torch.tensor([5, 6]),
                       rewards=torch.zeros(2, 1))  # fmt: skip
    with pytest.raises(ValueError, match="reward_ranges is empty"):
        shaper(bad)
    assert shaper.state_dict() == before


def test_every_shaper_equals_its_hand_written_self_on_a_large_batch():
    """8192 rollouts: torch reduces a long vector in vectorised blocks, so an order of operations that small
    batches cannot tell apart (a strided column against a contiguous copy) shows here."""
    gen = torch.Generator().manual_seed(0)
    n = 512 * 16
    ids = torch.arange(512).repeat_interleave(16)[torch.randperm(n, generator=gen)]
    correct = torch.rand(n, generator=gen) < torch.rand(512, generator=gen)[ids]
    lengths = torch.randint(200, 6000, (n,), generator=gen)
    plain = RolloutBatch(group_ids=ids, correct=correct, lengths=lengths)
    cols = torch.rand(n, 2, generator=gen, dtype=torch.float64)
    two = RolloutBatch(group_ids=ids, correct=correct, lengths=lengths, rewards=cols)
    one = RolloutBatch(group_ids=ids, correct=correct, lengths=lengths, rewards=cols[:, :1])
    same(get_shaper("grpo")(plain), legacy.grpo(plain))
    same(get_shaper("grpo")(one), legacy.grpo(one))
    same(get_shaper("grpo_length", threshold=3000)(plain), legacy.grpo_length(plain, threshold=3000))
    same(get_shaper("gdpo", weights=(0.7, 0.3))(two), legacy.gdpo(two, (0.7, 0.3)))
    same(get_shaper("shorterbetter")(plain), legacy.shorterbetter(plain))
    shaper, ref = get_shaper("lead"), legacy.Lead(LeadConfig())
    for _ in range(3):
        same(shaper(plain), ref(plain))
    ranges = ((0.0, 1.0), (0.0, 1.0))
    shaper, ref = get_shaper("lead", reward_ranges=ranges), legacy.Lead(LeadConfig(reward_ranges=ranges))
    same(shaper(two), ref(two))


@settings(max_examples=60)
@given(
    st.integers(0, 3).flatmap(lambda k: batches(with_rewards=k) if k else batches()),
    st.sampled_from(["cosine", "kimi_length", "pass_rate_linear", "length_zscore"]),
    st.sampled_from(["unbiased", "none"]),
    st.data(),
)
def test_the_length_reward_recipes_equal_their_hand_written_shapers(batch, name, std, data):
    """cosine, kimi_length, pass_rate_linear, length_zscore: the reward part, the batch's reward columns summed
    on, GRPO; the same numbers and metrics as the shapers they were, with and without reward columns."""
    params = {
        "cosine": lambda: {
            "max_len": data.draw(st.floats(1, 9000)),
            "exceed_length": data.draw(st.none() | st.floats(-10, 0)),
            "exceed_margin": data.draw(st.floats(0, 32)),
        },
        "kimi_length": lambda: {"weight": data.draw(st.floats(0, 3))},
        "pass_rate_linear": lambda: {
            "coef": data.draw(st.floats(0, 1)),
            "budget": data.draw(st.floats(1, 9000)),
            "only_correct": data.draw(st.booleans()),
            "scale": data.draw(st.sampled_from(["budget", "group_max"])),
        },
        "length_zscore": lambda: {"alpha": data.draw(st.floats(0, 0.5)), "wrong_reward": data.draw(st.floats(-2, 0))},
    }[name]()
    shaper = get_shaper(name, std=std, **params)
    same(shaper(batch), getattr(legacy, name)(batch, shaper.config))
