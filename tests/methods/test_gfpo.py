"""GFPO: the keep mask and advantages by hand, ties, adaptive k across steps, and properties."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.core.groups import Groups
from dynashape.methods.gfpo import AdaptiveKeep, GfpoConfig, gfpo_advantages, gfpo_keep_mask
from strategies import batches

IDS = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1])
REWARDS = torch.tensor([1.0, 1, 0, 1, 0, 1, 1, 0, 0])
LENGTHS = torch.tensor([300, 100, 50, 200, 400, 100, 500, 10, 20])


def test_shortest_k_hand_worked():
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=3, by="length")
    # g0 keeps the 3 shortest: rows 2 (50), 1 (100), 5 (100); rewards 0, 1, 1: mean 2/3, Bessel var 1/3,
    # std .577350 -> -2/3 / (.577350 + 1e-4) = -1.154501, 1/3 / .577450 = .577250.
    # g1 has 3 rows: all kept; rewards 1, 0, 0 -> 1.154501, -.577250, -.577250.
    assert out.keep.tolist() == [False, True, True, False, False, True, True, True, True]
    expected = torch.tensor([0, 0.577250, -1.154501, 0, 0, 0.577250, 1.154501, -0.577250, -0.577250])
    torch.testing.assert_close(out.advantages, expected.double(), atol=2e-6, rtol=0)
    assert out.keep_per_group.tolist() == [3, 3]
    assert out.metrics == {"gfpo/kept_fraction": pytest.approx(6 / 9)}


def test_ties_are_broken_as_torch_topk_breaks_them():
    # k = 2 in g0: row 2 (50), then rows 1 and 5 tie at 100: topk over -length returns [2, 1] (torch 2.13, CPU)
    mask = gfpo_keep_mask(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=2)
    assert mask.tolist() == [False, True, True, False, False, False, False, True, True]


def test_four_equal_lengths_keep_what_topk_keeps():
    # trl: torch.topk(scores [1, 4] all -100, 2, dim=-1) -> indices [2, 3] on torch 2.13's CPU (nth_element), not
    # the first two rows. The same group second in the batch, its rows interleaved with another's, keeps the
    # same positions within the group.
    assert torch.topk(torch.full((1, 4), -100), 2, dim=-1).indices.tolist() == [[2, 3]]
    one = gfpo_keep_mask(
        torch.ones(4), torch.full((4,), 100), Groups.from_ids(torch.zeros(4, dtype=torch.long)), keep=2
    )
    assert one.tolist() == [False, False, True, True]
    ids = torch.tensor([7, 3, 7, 3, 7, 3, 7, 3])
    lengths = torch.tensor([100, 5, 100, 6, 100, 7, 100, 8])
    mixed = gfpo_keep_mask(torch.ones(8), lengths, Groups.from_ids(ids), keep=2)
    assert mixed.tolist() == [False, True, False, True, True, False, True, False]


def test_reward_per_token_ties_at_zero_go_as_topk():
    # 2 correct of 8; the 6 wrong answers all score 0 / |y| = 0. k = 4 keeps the 2 correct (1/400, 1/800), then
    # 2 of the 6 zeros: torch.topk returns indices [0, 3, 6, 4], so rows 6 and 4 (not rows 1 and 2).
    r = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0])
    lengths = torch.tensor([400, 100, 200, 800, 300, 50, 600, 700])
    scores = torch.tensor([[1 / 400, 0, 0, 1 / 800, 0, 0, 0, 0]])
    assert torch.topk(scores, 4, dim=-1).indices.tolist() == [[0, 3, 6, 4]]
    out = gfpo_advantages(r, lengths, Groups.from_ids(torch.zeros(8, dtype=torch.long)), keep=4, by="reward_per_token")
    assert out.keep.tolist() == [True, False, False, True, True, False, True, False]
    # kept rewards 1, 1, 0, 0: mean .5, Bessel std sqrt(1/3) = .577350 -> +-.5 / .577450 = +-.865875
    expected = torch.tensor([0.865875, 0, 0, 0.865875, -0.865875, 0, -0.865875, 0])
    torch.testing.assert_close(out.advantages, expected.double(), atol=2e-6, rtol=0)


def test_kept_set_does_not_depend_on_the_device_of_the_batch():
    # 12 rows tie at 100 for 8 places; topk always runs on a CPU copy of the scores (its tie order differs on
    # CUDA), so a batch on any available device keeps what CPU topk keeps.
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    ids = torch.zeros(16, dtype=torch.long)
    lengths = torch.tensor([100] * 12 + [200] * 4)
    want = torch.zeros(16, dtype=torch.bool).index_fill(0, torch.topk(-lengths, 8).indices, True)
    assert want[:12].sum() == 8 and want[:8].sum() < 8  # the tie is broken, and not by batch order
    for device in devices:
        got = gfpo_keep_mask(torch.ones(16, device=device), lengths.to(device), Groups.from_ids(ids.to(device)), keep=8)
        assert got.device.type == device
        assert got.cpu().tolist() == want.tolist()


def test_reward_per_token_hand_worked():
    # g0 r / |y|: 1/300, 1/100, 0, 1/200, 0, 1/100 -> the best two are rows 1 and 5 (both reward 1: advantage 0)
    # g1: 1/500, 0, 0 -> row 6, then row 7 (tie with 8 at 0: the earlier wins)
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=2, by="reward_per_token")
    assert out.keep.tolist() == [False, True, False, False, False, True, True, True, False]
    # g1 kept rewards 1, 0: mean .5, std sqrt(.5) = .707107 -> +-.5 / .707207 = +-.707007
    expected = torch.tensor([0, 0, 0, 0, 0, 0, 0.707007, -0.707007, 0])
    torch.testing.assert_close(out.advantages, expected.double(), atol=2e-6, rtol=0)


def test_per_group_k_and_single_kept_row():
    # Groups are numbered by sorted id: g0 keeps 1 (advantage 0, a set of one), g1 keeps 5 > size 3 (all)
    out = gfpo_advantages(REWARDS, LENGTHS, Groups.from_ids(IDS), keep=torch.tensor([1, 5]))
    assert out.keep.tolist() == [False, False, True, False, False, False, True, True, True]
    assert out.advantages[:6].abs().max() == 0


def test_zero_length_rows_are_not_divided_by_zero():
    out = gfpo_advantages(
        torch.tensor([1.0, 1.0]),
        torch.tensor([0, 5]),
        Groups.from_ids(torch.tensor([0, 0])),
        keep=1,
        by="reward_per_token",
    )
    assert out.keep.tolist() == [True, False]  # 1 / max(0, 1) = 1 beats 1 / 5


def test_validation():
    g = Groups.from_ids(IDS)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(REWARDS, LENGTHS, g, keep=0)
    with pytest.raises(ValueError, match="keep"):
        gfpo_keep_mask(REWARDS, LENGTHS, g, keep=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="by"):
        GfpoConfig(by="random")
    with pytest.raises(ValueError, match="adaptive_keep"):
        GfpoConfig(adaptive_keep=(4, 6, 8))
    with pytest.raises(ValueError, match=r"rewards\[0\]"):
        gfpo_keep_mask(torch.tensor([float("nan")] * 9), LENGTHS, g, keep=2)
    with pytest.raises(ValueError, match="adaptive_keep"):
        AdaptiveKeep(GfpoConfig())


def test_adaptive_keep_quartiles_hand_worked():
    part = AdaptiveKeep(GfpoConfig(adaptive_keep=(4, 6, 8, 8)))
    # 4 groups with mean rewards 0, 1/2, 3/4, 1 (ids 0..3, two rows each)
    ids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    r = torch.tensor([0.0, 0, 0, 1, 0.5, 1, 1, 1])
    k = part.keep_for(r, Groups.from_ids(ids))
    # history 0, .5, .75, 1: quantiles (linear) q25 = .375, q50 = .625, q75 = .8125
    # 0 <= q25 -> hardest (8); .5 in (q25, q50] -> 8; .75 in (q50, q75] -> 6; 1 > q75 -> easiest (4)
    assert k.tolist() == [8, 8, 6, 4]
    assert part.state_dict() == {"history": [0.0, 0.5, 0.75, 1.0]}


def test_adaptive_keep_restored_equals_uninterrupted():
    cfg = GfpoConfig(adaptive_keep=(4, 6, 8, 8), history=6)
    steps = [
        (torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 0, 1, 1])),
        (torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0.0, 0, 1, 0, 1, 1])),
        (torch.tensor([5, 5, 6, 6]), torch.tensor([0.0, 1, 1, 1])),
    ]
    straight = AdaptiveKeep(cfg)
    want = [straight.keep_for(r, Groups.from_ids(i)) for i, r in steps]
    first = AdaptiveKeep(cfg)
    got = [first.keep_for(steps[0][1], Groups.from_ids(steps[0][0]))]
    resumed = AdaptiveKeep(cfg)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.keep_for(r, Groups.from_ids(i)) for i, r in steps[1:]]
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert len(resumed.history_) == 6  # 2 + 3 + 2 = 7 means, the window keeps the last 6
    assert resumed.state_dict() == straight.state_dict()
    with pytest.raises(ValueError, match="more than history"):
        resumed.load_state_dict({"history": [0.0] * 7})


@given(batches(max_len=3000, with_rewards=1), st.integers(1, 7), st.sampled_from(["length", "reward_per_token"]))
def test_properties(batch, k, by):
    g = Groups.from_ids(batch.group_ids)
    r = batch.rewards[:, 0]
    out = gfpo_advantages(r, batch.lengths, g, keep=k, by=by)
    kept_per_group = g.sum(out.keep.long())
    assert torch.equal(kept_per_group, g.counts.clamp_max(k))  # keep count = min(k, group size)
    assert torch.equal(out.advantages[~out.keep], torch.zeros(int((~out.keep).sum()), dtype=torch.float64))
    kept_mean = g.sum(torch.where(out.keep, out.advantages, 0.0)) / kept_per_group.double()
    assert bool((kept_mean.abs() < 1e-6).all())  # zero mean over each group's kept rows


@given(batches(max_len=3000, with_rewards=1), st.integers(1, 5), st.randoms(use_true_random=False))
def test_permutation_equivariance(batch, k, rnd):
    n = batch.lengths.shape[0]
    # distinct lengths: which of tied rows topk keeps depends on their positions, which a permutation changes
    lengths = torch.randperm(n, generator=torch.Generator().manual_seed(rnd.randint(0, 2**31))) * 7
    perm = list(range(n))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    r = batch.rewards[:, 0]
    base = gfpo_advantages(r, lengths, Groups.from_ids(batch.group_ids), keep=k)
    moved = gfpo_advantages(r[p], lengths[p], Groups.from_ids(batch.group_ids[p]), keep=k)
    assert torch.equal(moved.keep, base.keep[p])
    torch.testing.assert_close(moved.advantages, base.advantages[p], atol=1e-12, rtol=0)


def _trl_gfpo(rewards: torch.Tensor, lengths: list[int], num_generations: int, k: int, by: str):
    """trl's GFPO step (huggingface/trl@b6ff4a78, gfpo_trainer.py, `_generate_and_score_completions`) in its own
    control flow and dtypes: float32 rewards, a Python filter over [groups][generations] (the paper's two
    filters, each group given its own rows), torch.tensor, topk over dim -1, row offsets, Bessel std + 1e-4."""
    group_rewards = rewards.view(-1, num_generations).tolist()
    group_lengths = [lengths[i : i + num_generations] for i in range(0, len(lengths), num_generations)]
    scores = []
    for lens, rs in zip(group_lengths, group_rewards):
        if by == "length":
            scores.append([-n for n in lens])
        else:
            scores.append([r / max(n, 1) for r, n in zip(rs, lens)])
    _, local = torch.topk(torch.tensor(scores), k, dim=-1)
    offsets = torch.arange(0, len(lengths), num_generations).unsqueeze(1)
    kept = (offsets + local).flatten()
    kept_rewards = rewards[kept]
    mean = kept_rewards.view(-1, k).mean(dim=1).repeat_interleave(k, dim=0)
    std = kept_rewards.view(-1, k).std(dim=1).repeat_interleave(k, dim=0)
    return kept, (kept_rewards - mean) / (std + 1e-4)


@given(
    st.integers(1, 4),
    st.sampled_from([(4, 2), (8, 4), (16, 8), (16, 4)]),
    st.sampled_from(["length", "reward_per_token"]),
    st.randoms(use_true_random=False),
)
def test_equals_trl_in_its_own_control_flow(num_groups, shape, by, rnd):
    """Heavy ties (three lengths, 0/1 rewards): the kept rows and advantages are trl's; shuffling the batch's
    rows across groups (keeping each group's order) and renaming the groups changes nothing."""
    g, k = shape
    n = num_groups * g
    lengths = [rnd.choice([100, 200, 300]) for _ in range(n)]
    rewards = torch.tensor([float(rnd.random() < 0.4) for _ in range(n)])
    kept, adv = _trl_gfpo(rewards, lengths, g, k, by)
    want_keep = torch.zeros(n, dtype=torch.bool).index_fill(0, kept, True)
    want_adv = torch.zeros(n, dtype=torch.float64).index_copy(0, kept, adv.double())
    ids = torch.arange(n) // g
    out = gfpo_advantages(rewards, torch.tensor(lengths), Groups.from_ids(ids), keep=k, by=by)
    assert out.keep.tolist() == want_keep.tolist()
    torch.testing.assert_close(out.advantages, want_adv, atol=1e-5, rtol=1e-5)
    # interleave the groups, each keeping its own row order, and rename them
    labels = [j for j in range(num_groups) for _ in range(g)]
    rnd.shuffle(labels)
    seen = [0] * num_groups
    src = []
    for j in labels:
        src.append(j * g + seen[j])
        seen[j] += 1
    src = torch.tensor(src)
    renamed = 1000 - 7 * ids[src]
    moved = gfpo_advantages(rewards[src], torch.tensor(lengths)[src], Groups.from_ids(renamed), keep=k, by=by)
    assert moved.keep.tolist() == want_keep[src].tolist()
    torch.testing.assert_close(moved.advantages, want_adv[src], atol=1e-5, rtol=1e-5)
