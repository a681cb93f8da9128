"""RolloutBatch.budgets (the token budget each rollout's prompt asked for, L1's n_gold): validated as lengths
are, each error naming the field and the first bad index; and the ShaperNeeds flags that declare it."""

import math

import pytest
import torch

from dynashape import RolloutBatch, Shaped, ShaperNeeds
from dynashape.shapers import available_shapers, shaper_needs


def make(**over):
    fields = dict(group_ids=torch.tensor([0, 0, 1]), correct=torch.tensor([True, False, True]),
                  lengths=torch.tensor([5, 6, 7]))  # fmt: skip
    fields.update(over)
    return RolloutBatch(**fields)


def test_budgets_are_optional_and_kept_as_int64():
    assert make().budgets is None
    b = make(budgets=torch.tensor([100, 100, 40], dtype=torch.int32))
    assert b.budgets.dtype == torch.int64 and b.budgets.tolist() == [100, 100, 40]
    assert make(budgets=[0, 1, 2]).budgets.tolist() == [0, 1, 2]  # a list is accepted, 0 is a legal budget


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        (torch.tensor([100, -1, 40]), r"budgets has a negative value -1 at index 1"),
        (torch.tensor([100.0, math.nan, 40.0]), r"budgets has a non-finite value nan at index 1"),
        (torch.tensor([100.0, 50.0, 40.0]), r"budgets must have an integer dtype"),
        (torch.tensor([100, 50]), r"budgets has 2 rows but group_ids has 3"),
        (torch.tensor([[100], [50], [40]]), r"budgets must be 1-D \[N\]"),
        (torch.tensor([True, False, True]), r"budgets must have an integer dtype"),
    ],
)
def test_bad_budgets_name_the_field_and_first_bad_index(budgets, message):
    with pytest.raises(ValueError, match=message):
        make(budgets=budgets)


def test_needs_declare_budgets_validation_accuracy_monitor_and_dropped_rows():
    flags = ("budgets", "validation_accuracy", "monitor_rollouts", "drops_rows")
    assert not any(getattr(ShaperNeeds(), name) for name in flags)
    assert all(getattr(ShaperNeeds(**dict.fromkeys(flags, True)), name) for name in flags)
    assert shaper_needs("gfpo").drops_rows
    assert [n for n in available_shapers() if shaper_needs(n).drops_rows] == ["gfpo"]
    for name in flags:
        with pytest.raises(ValueError, match=f"{name} must be true or false"):
            ShaperNeeds(**{name: 1})


def test_shaped_keep_is_a_bool_row_mask():
    adv = torch.zeros(3)
    assert Shaped(advantages=adv, rewards=adv[:, None]).keep is None
    assert Shaped(advantages=adv, rewards=adv[:, None], keep=torch.tensor([True, False, True])).keep.tolist() == [
        True, False, True,
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"keep must be a BoolTensor \[3\]"):
        Shaped(advantages=adv, rewards=adv[:, None], keep=torch.tensor([1, 0, 1]))


def test_the_trainer_config_accepts_each_reader_once_the_trainer_can_hand_it_over():
    # What is refused while off is tested in tests/train/test_field_trainer.py; here, the settings that supply
    # each need make the shaper legal, and LASER-D's monitor needs nothing beyond the validation split.
    from dynashape.train.config import TrainConfig

    assert TrainConfig(shaper="l1_exact", budget_prompt={"enabled": True}).shaper == "l1_exact"
    assert TrainConfig(shaper="aalc", validation_every=10).validation_every == 10
    assert TrainConfig(shaper="laser_d").shaper == "laser_d"
    assert TrainConfig(shaper="adlp").shaper == "adlp"
