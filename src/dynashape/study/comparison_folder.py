"""What a comparison folder records besides its runs: comparison.json (the command, the plan's settings, the
machine, the wall time of every invocation) and runs.json (an index, one line per finished run).

Both are rewritten whole, atomically (``dynashape.io.state``), after every finished run: a comparison is long,
gets killed and resumed, and a killed invocation must still count up to its last finished run.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.ray_tasks import Placement, default_jobs
from dynashape.study.run_spec import RunSpec
from dynashape.study.scheduler import Outcome
from dynashape.train.run_folder import read_history

__all__ = ["ComparisonRecord", "RunIndex", "machine", "placement_record", "trained_by"]


def placement_record(placement: Placement | None) -> dict[str, Any]:
    """comparison.json's ``ray``: where the runs went and what each held."""
    placement = placement or Placement()
    return {
        "address": placement.address or "local",
        "cpus_per_run": placement.cpus_per_run,
        "gpus_per_run": placement.gpus_per_run,
    }


def machine() -> dict[str, Any]:
    """comparison.json's ``machine``: the platform, the cores this process may use, Python's and torch's versions."""
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": default_jobs(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _write_json(path: Path, data: Any, *, compact: bool = False) -> None:
    """Write atomically (``dynashape.io.state``); ``compact``: one line per list item (runs.json, one line per run,
    diffs well in git)."""
    if compact:
        state.write_text(path, "[\n" + ",\n".join(json.dumps(x, separators=(",", ":")) for x in data) + "\n]\n")
    else:
        state.write_json(path, data, indent=1)


def _record(outcome: Outcome, spec: RunSpec, out: Path) -> dict[str, Any]:
    """A finished run's record: the spec, its folder (relative to ``out``), how it ended, and its eval.json."""
    return {
        "method": spec.method,
        **({"row": spec.row} if spec.row else {}),  # a sweep's row; a plain row is its method (records unchanged)
        "regime": spec.regime,
        "seed": spec.seed,
        "split": spec.split,
        "point": spec.point,
        "overrides": dict(spec.overrides),
        "run_dir": str(outcome.job.run_dir.relative_to(out)),
        "status": outcome.status,
        "seconds": outcome.seconds,
        **trained_by(outcome.job.run_dir),
        "eval": outcome.eval,
    }


def trained_by(run_dir: Path) -> dict[str, Any]:
    """From the run's history.jsonl: ``resumes``, the step of every invocation that began mid-run (a run that
    was killed and resumed, however many times and whichever invocation of the study finished it), and
    ``commits``, the code of every invocation that trained it (``"<sha>+dirty"`` for uncommitted source)."""
    history = read_history(run_dir)
    commits = []
    for entry in history:
        name = f"{entry.get('commit')}{'+dirty' if entry.get('dirty') else ''}"
        if name not in commits:
            commits.append(name)
    return {"resumes": [e["from_step"] for e in history if e["from_step"] > 0], "commits": commits}


class ComparisonRecord:
    """comparison.json: the command and the plan's settings (this invocation's, over an earlier one's), and the
    start and wall time of every invocation, whose sum is the study's ``wall_seconds``.

    Args:
        path: the folder's comparison.json (read when it exists: an earlier invocation's invocations are kept).
        settings: what this invocation runs (command, rows, seeds, jobs, Ray, machine, ...), written at once.
    """

    def __init__(self, path: Path, settings: Mapping[str, Any]) -> None:
        self.path = path
        self.meta = state.read_json(path) if path.exists() else {"invocations": []}
        self.meta.update(settings)
        self.invocation = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_seconds": None}
        self.meta["invocations"].append(self.invocation)
        _write_json(path, self.meta)
        self.start = time.perf_counter()

    def record_wall_time(self) -> None:
        """This invocation's wall time up to now, and the study's over every invocation."""
        # after every finished run, not only at the end: a comparison is long, gets killed and resumed, and a
        # killed invocation must still count up to its last finished run
        self.invocation["wall_seconds"] = time.perf_counter() - self.start
        self.meta["wall_seconds"] = sum(i["wall_seconds"] or 0.0 for i in self.meta["invocations"])
        _write_json(self.path, self.meta)


class RunIndex:
    """runs.json: one line per finished run, sorted by split, regime, method, seed and point, without its numbers
    (they stay in the run's own eval.json, kept in git too); and the failures of this invocation.

    Finished runs recorded by earlier invocations stay while their eval.json exists, also those this invocation
    will reach again (reused: the same record then replaces them): a comparison killed before it gets back to
    them must not drop them.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        old = state.read_json(out / "runs.json") if (out / "runs.json").exists() else []
        self.kept = [r for r in old if (out / r["run_dir"] / "eval.json").exists()]
        self.records: list[dict[str, Any]] = []  # this invocation's, eval included
        self.failed: list[str] = []

    def add(self, outcome: Outcome, spec: RunSpec) -> dict[str, Any]:
        """Record a finished run (or a failed one), rewrite runs.json, and return the run's record."""
        record = _record(outcome, spec, self.out)
        self.records.append(record)
        if outcome.status == "failed":
            self.failed.append(f"{outcome.job.label}: {outcome.error}")
        merged = {r["run_dir"]: r for r in self.kept} | {r["run_dir"]: r for r in self.records}
        ordered = sorted(merged.values(), key=lambda r: (r["split"], r["regime"], r["method"], r["seed"], r["point"]))
        index = [{k: v for k, v in r.items() if k != "eval"} for r in ordered]
        _write_json(self.out / "runs.json", index, compact=True)
        return record
