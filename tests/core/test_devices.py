"""Right on any device, never half-updated, any float dtype (issue: device-agnostic core).

- Every registered shaper, every loss and every metric runs with its inputs on the CPU while torch's default
  device is "meta": a factory call without a device (torch.zeros(...), torch.tensor(...)) would land on meta
  and fail, exactly as it would put a CPU tensor beside a CUDA batch. The same checks run on CUDA (`gpu`).
- A refused batch leaves every stateful shaper's state as it was.
- Zero-length rollouts get 0 under token whitening; counts and length weights are exact in bf16.
- bf16 log-probs and float16 rewards give the float32 result within a stated tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import plain_math as plain
from dynashape import RolloutBatch, available_shapers, get_shaper, shaper_needs
from dynashape.core.groups import Groups, group_max, group_median, group_min, group_normalize, whiten
from dynashape.core.metrics import aes, pass_at_k, pass_at_k_curve, top1_eigen_ratio
from dynashape.losses import (
    aggregate_loss,
    clipped_surrogate_loss,
    entropy_advantage,
    kl_estimate,
    masked_mean,
    policy_loss,
)
from dynashape.losses.drpo import drpo_loss
from dynashape.methods.lead.efficiency import efficiency_reward, target_lengths
from dynashape.rewards.length import overlong_penalty

F = torch.float64
CUDA = torch.cuda.is_available()


# --------------------------------------------------------------------------------------------- fixtures
def shaper_batch(name: str, device: str = "cpu", *, reward_dtype: torch.dtype = F, fp_dim: int = 8) -> RolloutBatch:
    """A valid batch for shaper `name`: 3 groups (mixed, all correct, a single rollout), lengths in 0..90."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor([4, 4, 4, 4, 9, 9, 9, 2])
    correct = torch.tensor([1, 0, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    lengths = torch.tensor([12, 40, 25, 90, 30, 31, 33, 7])
    fields: dict = {}
    if name == "gdpo":
        fields["rewards"] = torch.rand(8, 2, generator=gen, dtype=F).to(reward_dtype)
    if name in ("meds", "lead_meds"):
        fields["prompt_keys"] = tuple(f"prompt-{int(i)}" for i in ids)
        fields["fingerprints"] = torch.randn(8, fp_dim, generator=gen)
    if shaper_needs(name).budgets:
        fields["budgets"] = torch.tensor([20, 20, 20, 20, 32, 32, 32, 5])
    if shaper_needs(name).truncated:  # the 90-token row cut at the cap
        fields["truncated"] = lengths == 90
    if shaper_needs(name).formatted:  # one correct and one wrong answer without a boxed answer
        fields["formatted"] = torch.tensor([1, 1, 0, 1, 1, 1, 1, 0], dtype=torch.bool)
    batch = RolloutBatch(group_ids=ids, correct=correct, lengths=lengths, **fields)
    return move(batch, device)


def move(batch: RolloutBatch, device: str) -> RolloutBatch:
    def to(x):
        return None if x is None else x.to(device)

    return RolloutBatch(
        group_ids=to(batch.group_ids),
        correct=to(batch.correct),
        lengths=to(batch.lengths),
        rewards=to(batch.rewards),
        prompt_keys=batch.prompt_keys,
        fingerprints=to(batch.fingerprints),
        budgets=to(batch.budgets),
        truncated=to(batch.truncated),
        formatted=to(batch.formatted),
    )


def shaper_kwargs(name: str) -> dict:
    # LEAD's paper defaults (l_min 1000) make every toy length fall under l_min; use toy-sized ones
    return {"lead": {"l_min": 10, "b_max": 64}, "lead_meds": {"l_min": 10, "b_max": 64}}.get(name, {})


def token_inputs(device: str = "cpu", dtype: torch.dtype = torch.float32, *, upcast: bool = False):
    """log_prob, old, ref, mask, advantages, entropy of 4 rollouts x 6 tokens; `upcast` turns the float
    inputs (rounded to `dtype` first) into float32, so both runs see the same numbers."""
    gen = torch.Generator().manual_seed(1)
    log_prob = (-torch.rand(4, 6, generator=gen)).to(dtype)
    old = (log_prob.float() + 0.1 * torch.randn(4, 6, generator=gen)).to(dtype)
    ref = (log_prob.float() - 0.05).to(dtype)
    entropy = torch.rand(4, 6, generator=gen).to(dtype)
    if upcast:
        log_prob, old, ref, entropy = (x.float() for x in (log_prob, old, ref, entropy))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4, [1] * 5 + [0]])
    adv = torch.tensor([0.5, -1.0, 2.0, -0.25])
    return tuple(x.to(device) for x in (log_prob, old, ref, mask, adv, entropy))


def loss_calls(device: str = "cpu", dtype: torch.dtype = torch.float32, *, upcast: bool = False) -> dict:
    """Every loss of dynashape.losses and dynashape.losses.drpo, as calls on one token batch built now."""
    log_prob, old, ref, mask, adv, entropy = token_inputs(device, dtype, upcast=upcast)
    ids = torch.tensor([3, 3, 8, 8], device=device)
    correct = torch.tensor([1, 0, 1, 0], device=device)
    return {
        "masked_mean": lambda: masked_mean(log_prob, mask),
        **{
            f"aggregate_loss[{mode}]": (lambda mode=mode: aggregate_loss(log_prob, mask, mode=mode))
            for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
        },
        **{f"kl_estimate[{k}]": (lambda k=k: kl_estimate(log_prob, ref, estimator=k)) for k in ("k1", "k2", "k3")},
        "clipped_surrogate_loss": lambda: clipped_surrogate_loss(log_prob, old, adv, mask, dual_clip=3.0),
        "policy_loss": lambda: policy_loss(
            log_prob, old, adv, mask, ref_log_prob=ref, kl_coef=0.1, entropy=entropy, entropy_coef=0.01
        ),
        "entropy_advantage": lambda: entropy_advantage(adv, entropy),
        **{
            f"drpo_loss[{k}]": (
                lambda k=k: drpo_loss(log_prob, old, mask, group_ids=ids, correct=correct, max_length=6, kl_estimator=k)
            )
            for k in ("k3", "k1")
        },
    }


def tensors_of(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, tuple):
        return [x for item in result for x in tensors_of(item)]
    return []


def state_equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(state_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(state_equal(x, y) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------------- 1. no device-less factory calls
@pytest.mark.parametrize("name", available_shapers())
def test_every_shaper_keeps_to_the_batch_device_under_a_foreign_default(name):
    shaper = get_shaper(name, **shaper_kwargs(name))
    batch = shaper_batch(name)
    want = shaper(batch).advantages
    shaper = get_shaper(name, **shaper_kwargs(name))
    with torch.device("meta"):
        out = shaper(batch)
    assert out.advantages.device.type == "cpu" and out.rewards.device.type == "cpu"
    assert torch.equal(out.advantages, want)


@pytest.mark.parametrize("call", list(loss_calls()))
def test_every_loss_keeps_to_the_input_device_under_a_foreign_default(call):
    want = tensors_of(loss_calls()[call]())
    calls = loss_calls()
    with torch.device("meta"):
        got = tensors_of(calls[call]())
    assert got and all(t.device.type == "cpu" for t in got)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_group_functions_and_metrics_keep_to_the_input_device_under_a_foreign_default():
    ids = torch.tensor([5, 5, 1, 1, 1])
    vals = torch.tensor([1.0, 3.0, 2.0, 2.0, 7.0], dtype=F)
    mask = torch.tensor([True, False, True, True, False])
    lengths = torch.tensor([3, 0, 4, 9, 2])
    with torch.device("meta"):
        g = Groups.from_ids(ids)
        results = [
            g.sum(vals),
            g.dense_sum(vals),
            group_min(vals, g, mask),
            group_max(vals, g, mask),
            group_median(vals, g, mask),
            group_normalize(vals, g),
            whiten(vals, lengths),
            whiten(vals),
            target_lengths(lengths, mask, g, mode="min_correct", l_min=1, b_max=8),
            efficiency_reward(lengths, vals),
            overlong_penalty(lengths, max_len=8, buffer=4),
        ]
        ratio = top1_eigen_ratio(torch.randn(6, 3, device="cpu"))
        p = pass_at_k(np.array([4, 4]), np.array([1, 0]), 2)
        curve = pass_at_k_curve(np.array([4, 4]), np.array([1, 0]))
        score = aes(0.5, 10.0, 0.4, 20.0)
    assert all(r.device.type == "cpu" for r in results)
    assert 0 < ratio <= 1 and p.tolist() == [0.5, 0.0] and curve.values[-1] == pytest.approx(0.5)
    assert score.value == pytest.approx(0.5 + 3 * 0.25)


# ------------------------------------------------------------- 2. deterministic per-group sums off the CPU
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=40),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
)
def test_dense_group_sum_equals_a_plain_loop(ids, k, seed):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_ids(torch.tensor(ids))
    values = torch.randn(len(ids), k, generator=gen, dtype=F)
    got = g.dense_sum(values)
    for pos, gid in enumerate(sorted(set(ids))):
        want = [sum(values[i, j].item() for i in range(len(ids)) if ids[i] == gid) for j in range(k)]
        assert got[pos].tolist() == pytest.approx(want, abs=1e-12)
    assert torch.equal(g.dense_sum(values[:, 0]), got[:, 0])  # [N] and [N, K] agree
    # ranks within each group, in batch order
    for gid in set(ids):
        rows = [i for i in range(len(ids)) if ids[i] == gid]
        assert g.slot[rows].tolist() == list(range(len(rows)))


def test_dense_table_is_bounded_and_off_cpu_sums_take_it():
    # 1000 singleton groups and one group of 1000: a dense table would need 1001 x 1000 cells
    skewed = Groups.from_ids(torch.cat([torch.arange(1000), torch.full((1000,), 5000)]))
    assert not skewed.dense_fits
    assert Groups.from_ids(torch.arange(64).repeat_interleave(16)).dense_fits
    g = Groups.from_ids(torch.tensor([2, 2, 7]))
    with torch.device("meta"):
        values = torch.empty(3, dtype=F)  # a non-CPU tensor: sum must go through the dense table, not index_add_
    calls = []
    original = torch.Tensor.index_add_

    def spy(self, *a, **kw):
        calls.append(self.device.type)
        return original(self, *a, **kw)

    torch.Tensor.index_add_ = spy  # type: ignore[method-assign]
    try:
        assert g.sum(values).shape == (2,)
        g.sum(torch.ones(3, dtype=F))
    finally:
        torch.Tensor.index_add_ = original  # type: ignore[method-assign]
    assert calls == ["cpu"]


# --------------------------------------------------------------------------- 3. degenerate inputs
def test_zero_length_rollouts_get_zero_under_token_whitening():
    # The case: one group, lengths [5, 0, 0, 0], verdicts [1, 0, 1, 0]. All 5 tokens come from row 0,
    # so the token mean is its own value: row 0 whitens to 0, and the rows without tokens get exactly 0
    # (they used to get -8227: divided by sqrt(eps) because the token variance is 0).
    batch = RolloutBatch(
        group_ids=torch.zeros(4, dtype=torch.long),
        correct=torch.tensor([1, 0, 1, 0]),
        lengths=torch.tensor([5, 0, 0, 0]),
    )
    assert get_shaper("lead").__call__(batch).advantages.tolist() == [0.0, 0.0, 0.0, 0.0]
    # By hand: values [1, 5, -1, 2], tokens [2, 0, 1, 1]: mean (2 - 1 + 2) / 4 = 0.75,
    # var (2 * 0.0625 + 3.0625 + 1.5625) / 3 = 4.75 / 3; row 1 has no token -> 0.
    got = whiten(torch.tensor([1.0, 5.0, -1.0, 2.0], dtype=F), torch.tensor([2, 0, 1, 1]), eps=0.0)
    sd = math.sqrt(4.75 / 3)
    assert got.tolist() == pytest.approx([0.25 / sd, 0.0, -1.75 / sd, 1.25 / sd], abs=1e-12)


@given(st.lists(st.tuples(st.floats(-3, 3), st.integers(0, 4)), min_size=1, max_size=12))
def test_token_whitening_ignores_rows_without_tokens(rows):
    values = torch.tensor([v for v, _ in rows], dtype=F)
    lengths = torch.tensor([n for _, n in rows])
    got = whiten(values, lengths)
    assert torch.isfinite(got).all()
    assert (got[lengths == 0] == 0).all()
    if int(lengths.sum()) >= 2:
        assert got.tolist() == pytest.approx(plain.token_whiten(values.tolist(), lengths.tolist()), abs=1e-9)
        # changing the value of a row without tokens changes nothing
        shifted = values + 100.0 * (lengths == 0)
        assert torch.equal(whiten(shifted, lengths), got)


@pytest.mark.parametrize("name", ["grpo", "grpo_length", "gdpo", "shorterbetter"])
def test_eps_zero_is_refused_and_constant_groups_give_zero(name):
    with pytest.raises(ValueError, match=r"eps=0.0 is out of range; allowed: \(0.0, inf\]"):
        get_shaper(name, eps=0.0)
    with pytest.raises(ValueError, match=r"eps=0\.0 must be a finite number > 0"):
        group_normalize(torch.ones(3, dtype=F), Groups.from_ids(torch.zeros(3, dtype=torch.long)), eps=0.0)
    rewards = torch.ones(3, 2, dtype=F) if name == "gdpo" else None
    constant = RolloutBatch(
        group_ids=torch.zeros(3, dtype=torch.long), correct=torch.ones(3), lengths=torch.full((3,), 7), rewards=rewards
    )
    out = get_shaper(name, eps=1e-12)(constant)
    assert out.advantages.tolist() == [0.0, 0.0, 0.0]


def test_drpo_counts_tokens_exactly_in_bf16():
    # 4001 and 2003 response tokens: bf16 rounds the counts to 4000 and 2000 (its spacing is 16 and 8 there),
    # which moved the length weights in the third digit. Computed in float32 they are exact.
    t = 4100
    mask = torch.zeros(3, t)
    for row, n in enumerate((4001, 2003, 10)):
        mask[row, :n] = 1
    log_prob = torch.full((3, t), -0.5)
    out32 = drpo_loss(
        log_prob,
        log_prob,
        mask,
        group_ids=torch.zeros(3, dtype=torch.long),
        correct=torch.tensor([1, 1, 0]),
        max_length=t,
    )
    out16 = drpo_loss(
        log_prob.bfloat16(), log_prob.bfloat16(), mask.bfloat16(),
        group_ids=torch.zeros(3, dtype=torch.long), correct=torch.tensor([1, 1, 0]), max_length=t,
    )  # fmt: skip
    # w_i = softmax over the correct rollouts of (1 - l_i / L) / lam, lam = 0.1
    e1, e2 = math.exp((1 - 4001 / t) / 0.1), math.exp((1 - 2003 / t) / 0.1)
    want = [e1 / (e1 + e2), e2 / (e1 + e2), 0.0]
    assert out32.weights.tolist() == pytest.approx(want, abs=1e-6)
    assert out16.weights.tolist() == pytest.approx(want, abs=1e-6)
    assert out16.weights.dtype == torch.float32


def test_drpo_trust_region_stays_finite_when_the_ratio_explodes():
    mask = torch.ones(2, 3)
    old = torch.full((2, 3), -100.0)
    new = torch.zeros(2, 3, requires_grad=True)  # log-ratio 100: exp overflows float32 without the guard
    out = drpo_loss(new, old, mask, group_ids=torch.tensor([0, 0]), correct=torch.tensor([1, 0]), max_length=3)
    assert torch.isfinite(out.loss) and torch.isfinite(out.kl)
    # the guard: k3 on a log-ratio clamped to 20
    assert out.kl.item() == pytest.approx(math.exp(20) - 1 - 20, rel=1e-6)
    out.loss.backward()
    assert torch.isfinite(new.grad).all()


# ---------------------------------------------------------------------- 4. state only after validation
def _stateful_shapers() -> list[str]:
    names = []
    for name in available_shapers():
        shaper = get_shaper(name, **shaper_kwargs(name))
        shaper(shaper_batch(name))
        if shaper.state_dict():
            names.append(name)
    return names


def _refused_variants(name: str) -> list[RolloutBatch]:
    good = shaper_batch(name)
    three = torch.rand(len(good), 3, dtype=F)
    return [
        # an extra reward column the shaper has no declared range for
        RolloutBatch(group_ids=good.group_ids, correct=good.correct, lengths=good.lengths, rewards=three,
                     prompt_keys=good.prompt_keys, fingerprints=good.fingerprints),
        # no fingerprints / keys (MEDS needs both)
        RolloutBatch(group_ids=good.group_ids, correct=good.correct, lengths=good.lengths),
        # fingerprints of another dimension than the stored ones
        shaper_batch(name, fp_dim=5) if good.fingerprints is not None else RolloutBatch(
            group_ids=good.group_ids, correct=good.correct, lengths=good.lengths,
            rewards=torch.rand(len(good), 1, dtype=F)),
    ]  # fmt: skip


STATEFUL = _stateful_shapers()


def test_the_stateful_shapers_are_found():
    assert {"lead", "meds", "lead_meds"} <= set(STATEFUL)


@pytest.mark.parametrize("name", STATEFUL)
def test_a_refused_batch_leaves_the_state_unchanged(name):
    shaper = get_shaper(name, **shaper_kwargs(name))
    shaper(shaper_batch(name))
    before = shaper.state_dict()
    refused = 0
    for bad in _refused_variants(name):
        try:
            shaper(bad)
        except ValueError:
            refused += 1
            assert state_equal(shaper.state_dict(), before), f"{name}: a refused batch changed the state"
        else:
            before = shaper.state_dict()  # accepted: the state moves on, and the next check starts from here
    assert refused >= 1, f"{name}: no variant was refused, so the test checked nothing"
    # and the shaper still works after refusals, advancing exactly once
    again = get_shaper(name, **shaper_kwargs(name))
    again.load_state_dict(shaper.state_dict())
    a, b = shaper(shaper_batch(name)), again(shaper_batch(name))
    assert torch.equal(a.advantages, b.advantages)


# --------------------------------------------------------------------------- 5. bf16 and float16 inputs
@pytest.mark.parametrize("call", list(loss_calls()))
def test_bf16_log_probs_give_the_float32_result(call):
    # The inputs are bf16-representable numbers, so both runs see the same values; only the arithmetic
    # differs. Computed in float32 whatever the input dtype, the results agree to float32 rounding (1e-6).
    got = tensors_of(loss_calls(dtype=torch.bfloat16)[call]())
    want = tensors_of(loss_calls(dtype=torch.bfloat16, upcast=True)[call]())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype in (torch.float32, torch.bool), (call, g.dtype)
        assert torch.allclose(g.double(), w.double(), rtol=1e-6, atol=1e-6), call


@pytest.mark.parametrize("name", available_shapers())
def test_float16_rewards_and_fingerprints_give_the_float32_result(name):
    # Rewards and fingerprints are upcast to float64 inside the shapers: float16 inputs holding the same
    # (float16-representable) values give the float32-input result exactly.
    b16 = shaper_batch(name, reward_dtype=torch.float16)
    b32 = RolloutBatch(
        group_ids=b16.group_ids, correct=b16.correct, lengths=b16.lengths,
        rewards=None if b16.rewards is None else b16.rewards.float(), prompt_keys=b16.prompt_keys,
        fingerprints=None if b16.fingerprints is None else b16.fingerprints.half().float(), budgets=b16.budgets,
        truncated=b16.truncated, formatted=b16.formatted,
    )  # fmt: skip
    if b16.fingerprints is not None:
        b16 = RolloutBatch(
            group_ids=b16.group_ids, correct=b16.correct, lengths=b16.lengths, rewards=b16.rewards,
            prompt_keys=b16.prompt_keys, fingerprints=b16.fingerprints.half(), truncated=b16.truncated,
            formatted=b16.formatted,
        )  # fmt: skip
    got = get_shaper(name, **shaper_kwargs(name))(b16).advantages
    want = get_shaper(name, **shaper_kwargs(name))(b32).advantages
    assert got.dtype == torch.float32
    assert torch.allclose(got, want, rtol=0, atol=1e-6), name


# ------------------------------------------------------------------------------------------ 6. on CUDA
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("name", available_shapers())
def test_every_shaper_on_cuda_matches_the_cpu_and_repeats_bit_for_bit(name):
    cpu = get_shaper(name, **shaper_kwargs(name))(shaper_batch(name)).advantages
    runs = [get_shaper(name, **shaper_kwargs(name))(shaper_batch(name, "cuda")).advantages for _ in range(3)]
    assert all(r.device.type == "cuda" for r in runs)
    assert all(torch.equal(runs[0], r) for r in runs[1:]), "not deterministic on CUDA"
    assert torch.allclose(runs[0].cpu(), cpu, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("call", list(loss_calls()))
def test_every_loss_on_cuda_matches_the_cpu(call):
    cpu = tensors_of(loss_calls()[call]())
    gpu = tensors_of(loss_calls("cuda")[call]())
    assert all(t.device.type == "cuda" for t in gpu)
    assert all(torch.allclose(g.cpu().double(), c.double(), atol=1e-5) for g, c in zip(gpu, cpu))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_group_sums_on_cuda_are_deterministic_for_a_large_batch():
    ids = torch.arange(512).repeat_interleave(16).cuda()
    values = torch.randn(ids.shape[0], 2, dtype=torch.float32, device="cuda")
    g = Groups.from_ids(ids)
    first = g.sum(values)
    assert all(torch.equal(first, g.sum(values)) for _ in range(5))
    assert torch.allclose(first.cpu(), Groups.from_ids(ids.cpu()).sum(values.cpu()), atol=1e-5)
