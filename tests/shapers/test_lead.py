"""LEAD, equation by equation, on a batch small enough to check on paper (lead.md sections 1-8).

The batch (l_min = 12, b_max = 40):
    group A (id 7): lengths [10, 14, 30, 36], correct [1, 1, 1, 0]
    group B (id 3): lengths [20, 50],         correct [0, 0]
    group C (id 5): lengths [16],             correct [1]
Groups are numbered by sorted id, so per-group results come in the order B, C, A.
"""

import math

import pytest
import torch

import plain_math as plain
from dynashape import RolloutBatch, get_shaper
from dynashape.core.groups import Groups, whiten
from dynashape.methods.lead.efficiency import efficiency_reward, target_lengths
from dynashape.methods.lead.psi import PSIController, psi_target_weights

F = torch.float64
IDS = [7, 7, 7, 7, 3, 3, 5]
LENGTHS = [10, 14, 30, 36, 20, 50, 16]
CORRECT = [True, True, True, False, False, False, True]


def batch(**over):
    fields = dict(group_ids=torch.tensor(IDS), correct=torch.tensor(CORRECT), lengths=torch.tensor(LENGTHS))
    fields.update(over)
    return RolloutBatch(**fields)


def targets(mode, l_min=12, b_max=40):
    b = batch()
    return target_lengths(b.lengths, b.correct, Groups.from_ids(b.group_ids), mode=mode, l_min=l_min, b_max=b_max)


# ----------------------------------------------------------------------------------- 1. target length
def test_target_mean_correct():
    # B unsolved -> sentinel b_max = 40; C: 16; A: (10 + 14 + 30) / 3 = 18
    assert targets("mean_correct").tolist() == [40.0, 16.0, 18.0]


def test_target_min_correct_is_clamped_from_below():
    # A: min 10 clamped to l_min 12
    assert targets("min_correct").tolist() == [40.0, 16.0, 12.0]


def test_target_median_correct():
    # A: median of {10, 14, 30} = 14
    assert targets("median_correct").tolist() == [40.0, 16.0, 14.0]


def test_target_median_of_even_count_is_mean_of_middle_pair():
    b = RolloutBatch(
        group_ids=torch.zeros(4, dtype=torch.long),
        correct=torch.ones(4, dtype=torch.bool),
        lengths=torch.tensor([30, 10, 20, 40]),
    )
    got = target_lengths(b.lengths, b.correct, Groups.from_ids(b.group_ids), mode="median_correct", l_min=1, b_max=100)
    assert got.tolist() == [25.0]


def test_target_mean_all_never_uses_the_sentinel():
    # B: (20 + 50) / 2 = 35 (unsolved but no sentinel); C: 16; A: 90 / 4 = 22.5
    assert targets("mean_all").tolist() == [35.0, 16.0, 22.5]


def test_target_clamped_from_above_by_b_max():
    # A's mean correct 18 > b_max 17
    assert targets("mean_correct", l_min=12, b_max=17).tolist() == [17.0, 16.0, 17.0]


def test_paper_order_min_median_mean_meanall_on_group_a():
    got = [targets(m)[2].item() for m in ("min_correct", "median_correct", "mean_correct", "mean_all")]
    assert got == sorted(got) and len(set(got)) == 4


# ------------------------------------------------------------------------------- 2. efficiency reward
def test_symmetric_efficiency_hand_worked():
    lt = torch.tensor([18, 18, 18, 18, 40, 40, 16], dtype=F)
    got = efficiency_reward(torch.tensor(LENGTHS), lt)
    # A: 1 - |l - 18| / 18 -> 10/18, 14/18, 6/18, 0; B: 1 - 20/40, 1 - 10/40; C: at target -> 1
    expected = [10 / 18, 14 / 18, 6 / 18, 0.0, 0.5, 0.75, 1.0]
    assert torch.allclose(got, torch.tensor(expected, dtype=F), atol=1e-15)


def test_symmetric_efficiency_is_zero_at_zero_and_minus_one_from_three_targets():
    # 1 - |0 - L*| / L* = 0 at l = 0 (lead.md's prose says -1 there, but its formula and the official code give
    # 0); the clip at -1 binds from l = 3 L* on: 1 - 2 L*/L* = -1
    got = efficiency_reward(torch.tensor([0, 36, 54, 60, 100]), torch.full((5,), 18.0, dtype=F))
    assert got.tolist() == [0.0, 0.0, -1.0, -1.0, -1.0]


def test_unsolved_prompt_efficiency_is_length_over_b_max():
    # the paper's "expansion pressure": L* = b_max gives r_l = l / b_max below b_max
    got = efficiency_reward(torch.tensor([10, 30]), torch.full((2,), 40.0, dtype=F))
    assert got.tolist() == [0.25, 0.75]


def test_upper_only_efficiency_hand_worked():
    lt = torch.tensor([18, 18, 18, 18, 40, 40, 16], dtype=F)
    got = efficiency_reward(torch.tensor(LENGTHS), lt, mode="upper_only")
    # only over-length counts: 30 -> 1 - 30/18 = -2/3; 36 -> -1; 50 -> 1 - 50/40 = -1/4
    expected = [0.0, 0.0, -2 / 3, -1.0, 0.0, -0.25, 0.0]
    assert torch.allclose(got, torch.tensor(expected, dtype=F), atol=1e-15)


def test_lengths_beyond_b_max_are_legal():
    lengths = [10, 14, 30, 36, 20, 5000, 16]
    out = get_shaper("lead", l_min=12, b_max=40)(batch(lengths=torch.tensor(lengths)))
    # group B (ids 3) is unsolved: target = b_max = 40; 20 -> 1 - 20/40 = 0.5; 5000 -> 1 - 4960/40 clipped to -1
    assert out.rewards[:, 1].tolist() == pytest.approx([10 / 18, 14 / 18, 6 / 18, 0.0, 0.5, -1.0, 1.0])
    # the 5000-token rollout also weighs 5000 tokens in the whitening: every advantage by the plain reference
    ref = plain.lead_first_step(IDS, CORRECT, lengths, l_min=12, b_max=40)
    assert out.advantages.double().tolist() == pytest.approx(ref["advantages"], rel=1e-5, abs=1e-6)
    assert out.metrics["lead/lambda_c"] == pytest.approx(ref["weights"][0], rel=1e-6)


# ------------------------------------------------------------------------ 3-6. one full controller step
def hand_step():
    """The step written out by hand (see module docstring)."""
    mu_c, sigma_c = 7 / 12, math.sqrt(35) / 12  # means [3/4, 0, 1], pop vars [3/16, 0, 0]
    # efficiency over correct rollouts: A {10/18, 14/18, 6/18} -> mean 5/9, pop var 8/243; C {1}; B dropped
    mu_l, sigma_l = 7 / 9, 4 / math.sqrt(243)  # sigma_l^2 = (8/243 + 0)/2 + Var(5/9, 1) = 4/243 + 4/81
    cv_c, cv_l = sigma_c / mu_c, sigma_l / mu_l  # sqrt(35)/7 and 4/(7 sqrt 3)
    n_c, n_l = cv_c / (cv_c + cv_l), cv_l / (cv_c + cv_l)
    p_c, p_l = 1 - mu_c, (1 - mu_l) / 2  # 5/12 and 1/9
    d_c, d_l = n_c * p_c, n_l * p_l
    target_c = d_c / (d_c + d_l)
    ema = 0.95 * 0.5 + 0.05 * target_c
    return dict(
        mu_c=mu_c,
        mu_l=mu_l,
        cv_c=cv_c,
        cv_l=cv_l,
        potential_c=p_c,
        potential_l=p_l,
        psi_c=d_c,
        psi_l=d_l,
        target_lambda_c=target_c,
        lambda_c=ema,
        lambda_l=1 - ema,
    )


def test_controller_step_hand_worked():
    out = get_shaper("lead", l_min=12, b_max=40)(batch())
    for key, value in hand_step().items():
        assert out.metrics[f"lead/{key}"] == pytest.approx(value, rel=1e-6), key


def test_decoupled_normalisation_and_token_whitening_hand_worked():
    shaper = get_shaper("lead", l_min=12, b_max=40)
    out = shaper(batch())
    lam_c = hand_step()["lambda_c"]
    eps = 1e-6
    # correctness: A [1,1,1,0] mean 3/4, unbiased std 1/2; B constant; C single
    a_c = [0.25 / (0.5 + eps)] * 3 + [-0.75 / (0.5 + eps), 0.0, 0.0, 0.0]
    # efficiency: A [10,14,6,0]/18 mean 5/12, unbiased var 428/3888; B [1/2, 3/4] std sqrt(1/32); C single
    sd_a, sd_b = math.sqrt(428 / 3888), math.sqrt(1 / 32)
    a_l = [
        (5 / 36) / (sd_a + eps),
        (13 / 36) / (sd_a + eps),
        (-3 / 36) / (sd_a + eps),
        (-15 / 36) / (sd_a + eps),
        -0.125 / (sd_b + eps),
        0.125 / (sd_b + eps),
        0.0,
    ]
    combined = torch.tensor([lam_c * c + (1 - lam_c) * e for c, e in zip(a_c, a_l)], dtype=F)
    w = torch.tensor(LENGTHS, dtype=F)
    mu = (w * combined).sum() / w.sum()
    var = (w * (combined - mu) ** 2).sum() / (w.sum() - 1)
    expected = (combined - mu) / torch.sqrt(var + 1e-8)
    assert torch.allclose(out.advantages.double(), expected, atol=1e-5)


def test_sequence_and_no_whitening():
    b = batch()
    raw = get_shaper("lead", l_min=12, b_max=40, whiten="none")(b).advantages.double()
    seq = get_shaper("lead", l_min=12, b_max=40, whiten="sequence")(b).advantages.double()
    tok = get_shaper("lead", l_min=12, b_max=40)(b).advantages.double()
    assert torch.allclose(seq, whiten(raw), atol=1e-5)
    assert torch.allclose(tok, whiten(raw, b.lengths), atol=1e-5)
    assert not torch.allclose(seq, tok, atol=1e-3)


def test_psi_target_weights_two_channel_closed_form():
    eps = 1e-8
    t = psi_target_weights(
        torch.tensor([0.5, 0.2], dtype=F),
        torch.tensor([0.5, 0.1], dtype=F),
        torch.tensor([[0.0, 1.0], [-1.0, 1.0]]),
        eps=eps,
    )
    cv_c, cv_l = 0.5 / (0.5 + eps), 0.1 / (0.2 + eps)  # 1 and 1/2
    n_c, n_l = cv_c / (cv_c + cv_l + eps), cv_l / (cv_c + cv_l + eps)  # 2/3 and 1/3
    p_c, p_l = 0.5, (1 - 0.2) / 2  # headroom over the range: 1/2 and 2/5
    d_c, d_l = n_c * p_c, n_l * p_l  # 1/3 and 2/15
    assert t.cv.tolist() == pytest.approx([cv_c, cv_l], abs=1e-12)
    assert t.cv_norm.tolist() == pytest.approx([n_c, n_l], abs=1e-12)
    assert t.potential.tolist() == pytest.approx([p_c, p_l], abs=1e-12)
    assert t.psi.tolist() == pytest.approx([d_c, d_l], abs=1e-12)
    assert t.target.tolist() == pytest.approx([d_c / (d_c + d_l + eps), d_l / (d_c + d_l + eps)], abs=1e-12)
    assert t.target.tolist() == pytest.approx([5 / 7, 2 / 7], abs=1e-7)  # the same on paper, without eps
    # a channel with mean 0 has a huge CV (0.25 / 1e-8) and takes all the normalised CV mass
    t = psi_target_weights(
        torch.tensor([0.5, 0.0]), torch.tensor([0.5, 0.25]), torch.tensor([[0.0, 1.0], [-1.0, 1.0]]), eps=eps
    )
    assert t.cv_norm[1].item() == pytest.approx(1.0, abs=1e-6)
    assert t.potential.tolist() == [0.5, 0.5]
    assert t.target[1].item() == pytest.approx(1.0, abs=1e-6)


def test_potential_alpha_sharpens_headroom():
    t = psi_target_weights(
        torch.tensor([0.75, 0.5]),
        torch.tensor([0.1, 0.1]),
        torch.tensor([[0.0, 1.0], [-1.0, 1.0]]),
        alpha=2.0,
    )
    assert t.potential.tolist() == pytest.approx([0.0625, 0.0625])


# ----------------------------------------------------------------------------------- 6. EMA and floor
def saturated_batch():
    """All correct, equal lengths per group: mu_c = 1 -> P_c = 0 -> lambda*_c = 0."""
    return RolloutBatch(
        group_ids=torch.tensor([0, 0, 1, 1]),
        correct=torch.ones(4, dtype=torch.bool),
        lengths=torch.tensor([20, 24, 30, 30]),
    )


def efficient_batch():
    """Correct rollouts exactly at their target: mu_l = 1 -> P_l = 0 -> lambda*_c = 1 (up to eps)."""
    return RolloutBatch(
        group_ids=torch.tensor([0, 0, 0]),
        correct=torch.tensor([True, True, False]),
        lengths=torch.tensor([20, 20, 30]),
    )


def test_ema_decays_and_floor_is_not_written_back():
    shaper = get_shaper("lead", l_min=1, b_max=100)
    for n in range(1, 15):
        out = shaper(saturated_batch())
        assert out.metrics["lead/target_lambda_c"] == 0.0
        assert shaper.held("controller").ema_[0].item() == pytest.approx(0.5 * 0.95**n, rel=1e-12)
    ema = 0.5 * 0.95**14  # 0.2438 < lambda_min
    assert out.metrics["lead/lambda_c"] == 0.3 and out.metrics["lead/lambda_l"] == 0.7
    # the floor was not written back: the next EMA starts from 0.2438, not 0.3
    out = shaper(efficient_batch())
    ema = 0.95 * ema + 0.05 * 1.0
    assert shaper.held("controller").ema_[0].item() == pytest.approx(ema, rel=1e-6)
    assert out.metrics["lead/lambda_c"] == 0.3  # 0.2816 still floored
    out = shaper(efficient_batch())
    ema = 0.95 * ema + 0.05 * 1.0
    assert out.metrics["lead/lambda_c"] == pytest.approx(ema, rel=1e-6)  # 0.3175, above the floor
    assert shaper.state_dict()["controller"]["n_updates"] == 16


def test_static_lambda_overrides_ema_and_floor():
    shaper = get_shaper("lead", l_min=1, b_max=100, static_lambda_c=0.1)
    for _ in range(3):
        out = shaper(saturated_batch())
        assert out.metrics["lead/lambda_c"] == pytest.approx(0.1)
        assert out.metrics["lead/lambda_l"] == pytest.approx(0.9)


def test_no_correct_rollout_gives_zero_efficiency_statistics():
    b = RolloutBatch(
        group_ids=torch.tensor([0, 0, 1, 1]),
        correct=torch.zeros(4, dtype=torch.bool),
        lengths=torch.tensor([10, 20, 30, 40]),
    )
    out = get_shaper("lead", l_min=1, b_max=100)(b)
    assert out.metrics["lead/mu_l"] == 0.0 and out.metrics["lead/cv_l"] == 0.0
    assert out.metrics["lead/unsolved_frac"] == 1.0 and out.metrics["lead/solved_all_frac"] == 0.0
    assert out.metrics["lead/efficiency_correct_mean"] == 0.0
    assert torch.isfinite(out.advantages).all()


def test_all_correct_batch_follows_formulas():
    out = get_shaper("lead", l_min=1, b_max=100)(saturated_batch())
    assert out.metrics["lead/mu_c"] == 1.0 and out.metrics["lead/potential_c"] == 0.0
    assert out.metrics["lead/solved_all_frac"] == 1.0


def test_single_rollout_groups_give_zero_before_whitening():
    b = RolloutBatch(
        group_ids=torch.tensor([1, 2, 3]),
        correct=torch.tensor([True, False, True]),
        lengths=torch.tensor([10, 20, 30]),
    )
    out = get_shaper("lead", l_min=1, b_max=100, whiten="none")(b)
    assert out.advantages.tolist() == [0.0, 0.0, 0.0]


def test_metric_names_are_exactly_the_spec_list():
    names = {
        "lambda_c",
        "lambda_l",
        "target_lambda_c",
        "cv_c",
        "cv_l",
        "potential_c",
        "potential_l",
        "psi_c",
        "psi_l",
        "mu_c",
        "mu_l",
        "target_len_mean",
        "target_len_min",
        "target_len_max",
        "efficiency_mean",
        "efficiency_correct_mean",
        "unsolved_frac",
        "solved_all_frac",
    }
    out = get_shaper("lead", l_min=12, b_max=40)(batch())
    assert set(out.metrics) == {f"lead/{n}" for n in names}
    assert out.metrics["lead/target_len_min"] == 16.0 and out.metrics["lead/target_len_max"] == 40.0
    assert out.metrics["lead/unsolved_frac"] == pytest.approx(1 / 3)
    assert out.metrics["lead/solved_all_frac"] == pytest.approx(1 / 3)  # only C


def test_rewards_need_declared_ranges():
    b = batch(rewards=torch.zeros(7, 1))
    with pytest.raises(ValueError, match="reward_ranges is empty"):
        get_shaper("lead")(b)


def test_extra_channel_with_declared_range():
    fmt = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]  # A: 1 0 1 1, B: 0 1, C: 1
    out = get_shaper("lead", l_min=12, b_max=40, reward_ranges=((0.0, 1.0),))(
        batch(rewards=torch.tensor(fmt, dtype=F).unsqueeze(1))
    )
    m = out.metrics
    # On paper. Correctness and efficiency as in hand_step(). Format over all rollouts: group means 3/4, 1/2, 1
    # (mean 3/4), pop vars 3/16, 1/4, 0 (mean 7/48), Var of the means 1/24 -> sigma^2 = 9/48, sigma = sqrt(3)/4.
    h = hand_step()
    mu_r, sigma_r = 3 / 4, math.sqrt(3) / 4
    cv = [h["cv_c"], h["cv_l"], sigma_r / mu_r]  # cv_r = 1 / sqrt(3)
    cv_norm = [c / sum(cv) for c in cv]
    potential = [5 / 12, 1 / 9, 1 - mu_r]  # headroom of each mean within its declared range
    psi = [n * p for n, p in zip(cv_norm, potential)]
    target = [d / sum(psi) for d in psi]
    ema = [0.95 / 3 + 0.05 * x for x in target]  # the EMA starts at 1/3 per channel
    lam_c = max(ema[0], 0.3)
    lam = [lam_c, (1 - lam_c) * ema[1] / (ema[1] + ema[2]), (1 - lam_c) * ema[2] / (ema[1] + ema[2])]
    assert m["lead/target_lambda_c"] == pytest.approx(target[0], rel=1e-6)
    assert m["lead/psi_c"] == pytest.approx(psi[0], rel=1e-6) and m["lead/psi_l"] == pytest.approx(psi[1], rel=1e-6)
    assert [m["lead/lambda_c"], m["lead/lambda_l"], m["lead/lambda_r0"]] == pytest.approx(lam, rel=1e-6)
    assert out.rewards[:, 2].tolist() == fmt
    ref = plain.lead_first_step(IDS, CORRECT, LENGTHS, l_min=12, b_max=40, extra=[fmt], ranges=[(0.0, 1.0)])
    assert ref["weights"] == pytest.approx(lam, rel=1e-9)  # the plain loop agrees with the paper numbers
    assert out.advantages.double().tolist() == pytest.approx(ref["advantages"], rel=1e-5, abs=1e-6)


def test_three_channel_controller_shares_the_rest_by_ema():
    ctl = PSIController(((0, 1), (-1, 1), (0, 1)), lambda_min=0.5)
    ctl.ema_ = torch.tensor([0.2, 0.6, 0.2], dtype=F)
    w = ctl._floored(ctl.ema_)
    # floor lifts channel 0 to 0.5; channels 1, 2 share 0.5 as 0.6 : 0.2
    assert w.tolist() == pytest.approx([0.5, 0.375, 0.125])
    ctl.ema_ = torch.tensor([0.9, 0.0, 0.0], dtype=F)
    assert ctl._floored(ctl.ema_).tolist() == pytest.approx([0.9, 0.05, 0.05])


# ------------------------------------------------------------------------------------------ controller state
def test_controller_state_round_trip_and_corrupt_state_is_refused():
    ctl = PSIController()
    ctl.update(torch.tensor([0.5, 0.2]), torch.tensor([0.5, 0.1]))
    state = ctl.state_dict()
    assert state["n_updates"] == 1 and len(state["ema"]) == 2
    other = PSIController()
    other.load_state_dict(state)
    assert torch.equal(other.ema_, ctl.ema_) and other.n_updates_ == 1
    for bad in (
        {"ema": [0.5]},
        {"ema": [0.5, float("nan")], "n_updates": 1},
        {"ema": [0.5, 0.5], "n_updates": -1},
        {"n_updates": 3},
    ):
        with pytest.raises(ValueError, match="controller state"):
            other.load_state_dict(bad)
    assert torch.equal(other.ema_, ctl.ema_)  # a refused state changes nothing


def test_lead_shaper_refuses_foreign_state():
    shaper = get_shaper("lead")
    with pytest.raises(ValueError, match="not a lead shaper state"):
        shaper.load_state_dict({"memory": {}})
    with pytest.raises(ValueError, match="3 channels, expected 2"):
        shaper.load_state_dict({"version": 1, "controller": {"ema": [0.3, 0.3, 0.4], "n_updates": 2}})
