"""SAW: CV weights and both modes by hand; weights sum to K; constant batches give zero."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape import RolloutBatch, get_shaper
from dynashape.core.groups import Groups
from dynashape.methods.saw import SawConfig, saw_advantages, saw_weights

# Two groups of two; channel 0 correctness, channel 1 format.
IDS = torch.tensor([0, 0, 1, 1])
REWARDS = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])


def test_graded_correctness_column_gives_the_official_weights():
    """issue 49: ToolRL correctness [3, -1.5, .5, -3], format [1, 1, 0, 1]. +3: [6, 1.5, 3.5, 0], mean 2.75,
    Bessel var 20.25 / 3 = 6.75, std 2.598076, CV .944755; format CV .5 / .75 = 2/3; w = 2 CV / (sum + 1e-8) =
    (1.172573, .827427). The 0/1 verdicts [1, 0, 1, 0] as channel 0 (the fallback) weigh (.396711, 1.603289)."""
    graded = torch.tensor([[3.0, 1.0], [-1.5, 1.0], [0.5, 0.0], [-3.0, 1.0]])
    batch = RolloutBatch(group_ids=IDS, correct=torch.tensor([1, 0, 1, 0]), lengths=torch.tensor([5, 6, 7, 8]),
                         rewards=graded)  # fmt: skip
    out = get_shaper("saw", correctness_column=0)(batch)
    assert (out.metrics["saw/weight_0"], out.metrics["saw/weight_1"]) == pytest.approx((1.172573, 0.827427), abs=1e-6)
    fallback = RolloutBatch(group_ids=IDS, correct=torch.tensor([1, 0, 1, 0]), lengths=torch.tensor([5, 6, 7, 8]),
                            rewards=graded[:, 1:])  # fmt: skip
    out = get_shaper("saw")(fallback)
    assert (out.metrics["saw/weight_0"], out.metrics["saw/weight_1"]) == pytest.approx((0.396711, 1.603289), abs=1e-6)
    # the graded column is channel 0 wherever it sits; the combined reward is w_c * corr + w_f * fmt, not shifted
    swapped = RolloutBatch(group_ids=IDS, correct=batch.correct, lengths=batch.lengths, rewards=graded[:, [1, 0]])
    moved = get_shaper("saw", correctness_column=1)(swapped)
    assert torch.equal(moved.advantages, get_shaper("saw", correctness_column=0)(batch).advantages)


def test_graded_correctness_outside_its_range_is_refused():
    batch = RolloutBatch(group_ids=IDS, correct=torch.tensor([1, 0, 1, 0]), lengths=torch.tensor([5, 6, 7, 8]),
                         rewards=torch.tensor([[3.0, 1.0], [-3.5, 1.0], [0.5, 0.0], [0.0, 1.0]]))  # fmt: skip
    with pytest.raises(ValueError, match=r"rewards\[1, 0\]=-3.5 is a graded correctness outside \[-3, 3\]"):
        get_shaper("saw", correctness_column=0)(batch)
    with pytest.raises(ValueError, match=r"correctness_column=2 but rewards has 2 columns"):
        get_shaper("saw", correctness_column=2)(batch)
    with pytest.raises(ValueError, match=r"correctness_column=-1 must be an integer >= 0"):
        SawConfig(correctness_column=-1)


def test_weights_hand_worked():
    # correctness + 3 = 4, 3, 4, 4: mean 3.75, Bessel var (3 * .0625 + .5625) / 3 = .25, std .5 -> CV 2/15
    # format 1, 1, 0, 1: mean .75, var .25, std .5 -> CV 2/3
    # w = 2 * CV / (2/15 + 2/3) = 2 * CV / .8 -> 1/3, 5/3 (up to the 1e-8 beside the sum)
    w, cv = saw_weights(REWARDS)
    torch.testing.assert_close(cv, torch.tensor([2 / 15, 2 / 3], dtype=torch.float64), rtol=1e-7, atol=0)
    torch.testing.assert_close(w, torch.tensor([1 / 3, 5 / 3], dtype=torch.float64), rtol=1e-7, atol=0)


def test_grpo_mode_hand_worked():
    # combined = w_c c + w_f f = 2, 5/3 | 1/3, 2. g0: mean 11/6, dev +-1/6, std sqrt(1/18) = .235702
    # -> +-(1/6) / (.235702 + 1e-6) = +-.707104; g1: dev -+5/6, std 1.178511 -> -+.707106
    out = saw_advantages(REWARDS, Groups.from_ids(IDS), mode="grpo")
    torch.testing.assert_close(
        out.advantages, torch.tensor([0.707104, -0.707104, -0.707106, 0.707106], dtype=torch.float64), atol=2e-6, rtol=0
    )


def test_gdpo_mode_hand_worked():
    # A_c: g0 (1, 0) -> +-.5 / (.707107 + 1e-6) = +-.707106, g1 (1, 1) -> 0; A_f: g0 0, g1 (0, 1) -> -+.707106
    # sum: 1/3 * .707106 = .235702 (+-), 5/3 * .707106 = 1.178510 (-+); whitened (mean 0, Bessel var .962962,
    # std .981307): .240192, -.240192, -1.200961, 1.200961
    out = saw_advantages(REWARDS, Groups.from_ids(IDS), mode="gdpo")
    torch.testing.assert_close(
        out.advantages, torch.tensor([0.240192, -0.240192, -1.200961, 1.200961], dtype=torch.float64), atol=2e-6, rtol=0
    )
    assert set(out.metrics) == {"saw/weight_0", "saw/weight_1", "saw/cv_0", "saw/cv_1"}


def test_constant_batch_gives_zero_weights_and_advantages():
    flat = torch.ones(4, 2)
    for mode in ("grpo", "gdpo"):
        out = saw_advantages(flat, Groups.from_ids(IDS), mode=mode)
        assert torch.equal(out.weights, torch.zeros(2, dtype=torch.float64))
        assert torch.equal(out.advantages, torch.zeros(4, dtype=torch.float64))


def test_single_rollout_batch_is_zero_not_nan():
    out = saw_advantages(torch.tensor([[1.0, 0.0]]), Groups.from_ids(torch.tensor([7])), mode="gdpo")
    assert out.advantages.tolist() == [0.0]


def test_validation():
    with pytest.raises(ValueError, match="mode"):
        SawConfig(mode="mean")
    with pytest.raises(ValueError, match="eps"):
        SawConfig(eps=0.0)
    with pytest.raises(ValueError, match="rewards must be"):
        saw_weights(torch.ones(3))
    with pytest.raises(ValueError, match=r"rewards\[1\]"):
        saw_weights(torch.tensor([[1.0, 0.0], [float("nan"), 1.0]]))


@given(
    st.integers(2, 4).flatmap(
        lambda k: st.lists(
            st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=k, max_size=k), min_size=2, max_size=12
        )
    )
)
def test_weights_sum_to_k_unless_all_cv_vanish(rows):
    r = torch.tensor(rows, dtype=torch.float64)
    w, cv = saw_weights(r)
    k = r.shape[1]
    assert bool((w >= 0).all())
    total = float(cv.sum())
    # sum w = K * S / (S + eps): K to within K * eps / S, or 0 when every CV is 0
    assert float(w.sum()) == pytest.approx(k * total / (total + 1e-8), rel=1e-9, abs=1e-12)
    if total > 1e-3:
        assert float(w.sum()) == pytest.approx(k, rel=1e-5)
