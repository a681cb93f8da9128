"""Locate the parts of a causal language model that the MEDS fingerprint reads.

The fingerprint (MEDS, arXiv 2604.11297) needs four things from a Hugging Face causal LM: the stack
of decoder layers (to hook their outputs), the final norm (the last layer's hidden state in
``hidden_states[-1]`` is normed, and ``norm="final"`` applies it to every layer), the output head W_U
(weight [V, H], optional bias [V]) and the backbone module that runs embeddings -> layers -> final norm
without the head (so a stand-alone fingerprint forward never computes full-vocabulary logits).

Layouts are found by attribute names rather than by class, so Qwen2/Qwen3/Llama/Mistral (``model.layers``,
``model.norm``), GPT-2 (``transformer.h``, ``transformer.ln_f``), GPT-NeoX (``gpt_neox.layers``,
``gpt_neox.final_layer_norm``), OPT (``model.decoder.layers``, ``final_layer_norm``) and PEFT / DDP / FSDP1
wrappers around them all resolve; anything else raises a ValueError naming the class, and the caller can
pass a hand-built :class:`ModelParts` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

__all__ = ["ModelParts", "find_model_parts"]

# Attribute names, in the order they are tried. Each is a convention shared by many HF model families.
_BACKBONE_ATTRS = ("model", "transformer", "gpt_neox", "language_model", "decoder", "backbone", "base_model")
_LAYER_ATTRS = ("layers", "h", "blocks", "layer")
_NORM_ATTRS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "final_norm")
_HEAD_ATTRS = ("lm_head", "embed_out", "output")
# model.model.decoder (OPT) and model.model.language_model (VLMs) are two levels down; PEFT adds two more.
_MAX_DEPTH = 4


@dataclass(frozen=True)
class ModelParts:
    """The modules of a causal LM that the fingerprint hooks and reads.

    Attributes:
        backbone: Module whose forward runs embeddings -> ``layers`` -> ``final_norm`` and returns hidden
            states (``model.model`` for Qwen2/Llama, ``model.transformer`` for GPT-2). Used only by the
            stand-alone :func:`dynashape.meds.fingerprint`; a capture on a forward you run never calls it.
        layers: The decoder layers in execution order; layer n (1-based) is ``layers[n - 1]``. Each layer's
            output is a tensor [B, T, H] or a tuple whose first element is that tensor.
        final_norm: The norm applied to the last layer's output before the head; it must act on each token
            independently (LayerNorm, RMSNorm), so applying it to gathered rows [N, H] is exact. Read only in
            its own forward pre-hook (sharding engines gather its parameters there).
        head: The output head: ``head.weight`` [V, H] (tied or not) and an optional ``head.bias`` [V]. Read
            only in its own forward pre-hook.
    """

    backbone: nn.Module
    layers: nn.ModuleList
    final_norm: nn.Module
    head: nn.Module

    def __post_init__(self) -> None:
        if len(self.layers) == 0:
            raise ValueError("layers: the model has no decoder layers (got an empty ModuleList)")
        weight = getattr(self.head, "weight", None)
        if weight is None:
            raise ValueError(f"head: {type(self.head).__name__} has no `weight`; expected a Linear-like head")

    @property
    def num_layers(self) -> int:
        """N, the number of decoder layers."""
        return len(self.layers)

    @property
    def vocab_size(self) -> int:
        """V, the number of rows of the head.

        Read from ``out_features`` when the head has it: under FSDP1 / FSDP2 / ZeRO-3 the weight is a shard
        (a flat slice, a DTensor, an empty placeholder) outside the head's own forward, so its shape is not the
        vocabulary size there.
        """
        out_features = getattr(self.head, "out_features", None)
        if isinstance(out_features, int):
            return out_features
        return int(self.head.weight.shape[0])


def _unwrap(model: nn.Module) -> nn.Module:
    """Strip PEFT and DistributedDataParallel wrappers (FSDP1 forwards attribute access by itself)."""
    for _ in range(_MAX_DEPTH):
        get_base_model = getattr(model, "get_base_model", None)
        if callable(get_base_model) and get_base_model() is not model:
            model = get_base_model()
            continue
        inner = getattr(model, "module", None)
        if isinstance(inner, nn.Module) and not hasattr(model, "get_output_embeddings"):
            model = inner
            continue
        break
    return model


def _find_head(model: nn.Module) -> nn.Module | None:
    get_output_embeddings = getattr(model, "get_output_embeddings", None)
    if callable(get_output_embeddings):
        head = get_output_embeddings()
        if isinstance(head, nn.Module):
            return head
    for name in _HEAD_ATTRS:
        head = getattr(model, name, None)
        if isinstance(head, nn.Module) and getattr(head, "weight", None) is not None:
            return head
    return None


def _layers_and_norm(module: nn.Module) -> tuple[nn.ModuleList, nn.Module] | None:
    layers = next(
        (
            getattr(module, name)
            for name in _LAYER_ATTRS
            if isinstance(getattr(module, name, None), nn.ModuleList) and len(getattr(module, name)) > 0
        ),
        None,
    )
    norm = next(
        (getattr(module, name) for name in _NORM_ATTRS if isinstance(getattr(module, name, None), nn.Module)),
        None,
    )
    if layers is None or norm is None:
        return None
    return layers, norm


def find_model_parts(model: nn.Module) -> ModelParts:
    """Find the decoder layers, final norm, output head and backbone of a Hugging Face causal LM.

    Args:
        model: A causal LM such as ``Qwen2ForCausalLM``, ``LlamaForCausalLM`` or ``GPT2LMHeadModel``, possibly
            wrapped by PEFT, DDP or FSDP1.

    Returns:
        The :class:`ModelParts` of the model.

    Raises:
        ValueError: When no known layout matches; the message names the model class.
    """
    inner = _unwrap(model)
    head = _find_head(inner)
    # Breadth-first through the conventional backbone attributes, the model itself first (a bare backbone
    # such as Qwen2Model has `layers` and `norm` directly).
    frontier: list[nn.Module] = [inner]
    seen: set[int] = set()
    for _ in range(_MAX_DEPTH + 1):
        next_frontier: list[nn.Module] = []
        for module in frontier:
            if id(module) in seen:
                continue
            seen.add(id(module))
            found = _layers_and_norm(module)
            if found is not None and head is not None:
                return ModelParts(backbone=module, layers=found[0], final_norm=found[1], head=head)
            for name in _BACKBONE_ATTRS:
                child = getattr(module, name, None)
                if isinstance(child, nn.Module):
                    next_frontier.append(child)
        frontier = next_frontier
    missing = "output head (get_output_embeddings() returned None)" if head is None else "decoder layers"
    raise ValueError(
        f"model: unsupported architecture {type(model).__name__}: cannot find its {missing}. Supported "
        "layouts: <backbone>.{layers|h|blocks} with <backbone>.{norm|ln_f|final_layer_norm} under "
        "model/transformer/gpt_neox/language_model/decoder, and an output head from get_output_embeddings() "
        "(Qwen2, Llama, Mistral, GPT-2, GPT-NeoX, OPT). Pass parts=ModelParts(...) for other models."
    )
