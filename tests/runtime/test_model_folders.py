"""Model folders (the warm-up cache, a converted GGUF) appear whole or not at all; a cache entry that another
process wrote first is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dynashape.io.state import TMP_PREFIX
from dynashape.runtime import models
from dynashape.train.warmup import save_base


class _Saves:
    """Stands in for a model or tokenizer: ``save_pretrained`` writes one file (and can fail or race)."""

    def __init__(self, name: str, *, fail: bool = False, race: Path | None = None) -> None:
        self.name, self.fail, self.race = name, fail, race

    def save_pretrained(self, folder: str) -> None:
        Path(folder, self.name).write_text("ours")
        if self.race is not None:  # another process renames its complete folder into place meanwhile
            self.race.mkdir()
            (self.race / "warmup.json").write_text('{"theirs": true}')
        if self.fail:
            raise OSError(28, "No space left on device")

    def parameters(self):
        return iter([torch.zeros(3)])


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_save_base_writes_a_whole_folder(tmp_path):
    path = save_base(tmp_path / "base-k", _Saves("weights"), _Saves("tokenizer"), key="k", losses=[0.5], seconds=2.0)
    assert _left(path) == ["tokenizer", "warmup.json", "weights"]
    assert json.loads((path / "warmup.json").read_text()) == {"key": "k", "losses": [0.5], "seconds": 2.0}
    assert _left(tmp_path) == ["base-k"]


def test_save_base_keeps_the_entry_another_process_cached_first(tmp_path):
    theirs = tmp_path / "base-k"
    theirs.mkdir()
    (theirs / "warmup.json").write_text('{"theirs": true}')
    assert save_base(theirs, _Saves("weights"), _Saves("tokenizer"), key="k", losses=[0.5], seconds=1.0) == theirs
    raced = tmp_path / "base-r"
    save_base(raced, _Saves("weights", race=raced), _Saves("tokenizer"), key="r", losses=[0.5], seconds=1.0)
    for folder in (theirs, raced):
        assert _left(folder) == ["warmup.json"] and json.loads((folder / "warmup.json").read_text()) == {"theirs": True}
    assert _left(tmp_path) == ["base-k", "base-r"], "our temporary folders are gone"


def test_a_failed_save_base_leaves_no_entry(tmp_path):
    with pytest.raises(OSError, match="No space left"):
        save_base(tmp_path / "base-k", _Saves("weights", fail=True), _Saves("tok"), key="k", losses=[], seconds=0.0)
    assert _left(tmp_path) == []


def test_gguf_to_hf_renames_a_whole_folder_into_place(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(models, "_load_gguf", lambda path: (_Saves("model.safetensors"), _Saves("tokenizer.json")))
    out = models.gguf_to_hf(gguf, tmp_path / "hf")
    assert _left(out) == ["model.safetensors", "source.json", "tokenizer.json"]
    assert json.loads((out / "source.json").read_text())["parameters"] == 3
    with pytest.raises(ValueError, match="exists and is not empty"):
        models.gguf_to_hf(gguf, out)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _left(models.gguf_to_hf(gguf, empty)) == ["model.safetensors", "source.json", "tokenizer.json"]
    monkeypatch.setattr(models, "_load_gguf", lambda path: (_Saves("model.safetensors", fail=True), _Saves("tok")))
    with pytest.raises(OSError, match="No space left"):
        models.gguf_to_hf(gguf, tmp_path / "broken")
    assert not (tmp_path / "broken").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]
