"""DLER: capped reward and REINFORCE++-baseline advantages, by hand; whitening properties."""

import pytest
import torch
from hypothesis import given

from dynashape import RolloutBatch, get_shaper
from dynashape.core.groups import Groups
from dynashape.methods.dler import DlerConfig, dler_advantages, dler_boost, dler_reward
from strategies import batches


def test_capped_score_hand_worked():
    # The capped score before the stop-properly multiplier: a response that ENDED at exactly the cap passes
    # (the official code compares no length; only a cut response is penalised, by the multiplier below).
    r = dler_reward(torch.tensor([1, 1, 0, 1]), torch.tensor([4000, 4001, 10, 0]), max_length=4000)
    assert r.tolist() == [1.0, 0.0, 0.0, 1.0]  # at the cap passes; over the cap and wrong score 0


def test_the_official_stop_properly_penalty_hand_worked():
    # issue 49: [cut at the cap and judged correct, correct, wrong, wrong], one group, lengths 4000/1000/2000/3000.
    # Official reward manager: score * 0.1 where the finish reason is not "stop": r = [0.1, 1, 0, 0].
    # Centred on the group mean .275: c = [-.175, .725, -.275, -.275]. Token whitening over 10000 tokens:
    # mu = (4000 * -.175 + 1000 * .725 - 5000 * .275) / 10000 = -.135;
    # deviations [-.04, .86, -.14, -.14]; var = (4000 * .0016 + 1000 * .7396 + 5000 * .0196) / 9999
    # = 844 / 9999 = .0844084, sqrt .290531; A = [-.137679, 2.960094, -.481876, -.481876] (issue: -.14, 2.96, -.48).
    batch = RolloutBatch(
        group_ids=torch.zeros(4, dtype=torch.long),
        correct=torch.tensor([1, 1, 0, 0]),
        lengths=torch.tensor([4000, 1000, 2000, 3000]),
        truncated=torch.tensor([1, 0, 0, 0]),
    )
    out = get_shaper("dler", correct_boost=0.0)(batch)
    assert out.rewards[:, 0].double().tolist() == pytest.approx([0.1, 1.0, 0.0, 0.0], abs=1e-7)
    want = [-0.137679, 2.960094, -0.481876, -0.481876]
    assert out.advantages.double().tolist() == pytest.approx(want, abs=2e-6)
    # the official run also adds 0.1 to the advantage of each response scoring 1 before the multiplier
    # (dp_actor.boost_high_score_advantages): the cut correct one too, whose score was 1
    boosted = get_shaper("dler")(batch)
    assert boosted.advantages.double().tolist() == pytest.approx(
        [w + b for w, b in zip(want, [0.1, 0.1, 0, 0])], abs=2e-6
    )
    assert boosted.metrics["dler/boosted_frac"] == 0.5
    # the paper's reward (no multiplier) gives the cut response full credit: A differs
    out = boosted
    paper = get_shaper("dler", stop_properly_coef=None, correct_boost=0.0)(batch)
    assert paper.rewards[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert paper.advantages[0] > 0 > out.advantages[0]


def test_a_response_that_ends_at_the_cap_keeps_its_score():
    # EOS at exactly L tokens: stopped properly, full credit, as the official reward (no length comparison)
    batch = RolloutBatch(group_ids=torch.zeros(2, dtype=torch.long), correct=torch.tensor([1, 0]),
                         lengths=torch.tensor([4000, 100]), truncated=torch.tensor([0, 0]))  # fmt: skip
    assert get_shaper("dler")(batch).rewards[:, 0].tolist() == [1.0, 0.0]


def test_dler_refuses_a_batch_without_truncated():
    batch = RolloutBatch(group_ids=torch.zeros(2, dtype=torch.long), correct=torch.tensor([1, 0]),
                         lengths=torch.tensor([40, 100]))  # fmt: skip
    with pytest.raises(ValueError, match=r"shaper 'dler' needs truncated \[N\] in the batch"):
        get_shaper("dler")(batch)
    assert get_shaper("dler", stop_properly_coef=None)(batch).rewards[:, 0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="dler applies its own stop-properly penalty"):
        get_shaper("dler", stop_properly=0.1)


def test_advantages_hand_worked_sequence_whitening():
    # g0 r = 1,0,0,0 (mean 1/4): .75, -.25, -.25, -.25; g1 r = 1,1: 0, 0; g2 a single rollout r = 1 keeps 1.
    # Values .75, -.25 x3, 0 x2, 1: mu = 1/7; deviations .607143, -.392857 x3, -.142857 x2, .857143;
    # sum of squares 1.607143, / 6 = .267857; sqrt(.267857 + 1e-8) = .517549.
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1])
    a = dler_advantages(r, Groups.from_ids(ids))
    expected = torch.tensor([1.173111, -0.759072, -0.759072, -0.759072, -0.276026, -0.276026, 1.656157])
    torch.testing.assert_close(a, expected.double(), atol=2e-6, rtol=0)


def test_advantages_hand_worked_token_whitening():
    # g0 r = 1, 0 centred .5, -.5 with 1 and 3 tokens; g1 r = 1, 1 centred 0, 0 with 2 and 2 tokens.
    # 8 tokens: mu = (.5 - 1.5) / 8 = -1/8; deviations .625, -.375, .125, .125;
    # var = (1 * .390625 + 3 * .140625 + 4 * .015625) / 7 = .125; sqrt = .353553.
    ids = torch.tensor([0, 0, 1, 1])
    a = dler_advantages(torch.tensor([1.0, 0, 1, 1]), Groups.from_ids(ids), torch.tensor([1, 3, 2, 2]))
    torch.testing.assert_close(a, torch.tensor([1.767767, -1.06066, 0.353553, 0.353553]).double(), atol=2e-6, rtol=0)


def test_all_correct_batch_gives_zero():
    ids = torch.tensor([0, 0, 1, 1])
    a = dler_advantages(torch.ones(4), Groups.from_ids(ids), torch.tensor([5, 6, 7, 8]))
    assert torch.equal(a, torch.zeros(4, dtype=torch.float64))


def test_bad_inputs_raise():
    g = Groups.from_ids(torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"rewards\[1\]"):
        dler_advantages(torch.tensor([1.0, float("inf")]), g)
    with pytest.raises(ValueError, match="rollout counts differ"):
        dler_advantages(torch.tensor([1.0, 0.0]), g, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="max_length"):
        DlerConfig(max_length=0)
    with pytest.raises(ValueError, match="whiten"):
        DlerConfig(whiten="batch")
    with pytest.raises(ValueError, match=r"stop_properly_coef=-0.1 is out of range"):
        DlerConfig(stop_properly_coef=-0.1)
    with pytest.raises(ValueError, match=r"correct_boost=-1 is out of range"):
        DlerConfig(correct_boost=-1)


def test_boost_hand_worked():
    # A + 0.1 where score >= 1 - 1e-5 (the official tolerance): 0.99999 passes, 0.9999 does not
    scores = torch.tensor([1.0, 0.99999, 0.9999, 0.0], dtype=torch.float64)
    a = dler_boost(torch.tensor([0.5, -0.5, 0.2, 0.0]), scores)
    assert a.tolist() == pytest.approx([0.6, -0.4, 0.2, 0.0])


@given(batches(max_len=6000))
def test_whitened_advantages_have_zero_mean_and_unit_std(batch):
    r = dler_reward(batch.correct, batch.lengths, max_length=4000)
    g = Groups.from_ids(batch.group_ids)
    a = dler_advantages(r, g)
    assert torch.isfinite(a).all()
    if bool(a.abs().max() > 0):  # a non-constant batch of 0/1 rewards has variance >> eps
        assert abs(float(a.mean())) < 1e-9
        assert float(a.std()) == pytest.approx(1.0, abs=1e-4)
    # token whitening: zero mean over tokens (rollouts of 0 tokens get exactly 0)
    w = batch.lengths.double()
    a_tok = dler_advantages(r, g, batch.lengths)
    assert torch.equal(a_tok[w == 0], torch.zeros(int((w == 0).sum()), dtype=torch.float64))
    if float(w.sum()) > 1:
        assert abs(float((w * a_tok).sum() / w.sum())) < 1e-9
