"""``dynashape results OUT``: which page a comparison folder gets, written only once its runs are shown to have
been evaluated as its plan registered.

The follow-up (plan v2) gets its pre-registered page (``followup_results``), the field comparison (plan field) its
descriptive page beside the follow-up's GRPO and LEAD runs (``field_results``), a plan with v1's claims gets v1's
page (``results``). Every page records, beside the plan's evaluation, each run's own (its config.yaml); where they
differ no verdict is written unless the caller asks for a page marked as deviating.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.evaluation_check import (
    EvaluationMismatchError,
    evaluation_deviations,
    registered_evaluation,
    run_evaluation,
    summarize,
)
from dynashape.study.results import load_runs

__all__ = ["plan_of", "write_page"]


def plan_of(meta: Mapping[str, Any]) -> str | None:
    """The plan a comparison ran (comparison.json ``plan``; a folder written before that key: its command's
    ``--plan``), None for an ad-hoc comparison (``--methods``)."""
    if meta.get("plan"):
        return str(meta["plan"])
    words = shlex.split(meta.get("command") or "")
    for i, word in enumerate(words):
        if word == "--plan" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--plan="):
            return word.split("=", 1)[1]
    return None


def evaluation_record(out: Path, plan: str | None) -> dict[str, Any]:
    """The plan's registered evaluation, each finished run's own, and the differences (``evaluation_check``)."""
    from dynashape.study.compare import COMPARISON_PLAN

    if plan is not None and plan not in COMPARISON_PLAN:
        raise ValueError(f"comparison.json names plan {plan!r}, which is not one of {sorted(COMPARISON_PLAN)}")
    expected = registered_evaluation(COMPARISON_PLAN[plan].eval) if plan else None
    records = load_runs(out)
    deviations = evaluation_deviations(out, records, expected)
    finished = [r for r in records if r.get("split", "test") == "test" and r.get("eval")]
    return {
        "plan": expected,
        "runs": {r["run_dir"]: run_evaluation(out, r) for r in finished},
        "deviating_runs": sorted({d.run_dir for d in deviations}),
        "deviations": summarize(deviations, against="the plan has" if plan else "most runs have"),
    }


def write_page(
    out: str | Path,
    report: str | Path,
    *,
    n_boot: int = 2000,
    deviating: bool = False,
    controls: str | Path | None = None,
) -> list[Path]:
    """Write ``report`` (markdown), its JSON (same stem) and plots (folder of the same stem) for the comparison
    folder ``out``; returns the paths written. ``controls``: the field page's controls folder (default: the field
    folder's sibling ``comparison-v2``); refused for any other plan.

    Raises:
        EvaluationMismatchError: some runs were evaluated otherwise than the plan registered (the message names
            the fields, values and runs), unless ``deviating``: then the page is written and marked as deviating.
    """
    out = Path(out)
    if not out.is_dir():  # a mistyped folder must not rewrite a results page with nothing
        raise ValueError(f"out must be a comparison folder (dynashape compare --out), got {str(out)!r}")
    meta = state.read_json(out / "comparison.json") if (out / "comparison.json").exists() else {}
    plan = plan_of(meta)
    if controls is not None and plan != "field":
        raise ValueError(f"--controls applies to the field comparison's page only; {out} ran plan {plan!r}")
    evaluation = evaluation_record(out, plan)
    if evaluation["deviations"] and not deviating:
        raise EvaluationMismatchError(
            f"{len(evaluation['deviating_runs'])} runs of {out} were not evaluated as "
            f"{'plan ' + plan if plan else 'the other runs'} registered: "
            + "; ".join(evaluation["deviations"])
            + ". No verdict is written; --deviating writes a page marked as deviating"
        )
    if plan == "v2":
        from dynashape.study.followup_results import write_followup_results

        return write_followup_results(out, report, n_boot=n_boot, evaluation=evaluation)
    if plan == "field":
        from dynashape.study.field_results import write_field_results

        return write_field_results(out, report, controls=controls, evaluation=evaluation)
    from dynashape.study.results import write_results

    return write_results(out, report, n_boot=n_boot, evaluation=evaluation, registered=plan is not None)
