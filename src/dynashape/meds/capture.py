"""MEDS answer fingerprint: layer-wise logits of the first answer token (MEDS, arXiv 2604.11297).

For rollout i with answer position p_i (the ``{`` of its last ``\\boxed{``) and target y*_i (the token sampled
at p_i + 1), the fingerprint over decoder layers n = 1..N is

    f_n = <h_n[p], W_U[y*]> + b[y*]        (b only if the head has a bias)

``norm="raw"`` (official): h_n is the raw residual stream after layer n for n < N and the final-normed
state for n = N, exactly ``hidden_states[1:]`` of a Hugging Face forward. ``norm="final"``: the final norm
applied to every layer (a logit lens). The feature keeps the last ``layers`` values, after consecutive
differences over all N layers when ``diff=True`` (``np.diff`` semantics).

How: :class:`FingerprintCapture` puts forward hooks on the last few decoder layers of a forward you already
run (verl's / TRL's old-log-prob forward). Each hook gathers h_n at the N answer positions ([N, H]); a pre-hook
on the final norm norms the states that need it, and a pre-hook on the head dots them with the N head rows
W_U[y*] ([N, H]): O(N * H) per layer, no ``output_hidden_states`` (which keeps N + 1 full [B, T, H] tensors
alive), no full-vocabulary logits per layer. The final norm and the head are read only inside their OWN
forward, where every sharding engine has their parameters gathered: FSDP1 (root unit), FSDP2 with the head as
its own unit (verl with untied embeddings) and DeepSpeed ZeRO-3 (parameters gathered per module).
:func:`fingerprint` runs a forward itself.

Typical use (padded batch, response-relative positions from :mod:`dynashape.meds.positions`)::

    p = answer_positions(responses, tokenizer, response_mask=response_mask)
    y = answer_targets(responses, p)
    index = padded_token_index(p, attention_mask, response_mask.sum(-1))
    with FingerprintCapture(model, index.positions, y, rows=index.rows, layers=14) as cap:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # log-probs as usual
    features = cap.result()  # [N, 14] float32, NaN rows where p == -1
"""

from __future__ import annotations

import inspect
from types import TracebackType
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from dynashape.meds.model_parts import ModelParts, find_model_parts
from dynashape.meds.sharded_params import materialised, whole_head

__all__ = ["OFFICIAL_FINGERPRINT_LAYERS", "FingerprintCapture", "fingerprint"]

OFFICIAL_FINGERPRINT_LAYERS = 14
"""The MEDS paper's fingerprint width: the last 14 layers' logits (its official code); the engines' default."""

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
        layers: Number of values kept, the last ones (official: OFFICIAL_FINGERPRINT_LAYERS = 14); None keeps all
            (N, or N - 1 with diff).
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
        layers: int | None = OFFICIAL_FINGERPRINT_LAYERS,
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
        self._picked: list[Tensor | None] = [None] * (total - self._first_hooked)  # [N, H] per hooked layer
        self._values: Tensor | None = None  # [N, hooked layers] once the head rows were read
        self._normed = False
        self._head_rows: Tensor | None = None
        self._head_bias: Tensor | None = None
        self._handles: list[RemovableHandle] = []

    # -- context manager -------------------------------------------------------------------------------------

    def __enter__(self) -> FingerprintCapture:
        if self._handles:
            raise RuntimeError("FingerprintCapture: already entered; a capture covers one forward")
        self._picked = [None] * len(self._picked)
        self._values = None
        self._normed = False
        self._head_rows = self._head_bias = None
        for slot, index in enumerate(range(self._first_hooked, self._parts.num_layers)):
            self._handles.append(self._parts.layers[index].register_forward_hook(self._make_hook(slot)))
        # Pre-hooks registered after the sharding engine's own (FSDP2 prepends its unshard pre-hook, DeepSpeed
        # registered its fetch hook at engine start), so they run when the module's parameters are gathered.
        self._handles.append(self._parts.final_norm.register_forward_pre_hook(self._make_norm_hook()))
        self._handles.append(self._parts.head.register_forward_pre_hook(self._make_head_hook()))
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
    #
    # The final norm and the head are read only inside their OWN forward: under FSDP2 (verl wraps lm_head and
    # embed_tokens as their own units when the embeddings are untied) and DeepSpeed ZeRO-3 a module's
    # parameters are gathered only around its own forward, so during a decoder layer's forward head.weight is
    # a shard (a DTensor, or an empty ZeRO-3 placeholder). The layer hooks therefore only keep the picked
    # hidden states [N, H]; the norm's pre-hook norms those that need it; the head's pre-hook dots them with
    # the N head rows. On an unsharded model these are the same operations on the same tensors as reading
    # everything in the layer hooks, so the values are bit for bit the same.

    def _make_hook(self, slot: int) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            # Checkpoint recomputation in backward or a second forward: keep the first pass.
            if self._values is not None or self._picked[slot] is not None:
                return
            hidden = output[0] if isinstance(output, (tuple, list)) else output
            with torch.no_grad():
                self._picked[slot] = self._gather(hidden.detach())

        return hook

    def _make_norm_hook(self) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            # The first call of the final norm after the last decoder layer ran (earlier calls are not ours).
            if self._normed or self._picked[-1] is None:
                return
            self._apply_norm()
            # A forward that never calls the head module (a fused log-prob kernel reading head.weight directly)
            # still gets the head rows: read here when the weight is a whole, plain tensor (an unsharded model,
            # FSDP1's root unit), never from a shard. The head's own pre-hook, when it runs, reads them again.
            if self._head_rows is None and materialised(self._parts.head, self._head_shape()):
                self._read_head_rows(self._picked[-1])

        return hook

    def _make_head_hook(self) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            if self._values is not None or self._picked[-1] is None:
                return
            if not self._normed:  # a model that applies its final norm without calling the module
                self._apply_norm()
            self._read_head_rows(self._picked[-1])
            self._finish()

        return hook

    def _apply_norm(self) -> None:
        """Apply the final norm to the picked states that need it (every layer for "final", the last for "raw")."""
        with torch.no_grad():
            # .forward skips the norm's own hooks (HF output capture, profilers, ours): a read, not a call.
            norm = self._parts.final_norm.forward
            last = len(self._picked) - 1
            for slot, picked in enumerate(self._picked):
                if picked is not None and (self.norm == "final" or slot == last):
                    self._picked[slot] = norm(picked)
        self._normed = True

    def _read_head_rows(self, picked: Tensor, weight: Tensor | None = None, bias: Tensor | None = None) -> None:
        """W_U[y*] [N, H] (and b[y*] [N]) in at least float32, on the device of the picked states.

        ``weight`` / ``bias``: whole copies when the head's own are shards (read outside its forward).
        """
        dtype = torch.promote_types(picked.dtype, torch.float32)
        head = self._parts.head
        if weight is None:
            weight, bias = head.weight, getattr(head, "bias", None)
        with torch.no_grad():
            weight = weight.detach()
            self._head_rows = weight[self._targets.to(weight.device)].to(picked.device, dtype)
            if isinstance(bias, Tensor):
                self._head_bias = bias.detach()[self._targets.to(bias.device)].to(picked.device, dtype)

    def _head_shape(self) -> tuple[int, int] | None:
        """[V, H] of the whole head weight (H from the picked states); None before the last layer ran."""
        last = self._picked[-1]
        return None if last is None else (self._parts.vocab_size, int(last.shape[-1]))

    def _finish(self) -> None:
        """<picked_n[i], W_U[y*_i]> (+ b[y*_i]) for every hooked layer -> values [N, hooked layers]."""
        rows, bias = self._head_rows, self._head_bias
        assert rows is not None
        columns = []
        with torch.no_grad():
            for picked in self._picked:
                assert picked is not None
                value = (picked.to(rows.dtype) * rows).sum(-1)
                columns.append(value if bias is None else value + bias)
        self._values = torch.stack(columns, dim=1)
        self._picked = [None] * len(self._picked)  # the [N, H] states are no longer needed

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

    # -- result ----------------------------------------------------------------------------------------------

    def result(self) -> Tensor:
        """The fingerprints, float32 [N, layers], NaN rows where the position was -1.

        Raises:
            RuntimeError: When the hooked layers did not all run (no forward inside the context), or when the
                head never ran inside the forward and its weight is sharded now (nothing exact to read).
        """
        if self._values is None:
            if any(p is None for p in self._picked):
                raise RuntimeError(
                    f"FingerprintCapture: the hooked decoder layers of {self._model_name} did not run; run the "
                    "model's forward inside the `with` block"
                )
            self._finish_outside_forward()
        assert self._values is not None
        values = self._values
        if self.diff:
            values = values[:, 1:] - values[:, :-1]
        values = values[:, -self.width :].float()
        return values.masked_fill(~self._present.to(values.device)[:, None], float("nan"))

    def _finish_outside_forward(self) -> None:
        """The forward ran the layers but not the head module (a backbone-only forward, a fused head kernel)."""
        if not self._normed:
            if not materialised(self._parts.final_norm, None):
                raise RuntimeError(
                    f"FingerprintCapture: the final norm of {self._model_name} did not run inside the forward and "
                    "its parameters are sharded outside it (FSDP2 / ZeRO-3); run a forward that calls it"
                )
            self._apply_norm()
        if self._head_rows is None:
            with whole_head(self._parts.head, self._head_shape()) as whole:
                if whole is None:
                    raise RuntimeError(
                        f"FingerprintCapture: the output head of {self._model_name} was not called inside the "
                        "forward and its weight is sharded outside it (FSDP1 flat shards), so the head rows cannot "
                        "be read exactly; run a forward that calls the head module (no fused head kernel)"
                    )
                self._read_head_rows(self._picked[-1], *whole)  # type: ignore[arg-type]
        self._finish()


def fingerprint(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    positions: Tensor,
    targets: Tensor,
    *,
    rows: Tensor | None = None,
    layers: int | None = OFFICIAL_FINGERPRINT_LAYERS,
    diff: bool = False,
    norm: Norm = "raw",
    parts: ModelParts | None = None,
    **forward_kwargs: Any,
) -> Tensor:
    """MEDS fingerprints from a no-grad forward of the model that computes the logits of one position per row.

    Prefer :class:`FingerprintCapture` on the log-prob forward you run anyway; this runs its own forward:
    ``model(..., logits_to_keep=1)`` when the model takes ``logits_to_keep`` (Hugging Face causal LMs; it also
    works on an FSDP2-sharded model, whose root unit is gathered only inside the root's forward), otherwise the
    backbone followed by one call of the head on a single hidden state.

    Args:
        model: A causal LM (see :func:`find_model_parts`).
        input_ids: LongTensor [R, S] (padded batch) or [1, total] (packed row).
        attention_mask: [R, S] mask, or None (packed rows pass ``position_ids`` in ``forward_kwargs``).
        positions, targets, rows, layers, diff, norm, parts: As in :class:`FingerprintCapture`.
        **forward_kwargs: Passed to the forward (e.g. ``position_ids`` for packed rows).

    Returns:
        float32 [N, layers], NaN rows where ``positions`` is -1.
    """
    parts = parts if parts is not None else find_model_parts(model)
    capture = FingerprintCapture(model, positions, targets, rows=rows, layers=layers, diff=diff, norm=norm, parts=parts)
    forward_kwargs.setdefault("use_cache", False)
    with torch.no_grad(), capture:
        if "logits_to_keep" in inspect.signature(model.forward).parameters:
            # The model's own forward with the logits of one position per row ([R, 1, V]): a sharded model's
            # root unit (FSDP2: the final norm) is gathered only inside the root's forward, not the backbone's.
            model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1, **forward_kwargs)
        else:
            out = parts.backbone(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
            if capture._values is None:
                # The backbone stops before the head: call the head on ONE hidden state so its pre-hook reads
                # the head rows inside the head's own forward, where FSDP2 / ZeRO-3 gather its weight.
                hidden = out if isinstance(out, Tensor) else out[0]
                parts.head(hidden.reshape(-1, hidden.shape[-1])[:1])
    return capture.result()
