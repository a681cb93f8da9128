"""AALC: the scheduled length reward by hand, the switch, and the validation accuracy as state."""

from collections import defaultdict

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape import RolloutBatch, get_shaper
from dynashape.methods.aalc import AalcConfig, AalcSchedule, aalc_reward

CORRECT = torch.tensor([1, 1, 0, 1])
LENGTHS = torch.tensor([512, 1024, 512, 4096])


def test_no_validation_yet_is_plain_correctness():
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=None)
    assert r.tolist() == [1.0, 1.0, 0.0, 1.0]


def test_hand_worked_small_beta():
    # A_val .9, A_target 1: a = .9, alpha = .9 + .1 * .1 = .91, a^2 = .81.
    # lengths 512, 1024, 512, 4096 -> ratios .5, 1, .5, 1 -> min(.81, ratio) = .5, .81, .5, .81
    # -> R_len .5, .19, .5, .19; r = .91 c + .1 R_len
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=0.9, beta=2, c=0.1, l_max=1024)
    expected = torch.tensor([0.91 + 0.05, 0.91 + 0.019, 0.05, 0.91 + 0.019], dtype=torch.float64)
    torch.testing.assert_close(r, expected)


def test_code_defaults_far_below_target_give_no_length_pressure():
    # A_val .5: a = .5, alpha = .95, a^128 = 2^-128 ~ 2.9e-39, so R_len = 1 - 2.9e-39 for every length
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=0.5, precision="float64")
    expected = torch.tensor([0.95 + 1e-6, 0.95 + 1e-6, 1e-6, 0.95 + 1e-6], dtype=torch.float64)
    torch.testing.assert_close(r, expected, rtol=0, atol=1e-15)
    # the official code: min(acc_ratio**128, ratio) is the Python float, so float64 sums stored in float32
    official = aalc_reward(CORRECT, LENGTHS, val_accuracy=0.5)
    assert official.tolist() == expected.to(torch.float32).double().tolist()


def test_code_defaults_at_target_reward_short_answers():
    # A_val 1 = A_target: a = 1, alpha = .9, a^128 = 1: R_len = 1 - min(1, l / 1024): .5, 0, .5, 0
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=1.0, precision="float64")
    expected = torch.tensor([0.9 + 0.5e-6, 0.9, 0.5e-6, 0.9], dtype=torch.float64)
    torch.testing.assert_close(r, expected, rtol=0, atol=1e-15)
    assert float(r[0] - r[1]) == pytest.approx(0.5e-6, abs=1e-15)  # float64 keeps the 1e-6 term


def test_official_float32_quantises_the_length_term():
    # The official code (the default): rows 0 and 2 have ratio .5 < 1, so the sum is float32 arithmetic:
    # float32(.9) = .9 - 2.4e-8; + 5e-7 is 8.39 float32 steps of 2^-24 = 5.96e-8 near .9, rounded to 8 steps.
    # Row 2: 0 + float32(5e-7). Rows 1 and 3 (ratio >= 1): Python's .9 + 1e-6 * 0, stored as float32(.9).
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=1.0)
    f32_09 = float(torch.tensor(0.9, dtype=torch.float32))
    assert f32_09 == pytest.approx(0.9 - 2.38e-8, abs=1e-10)
    assert r.tolist() == [f32_09 + 8 * 2**-24, f32_09, float(torch.tensor(5e-7, dtype=torch.float32)), f32_09]
    assert float(r[0] - r[1]) == 8 * 2**-24  # 4.77e-7, not the formula's 5e-7


def test_issue_example_all_correct_group_of_eight():
    """Issue 49's group: 8 correct, A_val = 1, lengths 100 ... 1200 (the last two past L_max). Official
    (the code's own arithmetic, see test_equals_the_official_code_in_its_own_control_flow) against float64.
    The issue quoted [.39, .22, .09, -.04, -.22, -.26, -.30, -.30]: that is a float64 reward stored in float32;
    the code's sum is float32 arithmetic wherever the length ratio is a tensor (rows 0-5), which moves rows 0, 3
    and 5."""
    lengths = torch.tensor([100, 300, 500, 700, 900, 1000, 1100, 1200])
    batch = RolloutBatch(group_ids=torch.zeros(8, dtype=torch.long), correct=torch.ones(8, dtype=torch.bool),
                         lengths=lengths)  # fmt: skip
    rounded = {}
    for precision in ("float32", "float64"):
        shaper = get_shaper("aalc", precision=precision)
        shaper.observe(validation_accuracy=1.0)
        rounded[precision] = [round(x, 2) for x in shaper(batch).advantages.tolist()]
    assert rounded["float32"] == [0.35, 0.22, 0.09, -0.09, -0.22, -0.3, -0.3, -0.3]
    assert rounded["float64"] == [0.43, 0.28, 0.14, -0.0, -0.15, -0.22, -0.24, -0.24]
    official = _official_advantages([1] * 8, lengths.tolist(), [0] * 8, 1.0)
    assert [round(x, 2) for x in official] == rounded["float32"]


def test_accuracy_above_a_lower_target_saturates():
    # A_val .8, A_target .5: a = min(1, 1.6) = 1, as at the target
    torch.testing.assert_close(
        aalc_reward(CORRECT, LENGTHS, val_accuracy=0.8, a_target=0.5), aalc_reward(CORRECT, LENGTHS, val_accuracy=1.0)
    )


def test_schedule_state_across_validations_and_restore():
    sched = AalcSchedule(AalcConfig(beta=2, c=0.1))
    assert sched.reward(CORRECT, LENGTHS).tolist() == [1.0, 1.0, 0.0, 1.0]
    assert sched.metrics == {}
    sched.observe_validation(0.9)
    assert sched.metrics == pytest.approx({"aalc/val_accuracy": 0.9, "aalc/alpha": 0.91})
    restored = AalcSchedule(AalcConfig(beta=2, c=0.1))
    restored.load_state_dict(sched.state_dict())
    assert torch.equal(restored.reward(CORRECT, LENGTHS), sched.reward(CORRECT, LENGTHS))
    assert restored.state_dict() == {"val_accuracy": 0.9}
    restored.reset()
    assert restored.val_accuracy_ is None


def test_validation_errors():
    with pytest.raises(ValueError, match="accuracy"):
        AalcSchedule().observe_validation(1.2)
    with pytest.raises(ValueError, match="a_target"):
        AalcConfig(a_target=0.0)
    with pytest.raises(ValueError, match="l_max"):
        AalcConfig(l_max=0)
    with pytest.raises(ValueError, match="AALC state"):
        AalcSchedule().load_state_dict({})
    with pytest.raises(ValueError, match="val_accuracy"):
        aalc_reward(CORRECT, LENGTHS, val_accuracy=-0.1)


@given(st.floats(0, 1), st.lists(st.integers(0, 5000), min_size=1, max_size=10))
def test_shorter_never_earns_less(acc, lengths):
    n = torch.tensor(sorted(lengths))
    r = aalc_reward(torch.ones(len(lengths)), n, val_accuracy=acc, beta=4, c=0.5, precision="float64")
    assert bool((r[:-1] >= r[1:]).all())
    # the official float32 arithmetic rounds float32(alpha) + term on one side of the switch and alpha + term in
    # float64 on the other, so at the switch a shorter answer may earn one float32 step (2^-23 below 2) less
    official = aalc_reward(torch.ones(len(lengths)), n, val_accuracy=acc, beta=4, c=0.5)
    assert bool((official[:-1] >= official[1:] - 2**-23).all())


# ---------------------------------------------------------------------------------------------------------
# The official code in its own control flow (du-nlp-lab/AALC@f12452d): LRRewardManager.__call__, lines 87-94,
# with 0-d tensors as verl hands them, and that repository's compute_grpo_outcome_advantage (core_algos.py).
# ---------------------------------------------------------------------------------------------------------


def _official_rewards(correct, lengths, validation_acc, target_acc=1, max_length=1024):
    reward_tensor = torch.zeros(len(lengths), 2, dtype=torch.float32)  # the reward sits on the last token
    for i in range(len(lengths)):
        valid_response_length = torch.tensor(lengths[i])  # attention_mask[prompt_length:].sum(), 0-d int64
        reward = float(correct[i])
        if -1 != validation_acc:
            acc_ratio = min(1, validation_acc / target_acc)
            alpha = 0.9 + 0.1 * (1 - acc_ratio)
            length_ratio = min(1, valid_response_length / max_length)
            length_reward = 1 - min(acc_ratio**128, length_ratio)
            reward = reward * alpha + 1e-6 * length_reward
        reward_tensor[i, 1] = reward
    return reward_tensor


def _official_grpo(token_level_rewards, index, epsilon=1e-6):
    scores = token_level_rewards.sum(dim=-1)
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx] = torch.tensor(0.0)
            id2std[idx] = torch.tensor(1.0)
        else:
            id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
            id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores


def _official_advantages(correct, lengths, index, validation_acc):
    return _official_grpo(_official_rewards(correct, lengths, validation_acc), index).tolist()


@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 1500)), min_size=1, max_size=40),
    st.sampled_from([-1, 0.0, 0.5, 0.97, 0.995, 1.0]),
)
def test_equals_the_official_code_in_its_own_control_flow(rows, validation_acc):
    """Random batches with singleton groups, lengths past L_max, the switch half on (0.995^128 = 0.53) and
    accuracies below and at the target: the rewards are the official float32 values bit for bit, and the
    advantages agree to float32 rounding of verl's std (a full reduction; ours row-wise)."""
    ids, correct, lengths = (list(x) for x in zip(*rows, strict=True))
    got_rewards = aalc_reward(torch.tensor(correct), torch.tensor(lengths),
                              val_accuracy=None if validation_acc == -1 else validation_acc)  # fmt: skip
    want_rewards = _official_rewards(correct, lengths, validation_acc).sum(-1)
    assert got_rewards.tolist() == want_rewards.double().tolist()
    shaper = get_shaper("aalc")
    if validation_acc != -1:
        shaper.observe(validation_accuracy=validation_acc)
    got = shaper(
        RolloutBatch(group_ids=torch.tensor(ids), correct=torch.tensor(correct), lengths=torch.tensor(lengths))
    )
    want = torch.tensor(_official_advantages(correct, lengths, ids, validation_acc))
    torch.testing.assert_close(got.advantages.float(), want, rtol=1e-5, atol=1e-5)


def test_float32_group_mean_rounds_as_verls_torch_mean():
    # aalc_grpo_float32 takes each group's mean row-wise from a [G, size] block; verl takes torch.mean of the
    # group's own 1-d tensor. On values a few float32 steps apart (an all-correct group) they round alike.
    gen = torch.Generator().manual_seed(0)
    for size in (2, 3, 5, 8, 16, 17, 33, 64):
        block = 0.9 + torch.randint(0, 20, (50, size), generator=gen).float() * 6e-8
        row_wise = block.mean(dim=1)
        assert all(torch.equal(torch.mean(torch.tensor(list(row))), row_wise[g]) for g, row in enumerate(block))
