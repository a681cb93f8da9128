"""The vectorised field functions against slow, obviously correct loops over groups (written here from each
method's definition), on random batches with unequal groups and shuffled ids.

These check the vectorisation of our own conventions. Fidelity to the official code (its control flow, epsilons
and dtypes; groups of one, truncated rows, unformatted answers, graded scores) is checked for DLER, LASER,
LASER-D, SAW and the engines' penalties in test_official_loops.py."""

import math
from collections import defaultdict

import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.core.groups import Groups
from dynashape.methods import (
    AdlpConfig,
    AdlpController,
    alp_reward,
    choose_bucket_targets,
    dler_advantages,
    gfpo_advantages,
    laser_d_reward,
    monitor_coverage,
    saw_advantages,
)
from strategies import batches


def _by_group(ids):
    rows = defaultdict(list)
    for i, g in enumerate(ids.tolist()):
        rows[g].append(i)
    return rows


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs):  # Bessel; 0 for fewer than two values
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _grpo(values, rows, eps):
    out = [0.0] * len(values)
    for idx in rows.values():
        xs = [values[i] for i in idx]
        if len(xs) < 2:
            continue
        m, s = _mean(xs), _std(xs)
        for i in idx:
            out[i] = (values[i] - m) / (s + eps)
    return out


def _whiten(values, weights=None, eps=1e-8):
    w = [1.0] * len(values) if weights is None else [float(x) for x in weights]
    total = sum(w)
    mu = sum(a * b for a, b in zip(w, values)) / total
    var = sum(a * (v - mu) ** 2 for a, v in zip(w, values)) / (total - 1) if total > 1 else 0.0
    return [0.0 if a == 0 else (v - mu) / math.sqrt(var + eps) for a, v in zip(w, values)]


@given(batches(max_len=3000, with_rewards=1), st.integers(1, 6), st.sampled_from(["length", "reward_per_token"]))
def test_gfpo_equals_loop(batch, k, by):
    r = batch.rewards[:, 0].tolist()
    lengths = batch.lengths.tolist()
    rows = _by_group(batch.group_ids)
    keep = [False] * len(r)
    adv = [0.0] * len(r)
    for idx in rows.values():
        # trl's GFPO: torch.topk over the filter's scores (-length, or float32 r / |y|), ties as topk breaks them
        if by == "length":
            scores = torch.tensor([-int(lengths[i]) for i in idx])
        else:
            scores = torch.tensor([float(torch.tensor(r[i], dtype=torch.float32)) / max(lengths[i], 1) for i in idx])
        chosen = [idx[j] for j in torch.topk(scores, min(k, len(idx))).indices.tolist()]
        for i in chosen:
            keep[i] = True
        xs = [r[i] for i in chosen]
        if len(xs) > 1:
            m, s = _mean(xs), _std(xs)
            for i in chosen:
                adv[i] = (r[i] - m) / (s + 1e-4)
    out = gfpo_advantages(batch.rewards[:, 0], batch.lengths, Groups.from_ids(batch.group_ids), keep=k, by=by)
    assert out.keep.tolist() == keep
    torch.testing.assert_close(out.advantages, torch.tensor(adv, dtype=torch.float64), atol=1e-9, rtol=1e-9)


@given(batches(max_len=3000, with_rewards=1))
def test_dler_equals_loop(batch):
    r = batch.rewards[:, 0].tolist()
    centred = list(r)
    for idx in _by_group(batch.group_ids).values():
        if len(idx) > 1:
            m = _mean([r[i] for i in idx])
            for i in idx:
                centred[i] = r[i] - m
    g = Groups.from_ids(batch.group_ids)
    torch.testing.assert_close(
        dler_advantages(batch.rewards[:, 0], g),
        torch.tensor(_whiten(centred), dtype=torch.float64),
        atol=1e-7,
        rtol=1e-7,
    )
    if sum(batch.lengths.tolist()) > 1:
        want = _whiten(centred, batch.lengths.tolist())
        got = dler_advantages(batch.rewards[:, 0], g, batch.lengths)
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), atol=1e-7, rtol=1e-7)


@given(batches(max_len=3000, with_rewards=2), st.sampled_from(["grpo", "gdpo"]))
def test_saw_equals_loop(batch, mode):
    r = batch.rewards.tolist()
    n = len(r)
    cv = []
    for k in range(2):
        col = [row[k] + (3.0 if k == 0 else 0.0) for row in r]
        cv.append(_std(col) / (abs(_mean(col)) + 1e-8))
    w = [2 * c / (sum(cv) + 1e-8) for c in cv]
    rows = _by_group(batch.group_ids)
    if mode == "grpo":
        want = _grpo([w[0] * row[0] + w[1] * row[1] for row in r], rows, 1e-6)
    else:
        a0 = _grpo([row[0] for row in r], rows, 1e-6)
        a1 = _grpo([row[1] for row in r], rows, 1e-6)
        want = _whiten([w[0] * a0[i] + w[1] * a1[i] for i in range(n)])
    out = saw_advantages(batch.rewards, Groups.from_ids(batch.group_ids), mode=mode)
    torch.testing.assert_close(out.advantages, torch.tensor(want, dtype=torch.float64), atol=1e-6, rtol=1e-6)


@given(batches(max_len=8000))
def test_alp_and_laser_d_equal_loop(batch):
    c = [float(x) for x in batch.correct.tolist()]
    lengths = batch.lengths.tolist()
    g = Groups.from_ids(batch.group_ids)
    alp, laser = [0.0] * len(c), [0.0] * len(c)
    targets = (3000, 5000, 1000)
    for idx in _by_group(batch.group_ids).values():
        p = _mean([c[i] for i in idx])
        bucket = 2 if p >= 2 / 3 else (1 if p >= 1 / 3 else 0)
        for i in idx:
            alp[i] = c[i] - 1e-5 * lengths[i] * max(p, 1 / len(idx))
            laser[i] = c[i] + 0.5 * (c[i] == 1 and lengths[i] <= targets[bucket])
    torch.testing.assert_close(alp_reward(batch.correct, batch.lengths, g, beta=1e-5), torch.tensor(alp).double())
    assert laser_d_reward(batch.correct, batch.lengths, g, targets=targets).tolist() == laser


@given(batches(max_len=8000), st.data())
def test_laser_d_official_score_equals_loop(batch, data):
    """The official base score (1 / -0.5 / -1): buckets and bonus count only the responses scoring 1."""
    n = len(batch)
    formatted = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    c, f, lengths = batch.correct.tolist(), formatted.tolist(), batch.lengths.tolist()
    score = [(1.0 if c[i] else -0.5) if f[i] else -1.0 for i in range(n)]
    want = list(score)
    targets = (3000, 5000, 1000)
    for idx in _by_group(batch.group_ids).values():
        p = _mean([float(score[i] == 1.0) for i in idx])
        bucket = 2 if p >= 2 / 3 else (1 if p >= 1 / 3 else 0)
        for i in idx:
            want[i] += 0.5 * (score[i] == 1.0 and lengths[i] <= targets[bucket])
    g = Groups.from_ids(batch.group_ids)
    assert laser_d_reward(batch.correct, batch.lengths, g, targets=targets, formatted=formatted).tolist() == want


@given(batches(max_len=9000), st.integers(1, 3))
def test_monitor_and_choice_equal_loop(batch, expected):
    grid = (1000, 2000, 4000, 8000)
    c, lengths = batch.correct.tolist(), batch.lengths.tolist()
    band_lengths = {0: [], 1: [], 2: []}
    for idx in _by_group(batch.group_ids).values():
        p = _mean([float(c[i]) for i in idx])
        band = 0 if p <= 1 / 3 else (1 if p <= 2 / 3 else 2)
        band_lengths[band] += [lengths[i] for i in idx]
    cov = [
        [sum(x <= t for x in band_lengths[b]) / len(band_lengths[b]) if band_lengths[b] else 0.0 for t in grid]
        for b in range(3)
    ]
    got = monitor_coverage(batch.correct, batch.lengths, Groups.from_ids(batch.group_ids), grid)
    assert got.tolist() == cov
    sizes = (1, int(8 * 1 / 3), int(8 * 2 / 3))
    want = tuple(
        next((t for t, ratio in zip(grid, cov[b]) if int(ratio * sizes[b]) >= expected), None) for b in range(3)
    )
    assert choose_bucket_targets(got, grid, expected_n_correct=expected) == want


@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=6), min_size=2, max_size=10), st.data())
def test_adlp_resumed_equals_uninterrupted(batches_, data):
    cfg = AdlpConfig(lambda0=1e-3, eta=0.05, acc_ref=0.5)
    cut = data.draw(st.integers(1, len(batches_) - 1))
    inputs = [(torch.tensor(b), torch.arange(len(b)) * 10) for b in batches_]
    straight = AdlpController(cfg)
    want = [straight.step(*x).rewards for x in inputs]
    first = AdlpController(cfg)
    got = [first.step(*x).rewards for x in inputs[:cut]]
    second = AdlpController(cfg)
    second.load_state_dict(first.state_dict())
    got += [second.step(*x).rewards for x in inputs[cut:]]
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert second.state_dict() == straight.state_dict()
