"""What a folder named as a model must hold, said in one line before anything is loaded or written.

transformers, given a folder it cannot read, answers with a long chain of tracebacks (a relative path such as
``nope-model/`` that does not exist is taken for a Hub repository id; an empty folder ends in "install
sentencepiece or tiktoken"), and by then a run has taken its lock. ``model_folder_problem`` looks at the files
first and names what is missing, and says which command makes a model folder from what the user has (a train
run folder or one of its checkpoints: ``dynashape export``).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["CHECKPOINT_FILES", "check_model_folder", "model_folder_problem", "results_folder"]

# What a trainer checkpoint folder holds (train/checkpoint.py writes them); here so that evaluate can tell a
# checkpoint from a model folder without importing the trainer.
CHECKPOINT_FILES: tuple[str, ...] = ("model.pt", "optimizer.pt", "state.pt", "meta.json")

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
"""The weight files transformers' ``from_pretrained`` reads (one of them)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
"""The files a tokenizer is built from (one of them)."""
EXPECTED = "a Hugging Face model folder (config.json, model.safetensors, tokenizer.json)"


def model_folder_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a model folder transformers can load (None when it looks like one)."""
    root = Path(path)
    if not root.exists():
        return f"no such folder; expected {EXPECTED}"
    if not root.is_dir():
        return f"is a file; expected {EXPECTED}"
    if (root / "checkpoints").is_dir() and (root / "config.yaml").is_file():
        return f"is a dynashape train run folder; make a model folder of it with: dynashape export {root} OUT"
    if all((root / name).is_file() for name in CHECKPOINT_FILES[:3]):
        run, step = root.parent.parent, root.name.removeprefix("step_")
        return f"is a dynashape train checkpoint; make a model folder of it with: dynashape export {run} OUT" + (
            f" --step {step}" if step.isdigit() else ""
        )
    if (root / "results.json").is_file():
        return f"is a dynashape evaluate results folder; expected {EXPECTED}"
    config = root / "config.json"
    if not config.is_file():
        return f"has no config.json; expected {EXPECTED}"
    try:
        if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
            return "config.json is not a JSON object"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"config.json is not readable JSON ({err})"
    if not any((root / name).is_file() for name in WEIGHT_FILES):
        return f"has no weights (one of {', '.join(WEIGHT_FILES)})"
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        return f"has no tokenizer (one of {', '.join(TOKENIZER_FILES)})"
    return None


def check_model_folder(path: str | Path, flag: str) -> Path:
    """``path`` when it looks like a loadable model folder; else a ValueError naming ``flag`` and the path."""
    problem = model_folder_problem(path)
    if problem is not None:
        raise ValueError(f"{flag} {str(path)!r}: {problem}")
    return Path(path)


def results_folder(path: str | Path) -> bool:
    """Whether ``path`` is a results folder of ``dynashape evaluate`` (it holds results.json)."""
    return (Path(path) / "results.json").is_file()
