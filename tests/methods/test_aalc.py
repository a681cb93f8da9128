"""AALC: the scheduled length reward by hand, the switch, and the validation accuracy as state."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

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
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=0.5)
    expected = torch.tensor([0.95 + 1e-6, 0.95 + 1e-6, 1e-6, 0.95 + 1e-6], dtype=torch.float64)
    torch.testing.assert_close(r, expected, rtol=0, atol=1e-15)


def test_code_defaults_at_target_reward_short_answers():
    # A_val 1 = A_target: a = 1, alpha = .9, a^128 = 1: R_len = 1 - min(1, l / 1024): .5, 0, .5, 0
    r = aalc_reward(CORRECT, LENGTHS, val_accuracy=1.0)
    expected = torch.tensor([0.9 + 0.5e-6, 0.9, 0.5e-6, 0.9], dtype=torch.float64)
    torch.testing.assert_close(r, expected, rtol=0, atol=1e-15)
    assert float(r[0] - r[1]) == pytest.approx(0.5e-6, abs=1e-15)  # float64 keeps the 1e-6 term


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
    r = aalc_reward(torch.ones(len(lengths)), n, val_accuracy=acc, beta=4, c=0.5)
    assert bool((r[:-1] >= r[1:]).all())
