"""A module's parameters read whole outside its own forward, whatever shards them (FSDP1, FSDP2, ZeRO-3).

The MEDS fingerprint capture (:mod:`dynashape.meds.capture`) reads the final norm's and the head's parameters.
Inside their own forward every sharding engine has them gathered; outside it (a fused head kernel that never
calls the head module) they must be gathered here, or the read refused when that cannot be done exactly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import Tensor, nn

try:  # torch builds without distributed support have no DTensor (and then no FSDP2 shards either)
    from torch.distributed.tensor import DTensor as _DTensor
except ImportError:  # pragma: no cover
    _DTensor = None  # type: ignore[assignment,misc]

__all__ = ["is_shard", "materialised", "whole_head"]


def is_shard(param: Tensor) -> bool:
    """A parameter that holds only this rank's part outside its module's forward (FSDP2 DTensor, ZeRO-3).

    ZeRO-3 parameters (``ds_id``) count as shards even when they look whole: outside the module's own forward
    they may be in flight (prefetched into a buffer that is not filled yet).
    """
    return hasattr(param, "ds_id") or (_DTensor is not None and isinstance(param, _DTensor))


@contextlib.contextmanager
def whole_head(head: nn.Module, shape: tuple[int, ...] | None) -> Iterator[tuple[Tensor, Tensor | None] | None]:
    """The head's (weight, bias) as whole tensors for a read outside its forward; None when impossible.

    For a head that the forward never called (TRL's fused LM head and verl's fused kernels read ``head.weight``
    directly, gathering it themselves): DeepSpeed ZeRO-3 parameters are gathered with DeepSpeed's own
    ``GatheredParameters``, FSDP2 DTensors with ``full_tensor()``. Both are collectives: every rank reads its
    capture's ``result()`` once per forward, as the adapters do, so the ranks call them in step.
    """
    weight = head.weight
    bias = getattr(head, "bias", None)
    bias = bias if isinstance(bias, Tensor) else None
    params = [t for t in (weight, bias) if t is not None]
    partitioned = [p for p in params if hasattr(p, "ds_id") and getattr(p.ds_status, "name", "") != "AVAILABLE"]
    if partitioned:
        import deepspeed

        with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
            yield weight, bias
    elif _DTensor is not None and any(isinstance(p, _DTensor) for p in params):

        def whole(t: Tensor | None) -> Tensor | None:
            return t.full_tensor() if _DTensor is not None and isinstance(t, _DTensor) else t

        yield whole(weight), whole(bias)  # type: ignore[misc]
    elif materialised(head, shape):
        yield weight, bias
    else:
        yield None


def materialised(module: nn.Module, shape: tuple[int, ...] | None) -> bool:
    """True when the module's own parameters are whole plain tensors now; ``shape``: the weight's full shape.

    Without ``shape`` every parameter must be non-empty (FSDP1 leaves empty or flat views outside a forward).
    """
    params = list(module.parameters(recurse=False))
    if any(is_shard(p) for p in params):
        return False
    if shape is not None:
        weight = getattr(module, "weight", None)
        return isinstance(weight, Tensor) and tuple(weight.shape) == shape
    return all(p.numel() > 0 for p in params)
