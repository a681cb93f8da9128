"""The engines' penalties as parts: DAPO's soft overlong punishment and ProRL's stop-properly multiplier, by hand,
on any method's reward channel through get_shaper (verl's and TRL's paths are in tests/integrations)."""

import pytest
import torch

import plain_math as plain
from dynashape import RolloutBatch, get_shaper
from dynashape.rewards.length import stop_properly_scale
from dynashape.shapers.parts import Overlong, StopProperly, penalty_parts

IDS = [0, 0, 0, 0]
LENGTHS = [100, 3500, 4000, 3000]  # cap 4000, buffer 1000: the punishment starts after 3000 tokens
CORRECT = [1, 1, 1, 0]
TRUNCATED = [False, False, True, False]


def batch(**over):
    fields = dict(group_ids=torch.tensor(IDS), correct=torch.tensor(CORRECT), lengths=torch.tensor(LENGTHS),
                  truncated=torch.tensor(TRUNCATED))  # fmt: skip
    fields.update(over)
    return RolloutBatch(**fields)


def test_stop_properly_scale_is_the_official_expression():
    # (1 - stop) * coef + stop over the float stop flag: 1 for a stopped response, coef for a cut one
    assert stop_properly_scale(torch.tensor([False, True]), 0.1).tolist() == [1.0, 0.1]
    with pytest.raises(ValueError, match="stop_properly coef must be a finite number >= 0"):
        stop_properly_scale(torch.tensor([True]), -1.0)


def test_overlong_on_grpo_hand_worked():
    # DAPO: R(l) = min((3000 - l) / 1000, 0) * 1.0: [0, -.5, -1, 0]; r = c + R = [1, .5, 0, 0]
    out = get_shaper("grpo", overlong={"max_length": 4000, "buffer": 1000})(batch())
    assert out.rewards[:, 0].tolist() == [1.0, 0.5, 0.0, 0.0]
    assert out.advantages.double().tolist() == pytest.approx(plain.group_normalize([1.0, 0.5, 0.0, 0.0], IDS), abs=1e-6)
    assert out.metrics["overlong/penalised_frac"] == 0.5


def test_overlong_defaults_are_dapos():
    part = penalty_parts(overlong={"max_length": 20480})[0]
    assert part == Overlong(max_length=20480, buffer=4096, factor=1.0)


def test_stop_properly_on_grpo_hand_worked():
    # c * (0.1 on the cut row): [1, 1, .1, 0]
    out = get_shaper("grpo", stop_properly=0.1)(batch())
    assert out.rewards[:, 0].double().tolist() == pytest.approx([1.0, 1.0, 0.1, 0.0])
    assert out.advantages.double().tolist() == pytest.approx(plain.group_normalize([1, 1, 0.1, 0], IDS), abs=1e-6)
    assert get_shaper("grpo", stop_properly=True).penalties == (StopProperly(0.1),)  # True: the official 0.1


def test_both_in_the_official_order_add_then_scale():
    # DAPO's manager adds the overlong term to the score, then the stop-properly multiplier scales the sum:
    # [1, .5, (1 - 1) * .1, 0] = [1, .5, 0, 0]; scale-then-add would give [1, .5, .1 - 1, 0]
    out = get_shaper("grpo", overlong={"max_length": 4000, "buffer": 1000}, stop_properly=0.1)(batch())
    assert out.rewards[:, 0].tolist() == [1.0, 0.5, 0.0, 0.0]


def test_penalties_act_on_channel_zero_of_a_multi_channel_method():
    # grpo_length (weights (1, 1), threshold 3200): channels c and 1[l <= 3200] = [1, 0, 0, 1];
    # stop_properly scales c only: c = [1, 1, .1, 0] -> r = [2, 1, .1, 1]
    out = get_shaper("grpo_length", threshold=3200, stop_properly=0.1)(batch())
    assert out.rewards[:, 0].double().tolist() == pytest.approx([2.0, 1.0, 0.1, 1.0])


def test_a_penalty_needing_truncated_refuses_a_batch_without_it():
    with pytest.raises(ValueError, match=r"shaper 'stop_properly' needs truncated \[N\] in the batch"):
        get_shaper("grpo", stop_properly=0.1)(batch(truncated=None))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(overlong={"buffer": 10}), r"give max_length \(the engine's response cap\)"),
        (dict(overlong={"max_length": 100, "window": 3}), r"give max_length"),
        (dict(overlong={"max_length": 100, "buffer": 200}), r"buffer must be in \(0, max_len=100\]"),
        (dict(overlong=5), r"overlong must be a mapping"),
        (dict(stop_properly=-0.5), r"stop_properly=-0.5 is out of range"),
    ],
)
def test_bad_penalties_name_the_value(params, message):
    with pytest.raises(ValueError, match=message):
        get_shaper("grpo", **params)


def test_a_shaper_not_built_from_parts_refuses_penalties():
    with pytest.raises(ValueError, match="shaper 'meds' is not built from parts: it takes no stop_properly"):
        get_shaper("meds", stop_properly=0.1)


def test_a_length_reward_recipe_takes_the_penalties_on_its_reward():
    """cosine is a chain now: stop_properly scales its cosine reward on the truncated rows, before GRPO."""
    b = RolloutBatch(
        group_ids=torch.tensor([0, 0]),
        correct=torch.tensor([True, True]),
        lengths=torch.tensor([0, 500]),
        truncated=torch.tensor([False, True]),
    )
    out = get_shaper("cosine", max_len=1000.0, stop_properly=0.5)(b)
    # cosine rewards 1 (l = 0) and 0.75 (l = max_len / 2: 0.5 + 0.25 (1 + cos(pi / 2))), the second halved
    assert out.rewards[:, 0].tolist() == [1.0, 0.375]


def test_penalties_keep_the_state_of_a_stateful_method():
    shaper, plain_shaper = get_shaper("thinkprune", stop_properly=0.5), get_shaper("thinkprune")
    shaper(batch())
    plain_shaper(batch())
    assert shaper.state_dict() == plain_shaper.state_dict()  # the stateless penalty adds no state key
    fresh = get_shaper("thinkprune", stop_properly=0.5)
    fresh.load_state_dict(shaper.state_dict())
    assert torch.equal(fresh(batch()).advantages, shaper(batch()).advantages)


def test_a_trainer_config_checks_the_penalty_keywords_as_get_shaper_does():
    import pytest

    from dynashape.train.config import TrainConfig

    cfg = TrainConfig(shaper="grpo", shaper_kwargs={"stop_properly": 0.1, "overlong": {"max_length": 64, "buffer": 8}})
    assert cfg.shaper_kwargs["stop_properly"] == 0.1
    with pytest.raises(ValueError, match="shaper_kwargs of 'grpo'"):
        TrainConfig(shaper="grpo", shaper_kwargs={"overlong": {"buffer": 8}})  # max_length has no default
    with pytest.raises(ValueError, match="shaper_kwargs of 'meds': shaper 'meds' is not built from parts"):
        TrainConfig(shaper="meds", shaper_kwargs={"stop_properly": 0.1})
