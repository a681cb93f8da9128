"""A KV cache that writes each new token's keys and values in place, into buffers sized once for the whole rollout.

transformers' ``DynamicCache`` grows every layer's keys and values with ``torch.cat`` at every decoding step: a
copy of the whole cache per token, per layer, so decoding T tokens moves O(T^2) bytes and allocates a fresh
tensor each time. Here each layer's buffers hold ``capacity`` positions from the prefill on; a step writes one
column and hands attention a view of the filled part. The values are the same tensors ``DynamicCache`` would
hold (the same numbers in the same order), so the attention, hence the sampled tokens, do not change.

Built on transformers' cache layers (``DynamicCache(config=...)`` of ``DynamicLayer``s); ``inplace_cache`` returns
None where that is not what the model would use (an older transformers, sliding-window or other special layers),
and the sampler then lets the model make its own cache.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["inplace_cache"]


def inplace_cache(config: Any, capacity: int) -> Any | None:
    """A ``DynamicCache`` for a model of ``config`` whose layers preallocate ``capacity`` positions (prompt + new
    tokens); None when the model's own cache would not be plain ``DynamicLayer``s. Rows are kept or dropped with
    ``reorder_cache(index)``."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        reference = DynamicCache(config=config)
    except (ImportError, TypeError, ValueError, AttributeError):
        return None
    if not reference.layers or any(type(layer) is not DynamicLayer for layer in reference.layers):
        return None

    class InPlaceLayer(DynamicLayer):
        """A ``DynamicLayer`` over preallocated [B, H, capacity, D] buffers; ``keys`` / ``values`` are views of
        the filled positions."""

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            b, h, _, d = key_states.shape
            self._k = key_states.new_empty((b, h, capacity, d))
            self._v = value_states.new_empty((b, h, capacity, value_states.shape[-1]))
            self._filled = 0

        def _views(self) -> None:
            self.keys, self.values = self._k[:, :, : self._filled], self._v[:, :, : self._filled]

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._filled + key_states.shape[-2]
            if end > self._k.shape[-2]:  # past the planned capacity: grow (never on the sampler's path)
                grow = end - self._k.shape[-2]
                self._k = torch.cat([self._k, self._k.new_empty((*self._k.shape[:2], grow, self._k.shape[-1]))], 2)
                self._v = torch.cat([self._v, self._v.new_empty((*self._v.shape[:2], grow, self._v.shape[-1]))], 2)
            self._k[:, :, self._filled : end] = key_states
            self._v[:, :, self._filled : end] = value_states
            self._filled = end
            self._views()
            return self.keys, self.values

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            if self.is_initialized:
                self._k = self._k.index_select(0, beam_idx.to(self._k.device))
                self._v = self._v.index_select(0, beam_idx.to(self._v.device))
                self._views()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self.reorder_cache(indices)

    reference.layers = [InPlaceLayer() for _ in reference.layers]
    return reference
