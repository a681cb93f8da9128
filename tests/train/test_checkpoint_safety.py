"""A checkpoint's state file that would run code when unpickled is refused, and the code never runs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from dynashape.shapers import get_shaper
from dynashape.train import checkpoint as ckpt


def _make_marker(path: str) -> None:
    Path(path).write_text("code ran")


class _Payload:
    """Unpickling this object calls _make_marker(path): what a tampered state file could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (_make_marker, (self.path,))


def _write_checkpoint(root: Path, state: dict) -> Path:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    return ckpt.save(root, step=1, model=model, optimizer=optimizer, state=state, cfg_hash="h")


def test_trainer_state_of_every_kind_loads_with_weights_only(tmp_path):
    # What the trainer writes (loop.Trainer.state_dict): ints, RNG byte tensors, shaper state of lead and meds.
    from dynashape import RolloutBatch

    lead_meds = get_shaper("lead_meds", b_max=64, l_min=16)
    batch = RolloutBatch(
        group_ids=torch.tensor([0, 0, 1, 1]),
        correct=torch.tensor([True, False, False, False]),
        lengths=torch.tensor([10, 20, 30, 40]),
        prompt_keys=("a", "a", "b", "b"),
        fingerprints=torch.randn(4, 6),
    )
    lead_meds(batch)
    state = {
        "step": 1,
        "stream": {"epoch": 0, "index": 4},
        "generator": torch.Generator().get_state(),
        "torch_rng": torch.get_rng_state(),
        "shaper": lead_meds.state_dict(),
    }
    path = _write_checkpoint(tmp_path, state)
    loaded = ckpt.load(path, cfg_hash="h").state
    assert torch.equal(loaded["torch_rng"], state["torch_rng"])
    fresh = get_shaper("lead_meds", b_max=64, l_min=16)
    fresh.load_state_dict(loaded["shaper"])
    assert fresh.state_dict()["controller"] == state["shaper"]["controller"]
    assert torch.equal(fresh.state_dict()["memory"]["vectors"], state["shaper"]["memory"]["vectors"])


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("file", ["state.pt", "optimizer.pt", "model.pt"])
def test_state_file_that_runs_code_is_refused(tmp_path, file):
    path = _write_checkpoint(tmp_path / "ckpts", {"step": 1})
    marker = tmp_path / "marker"
    with open(path / file, "wb") as f:
        pickle.dump({"step": 1, "evil": _Payload(os.fspath(marker))}, f)
    # The payload is live: plain unpickling of the same file runs it.
    with open(path / file, "rb") as f:
        pickle.load(f)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ckpt.CheckpointError, match=rf"checkpoint {path} is corrupt: .*"):
        ckpt.load(path, cfg_hash="h")
    assert not marker.exists(), "loading the checkpoint ran code from the file"
    assert (path / file).exists(), "the refused file is kept"
