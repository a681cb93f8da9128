"""cosine, kimi_length, pass_rate_linear, length_zscore: hand-worked values, properties, edge cases, devices.

Expected numbers are worked out here from the sources' equations (a plain Python loop per group), never with
dynashape's own group helpers.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynashape import RolloutBatch, available_shapers, config_class, get_shaper
from dynashape.methods import (
    CosineConfig,
    KimiLengthConfig,
    LengthZscoreConfig,
    PassRateLinearConfig,
)
from strategies import batches, permuted

F = torch.float64
EPS = 1e-6
NAMES = ("cosine", "kimi_length", "pass_rate_linear", "length_zscore")

# Two groups, ids out of order and interleaved: group 7 = rollouts 0, 2, 4, 6; group 3 = rollouts 1, 3, 5.
IDS = [7, 3, 7, 3, 7, 3, 7]
CORRECT = [1, 0, 1, 0, 0, 1, 1]
LENGTHS = [100, 50, 400, 900, 250, 300, 700]


def batch(ids=IDS, correct=CORRECT, lengths=LENGTHS, rewards=None) -> RolloutBatch:
    return RolloutBatch(
        group_ids=torch.tensor(ids),
        correct=torch.tensor(correct),
        lengths=torch.tensor(lengths),
        rewards=rewards,
    )


def normalise_loop(rewards: list[float], ids: list[int], std: str = "unbiased", eps: float = EPS) -> list[float]:
    """GRPO normalisation by hand: (r - mean) / (Bessel std + eps); 0 for a group of one or a constant group."""
    out = []
    for r, g in zip(rewards, ids):
        members = [x for x, h in zip(rewards, ids) if h == g]
        mean = sum(members) / len(members)
        if len(members) == 1 or max(members) == min(members):
            out.append(0.0)
        elif std == "none":
            out.append(r - mean)
        else:
            sd = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - 1))
            out.append((r - mean) / (sd + eps))
    return out


def assert_advantages(out, expected: list[float], atol: float = 2e-6) -> None:
    assert out.advantages.dtype == torch.float32
    assert torch.allclose(out.advantages.double(), torch.tensor(expected, dtype=F), atol=atol, rtol=1e-5)


# ------------------------------------------------------------------------------------------ hand-worked values
def test_cosine_hand_worked():
    # r = lo + 0.5 (hi - lo)(1 + cos(pi l / 1000)); correct (lo, hi) = (0.5, 1), wrong (lo, hi) = (-0.5, -1)
    def r(c, length):
        lo, hi = (0.5, 1.0) if c else (-0.5, -1.0)
        return lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * length / 1000))

    rewards = [r(c, length) for c, length in zip(CORRECT, LENGTHS)]
    # spot values by hand: l = 0 -> hi, l = 500 -> midpoint, l = 1000 -> lo
    assert r(1, 0) == 1.0 and r(1, 500) == pytest.approx(0.75) and r(1, 1000) == pytest.approx(0.5)
    assert r(0, 0) == -1.0 and r(0, 500) == pytest.approx(-0.75) and r(0, 1000) == pytest.approx(-0.5)
    out = get_shaper("cosine")(batch())
    assert torch.allclose(out.rewards[:, 0].double(), torch.tensor(rewards, dtype=F), atol=1e-6)
    assert_advantages(out, normalise_loop(rewards, IDS))


def test_cosine_beyond_max_len_follows_the_cosine_or_takes_exceed_length():
    lengths, correct, ids = [0, 150, 200, 400], [1, 1, 0, 0], [0, 0, 0, 0]
    # max_len 200: l = 400 is a full period, back to hi (-1 for a wrong answer), l = 150: cos(3 pi / 4)
    plain = get_shaper("cosine", max_len=200, std="none")(batch(ids, correct, lengths))
    c34 = math.cos(3 * math.pi / 4)
    expected = [1.0, 0.5 + 0.25 * (1 + c34), -0.5, -1.0]
    assert plain.rewards[:, 0].double().tolist() == pytest.approx(expected, abs=1e-6)
    # exceed_length -3 with margin 50: l + 50 >= 200 for l = 150, 200, 400
    capped = get_shaper("cosine", max_len=200, exceed_length=-3.0, exceed_margin=50, std="none")
    assert capped(batch(ids, correct, lengths)).rewards[:, 0].tolist() == pytest.approx([1.0, -3.0, -3.0, -3.0])
    assert plain.metrics["cosine/beyond_max_len_frac"] == 0.5


def test_kimi_length_hand_worked():
    # group 7: lengths 100, 400, 250, 700 (min 100, span 600): lambda = 0.5, 0, 0.25, -0.5
    #   correct 1, 1, 0, 1 -> length reward 0.5, 0, min(0, 0.25) = 0, -0.5
    # group 3: lengths 50, 900, 300 (min 50, span 850): lambda = 0.5, -0.5, 0.5 - 250 / 850
    #   correct 0, 0, 1 -> length reward 0, -0.5, 0.5 - 250 / 850
    lam3 = 0.5 - 250 / 850
    length_reward = [0.5, 0.0, 0.0, -0.5, 0.0, lam3, -0.5]
    for weight in (1.0, 0.3):
        rewards = [c + weight * x for c, x in zip(CORRECT, length_reward)]
        out = get_shaper("kimi_length", weight=weight)(batch())
        assert out.rewards[:, 0].double().tolist() == pytest.approx(rewards, abs=1e-6)
        assert_advantages(out, normalise_loop(rewards, IDS))
    assert out.metrics["kimi_length/length_reward_mean"] == pytest.approx(sum(length_reward) / 7)


def test_pass_rate_linear_hand_worked():
    # pass rates: group 7 has 3 of 4 correct, group 3 has 1 of 3
    p = {7: 3 / 4, 3: 1 / 3}
    penalty = [0.25 * p[g] * length / 2048 for g, length in zip(IDS, LENGTHS)]
    rewards = [c - x for c, x in zip(CORRECT, penalty)]
    out = get_shaper("pass_rate_linear")(batch())
    assert out.rewards[:, 0].double().tolist() == pytest.approx(rewards, abs=1e-7)
    assert_advantages(out, normalise_loop(rewards, IDS, std="none"), atol=1e-7)  # prime-rl: mean baseline only
    # only_correct (prime-rl's gate_by_correctness), coef 0.5, budget 1000, GRPO normalisation
    gated = [c - 0.5 * p[g] * length / 1000 * c for c, g, length in zip(CORRECT, IDS, LENGTHS)]
    out = get_shaper("pass_rate_linear", coef=0.5, budget=1000, only_correct=True, std="unbiased")(batch())
    assert_advantages(out, normalise_loop(gated, IDS))
    # group_max: l / longest of the group (700 in group 7, 900 in group 3)
    longest = {7: 700, 3: 900}
    by_max = [c - 0.25 * p[g] * length / longest[g] for c, g, length in zip(CORRECT, IDS, LENGTHS)]
    out = get_shaper("pass_rate_linear", scale="group_max")(batch())
    assert out.rewards[:, 0].double().tolist() == pytest.approx(by_max, abs=1e-7)


def test_length_zscore_hand_worked():
    # group 7: correct lengths 100, 400, 700: mean 400, Bessel std 300 -> z = -1, 0, 1 (over 300 + 1e-6)
    # group 3: one correct (300): std taken as 1, z = 0 -> reward 1; wrong answers -1
    z = [-300 / (300 + 1e-6), 0.0, 300 / (300 + 1e-6)]
    rewards = [math.exp(-0.05 * z[0]), -1.0, math.exp(-0.05 * z[1]), -1.0, -1.0, 1.0, math.exp(-0.05 * z[2])]
    out = get_shaper("length_zscore")(batch())
    assert out.rewards[:, 0].double().tolist() == pytest.approx(rewards, abs=1e-6)
    assert_advantages(out, normalise_loop(rewards, IDS))
    out = get_shaper("length_zscore", alpha=1.0, wrong_reward=0.0)(batch())
    rewards = [math.exp(1.0), 0.0, 1.0, 0.0, 0.0, 1.0, math.exp(-1.0)]
    assert out.rewards[:, 0].double().tolist() == pytest.approx(rewards, rel=1e-5)


def test_extra_reward_columns_are_added_before_normalisation():
    extra = torch.tensor([[0.5, -1.0], [0.0, 0.0], [0.25, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, -0.5], [0.0, 0.0]])
    plain = get_shaper("kimi_length")(batch()).rewards[:, 0].double()
    out = get_shaper("kimi_length")(batch(rewards=extra))
    summed = (plain + extra.double().sum(1)).tolist()
    assert out.rewards[:, 0].double().tolist() == pytest.approx(summed, abs=1e-6)
    assert_advantages(out, normalise_loop(summed, IDS))


# ----------------------------------------------------------------------------------------------- edge cases
EDGE = {
    # (correct, lengths) of one group
    "single": ([1], [300]),
    "all_correct": ([1, 1, 1], [100, 200, 400]),
    "all_wrong": ([0, 0, 0], [100, 200, 400]),
}


@pytest.mark.parametrize("name", NAMES)
def test_single_rollout_group_gets_zero(name):
    correct, lengths = EDGE["single"]
    assert get_shaper(name)(batch([5], correct, lengths)).advantages.tolist() == [0.0]


@pytest.mark.parametrize("name", NAMES)
def test_all_correct_group_prefers_the_shortest(name):
    correct, lengths = EDGE["all_correct"]
    adv = get_shaper(name)(batch([1, 1, 1], correct, lengths)).advantages.tolist()
    assert adv[0] > adv[1] > adv[2]
    assert sum(adv) == pytest.approx(0.0, abs=1e-6)


def test_all_wrong_groups_follow_each_formula():
    correct, lengths = EDGE["all_wrong"]
    b = batch([1, 1, 1], correct, lengths)
    # cosine: a longer wrong answer is punished less
    adv = get_shaper("cosine")(b).advantages.tolist()
    assert adv[0] < adv[1] < adv[2]
    # kimi: lambda = 0.5, 1/6, -0.5 -> min(0, .) = 0, 0, -0.5: only the longest is punished
    adv = get_shaper("kimi_length")(b).advantages.double().tolist()
    assert adv == pytest.approx(normalise_loop([0.0, 0.0, -0.5], [1, 1, 1]), abs=1e-6)
    # pass rate 0 -> no penalty; GRPO-LEAD: every wrong answer -1 -> constant group
    assert get_shaper("pass_rate_linear")(b).advantages.tolist() == [0.0, 0.0, 0.0]
    assert get_shaper("length_zscore")(b).advantages.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("name", ("kimi_length", "length_zscore"))
def test_equal_lengths_give_no_length_signal(name):
    out = get_shaper(name)(batch([0, 0, 0], [1, 1, 0], [80, 80, 80]))
    assert_advantages(out, normalise_loop([1.0, 1.0, 0.0] if name == "kimi_length" else [1.0, 1.0, -1.0], [0] * 3))


# ---------------------------------------------------------------------------------------------- properties
EXTREME = {
    "cosine": dict(max_len=1.0, exceed_length=None),
    "kimi_length": dict(weight=100.0),
    "pass_rate_linear": dict(coef=100.0, budget=1e-3, std="unbiased"),
    "length_zscore": dict(alpha=50.0, z_eps=1e-12),
}


@settings(max_examples=60, deadline=None)
@given(b=batches(max_len=10**7, with_rewards=1), name=st.sampled_from(NAMES), extreme=st.booleans())
def test_finite_on_every_legal_input(b, name, extreme):
    out = get_shaper(name, **(EXTREME[name] if extreme else {}))(b)
    assert out.advantages.shape == (len(b),) and out.rewards.shape == (len(b), 1)
    assert bool(torch.isfinite(out.advantages).all()) and bool(torch.isfinite(out.rewards).all())
    assert all(math.isfinite(v) for v in out.metrics.values())


def rewards_loop(name: str, ids: list[int], correct: list[bool], lengths: list[int]) -> list[float]:
    """Each source's reward with default settings, one rollout at a time, group statistics by list scans."""
    out = []
    for g, c, length in zip(ids, correct, lengths):
        mine = [(cc, ll) for gg, cc, ll in zip(ids, correct, lengths) if gg == g]
        if name == "cosine":
            lo, hi = (0.5, 1.0) if c else (-0.5, -1.0)
            out.append(lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * length / 1000)))
        elif name == "kimi_length":
            lo, hi = min(ll for _, ll in mine), max(ll for _, ll in mine)
            lam = 0.0 if hi == lo else 0.5 - (length - lo) / (hi - lo)
            out.append(float(c) + (lam if c else min(0.0, lam)))
        elif name == "pass_rate_linear":
            pass_rate = sum(cc for cc, _ in mine) / len(mine)
            out.append(float(c) - 0.25 * pass_rate * length / 2048)
        else:
            ok = [ll for cc, ll in mine if cc]
            mu = sum(ok) / len(ok) if ok else 0.0
            sd = math.sqrt(sum((x - mu) ** 2 for x in ok) / (len(ok) - 1)) if len(ok) > 1 else 1.0
            out.append(math.exp(-0.05 * (length - mu) / (sd + 1e-6)) if c else -1.0)
    return out


@settings(max_examples=60, deadline=None)
@given(b=batches(max_len=5000), name=st.sampled_from(NAMES))
def test_vectorised_shapers_equal_a_per_rollout_loop(b, name):
    ids, correct, lengths = b.group_ids.tolist(), b.correct.tolist(), b.lengths.tolist()
    expected = rewards_loop(name, ids, correct, lengths)
    out = get_shaper(name)(b)
    assert out.rewards[:, 0].double().tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    std = "none" if name == "pass_rate_linear" else "unbiased"
    assert torch.allclose(out.advantages.double(), torch.tensor(normalise_loop(expected, ids, std), dtype=F), atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(b=batches(max_len=5000), name=st.sampled_from(NAMES), data=st.data())
def test_permutation_equivariance(b, name, data):
    perm = data.draw(st.permutations(range(len(b))))
    shaper = get_shaper(name)
    base, moved = shaper(b).advantages, shaper(permuted(b, perm)).advantages
    assert torch.allclose(moved, base[torch.tensor(perm)], atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    b=batches(max_len=5000),
    params=st.sampled_from(
        [
            ("kimi_length", {}),
            ("length_zscore", {}),
            ("pass_rate_linear", {}),
            ("pass_rate_linear", {"std": "unbiased"}),
        ]
    ),
    data=st.data(),
)
def test_group_shift_invariance(b, params, data):
    """Adding the same number of tokens to every rollout of a group leaves its advantages unchanged: kimi and
    GRPO-LEAD use only differences of lengths within a group; prime-rl's penalty (not gated) shifts every
    reward of the group by the same amount."""
    name, kwargs = params
    groups = sorted(set(b.group_ids.tolist()))
    shift = {g: data.draw(st.integers(0, 3000)) for g in groups}
    moved = b.lengths + torch.tensor([shift[g] for g in b.group_ids.tolist()])
    shifted = RolloutBatch(group_ids=b.group_ids, correct=b.correct, lengths=moved)
    shaper = get_shaper(name, **kwargs)
    assert torch.allclose(shaper(shifted).advantages, shaper(b).advantages, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(b=batches(max_len=3000), k=st.integers(2, 5), name=st.sampled_from(("kimi_length", "length_zscore")))
def test_group_scale_invariance(b, k, name):
    scaled = RolloutBatch(group_ids=b.group_ids, correct=b.correct, lengths=b.lengths * k)
    shaper = get_shaper(name, **({"z_eps": 1e-12} if name == "length_zscore" else {}))
    assert torch.allclose(shaper(scaled).advantages, shaper(b).advantages, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(b=batches(max_len=1000))
def test_cosine_reward_stays_in_its_declared_ranges_within_max_len(b):
    r = get_shaper("cosine")(b).rewards[:, 0].double()
    c = b.correct
    assert bool(((r[c] >= 0.5 - 1e-6) & (r[c] <= 1.0 + 1e-6)).all())
    assert bool(((r[~c] >= -1.0 - 1e-6) & (r[~c] <= -0.5 + 1e-6)).all())


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("cosine", dict(max_len=0), r"max_len=0 is out of range"),
        ("cosine", dict(min_value_wrong=float("nan")), r"min_value_wrong=nan must be a finite number"),
        ("cosine", dict(exceed_length=float("inf")), r"exceed_length=inf must be a finite number"),
        ("cosine", dict(exceed_margin=-1), r"exceed_margin=-1 is out of range"),
        ("cosine", dict(std="population"), r"std='population' is not allowed"),
        ("kimi_length", dict(weight=-0.1), r"weight=-0.1 is out of range"),
        ("kimi_length", dict(eps=0.0), r"eps=0.0 is out of range"),
        ("pass_rate_linear", dict(budget=0), r"budget=0 is out of range"),
        ("pass_rate_linear", dict(coef=-1), r"coef=-1 is out of range"),
        ("pass_rate_linear", dict(scale="global"), r"scale='global' is not allowed"),
        ("pass_rate_linear", dict(only_correct=1), r"only_correct=1 must be a bool"),
        ("length_zscore", dict(alpha=-0.05), r"alpha=-0.05 is out of range"),
        ("length_zscore", dict(z_eps=0), r"z_eps=0 is out of range"),
        ("length_zscore", dict(wrong_reward="-1"), r"wrong_reward='-1' must be a finite number"),
    ],
)
def test_config_errors_name_the_field_and_value(name, params, message):
    with pytest.raises(ValueError, match=message):
        get_shaper(name, **params)


@pytest.mark.parametrize("name", NAMES)
def test_batch_errors_name_the_field(name):
    with pytest.raises(ValueError, match="lengths has a negative value -3 at index 1"):
        get_shaper(name)(batch([0, 0], [1, 0], [5, -3]))
    with pytest.raises(ValueError, match="rewards has a non-finite value nan"):
        get_shaper(name)(batch([0, 0], [1, 0], [5, 3], torch.tensor([[0.0], [float("nan")]])))


def test_registry_and_keyword_only_configs():
    assert set(NAMES) <= set(available_shapers())
    for name, cls in zip(NAMES, (CosineConfig, KimiLengthConfig, PassRateLinearConfig, LengthZscoreConfig)):
        assert config_class(name) is cls
        with pytest.raises(TypeError):
            cls(1.0)  # keyword-only
        with pytest.raises(TypeError, match="weigth"):
            get_shaper(name, weigth=1.0)
        assert get_shaper(name).state_dict() == {}


def test_defaults_are_the_sources():
    assert CosineConfig() == CosineConfig(
        min_value_wrong=-1.0, max_value_wrong=-0.5, min_value_correct=0.5, max_value_correct=1.0, max_len=1000
    )
    assert (PassRateLinearConfig().coef, PassRateLinearConfig().only_correct, PassRateLinearConfig().std) == (
        0.25,
        False,
        "none",
    )
    assert (LengthZscoreConfig().alpha, LengthZscoreConfig().wrong_reward) == (0.05, -1.0)


# ------------------------------------------------------------------------------------------ devices, dtypes
@pytest.mark.parametrize("name", NAMES)
def test_no_device_less_factories_under_a_meta_default_device(name):
    """A tensor created without device= would land on the meta device and fail to mix with the CPU batch."""
    b = batch(rewards=torch.linspace(-1, 1, 7).unsqueeze(1))
    expected = get_shaper(name)(b).advantages
    shaper = get_shaper(name)
    with torch.device("meta"):
        out = shaper(b)
    assert out.advantages.device.type == "cpu" and out.rewards.device.type == "cpu"
    assert torch.equal(out.advantages, expected)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_half_precision_rewards_give_the_float32_result(name, dtype):
    """The shapers compute in float64 whatever the input dtype: half-precision reward columns holding the same
    values as float32 ones give the same advantages (tolerance 1e-6, float32 output rounding)."""
    half = torch.tensor([[0.5], [-0.25], [1.0], [0.0], [0.75], [-1.0], [0.125]], dtype=dtype)
    out_half = get_shaper(name)(batch(rewards=half))
    out_f32 = get_shaper(name)(batch(rewards=half.float()))
    assert out_half.advantages.dtype == torch.float32
    assert torch.allclose(out_half.advantages, out_f32.advantages, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------ presets and tuning grids
@pytest.mark.parametrize("name", NAMES)
def test_presets_build_the_shaper_scaled_to_the_budget(name):
    from dynashape.train.presets import BUDGET, PRESETS, make_train_config

    cfg = make_train_config(name)
    assert cfg.shaper == name and PRESETS[name]["shaper"] == name
    shaper = get_shaper(cfg.shaper, **cfg.shaper_kwargs)
    scaled = {"cosine": "max_len", "pass_rate_linear": "budget"}
    if name in scaled:
        assert getattr(shaper.config, scaled[name]) == BUDGET


def test_compare_command_takes_the_new_presets():
    from dynashape.cli import build_parser
    from dynashape.cli.commands import _run_config

    args = build_parser().parse_args(["compare", "--methods", ",".join(NAMES), "--set", "shaper_kwargs.eps=1e-5"])
    for name in args.methods.split(","):
        run = _run_config(args, name, seed=1)
        assert run.train.shaper == name and run.train.seed == 1 and run.train.shaper_kwargs["eps"] == 1e-5


def test_tuning_grids_are_valid_and_centred_on_the_preset():
    from dynashape.train.presets import PRESETS, TUNING_GRIDS, make_train_config, tuning_overrides

    assert set(NAMES) | {"grpo_length", "gdpo", "shorterbetter", "lead_static"} <= set(TUNING_GRIDS)
    for method, grid in TUNING_GRIDS.items():
        ((key, values),) = grid.items()
        assert len(values) == 3 and len(set(values)) == 3, method
        points = [make_train_config(method, **o) for o in tuning_overrides(method)]
        for cfg in points:
            get_shaper(cfg.shaper, **cfg.shaper_kwargs)  # every point is a valid config
        field = key.split(".", 1)[1] if key.startswith("shaper_kwargs.") else key
        got = [cfg.shaper_kwargs[field] if key.startswith("shaper_kwargs.") else getattr(cfg, field) for cfg in points]
        assert got == list(values), method
        preset_value = PRESETS[method].get("shaper_kwargs", {}).get(field, PRESETS[method].get(field))
        if preset_value is not None:
            assert values[1] == preset_value, method
    with pytest.raises(ValueError, match="'lead' has no tuning grid"):
        tuning_overrides("lead")
