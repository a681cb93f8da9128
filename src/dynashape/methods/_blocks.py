"""Each group's rows as one row of a matrix, for the official codes that reduce over ``view(-1, group_size)``.

trl's GFPO keeps ``torch.topk`` of a [groups, num_generations] matrix, and verl's GRPO takes ``torch.mean`` of
each group's 1-d tensor; their ties and their float32 rounding are those of these calls. A batch whose groups
differ in size is split into one block per distinct size (a handful), so no Python loop runs over groups or
rollouts.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from dynashape.core.groups import Groups

__all__ = ["size_blocks"]


def size_blocks(groups: Groups) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Per distinct group size s: (the dense ids of the groups of that size, LongTensor [G'], and their rows,
    LongTensor [G', s], each group's rows in batch order), all on the CPU, sizes ascending."""
    index, sizes = groups.index.cpu(), groups.counts.cpu()
    order = torch.argsort(index, stable=True)  # each group's rows together, in batch order
    starts = torch.cumsum(sizes, 0) - sizes
    for size in torch.unique(sizes).tolist():
        chosen = torch.nonzero(sizes == size).squeeze(1)
        positions = starts.index_select(0, chosen).unsqueeze(1) + torch.arange(size, device=index.device)
        yield chosen, order.index_select(0, positions.reshape(-1)).view(-1, size)
