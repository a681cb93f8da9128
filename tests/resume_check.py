"""A run stopped part-way and resumed from its checkpoint must end where the uninterrupted run ends: the check
that the trainer's tests (LEAD with MEDS, every field method) share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dynashape.train.run import read_metrics, train


def strip_time(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wall-clock measurements (time/*, */seconds) are the only values allowed to differ between two runs."""
    return [{k: v for k, v in m.items() if not (k.startswith("time/") or k.endswith("seconds"))} for m in metrics]


def assert_resumes_bit_identically(cfg: Any, tmp_path: Path, verifier: Any) -> tuple[Any, Any]:
    """Train ``cfg`` (4 steps, a checkpoint every 2) whole into ``tmp_path/full``, and stopped after step 3 then
    resumed from the step-2 checkpoint into ``tmp_path/part``; assert every metric, the final weights and the
    evaluation equal. Returns (the whole run, the resumed run)."""
    full = train(cfg, tmp_path / "full", progress=False, verifier=verifier, report=False)
    part = train(cfg, tmp_path / "part", progress=False, stop_after=3, verifier=verifier, report=False)
    assert part.eval is None and len(part.metrics) == 3
    resumed = train(cfg, tmp_path / "part", progress=False, verifier=verifier, report=False)
    assert resumed.resumed_from == 2
    assert strip_time(read_metrics(tmp_path / "part")) == strip_time(full.metrics)
    a = torch.load(tmp_path / "full/checkpoints/step_4/model.pt")
    b = torch.load(tmp_path / "part/checkpoints/step_4/model.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.eval["final"] == full.eval["final"]
    return full, resumed
