"""MEDS answer fingerprint: layer-wise logits of the first answer token (spec meds.md section 1).

For rollout i with answer position p_i (the ``{`` of its last ``\\boxed{``) and target y*_i (the token sampled
at p_i + 1), the fingerprint over decoder layers n = 1..N is

    f_n = <h_n[p], W_U[y*]> + b[y*]        (b only if the head has a bias)

``norm="raw"`` (official): h_n is the raw residual stream after layer n for n < N and the final-normed
state for n = N, exactly ``hidden_states[1:]`` of a Hugging Face forward. ``norm="final"``: the final norm
applied to every layer (a logit lens). The feature keeps the last ``layers`` values, after consecutive
differences over all N layers when ``diff=True`` (``np.diff`` semantics).

How: :class:`FingerprintCapture` puts forward hooks on the last few decoder layers of a forward you already
run (verl's / TRL's old-log-prob forward). Each hook gathers h_n at the N answer positions ([N, H]) and dots
it with the N head rows W_U[y*] ([N, H]): O(N * H) per layer, no ``output_hidden_states`` (which keeps
N + 1 full [B, T, H] tensors alive), no full-vocabulary logits per layer. The final norm and the head are
read only inside the forward, where FSDP has their parameters unsharded. :func:`fingerprint` runs a backbone
forward itself.

Typical use (padded batch, response-relative positions from :mod:`dynashape.meds.positions`)::

    p = answer_positions(responses, tokenizer, response_mask=response_mask)
    y = answer_targets(responses, p)
    index = padded_token_index(p, attention_mask, response_mask.sum(-1))
    with FingerprintCapture(model, index.positions, y, rows=index.rows, layers=14) as cap:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # log-probs as usual
    features = cap.result()  # [N, 14] float32, NaN rows where p == -1
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from dynashape.meds.model_parts import ModelParts, find_model_parts

__all__ = ["FingerprintCapture", "fingerprint"]

Norm = Literal["raw", "final"]
_NORMS = ("raw", "final")


def _check_index(name: str, value: Tensor, n: int | None) -> Tensor:
    if not isinstance(value, Tensor) or value.dim() != 1 or value.dtype.is_floating_point:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"{name}: expected an integer tensor of shape [N], got {shape}")
    if n is not None and value.shape[0] != n:
        raise ValueError(f"{name}: expected {n} entries (one per rollout), got {value.shape[0]}")
    return value.long()


class FingerprintCapture:
    """Context manager that reads the MEDS fingerprint from a forward you run inside it.

    Shapes (N rollouts; the forward's input is [R, S] with hidden states [R, S, H]):

    - padded batch: ``rows`` None (rollout i is row i, so R == N) or ``arange(N)``; ``positions`` [N]
      index the sequence axis of each row;
    - packed (verl remove-padding, input [1, total]): ``rows`` = zeros [N], ``positions`` [N] flat indices.

    Build both with :func:`dynashape.meds.positions.padded_token_index` / ``packed_token_index``.

    The hooks record the first forward through each layer after ``__enter__``, so one capture covers one
    forward (a micro-batch; TRL's chunked log-prob loop needs one capture per chunk); later passes through a
    layer, such as activation-checkpointing recomputation in backward, are ignored. Sequence parallelism
    (verl's Ulysses) splits the sequence axis across ranks and is not handled: positions index the full row.
    Values are computed under ``no_grad`` from detached tensors: the capture works with grad enabled and
    never adds to the autograd graph. Hooks are removed on exit, also when the forward raises.

    Args:
        model: A causal LM (Qwen2/Llama/GPT-2 style, see :func:`find_model_parts`).
        positions: LongTensor [N], index of p along the sequence axis of the input; -1 = no answer (NaN row).
        targets: LongTensor [N], y* token ids; ignored where ``positions`` is -1.
        rows: LongTensor [N] of input rows, or None for ``arange(N)``.
        layers: Number of values kept, the last ones (official 14); None keeps all (N, or N - 1 with diff).
        diff: Take consecutive differences over all N layers first, then keep the last ``layers``.
        norm: ``"raw"`` (official, HF ``hidden_states[1:]``) or ``"final"`` (final norm on every layer).
        parts: The model's parts, when :func:`find_model_parts` does not know the architecture.
    """

    def __init__(
        self,
        model: nn.Module,
        positions: Tensor,
        targets: Tensor,
        *,
        rows: Tensor | None = None,
        layers: int | None = 14,
        diff: bool = False,
        norm: Norm = "raw",
        parts: ModelParts | None = None,
    ) -> None:
        if norm not in _NORMS:
            raise ValueError(f"norm: must be one of {_NORMS}, got {norm!r}")
        if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
            raise ValueError(f"layers: must be a positive int or None, got {layers!r}")
        self._parts = parts if parts is not None else find_model_parts(model)
        total = self._parts.num_layers
        available = total - 1 if diff else total
        self.width = available if layers is None else layers
        if self.width > available or available < 1:
            raise ValueError(
                f"layers: {layers} values need {self.width + int(diff)} decoder layers"
                f"{' (diff=True)' if diff else ''}, but {type(model).__name__} has {total}"
            )
        positions = _check_index("positions", positions, None)
        n = positions.shape[0]
        targets = _check_index("targets", targets, n)
        rows = _check_index("rows", rows, n) if rows is not None else None
        # The host syncs of validation happen here, outside the forward, so the hooks themselves never sync.
        present = positions >= 0
        if bool((positions < -1).any()):
            raise ValueError(f"positions: must be >= -1, got {int(positions.min())}")
        vocab = self._parts.vocab_size
        bad_targets = present & ((targets < 0) | (targets >= vocab))
        if bool(bad_targets.any()):
            i = int(bad_targets.nonzero()[0, 0])
            raise ValueError(f"targets: entry {i} is {int(targets[i])}, outside the vocabulary [0, {vocab})")
        if rows is not None and bool((rows < 0).any()):
            raise ValueError(f"rows: must be >= 0, got {int(rows.min())}")
        self._max_position = int(positions.max()) if n else -1
        self._max_row = int(rows.max()) if rows is not None and n else -1
        self._n = n
        self._present = present
        self._positions = positions.clamp(min=0)  # absent rows read position 0 and are NaN-ed in result()
        self._targets = torch.where(present, targets, 0)
        self._rows = rows
        self.diff = diff
        self.norm: Norm = norm
        self._model_name = type(model).__name__
        # Hook the last width (+1 for diff) layers; the differences need one more value than they return.
        self._first_hooked = total - self.width - int(diff)
        self._values: list[Tensor | None] = [None] * (total - self._first_hooked)
        self._head_rows: Tensor | None = None
        self._head_bias: Tensor | None = None
        self._handles: list[RemovableHandle] = []

    # -- context manager -------------------------------------------------------------------------------------

    def __enter__(self) -> FingerprintCapture:
        if self._handles:
            raise RuntimeError("FingerprintCapture: already entered; a capture covers one forward")
        self._values = [None] * len(self._values)
        self._head_rows = self._head_bias = None
        last = self._parts.num_layers - 1
        for slot, index in enumerate(range(self._first_hooked, last + 1)):
            apply_norm = self.norm == "final" or index == last
            hook = self._make_hook(slot, apply_norm)
            self._handles.append(self._parts.layers[index].register_forward_hook(hook))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- hooks -----------------------------------------------------------------------------------------------

    def _make_hook(self, slot: int, apply_norm: bool) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self._values[slot] is not None:  # checkpoint recomputation or a second forward: keep the first
                return
            hidden = output[0] if isinstance(output, (tuple, list)) else output
            with torch.no_grad():
                picked = self._gather(hidden.detach())
                if apply_norm:
                    # .forward skips the norm's own hooks (HF output capture, profilers): a read, not a call.
                    picked = self._parts.final_norm.forward(picked)
                self._values[slot] = self._dot(picked)

        return hook

    def _gather(self, hidden: Tensor) -> Tensor:
        """h[rows, positions] -> [N, H] from a layer output [R, S, H] (or [S, H] for one packed row)."""
        if hidden.dim() == 2:
            hidden = hidden.unsqueeze(0)
        if hidden.dim() != 3:
            raise ValueError(f"hidden states: expected [R, S, H] from the decoder layers, got {tuple(hidden.shape)}")
        num_rows, seq_len, _ = hidden.shape
        if self._rows is None and num_rows != self._n:
            raise ValueError(
                f"rows: None means one input row per rollout, but the forward has {num_rows} rows for "
                f"{self._n} positions; pass rows= (zeros for a packed row)"
            )
        if self._max_row >= num_rows:
            raise ValueError(f"rows: index {self._max_row} is out of range for a forward with {num_rows} rows")
        if self._max_position >= seq_len:
            raise ValueError(f"positions: index {self._max_position} is out of range for sequence length {seq_len}")
        device = hidden.device
        if self._positions.device != device:
            self._positions = self._positions.to(device, non_blocking=True)
            self._targets = self._targets.to(device, non_blocking=True)
            self._present = self._present.to(device, non_blocking=True)
        if self._rows is None:
            self._rows = torch.arange(self._n, device=device)
        elif self._rows.device != device:
            self._rows = self._rows.to(device, non_blocking=True)
        return hidden[self._rows, self._positions]

    def _dot(self, picked: Tensor) -> Tensor:
        """<picked[i], W_U[y*_i]> (+ b[y*_i]) -> [N], accumulated in at least float32."""
        dtype = torch.promote_types(picked.dtype, torch.float32)
        if self._head_rows is None:
            # N rows of the head, read once per forward (inside it, where FSDP has the weight unsharded).
            head = self._parts.head
            self._head_rows = head.weight.detach()[self._targets.to(head.weight.device)].to(picked.device, dtype)
            bias = getattr(head, "bias", None)
            if isinstance(bias, Tensor):
                self._head_bias = bias.detach()[self._targets.to(bias.device)].to(picked.device, dtype)
        value = (picked.to(dtype) * self._head_rows).sum(-1)
        return value if self._head_bias is None else value + self._head_bias

    # -- result ----------------------------------------------------------------------------------------------

    def result(self) -> Tensor:
        """The fingerprints, float32 [N, layers], NaN rows where the position was -1.

        Raises:
            RuntimeError: When the hooked layers did not all run (no forward inside the context).
        """
        if any(v is None for v in self._values):
            raise RuntimeError(
                f"FingerprintCapture: the hooked decoder layers of {self._model_name} did not run; run the "
                "model's forward inside the `with` block"
            )
        values = torch.stack([v for v in self._values if v is not None], dim=1)  # [N, hooked layers]
        if self.diff:
            values = values[:, 1:] - values[:, :-1]
        values = values[:, -self.width :].float()
        return values.masked_fill(~self._present.to(values.device)[:, None], float("nan"))


def fingerprint(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    positions: Tensor,
    targets: Tensor,
    *,
    rows: Tensor | None = None,
    layers: int | None = 14,
    diff: bool = False,
    norm: Norm = "raw",
    parts: ModelParts | None = None,
    **forward_kwargs: Any,
) -> Tensor:
    """MEDS fingerprints from a forward of the model's backbone (no head, no grad).

    Prefer :class:`FingerprintCapture` on the log-prob forward you run anyway; this runs its own forward.

    Args:
        model: A causal LM (see :func:`find_model_parts`).
        input_ids: LongTensor [R, S] (padded batch) or [1, total] (packed row).
        attention_mask: [R, S] mask, or None (packed rows pass ``position_ids`` in ``forward_kwargs``).
        positions, targets, rows, layers, diff, norm, parts: As in :class:`FingerprintCapture`.
        **forward_kwargs: Passed to the backbone's forward (e.g. ``position_ids`` for packed rows).

    Returns:
        float32 [N, layers], NaN rows where ``positions`` is -1.
    """
    parts = parts if parts is not None else find_model_parts(model)
    capture = FingerprintCapture(model, positions, targets, rows=rows, layers=layers, diff=diff, norm=norm, parts=parts)
    forward_kwargs.setdefault("use_cache", False)
    with torch.no_grad(), capture:
        parts.backbone(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
    return capture.result()
