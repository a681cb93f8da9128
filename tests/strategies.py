"""Hypothesis strategies for rollout batches with unequal groups and arbitrary group ids."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from dynashape import RolloutBatch


@st.composite
def batches(draw, max_groups: int = 6, max_size: int = 6, max_len: int = 8000, with_rewards: int = 0):
    """A RolloutBatch of 1..max_groups groups of 1..max_size rollouts, ids shuffled and non-contiguous."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    labels = draw(st.lists(st.integers(-1000, 1000), min_size=len(sizes), max_size=len(sizes), unique=True))
    ids = [lab for lab, s in zip(labels, sizes) for _ in range(s)]
    n = len(ids)
    perm = draw(st.permutations(range(n)))
    ids = [ids[i] for i in perm]
    correct = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(0, max_len), min_size=n, max_size=n))
    rewards = None
    if with_rewards:
        vals = draw(
            st.lists(
                st.floats(-5, 5, allow_nan=False, width=32),
                min_size=n * with_rewards,
                max_size=n * with_rewards,
            )
        )
        rewards = torch.tensor(vals, dtype=torch.float64).reshape(n, with_rewards)
    return RolloutBatch(
        group_ids=torch.tensor(ids),
        correct=torch.tensor(correct),
        lengths=torch.tensor(lengths),
        rewards=rewards,
    )


def permuted(batch: RolloutBatch, perm: list[int]) -> RolloutBatch:
    """The same rollouts in the order `perm` (fields without rollout rows are not carried)."""
    p = torch.tensor(perm)
    return RolloutBatch(
        group_ids=batch.group_ids[p],
        correct=batch.correct[p],
        lengths=batch.lengths[p],
        rewards=None if batch.rewards is None else batch.rewards[p],
    )
