"""ThinkPrune: the capped reward by hand, the schedule across steps and restored from its state."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.methods.thinkprune import CapSchedule, ThinkPruneConfig, thinkprune_reward


def test_reward_hand_worked():
    correct = torch.tensor([True, True, False, True, True, False])
    lengths = torch.tensor([3999, 4000, 100, 4001, 0, 9000])
    r = thinkprune_reward(correct, lengths, max_length=4000)
    # correct and <= 4000: yes, yes (inclusive), wrong, over, yes (empty answer that verifies), wrong
    assert r.tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert r.dtype == torch.float64


def test_all_beyond_the_cap_score_zero():
    r = thinkprune_reward(torch.ones(4), torch.full((4,), 5000), max_length=2000)
    assert r.tolist() == [0.0] * 4


def test_reward_rejects_bad_inputs():
    with pytest.raises(ValueError, match="max_length"):
        thinkprune_reward(torch.ones(2), torch.ones(2), max_length=0)
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        thinkprune_reward(torch.ones(2), torch.tensor([1, -1]), max_length=10)


def test_schedule_steps_through_the_rounds():
    config = ThinkPruneConfig(max_length=4000, schedule=((2, 3000), (4, 2000)))
    sched = CapSchedule(config)
    caps = []
    for _ in range(6):
        caps.append(sched.cap())
        sched.advance()
    assert caps == [4000, 4000, 3000, 3000, 2000, 2000]
    assert sched.state_dict() == {"steps": 6}


def test_schedule_restored_equals_uninterrupted():
    config = ThinkPruneConfig(max_length=4000, schedule=((3, 3000), (5, 2000)))
    straight = CapSchedule(config)
    caps_straight = []
    for _ in range(7):
        caps_straight.append(straight.cap())
        straight.advance()
    first = CapSchedule(config)
    caps = []
    for _ in range(4):
        caps.append(first.cap())
        first.advance()
    resumed = CapSchedule(config)
    resumed.load_state_dict(first.state_dict())
    for _ in range(3):
        caps.append(resumed.cap())
        resumed.advance()
    assert caps == caps_straight == [4000, 4000, 4000, 3000, 3000, 2000, 2000]
    resumed.reset()
    assert resumed.cap() == 4000


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_length": 0}, "max_length"),
        ({"schedule": ((0, 3000),)}, "schedule"),
        ({"schedule": ((5, 3000), (5, 2000))}, r"schedule\[1\] step"),
        ({"schedule": ((5, 0),)}, r"schedule\[0\] cap"),
        ({"schedule": ((5,),)}, r"schedule\[0\]"),
    ],
)
def test_config_validates(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ThinkPruneConfig(**kwargs)


def test_bad_state_raises():
    with pytest.raises(ValueError, match="steps"):
        CapSchedule().load_state_dict({"steps": -1})


@given(st.lists(st.integers(1, 50), min_size=0, max_size=4, unique=True), st.integers(0, 80))
def test_cap_is_the_last_round_started(steps, now):
    steps = sorted(steps)
    schedule = tuple((s, 1000 - 100 * i) for i, s in enumerate(steps))
    sched = CapSchedule(ThinkPruneConfig(max_length=2000, schedule=schedule))
    sched.load_state_dict({"steps": now})
    started = [cap for s, cap in schedule if s <= now]
    assert sched.cap() == (started[-1] if started else 2000)
