"""The field's registered shapers on one batch worked out by hand from the issue's table (the rewards), with
GRPO from the plain reference; state across steps and restored from state_dict.

The batch: group A (id 0) lengths [100, 300, 200], correct [1, 1, 0], budget 150;
           group B (id 1) lengths [50, 80],        correct [0, 1],    budget 100.
"""

import math

import pytest
import torch

import plain_math as plain
from dynashape import RolloutBatch, ShaperNeeds, get_shaper, shaper_needs

IDS = [0, 0, 0, 1, 1]
CORRECT = [1, 1, 0, 0, 1]
LENGTHS = [100, 300, 200, 50, 80]
BUDGETS = [150, 150, 150, 100, 100]
FIELD = ("l1_exact", "l1_max", "thinkprune", "laser", "laser_d", "dler", "alp", "adlp", "aalc", "saw", "gfpo")


def batch(**over):
    fields = dict(group_ids=torch.tensor(IDS), correct=torch.tensor(CORRECT), lengths=torch.tensor(LENGTHS),
                  budgets=torch.tensor(BUDGETS))  # fmt: skip
    fields.update(over)
    return RolloutBatch(**fields)


def check_grpo(out, reward):
    """The shaper's reward is the hand-worked one and its advantages are GRPO of it."""
    assert out.rewards[:, 0].double().tolist() == pytest.approx(reward, abs=1e-6)
    assert out.advantages.double().tolist() == pytest.approx(plain.group_normalize(reward, IDS), abs=1e-5)


def test_every_name_is_registered_with_its_declaration():
    from dynashape import available_shapers

    assert set(FIELD) <= set(available_shapers())
    assert shaper_needs("l1_exact") == shaper_needs("l1_max") == ShaperNeeds(budgets=True)
    assert shaper_needs("aalc") == ShaperNeeds(validation_accuracy=True)
    assert shaper_needs("laser_d") == ShaperNeeds(monitor_rollouts=True, formatted=True)
    assert shaper_needs("laser") == ShaperNeeds(formatted=True)
    assert shaper_needs("dler") == ShaperNeeds(truncated=True)
    assert shaper_needs("saw").reward_channels == shaper_needs("gfpo").reward_channels == "optional"


def test_l1_exact():
    # r = c - 1e-3 |b - l|: A: 1 - .05, 1 - .15, 0 - .05; B: 0 - .05, 1 - .02
    check_grpo(get_shaper("l1_exact", alpha=1e-3)(batch()), [0.95, 0.85, -0.05, -0.05, 0.98])


def test_l1_exact_refuses_a_batch_without_budgets():
    with pytest.raises(ValueError, match="'l1_exact' needs budgets"):
        get_shaper("l1_exact")(batch(budgets=None))


def test_l1_max_code_and_paper_forms():
    # code: c * clip(.5 + (1e-3 / 2)(b - l), 0, 1): b - l = 50, -150, (wrong), (wrong), 20
    check_grpo(get_shaper("l1_max", alpha=1e-3)(batch()), [0.525, 0.425, 0.0, 0.0, 0.51])
    # paper: slope 1e-3
    check_grpo(get_shaper("l1_max", alpha=1e-3, form="paper")(batch()), [0.55, 0.35, 0.0, 0.0, 0.52])


def test_thinkprune_schedule_runs_inside_one_run_and_restores():
    shaper = get_shaper("thinkprune", max_length=250, schedule=((1, 90),))
    first = shaper(batch())  # cap 250: 300 > 250 fails
    check_grpo(first, [1.0, 0.0, 0.0, 0.0, 1.0])
    assert first.metrics["thinkprune/max_length"] == 250
    state = shaper.state_dict()
    assert state == {"version": 1, "schedule": {"steps": 1}}
    second = shaper(batch())  # cap 90 from step 1: 100 > 90, 80 <= 90
    check_grpo(second, [0.0, 0.0, 0.0, 0.0, 1.0])
    restored = get_shaper("thinkprune", max_length=250, schedule=((1, 90),))
    restored.load_state_dict(state)
    assert torch.equal(restored(batch()).advantages, second.advantages)
    assert restored.state_dict() == shaper.state_dict() == {"version": 1, "schedule": {"steps": 2}}


def test_laser():
    # binary base (the paper): c + .5 * 1[c and l <= 150]
    check_grpo(get_shaper("laser", alpha=0.5, target_length=150, base="binary")(batch()), [1.5, 1.0, 0.0, 0.0, 1.5])
    # official base (default): 1 / -.5 / -1 by verdict and format; B's correct answer (row 4) unformatted:
    # A: 1 + .5, 1, -.5; B: -.5 (wrong), -1 (correct but unformatted, no bonus)
    formatted = torch.tensor([1, 1, 1, 1, 0])
    out = get_shaper("laser", alpha=0.5, target_length=150)(batch(formatted=formatted))
    check_grpo(out, [1.5, 1.0, -0.5, -0.5, -1.0])
    with pytest.raises(ValueError, match=r"shaper 'laser' needs formatted \[N\] in the batch"):
        get_shaper("laser")(batch())


def test_laser_reproduces_the_official_group_of_issue_49():
    """lengths [1000, 5000, 800, 6000], correct [1, 1, 0, 0], all formatted, L_T 4096, alpha .5:
    r = [1.5, 1, -.5, -.5], mean .375, deviations [1.125, .625, -.875, -.875], Bessel var 3.1875 / 3 = 1.0625,
    std 1.030776: A = [1.091410, .606339, -.848875, -.848875] (the 0/1 base gave [1.17, .50, -.83, -.83])."""
    b = RolloutBatch(group_ids=torch.zeros(4, dtype=torch.long), correct=torch.tensor([1, 1, 0, 0]),
                     lengths=torch.tensor([1000, 5000, 800, 6000]), formatted=torch.ones(4))  # fmt: skip
    out = get_shaper("laser")(b)
    assert out.advantages.double().tolist() == pytest.approx([1.091410, 0.606339, -0.848875, -0.848875], abs=2e-6)
    binary = get_shaper("laser", base="binary")(b).advantages.double().tolist()
    assert binary == pytest.approx([7 / 6, 0.5, -5 / 6, -5 / 6], abs=2e-6)  # r = [1.5, 1, 0, 0]


def test_laser_d_targets_by_bucket_from_the_monitor():
    params = dict(initial_target=90, grid=(60, 100, 150, 300), alpha=0.5, base="binary")
    shaper = get_shaper("laser_d", **params)
    # before any monitor every target is 90: only B's 80-token correct answer earns the bonus
    check_grpo(shaper(batch()), [1.0, 1.0, 0.0, 0.0, 1.5])
    # monitor: X all correct (band high) [60, 100, 140]; Y none (low) [200, 300, 300]; Z half (medium) [50, 150]
    monitor = RolloutBatch(group_ids=torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]),
                           correct=torch.tensor([1, 1, 1, 0, 0, 0, 1, 0]),
                           lengths=torch.tensor([60, 100, 140, 200, 300, 300, 50, 150]))  # fmt: skip
    shaper.observe(monitor=monitor)
    # coverage on (60, 100, 150, 300): high [1/3, 2/3, 1, 1], medium [1/2, 1/2, 1, 1], low [0, 0, 0, 1];
    # kept = floor(coverage * n_b) with n_b = int(8 * 2/3) = 5, int(8/3) = 2, 1: the first grid length with
    # kept >= 1 is 60 (high: floor(5/3) = 1), 60 (medium: floor(1) = 1), 300 (low)
    state = shaper.state_dict()
    assert state == {"version": 1, "buckets": {"targets": [300, 60, 60], "refreshes": 1}}
    out = shaper(batch())  # A is high (2/3), B medium (1/2): both targets 60, no length of a correct answer fits
    check_grpo(out, [1.0, 1.0, 0.0, 0.0, 1.0])
    assert (out.metrics["laser_d/target_low"], out.metrics["laser_d/target_high"]) == (300.0, 60.0)
    restored = get_shaper("laser_d", **params)
    restored.load_state_dict(state)
    assert torch.equal(restored(batch()).advantages, out.advantages)
    with pytest.raises(ValueError, match="reads no validation_accuracy"):
        shaper.observe(validation_accuracy=0.5)


def test_laser_d_official_buckets_count_only_the_answers_scoring_one():
    """Group A [1, 1, 0] all formatted: 2/3 score 1, high. With A's second answer unformatted only 1/3 scores 1:
    medium. Targets (low 300, medium 250, high 60): the 100-token correct answer earns the bonus only as medium.
    high: [1, 1, -.5] (100 > 60); medium: [1.5, -1, -.5]. B [0, 1] is medium (1/2): [-.5, 1 + .5] (80 <= 250)."""
    shaper = get_shaper("laser_d", initial_target=90, grid=(60, 100, 150, 300), alpha=0.5)
    shaper.load_state_dict({"version": 1, "buckets": {"targets": [300, 250, 60], "refreshes": 1}})
    check_grpo(shaper(batch(formatted=torch.ones(5))), [1.0, 1.0, -0.5, -0.5, 1.5])
    check_grpo(shaper(batch(formatted=torch.tensor([1, 0, 1, 1, 1]))), [1.5, -1.0, -0.5, -0.5, 1.5])


def test_dler_whitens_the_group_centred_reward():
    # no row truncated: the stop-properly multiplier leaves the capped score as it is
    # no boost (correct_boost=0): the whitening alone; the boost is hand-worked in tests/methods/test_dler.py
    shaper = get_shaper("dler", max_length=250, whiten="sequence", correct_boost=0.0)
    out = shaper(batch(truncated=torch.zeros(5, dtype=torch.bool)))
    # r = [1, 0, 0, 0, 1]; group means 1/3, 1/2: centred [2/3, -1/3, -1/3, -1/2, 1/2], batch mean 0,
    # unbiased var (4/9 + 1/9 + 1/9 + 1/4 + 1/4) / 4 = 7/24
    centred = [2 / 3, -1 / 3, -1 / 3, -1 / 2, 1 / 2]
    want = [c / math.sqrt(7 / 24 + 1e-8) for c in centred]
    assert out.rewards[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert out.advantages.double().tolist() == pytest.approx(want, abs=1e-6)


def test_dler_does_not_centre_a_group_of_one():
    one = RolloutBatch(group_ids=torch.tensor([0, 0, 1]), correct=torch.tensor([1, 0, 1]),
                       lengths=torch.tensor([10, 10, 10]), truncated=torch.tensor([0, 0, 0]))  # fmt: skip
    out = get_shaper("dler", whiten="sequence", correct_boost=0.0)(one)
    # centred [1/2, -1/2, 1] (the single group's mean is 0); mean 1/3, unbiased var (1/36 + 25/36 + 4/9) / 2 = 7/12
    want = [(c - 1 / 3) / math.sqrt(7 / 12 + 1e-8) for c in (0.5, -0.5, 1.0)]
    assert out.advantages.double().tolist() == pytest.approx(want, abs=1e-6)


def test_alp():
    # c - 1e-3 * l * max(p, 1/K): p_A = 2/3, p_B = 1/2
    want = [1 - 0.1 * 2 / 3, 1 - 0.3 * 2 / 3, -0.2 * 2 / 3, -0.05 * 0.5, 1 - 0.08 * 0.5]
    check_grpo(get_shaper("alp", beta=1e-3)(batch()), want)
    unsolved = RolloutBatch(group_ids=torch.tensor([0, 0]), correct=torch.tensor([0, 0]),
                            lengths=torch.tensor([100, 200]))  # fmt: skip
    # p = 0 -> the floor 1/K = 1/2: r = -.05, -.1
    assert get_shaper("alp", beta=1e-3)(unsolved).rewards[:, 0].tolist() == pytest.approx([-0.05, -0.1])


def test_adlp_dual_ascent_across_steps_and_restored():
    params = dict(lambda0=1e-3, eta=1e-2, acc_ref=0.5)
    shaper = get_shaper("adlp", **params)
    first = shaper(batch())
    # lambda 1e-3: r = c - 1e-3 l; accuracy 3/5 -> lambda 1e-3 + 1e-2 (0.6 - 0.5) = 2e-3
    check_grpo(first, [0.9, 0.7, -0.2, -0.05, 0.92])
    assert first.metrics["adlp/lambda"] == 1e-3
    assert first.metrics["adlp/lambda_next"] == pytest.approx(2e-3)
    second = shaper(batch())
    check_grpo(second, [0.8, 0.4, -0.4, -0.1, 0.84])
    assert second.metrics["adlp/lambda"] == pytest.approx(2e-3)
    state = shaper.state_dict()
    assert state["version"] == 1 and state["controller"]["n_updates"] == 2
    assert state["controller"]["lambda"] == pytest.approx(3e-3)
    restored = get_shaper("adlp", **params)
    restored.load_state_dict(state)
    assert restored(batch()).metrics["adlp/lambda"] == shaper(batch()).metrics["adlp/lambda"]
    with pytest.raises(ValueError, match="A-DLP state is corrupt"):
        restored.load_state_dict({"version": 1, "controller": {"lambda": -1.0, "n_updates": 0}})


def test_aalc_switches_on_with_the_validation_accuracy():
    params = dict(beta=2, c=0.1, l_max=200, a_target=0.8)
    shaper = get_shaper("aalc", **params)
    check_grpo(shaper(batch()), [1.0, 1.0, 0.0, 0.0, 1.0])  # no validation yet: r = c
    shaper.observe(validation_accuracy=0.72)
    # a = .72 / .8 = .9, alpha = .9 + .1 * .1 = .91, a^2 = .81; R_len = 1 - min(.81, min(1, l / 200)):
    # l = 100 -> .5, 300 -> .19, 200 -> .19, 50 -> .75, 80 -> .6; r = .91 c + .1 R_len
    want = [0.91 + 0.05, 0.91 + 0.019, 0.019, 0.075, 0.91 + 0.06]
    out = shaper(batch())
    check_grpo(out, want)
    assert out.metrics["aalc/alpha"] == pytest.approx(0.91)
    restored = get_shaper("aalc", **params)
    restored.load_state_dict(shaper.state_dict())
    assert shaper.state_dict() == {"version": 1, "schedule": {"val_accuracy": 0.72}}
    assert torch.equal(restored(batch()).advantages, out.advantages)


def test_saw_weights_the_channels_by_their_cv():
    fmt = torch.tensor([[1.0], [0.0], [1.0], [1.0], [0.0]])
    out = get_shaper("saw")(batch(rewards=fmt))
    # correctness + 3 = [4, 4, 3, 3, 4] and format [1, 0, 1, 1, 0] have the same std sqrt(.3); means 3.6, .6:
    # CV ratio 1 : 6, so w = 2 * (1/7, 6/7) = (2/7, 12/7); r = 2/7 c + 12/7 f
    assert out.metrics["saw/weight_0"] == pytest.approx(2 / 7)
    assert out.metrics["saw/weight_1"] == pytest.approx(12 / 7)
    check_grpo(out, [2.0, 2 / 7, 12 / 7, 12 / 7, 2 / 7])


def test_gfpo_keeps_the_shortest_and_drops_the_rest():
    out = get_shaper("gfpo", keep=2)(batch(budgets=None))
    # A keeps 100 and 200 (r 1, 0), drops 300; B keeps both (r 0, 1): kept sets of two, std sqrt(1/2), eps 1e-4
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert out.keep.tolist() == [True, False, True, True, True]
    assert out.advantages.double().tolist() == pytest.approx([a, 0.0, -a, -a, a], abs=1e-6)
    assert out.metrics["gfpo/kept_fraction"] == 0.8


def test_gfpo_by_reward_per_token():
    out = get_shaper("gfpo", keep=2, by="reward_per_token")(batch(budgets=None))
    # A: r / l = 1/100, 1/300, 0 -> keeps rows 0 and 1, both r = 1: a constant kept set gets 0
    assert out.keep.tolist() == [True, True, False, True, True]
    assert out.advantages.tolist()[:3] == [0.0, 0.0, 0.0]


def test_gfpo_adaptive_keep_state_restores():
    shaper = get_shaper("gfpo", keep=2, adaptive_keep=(1, 1, 2, 2))
    shaper(batch(budgets=None))
    state = shaper.state_dict()
    assert state == {"version": 1, "difficulty": {"history": [2 / 3, 1 / 2]}}
    restored = get_shaper("gfpo", keep=2, adaptive_keep=(1, 1, 2, 2))
    restored.load_state_dict(state)
    a, b = shaper(batch(budgets=None)), restored(batch(budgets=None))
    assert torch.equal(a.keep, b.keep) and torch.equal(a.advantages, b.advantages)
