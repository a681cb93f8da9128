"""L1 / LCPO rewards: hand-worked values, code versus paper for Max, input checks."""

import pytest
import torch

from dynashape.methods.l1 import L1ExactConfig, L1MaxConfig, l1_exact_reward, l1_max_reward

# Two prompts (groups are irrelevant to L1: the reward is per rollout). Budgets 1000 and 3000.
CORRECT = torch.tensor([1, 1, 0, 1, 0, 1])
LENGTHS = torch.tensor([1000, 1500, 200, 3000, 5000, 0])
BUDGETS = torch.tensor([1000, 1000, 1000, 3000, 3000, 3000])


def test_exact_hand_worked():
    r = l1_exact_reward(CORRECT, LENGTHS, BUDGETS, alpha=3e-4)
    expected = torch.tensor(
        [
            1.0,  # 1 - 3e-4 * 0
            1 - 0.15,  # 1 - 3e-4 * 500
            -0.24,  # 0 - 3e-4 * 800
            1.0,  # 1 - 3e-4 * 0
            -0.6,  # 0 - 3e-4 * 2000
            1 - 0.9,  # 1 - 3e-4 * 3000
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(r, expected)
    assert r.dtype == torch.float64


def test_max_code_form_hand_worked():
    # code: correct * clip(0.5 + 1.5e-4 * (budget - length), 0, 1)
    r = l1_max_reward(CORRECT, LENGTHS, BUDGETS, alpha=3e-4)
    expected = torch.tensor(
        [
            0.5,  # 0.5 + 0
            0.5 - 0.075,  # 0.5 + 1.5e-4 * (-500)
            0.0,  # wrong
            0.5,  # at the budget
            0.0,  # wrong (and 0.5 - 0.3 = 0.2 before the product)
            0.95,  # 0.5 + 1.5e-4 * 3000 = 0.95
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(r, expected)


def test_max_paper_form_differs_from_code_by_the_slope():
    # paper: correct * clip(0.5 + 3e-4 * (budget - length), 0, 1)
    r = l1_max_reward(CORRECT, LENGTHS, BUDGETS, alpha=3e-4, form="paper")
    expected = torch.tensor(
        [0.5, 0.5 - 0.15, 0.0, 0.5, 0.0, 1.0],  # last: 0.5 + 0.9 = 1.4, clipped to 1
        dtype=torch.float64,
    )
    torch.testing.assert_close(r, expected)


def test_max_code_additive_adds_the_score_to_correctness():
    r = l1_max_reward(CORRECT, LENGTHS, BUDGETS, alpha=3e-4, form="code_additive")
    expected = torch.tensor(
        [
            1.5,  # 1 + 0.5
            1.425,  # 1 + 0.425
            0.5 + 0.12,  # 0 + (0.5 + 1.5e-4 * 800)
            1.5,
            0.2,  # 0 + (0.5 - 1.5e-4 * 2000)
            1.95,
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(r, expected)


def test_max_clips_far_over_budget_to_zero():
    # 0.5 + 1.5e-4 * (1000 - 10000) = 0.5 - 1.35 < 0 -> 0
    r = l1_max_reward(torch.tensor([True]), torch.tensor([10000]), torch.tensor([1000]))
    assert r.item() == 0.0


def test_delta_moves_the_offset():
    r = l1_max_reward(torch.tensor([1]), torch.tensor([1000]), torch.tensor([1000]), delta=0.8, form="paper")
    assert r.item() == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lengths": torch.tensor([-1, 2])}, "lengths[0]"),
        ({"budgets": torch.tensor([5, -3])}, "budgets[1]"),
        ({"correct": torch.tensor([0.5, 1.0])}, "correct[0]"),
        ({"budgets": torch.tensor([5, 3, 4])}, "rollout counts differ"),
        ({"lengths": torch.tensor([float("nan"), 2.0])}, "lengths[0]"),
    ],
)
def test_bad_inputs_raise_naming_the_field(kwargs, field):
    args = {"correct": torch.tensor([1, 0]), "lengths": torch.tensor([10, 20]), "budgets": torch.tensor([5, 5])}
    args.update(kwargs)
    for fn in (l1_exact_reward, l1_max_reward):
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
            fn(**args)


def test_configs_validate():
    assert L1ExactConfig().alpha == 3e-4
    assert L1MaxConfig().form == "code"
    with pytest.raises(ValueError, match="alpha"):
        L1ExactConfig(alpha=-1.0)
    with pytest.raises(ValueError, match="delta"):
        L1MaxConfig(delta=1.5)
    with pytest.raises(ValueError, match="form"):
        L1MaxConfig(form="other")
    with pytest.raises(TypeError):
        L1MaxConfig(3e-4)  # keyword-only
