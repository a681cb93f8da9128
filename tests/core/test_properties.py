"""Properties of every shaper (hypothesis) and equivalence to the slow loop reference."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import plain_math as plain
from dynashape import RolloutBatch, get_shaper
from dynashape.core.groups import Groups, group_mean
from dynashape.testing.loop_reference import grpo_loop, lead_loop, shorterbetter_loop
from strategies import batches, permuted

F = torch.float64


@given(
    batches(),
    st.sampled_from(["mean_correct", "min_correct", "median_correct", "mean_all"]),
    st.sampled_from(["symmetric", "upper_only"]),
    st.sampled_from(["token", "sequence", "none"]),
)
def test_lead_equals_loop_reference(batch, target, efficiency, whiten_mode):
    params = dict(l_min=100, b_max=4000, target=target, efficiency=efficiency, whiten=whiten_mode)
    shaper = get_shaper("lead", **params)
    ema = 0.5
    for _ in range(2):  # two steps: the EMA carries over
        out = shaper(batch)
        ref, ema, info = lead_loop(
            batch.correct.tolist(), batch.lengths.tolist(), batch.group_ids.tolist(), ema=ema, **params
        )
        assert torch.allclose(out.advantages.double(), torch.tensor(ref, dtype=F), atol=2e-4, rtol=1e-4)
        assert abs(out.metrics["lead/lambda_c"] - info["lambda_c"]) < 1e-9


@given(batches())
def test_grpo_and_shorterbetter_equal_loop_reference(batch):
    ids, correct, lengths = batch.group_ids.tolist(), batch.correct.tolist(), batch.lengths.tolist()
    got = get_shaper("grpo")(batch).advantages.double()
    assert torch.allclose(got, torch.tensor(grpo_loop([float(c) for c in correct], ids), dtype=F), atol=1e-6)
    got = get_shaper("shorterbetter")(batch).advantages.double()
    assert torch.allclose(got, torch.tensor(shorterbetter_loop(correct, lengths, ids), dtype=F), atol=1e-5)


@given(batches(), st.data())
def test_permutation_equivariance(batch, data):
    perm = data.draw(st.permutations(range(len(batch))))
    for name, params in [
        ("lead", dict(l_min=50, b_max=3000)),
        ("grpo", {}),
        ("shorterbetter", {}),
        ("grpo_length", {}),
    ]:
        a = get_shaper(name, **params)(batch).advantages
        b = get_shaper(name, **params)(permuted(batch, perm)).advantages
        assert torch.allclose(a[torch.tensor(perm)], b, atol=1e-5), name


@given(batches(), st.integers(-50, 50))
def test_relabelling_groups_changes_nothing(batch, offset):
    relabelled = RolloutBatch(group_ids=batch.group_ids * 3 + offset, correct=batch.correct, lengths=batch.lengths)
    a = get_shaper("lead", l_min=50, b_max=3000)(batch).advantages
    b = get_shaper("lead", l_min=50, b_max=3000)(relabelled).advantages
    assert torch.equal(a, b)


@given(batches())
def test_lead_unwhitened_advantage_has_zero_group_mean(batch):
    out = get_shaper("lead", l_min=50, b_max=3000, whiten="none")(batch)
    g = Groups.from_ids(batch.group_ids)
    assert torch.allclose(group_mean(out.advantages.double(), g), torch.zeros(g.num_groups, dtype=F), atol=1e-5)


@given(batches(with_rewards=1), st.sampled_from(["token", "sequence"]))
def test_gdpo_with_one_column_is_grpo_then_whiten(batch, mode):
    gdpo = get_shaper("gdpo", whiten=mode)(batch).advantages.double()
    ids, lengths = batch.group_ids.tolist(), batch.lengths.tolist()
    grpo = plain.group_normalize(batch.rewards[:, 0].tolist(), ids)  # a plain loop, not the package
    if mode == "token":
        if sum(lengths) < 2:
            return  # the fallback of a batch with < 2 tokens has its own test (test_groups)
        expected = plain.token_whiten(grpo, lengths)
    else:
        if len(ids) < 2:
            return
        expected = plain.sequence_whiten(grpo)
    # float32 output: compare at float32 resolution of values up to ~1 / sqrt(eps)
    assert gdpo.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-4)


@given(batches(), st.integers(0, 20))
def test_constant_groups_get_zero_advantage_before_whitening(batch, length):
    same = RolloutBatch(
        group_ids=batch.group_ids, correct=batch.correct, lengths=torch.full_like(batch.lengths, length)
    )
    g = Groups.from_ids(batch.group_ids)
    out = get_shaper("lead", l_min=1, b_max=100, whiten="none")(same)
    # a group all correct or all wrong with equal lengths has constant rewards in both channels
    constant = (group_mean(same.correct.double(), g) % 1 == 0)[g.index]
    assert (out.advantages[constant] == 0).all()


@given(st.lists(batches(max_groups=4), min_size=4, max_size=6), st.integers(1, 3), st.sampled_from([None, 0.7]))
def test_restored_lead_continues_the_same_trajectory(stream, cut, static):
    params = dict(l_min=50, b_max=3000, static_lambda_c=static)
    straight = get_shaper("lead", **params)
    interrupted = get_shaper("lead", **params)
    for b in stream[:cut]:
        straight(b)
        interrupted(b)
    resumed = get_shaper("lead", **params)
    resumed.load_state_dict(interrupted.state_dict())
    for b in stream[cut:]:
        x, y = straight(b), resumed(b)
        assert torch.equal(x.advantages, y.advantages)
        assert x.metrics == y.metrics
