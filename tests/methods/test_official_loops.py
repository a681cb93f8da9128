"""Fidelity: each method's numbers against its official code's formula written here in the official control flow
(per-row loops, dict-of-lists groups, its epsilons, float32 where its tensors are float32), on random batches that
exercise where the conventions differ: groups of one, truncated rows, unformatted answers, graded scores.

Read at: NVlabs/DLER@ea7d4f7b (verl-dler reward_manager/dapo.py, trainer/ppo/core_algos.py, utils/torch_functional.py
masked_whiten), hkust-nlp/Laser@c9e7c4ef (reward_score/hf_math_verifier.py, length_penalty.py, trainer/ppo/
core_algos.py), Zhaolutuan/SAW@119951f6 (trainer/ppo/ray_trainer.py grpo-h, gdpo-h), verl's DAPO reward manager
(workers/reward_manager/dapo.py, the overlong buffer). Where our default differs (LASER's and SAW's GRPO on a group
of one), the test asserts the documented difference instead of equality.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from dynashape import RolloutBatch, get_shaper

SEEDS = range(25)


def random_batch(seed, *, cap=40, graded=False):
    """Groups of 1 to 5 rollouts (ids shuffled), lengths 1..cap, some rows at the cap and cut, some unformatted."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (int(torch.randint(2, 6, (1,), generator=gen)),), generator=gen)
    ids = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    ids = ids[torch.randperm(len(ids), generator=gen)]
    n = len(ids)
    lengths = torch.randint(1, cap + 1, (n,), generator=gen)
    at_cap = torch.rand(n, generator=gen) < 0.3
    lengths = torch.where(at_cap, torch.full_like(lengths, cap), lengths)
    truncated = at_cap & (torch.rand(n, generator=gen) < 0.8)  # an EOS on the last allowed token is not a cut
    correct = torch.rand(n, generator=gen) < 0.5
    formatted = torch.rand(n, generator=gen) < 0.8
    rewards = None
    if graded:  # ToolRL's graded correctness in [-3, 3] (steps of 0.5) and a 0/1 format score
        corr = torch.randint(-6, 7, (n,), generator=gen).float() / 2
        rewards = torch.stack([corr, formatted.float()], dim=1)
    return RolloutBatch(group_ids=ids, correct=correct, lengths=lengths, truncated=truncated, formatted=formatted,
                        rewards=rewards)  # fmt: skip


def token_rewards(scores, lengths):
    """verl's reward tensor: float32 [bs, T], each row's score at its last valid token."""
    width = int(lengths.max())
    out = torch.zeros(len(scores), width, dtype=torch.float32)
    for i in range(len(scores)):
        out[i, int(lengths[i]) - 1] = scores[i]
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    return out, mask


def masked_whiten(values, mask, shift_mean=True):
    """verl.utils.torch_functional.masked_whiten: masked mean, unbiased masked variance, rsqrt(var + 1e-8)."""
    mean = (values * mask).sum() / mask.sum()
    centered = values - mean
    variance = (centered**2 * mask).sum() / mask.sum()
    mask_sum = mask.sum()
    variance = variance * (mask_sum / (mask_sum - 1))
    whitened = (values - mean) * torch.rsqrt(variance + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


def verl_grpo(scores, index, epsilon=1e-6):
    """The older verl compute_grpo_outcome_advantage of LASER's and SAW's code: a group of one keeps mean 0, std 1."""
    scores = scores.clone()
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            id2mean[idx] = torch.mean(torch.stack(id2score[idx]))
            id2std[idx] = torch.std(torch.stack(id2score[idx]))
    for i in range(len(scores)):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores


def singletons(batch):
    ids = batch.group_ids.tolist()
    return torch.tensor([ids.count(g) == 1 for g in ids])


# ------------------------------------------------------------------------------------------------------- DLER


def official_dler(batch, coef=0.1, boost=0.1):
    """DAPO reward manager (score at the last token, then _apply_stop_properly_penalty), then verl-dler's
    compute_reinforce_plus_plus_baseline_outcome_advantage (group of one: mean 0) and masked_whiten over tokens,
    then dp_actor's boost_high_score_advantages on token_level_scores (the score before the multiplier)."""
    n = len(batch)
    scores = [1.0 if bool(batch.correct[i]) else 0.0 for i in range(n)]  # the verdict as the score (0/1)
    reward_tensor, mask = token_rewards(scores, batch.lengths)
    score_tensor = reward_tensor
    stop_properly = (~batch.truncated).type(reward_tensor.dtype)
    scale = ((1.0 - stop_properly) * coef + stop_properly).unsqueeze(-1)
    reward_tensor = reward_tensor * scale
    width = reward_tensor.shape[-1]
    s = reward_tensor.sum(dim=-1)
    index = batch.group_ids.tolist()
    id2score, id2mean = defaultdict(list), {}
    for i in range(n):
        id2score[index[i]].append(s[i])
    for idx in id2score:
        id2mean[idx] = torch.tensor(0.0) if len(id2score[idx]) == 1 else torch.mean(torch.stack(id2score[idx]))
    for i in range(n):
        s[i] = s[i] - id2mean[index[i]]
    s = s.unsqueeze(-1).tile([1, width]) * mask
    adv = masked_whiten(s, mask) * mask
    if boost > 0:
        high_score_mask = score_tensor.sum(dim=-1) >= 1.0 - 1e-5
        high_score_mask = high_score_mask.unsqueeze(-1).expand_as(adv)
        adv = adv + high_score_mask * boost
    return reward_tensor.sum(-1), adv[:, 0]


@pytest.mark.parametrize("seed", SEEDS)
def test_dler_equals_the_official_code(seed):
    batch = random_batch(seed)
    rewards, want = official_dler(batch)
    out = get_shaper("dler", max_length=40)(batch)
    torch.testing.assert_close(out.rewards[:, 0], rewards, rtol=0, atol=1e-7)
    torch.testing.assert_close(out.advantages, want, rtol=1e-5, atol=2e-5)  # the code's float32 against float64


# ------------------------------------------------------------------------------------------------ LASER, LASER-D


def official_laser_scores(batch, targets_of_row, scalar=0.5):
    """hf_math_verifier.compute_score (1 / -0.5 / -1) then compute_length_reward_larse's loop."""
    score_lst = []
    for i in range(len(batch)):
        box_match = 1.0 if bool(batch.correct[i]) else -0.5
        if not bool(batch.formatted[i]):  # no \boxed (or no think tags): -1 whatever the verdict
            box_match = -1.0
        score_lst.append(box_match)
    for i in range(len(score_lst)):
        if score_lst[i] == 1.0 and int(batch.lengths[i]) <= targets_of_row[i]:
            score_lst[i] += scalar
    return torch.tensor(score_lst, dtype=torch.float32)


def check_grpo_against_official(out, scores, batch):
    want = verl_grpo(scores, batch.group_ids.tolist())
    multi = ~singletons(batch)
    torch.testing.assert_close(out.rewards[:, 0], scores, rtol=0, atol=1e-7)
    torch.testing.assert_close(out.advantages[multi], want[multi], rtol=1e-5, atol=2e-5)
    # documented difference: verl's GRPO keeps a group of one's raw score, r / (1 + 1e-6); ours gives it 0
    assert not bool(out.advantages[~multi].any())
    torch.testing.assert_close(want[~multi], scores[~multi] / (1 + 1e-6))


@pytest.mark.parametrize("seed", SEEDS)
def test_laser_equals_the_official_code(seed):
    batch = random_batch(seed)
    scores = official_laser_scores(batch, [20] * len(batch))
    check_grpo_against_official(get_shaper("laser", target_length=20)(batch), scores, batch)


@pytest.mark.parametrize("seed", SEEDS)
def test_laser_d_equals_the_official_code(seed):
    batch = random_batch(seed)
    target_lengths = {"low": 35, "medium": 25, "high": 10}
    index = batch.group_ids.tolist()
    base = official_laser_scores(batch, [-1] * len(batch))  # the base score alone (no length fits under -1)
    id2acc = defaultdict(list)  # compute_length_reward_larse_d: a group's accuracy counts scores == 1.0
    for i in range(len(batch)):
        id2acc[index[i]].append(1 if float(base[i]) == 1.0 else 0)
    for idx in id2acc:
        id2acc[idx] = sum(id2acc[idx]) / len(id2acc[idx])
    targets = []
    for i in range(len(batch)):
        acc = id2acc[index[i]]
        if acc >= (2 / 3):
            targets.append(target_lengths["high"])
        elif acc < (2 / 3) and acc >= (1 / 3):
            targets.append(target_lengths["medium"])
        else:
            targets.append(target_lengths["low"])
    scores = official_laser_scores(batch, targets)
    shaper = get_shaper("laser_d")
    shaper.load_state_dict({"version": 1, "buckets": {"targets": [35, 25, 10], "refreshes": 1}})
    check_grpo_against_official(shaper(batch), scores, batch)


# ------------------------------------------------------------------------------------------------------- SAW


def official_saw(batch, mode):
    """ray_trainer.compute_advantage, branches grpo-h and gdpo-h, on ToolRL's graded correctness and format."""
    corr, fmt = batch.rewards[:, 0].float(), batch.rewards[:, 1].float()
    tl_corr, mask = token_rewards(corr.tolist(), batch.lengths)
    tl_fmt, _ = token_rewards(fmt.tolist(), batch.lengths)
    seq_scores_corr = (tl_corr * mask).sum(dim=-1)
    seq_scores_fmt = (tl_fmt * mask).sum(dim=-1)
    offset_corr = seq_scores_corr + 3.0
    mu_c, std_c = offset_corr.mean(), offset_corr.std()
    mu_f, std_f = seq_scores_fmt.mean(), seq_scores_fmt.std()
    eps = 1e-8
    cv_c = std_c / (torch.abs(mu_c) + eps)
    cv_f = std_f / (torch.abs(mu_f) + eps)
    total_cv = cv_c + cv_f + eps
    w_corr, w_fmt = (cv_c / total_cv) * 2.0, (cv_f / total_cv) * 2.0
    index = batch.group_ids.tolist()
    if mode == "grpo":
        combined = (w_corr * tl_corr) + (w_fmt * tl_fmt)
        return verl_grpo(combined.sum(-1), index), (w_corr, w_fmt)
    corr_adv = verl_grpo(tl_corr.sum(-1), index).unsqueeze(-1) * mask
    fmt_adv = verl_grpo(tl_fmt.sum(-1), index).unsqueeze(-1) * mask
    combined_adv = (w_corr * corr_adv) + (w_fmt * fmt_adv)
    return (masked_whiten(combined_adv, mask) * mask)[:, 0], (w_corr, w_fmt)


@pytest.mark.parametrize("seed", SEEDS)
def test_saw_grpo_h_equals_the_official_code_on_a_graded_column(seed):
    batch = random_batch(seed, graded=True)
    want, (w_c, w_f) = official_saw(batch, "grpo")
    out = get_shaper("saw", correctness_column=0)(batch)
    assert (out.metrics["saw/weight_0"], out.metrics["saw/weight_1"]) == pytest.approx(
        (float(w_c), float(w_f)), abs=1e-6
    )
    multi = ~singletons(batch)
    torch.testing.assert_close(out.advantages[multi], want[multi], rtol=1e-4, atol=5e-5)
    assert not bool(out.advantages[~multi].any())  # documented: the older verl GRPO keeps a group of one's score


@pytest.mark.parametrize("seed", SEEDS)
def test_saw_gdpo_h_equals_the_official_code_without_groups_of_one(seed):
    batch = random_batch(seed, graded=True)
    multi = ~singletons(batch)
    if int(multi.sum()) < 2:
        pytest.skip("too few rows outside groups of one")
    keep = multi.nonzero().squeeze(1)  # whitening mixes every row, so a group of one would move them all
    batch = RolloutBatch(group_ids=batch.group_ids[keep], correct=batch.correct[keep], lengths=batch.lengths[keep],
                         rewards=batch.rewards[keep])  # fmt: skip
    want, _ = official_saw(batch, "gdpo")
    out = get_shaper("saw", correctness_column=0, mode="gdpo")(batch)
    torch.testing.assert_close(out.advantages, want, rtol=1e-4, atol=5e-5)


# ------------------------------------------------------------------------------------------------- penalties


def official_dapo_manager(batch, max_resp_len, buffer_len, factor, coef):
    """verl's DAPO reward manager per row (score, then the overlong buffer's min(-exceed / len * factor, 0)),
    then DLER's _apply_stop_properly_penalty on the reward tensor."""
    scores = []
    for i in range(len(batch)):
        reward = 1.0 if bool(batch.correct[i]) else 0.0
        valid_response_length = batch.lengths[i]
        expected_len = max_resp_len - buffer_len
        exceed_len = valid_response_length - expected_len
        overlong_reward = min(-exceed_len / buffer_len * factor, 0)
        reward += overlong_reward
        scores.append(float(reward))
    reward_tensor, _ = token_rewards(scores, batch.lengths)
    stop_properly = (~batch.truncated).type(reward_tensor.dtype)
    scale = ((1.0 - stop_properly) * coef + stop_properly).unsqueeze(-1)
    return (reward_tensor * scale).sum(-1)


@pytest.mark.parametrize("seed", SEEDS)
def test_overlong_and_stop_properly_equal_the_official_reward_manager(seed):
    batch = random_batch(seed)
    want = official_dapo_manager(batch, 40, 16, 1.0, 0.1)
    out = get_shaper("grpo", overlong={"max_length": 40, "buffer": 16}, stop_properly=0.1)(batch)
    torch.testing.assert_close(out.rewards[:, 0], want, rtol=0, atol=1e-6)
