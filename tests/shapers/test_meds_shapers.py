"""The meds and lead_meds shapers: penalties of a scripted run written out by hand (meds.md section 3)."""

import math

import pytest
import torch

from dynashape import RolloutBatch, get_shaper
from dynashape.meds.penalty import repeat_penalty
from dynashape.methods.lead.config import LeadConfig
from dynashape.methods.lead.psi import PSIController
from dynashape.shapers.meds import lead_advantages

NAN = float("nan")
# one prompt, six rollouts: four wrong with fingerprints, one wrong without (no \boxed{}), one correct
FINGERPRINTS = torch.tensor([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0], [1.0, 0.02], [NAN, NAN], [0.0, 1.0]])
CORRECT = [0, 0, 0, 0, 0, 1]


def visit(**over):
    fields = dict(
        group_ids=torch.zeros(6, dtype=torch.long),
        correct=torch.tensor(CORRECT),
        lengths=torch.tensor([10, 12, 14, 16, 18, 20]),
        prompt_keys=["q"] * 6,
        fingerprints=FINGERPRINTS,
    )
    fields.update(over)
    return RolloutBatch(**fields)


def test_penalty_formula_hand_worked():
    got = repeat_penalty(torch.tensor([0, 1, 4, 100]), alpha=0.1, beta=0.2)
    assert got.tolist() == pytest.approx([0.0, 0.1 * math.log(2), 0.1 * math.log(5), 0.2])


def test_single_cluster_run_by_hand():
    # 'single': |C| = bank size before this visit. Visit 1: 0; visit 2: 4; visit 3: 8.
    shaper = get_shaper("meds", cluster_method="single")
    expected_penalty = [0.0, 0.1 * math.log(5), min(0.1 * math.log(9), 0.2)]
    for p in expected_penalty:
        out = shaper(visit())
        shaped = out.rewards[:, 0].double()
        # wrong with fingerprint: 0 - p; wrong without fingerprint: 0; correct (not targeted): 1
        assert shaped.tolist() == pytest.approx([-p, -p, -p, -p, 0.0, 1.0], abs=1e-7)
        r = shaped
        expected_adv = (r - r.mean()) / (r.std() + 1e-6)
        assert torch.allclose(out.advantages.double(), expected_adv, atol=1e-5)
    assert out.metrics["meds/points"] == 12.0 and out.metrics["meds/banks"] == 1.0
    assert out.metrics["meds/penalized_frac"] == pytest.approx(4 / 6)
    assert out.metrics["meds/cluster_size_mean"] == 8.0


def test_hdbscan_run_noise_then_pairs():
    # visit 1 stores 4 points; three share a direction, one is alone: HDBSCAN (no single cluster allowed) calls
    # all four noise. Visit 2: every vote is noise -> |C| = 4 noise points. After it the bank holds each vector
    # twice: four tight pairs, four clusters of 2. Visit 3: each new vector's 3 nearest are its own pair plus
    # one other -> |C| = 2.
    shaper = get_shaper("meds")
    sizes = []
    for _ in range(3):
        out = shaper(visit())
        sizes.append(out.metrics["meds/cluster_size_mean"])
    assert sizes == [0.0, 4.0, 2.0]
    assert out.rewards[0, 0].item() == pytest.approx(-0.1 * math.log(3))
    assert out.metrics["meds/clusters_per_bank"] == 4.0


def test_extra_reward_columns_are_added_to_the_base_reward():
    overlong = torch.tensor([[0.0], [-0.5], [0.0], [0.0], [-1.0], [0.0]])
    out = get_shaper("meds", cluster_method="single")(visit(rewards=overlong))
    assert out.rewards[:, 0].tolist() == pytest.approx([0.0, -0.5, 0.0, 0.0, -1.0, 1.0])


def test_dapo_scores_plus_minus_one():
    shaper = get_shaper("meds", cluster_method="single", wrong_reward=-1.0)
    shaper(visit())
    p = 0.1 * math.log(5)
    out = shaper(visit())
    assert out.rewards[:, 0].tolist() == pytest.approx([-1 - p] * 4 + [-1.0, 1.0])


@pytest.mark.parametrize(("target", "penalised"), [("right", [5]), ("both", [0, 1, 2, 3, 5])])
def test_targets_select_the_remembered_rollouts(target, penalised):
    shaper = get_shaper("meds", cluster_method="single", target=target)
    shaper(visit())
    out = shaper(visit())
    hit = (out.rewards[:, 0] < torch.tensor(CORRECT, dtype=torch.float32)).nonzero().reshape(-1).tolist()
    assert hit == penalised


def test_missing_fields_are_named():
    with pytest.raises(ValueError, match="needs prompt_keys and fingerprints"):
        get_shaper("meds")(visit(prompt_keys=None, fingerprints=None))
    with pytest.raises(ValueError, match="needs fingerprints"):
        get_shaper("lead_meds")(visit(fingerprints=None))


def test_memory_state_round_trip_gives_identical_penalties():
    straight, interrupted = get_shaper("meds"), get_shaper("meds")
    for _ in range(2):
        straight(visit())
        interrupted(visit())
    resumed = get_shaper("meds")
    resumed.load_state_dict(interrupted.state_dict())
    for _ in range(2):
        a, b = straight(visit()), resumed(visit())
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.rewards, b.rewards)


def test_lead_meds_subtracts_the_penalty_from_the_correctness_channel():
    params = dict(l_min=1, b_max=100)
    shaper = get_shaper("lead_meds", meds={"cluster_method": "single"}, **params)
    shaper(visit())
    out = shaper(visit())
    p = 0.1 * math.log(5)
    assert out.rewards[:, 0].tolist() == pytest.approx([-p, -p, -p, -p, 0.0, 1.0], abs=1e-7)
    # the same as LEAD fed (correct - penalty), from the controller state after one identical step
    cfg = LeadConfig(**params)
    ctl = PSIController(((0.0, 1.0), (-1.0, 1.0)))
    first = torch.tensor([0.0, 0, 0, 0, 0, 1], dtype=torch.float64)
    lead_advantages(visit(), first, ctl, cfg)
    second = torch.tensor([-p, -p, -p, -p, 0.0, 1.0], dtype=torch.float64)
    ref = lead_advantages(visit(), second, ctl, cfg)
    assert torch.allclose(out.advantages.double(), ref.advantages, atol=1e-6)
    # target lengths still come from the verdict: the only correct rollout has length 20
    assert out.metrics["lead/target_len_mean"] == 20.0
    assert "meds/penalty_mean" in out.metrics


def test_lead_meds_config_names_nested_fields():
    with pytest.raises(ValueError, match=r"meds\.target='all' is not allowed"):
        get_shaper("lead_meds", meds={"target": "all"})
    with pytest.raises(TypeError, match=r"meds\..*alpah"):
        get_shaper("lead_meds", meds={"alpah": 0.1})
    assert get_shaper("lead_meds", meds={"alpha": 0.02}).config.meds.beta == pytest.approx(0.04)
    assert get_shaper("meds", alpha=0.02).config.beta == pytest.approx(0.04)


def test_lead_meds_state_round_trip():
    straight, interrupted = get_shaper("lead_meds", l_min=1, b_max=100), get_shaper("lead_meds", l_min=1, b_max=100)
    straight(visit())
    interrupted(visit())
    resumed = get_shaper("lead_meds", l_min=1, b_max=100)
    resumed.load_state_dict(interrupted.state_dict())
    a, b = straight(visit()), resumed(visit())
    assert torch.equal(a.advantages, b.advantages)


def test_prompt_key_ignores_whitespace_and_is_16_hex_chars():
    from dynashape.meds import prompt_key

    key = prompt_key("What is  1 + 1?\n")
    assert key == prompt_key("What is 1 + 1?") and len(key) == 16 and int(key, 16) >= 0
    assert key != prompt_key("What is 1 + 2?")
    # md5("abc") = 900150983cd24fb0d6963f7d28e17f72 (RFC 1321 test suite)
    assert prompt_key(" abc ") == "900150983cd24fb0"
