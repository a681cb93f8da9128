"""The runs of the field page: the field folder's finished runs and their controls, the follow-up's GRPO and LEAD
runs at the same seeds (``<controls>/runs/<regime>/<method>-seed<s>``), each checked before any number is taken.

A control counts only when it was evaluated as the field runs were (the checked fields of its config.yaml's eval
section, ``evaluation_check``) and is paired with the field runs of its seed: the same evaluation seed, training
seed, budget and base model. Otherwise the page is refused, naming the runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.evaluation_check import EvaluationMismatchError, evaluation_deviations, summarize

__all__ = [
    "PAIRED_ON",
    "ControlsError",
    "Rows",
    "RunRef",
    "field_rows",
    "history",
    "load_controls",
    "read_jsonl",
]

PAIRED_ON: tuple[str, ...] = ("eval.seed", "train.seed", "train.max_new_tokens", "base sha256")
"""What a control shares with the field runs of its seed."""

RunRef = dict[str, Any]  # {"eval": eval.json, "dir": Path, "config": config.yaml or {}}
Rows = dict[tuple[str, str], dict[int, RunRef]]


class ControlsError(ValueError):
    """A control run a field seed needs is missing, unfinished or not paired with the field run."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (metrics.jsonl, history.jsonl); [] when it does not exist."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_ref(run_dir: Path, ev: Mapping[str, Any]) -> RunRef:
    """A run as the page reads it: its eval.json, folder and config.yaml."""
    config = state.read_yaml(run_dir / "config.yaml") if (run_dir / "config.yaml").exists() else {}
    return {"eval": ev, "dir": run_dir, "config": config or {}}


def field_rows(out: Path, records: Sequence[Mapping[str, Any]]) -> Rows:
    """(regime, method) -> {seed: run} of the field folder's finished test-split runs."""
    rows: Rows = {}
    for r in records:
        if r.get("split", "test") == "test" and r.get("eval") is not None:
            rows.setdefault((r["regime"], r["method"]), {})[int(r["seed"])] = run_ref(out / r["run_dir"], r["eval"])
    return rows


def _paired_keys(ref: RunRef) -> dict[str, Any]:
    """What a field run and its control must share to be paired: evaluation seed, training seed and budget, and
    the base model's hash."""
    cfg = ref["config"]
    return {
        "eval.seed": (cfg.get("eval") or {}).get("seed"),
        "train.seed": (cfg.get("train") or {}).get("seed"),
        "train.max_new_tokens": (cfg.get("train") or {}).get("max_new_tokens"),
        "base sha256": (ref["eval"].get("base_model") or {}).get("sha256"),
    }


def load_controls(controls: Path, field: Rows, expected: Mapping[str, Any] | None, methods: Sequence[str]) -> Rows:
    """The control runs (``methods``: the study file's ``controls.rows``) at every (regime, seed) a field run finished
    at, from ``controls/runs/<regime>/<method>-seed<s>``.

    Raises:
        ControlsError: a needed control is missing or unfinished (no eval.json), or differs from its field run in
            evaluation seed, training seed, budget or base model.
        EvaluationMismatchError: a control's config.yaml evaluation differs from ``expected`` (the plan's
            registered evaluation) in a checked field.
    """
    needed = sorted({(regime, seed) for (regime, _), by_seed in field.items() for seed in by_seed})
    if needed and not controls.is_dir():
        raise ControlsError(
            f"the controls' folder {controls} does not exist; the page pairs each run with the control runs "
            f"({', '.join(methods)}) at its seed (default: the study file's controls.folder, a sibling of the "
            "study's folder; --controls DIR)"
        )
    rows: Rows = {}
    missing, records = [], []
    for regime, seed in needed:
        for method in methods:
            rel = f"runs/{regime}/{method}-seed{seed}"
            path = controls / rel / "eval.json"
            if not path.exists():
                missing.append(rel)
                continue
            ev = state.read_json(path)
            rows.setdefault((regime, method), {})[seed] = run_ref(controls / rel, ev)
            records.append({"run_dir": rel, "split": "test", "eval": ev})
    if missing:
        raise ControlsError(
            f"{len(missing)} control runs that field seeds need are missing or unfinished in {controls} (no "
            f"eval.json): {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}. No page is written"
        )
    deviations = evaluation_deviations(controls, records, expected)
    if deviations:
        raise EvaluationMismatchError(
            f"{len({d.run_dir for d in deviations})} control runs in {controls} were not evaluated as the field "
            "runs: " + "; ".join(summarize(deviations)) + ". No page is written"
        )
    unpaired = []
    for (regime, method), by_seed in rows.items():
        for seed, ref in by_seed.items():
            field_refs = [r[seed] for (g, _), r in field.items() if g == regime and seed in r]
            mine = _paired_keys(ref)
            for other in field_refs:
                theirs = _paired_keys(other)
                diff = [f"{k} {mine[k]} vs {theirs[k]}" for k in mine if mine[k] != theirs[k]]
                if diff:
                    unpaired.append(f"{regime}/{method}-seed{seed} against {other['dir'].name}: {', '.join(diff)}")
                    break
    if unpaired:
        raise ControlsError(
            f"{len(unpaired)} control runs are not paired with the field runs of their seed: "
            + "; ".join(unpaired[:4])
            + (" ..." if len(unpaired) > 4 else "")
            + ". No page is written"
        )
    return rows


def history(ref: RunRef) -> dict[str, Any]:
    """``commits`` (every invocation's, ``+dirty`` marked), ``resumes`` (the steps it resumed from, > 0) and
    ``restarts`` (the start times of invocations after the first that began at step 0: the run was cut off before
    its first checkpoint, or its checkpoint was not used, and was trained again from the start)."""
    commits: list[str] = []
    entries = read_jsonl(ref["dir"] / "history.jsonl")
    for e in entries:
        name = f"{e.get('commit')}{'+dirty' if e.get('dirty') else ''}"
        if name not in commits:
            commits.append(name)
    return {
        "commits": commits,
        "resumes": [e["from_step"] for e in entries if e.get("from_step", 0) > 0],
        "restarts": [e.get("started") for e in entries[1:] if e.get("from_step", 0) == 0],
    }
