"""A checkpoint's state file that would run code when unpickled is refused, and the code never runs; a
checkpoint whose files do not hold what they should is a CheckpointError naming the file."""

from __future__ import annotations

import json
import os
import pickle
import re
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
    pattern = rf"{re.escape(str(path / file))}: checkpoint file is corrupt: .*arbitrary unpickling"
    with pytest.raises(ckpt.CheckpointError, match=pattern):
        ckpt.load(path, cfg_hash="h")
    assert not marker.exists(), "loading the checkpoint ran code from the file"
    assert (path / file).exists(), "the refused file is kept"


def _trainer_state(step: int = 1) -> dict:
    return {
        "step": step,
        "stream": {"epoch": 0, "index": 4},
        "generator": torch.Generator().get_state(),
        "torch_rng": torch.get_rng_state(),
        "shaper": {},
    }


@pytest.mark.parametrize(
    ("file", "content", "problem"),
    [
        ("state.pt", [1, 2, 3], "holds a list, expected a dict"),
        ("state.pt", {k: v for k, v in _trainer_state().items() if k != "step"}, "no 'step' entry"),
        ("state.pt", {k: v for k, v in _trainer_state().items() if k != "stream"}, "no 'stream' entry"),
        ("state.pt", {k: v for k, v in _trainer_state().items() if k != "shaper"}, "no 'shaper' entry"),
        ("state.pt", {**_trainer_state(), "stream": [0, 4]}, "'stream' holds a list, expected dict"),
        ("state.pt", {**_trainer_state(), "step": "1"}, "'step' holds a str, expected int"),
        ("state.pt", _trainer_state(step=7), "state step 7 != meta step 1"),
        ("model.pt", [torch.ones(2)], "holds a list, expected a dict"),
        ("model.pt", {"weight": [1.0, 2.0]}, "not a state dict of tensors"),
        ("optimizer.pt", {"state": {}}, "not an optimizer state dict"),
    ],
)
def test_structurally_tampered_checkpoint_is_a_checkpoint_error_naming_the_file(tmp_path, file, content, problem):
    path = _write_checkpoint(tmp_path, _trainer_state())
    assert ckpt.load(path, cfg_hash="h").step == 1  # the untouched checkpoint loads
    torch.save(content, path / file)
    with pytest.raises(ckpt.CheckpointError, match=rf"{re.escape(str(path / file))}: .*{re.escape(problem)}") as err:
        ckpt.load(path, cfg_hash="h")
    assert err.value.path == str(path / file)
    assert isinstance(err.value, ValueError) and isinstance(err.value, RuntimeError)  # StateFileError; as before


@pytest.mark.parametrize(
    ("text", "problem"), [("", "is empty"), ('{"format": 1, "st', "not JSON"), ("[1]", "holds a list")]
)
def test_broken_meta_json_is_a_checkpoint_error_naming_it(tmp_path, text, problem):
    path = _write_checkpoint(tmp_path, _trainer_state())
    (path / "meta.json").write_text(text)
    with pytest.raises(ckpt.CheckpointError, match=rf"{re.escape(str(path / 'meta.json'))}: .*{problem}"):
        ckpt.load(path, cfg_hash="h")


def test_content_that_does_not_fit_the_trainer_names_its_file(tmp_path):
    path = _write_checkpoint(tmp_path, _trainer_state())
    saved = ckpt.load(path, cfg_hash="h")
    other = torch.nn.Linear(4, 2)  # another shape: model.pt does not fit it
    with pytest.raises(ckpt.CheckpointError, match=rf"{re.escape(str(path / 'model.pt'))}: .*does not fit"):
        ckpt.restore(saved, model=other, optimizer=torch.optim.AdamW(other.parameters()), load_state=lambda s: None)

    def needs_more(state: dict) -> None:
        state["stream"]["order"]  # what a trainer reading a key the file lacks does

    model = torch.nn.Linear(3, 2)
    with pytest.raises(ckpt.CheckpointError, match=rf"{re.escape(str(path / 'state.pt'))}: .*KeyError"):
        ckpt.restore(saved, model=model, optimizer=torch.optim.AdamW(model.parameters()), load_state=needs_more)


def test_checkpoint_files_are_written_whole_and_nothing_else_is_left(tmp_path):
    path = _write_checkpoint(tmp_path, _trainer_state())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]
    assert sorted(p.name for p in path.iterdir()) == sorted(ckpt.CHECKPOINT_FILES)
    assert json.loads((path / "meta.json").read_text()) == {
        "format": 1,
        "step": 1,
        "config_hash": "h",
        "files": list(ckpt.CHECKPOINT_FILES),
    }


def test_a_failed_checkpoint_write_leaves_no_checkpoint(tmp_path):
    model = torch.nn.Linear(3, 2)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot serialise this")

    with pytest.raises(RuntimeError, match="cannot serialise"):
        ckpt.save(
            tmp_path,
            step=1,
            model=model,
            optimizer=torch.optim.AdamW(model.parameters()),
            state={**_trainer_state(), "bad": Unpicklable()},
            cfg_hash="h",
        )
    assert list(tmp_path.iterdir()) == []
    assert ckpt.latest_checkpoint(tmp_path) is None


def test_latest_checkpoint_ignores_temporary_folders(tmp_path):
    _write_checkpoint(tmp_path, _trainer_state())
    for name in (".tmp-step_5.1a2b3c4d", ".step_6.tmp1234-5678", ".tmp-step_7.deadbeef"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.pt").write_bytes(b"half")
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_1"
