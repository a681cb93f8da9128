"""``dynashape results OUT``: which page a comparison folder gets, written only once its runs are shown to have
been evaluated as its plan registered.

The page is the one its study file names (``page``, ``PAGES``): ``claims``, claims decided by their intervals
(``results``; the first comparison's); ``holm``, claims with margins decided by Holm's step-down, the registration
kept verbatim (``holm_page``; the follow-up's); ``controls``, a descriptive page of rows beside another study's
control runs (``controls_results``; the field comparison's); ``generic``, a table per regime against the file's
baseline row (``generic_page``); ``frontiers``, each method's frontier through a sweep of its strength, accuracy
at matched lengths and which method when (``frontier_page``). An ad-hoc comparison (``--methods``, no plan) gets
the claims page without claims.
Every page records, beside the plan's evaluation, each run's own (its config.yaml);
where they differ no verdict is written unless the caller asks for a page marked as deviating.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from dynashape.io import state
from dynashape.study.evaluation_check import (
    EvaluationMismatchError,
    evaluation_deviations,
    registered_evaluation,
    run_evaluation,
    summarize,
)
from dynashape.study.plan_file import ComparisonPlan, load_plan_file
from dynashape.study.results import load_runs

__all__ = ["PAGES", "Page", "plan_of", "study_of", "write_page"]


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


def study_of(out: Path, meta: Mapping[str, Any]) -> ComparisonPlan | None:
    """The plan the folder ``out`` ran: its own copy of a user's study file (comparison.json ``plan_file``), a
    committed study by name (``plan_of``), or None for an ad-hoc comparison."""
    from dynashape.study.compare import COMPARISON_PLAN

    if meta.get("plan_file"):
        return load_plan_file(out / str(meta["plan_file"]))
    name = plan_of(meta)
    if name is not None and name not in COMPARISON_PLAN:
        raise ValueError(f"comparison.json names plan {name!r}, which is not one of {sorted(COMPARISON_PLAN)}")
    return COMPARISON_PLAN[name] if name else None


def evaluation_record(out: Path, plan: ComparisonPlan | None) -> dict[str, Any]:
    """The plan's registered evaluation, each finished run's own, and the differences (``evaluation_check``)."""
    expected = registered_evaluation(plan.eval) if plan else None
    records = load_runs(out)
    deviations = evaluation_deviations(out, records, expected)
    finished = [r for r in records if r.get("split", "test") == "test" and r.get("eval")]
    return {
        "plan": expected,
        "runs": {r["run_dir"]: run_evaluation(out, r) for r in finished},
        "deviating_runs": sorted({d.run_dir for d in deviations}),
        "deviations": summarize(deviations, against="the plan has" if plan else "most runs have"),
    }


class Page(NamedTuple):
    """A results page a study file can name."""

    write: Callable[..., list[Path]]
    """(out, report, plan or None, evaluation, n_boot, controls) -> the paths written."""
    keeps_committed_page: bool = False
    """The page keeps a committed page's plan block (so ``dynashape compare`` writes it only with ``--report``)."""


def _claims(out: Path, report: Path, plan: ComparisonPlan | None, evaluation: Any, n_boot: int, controls: Any) -> Any:
    from dynashape.study.results import write_results

    return write_results(out, report, n_boot=n_boot, evaluation=evaluation, claims=plan.claims if plan else None)


def _holm(out: Path, report: Path, plan: ComparisonPlan | None, evaluation: Any, n_boot: int, controls: Any) -> Any:
    from dynashape.study.holm_page import write_holm_results

    return write_holm_results(out, report, plan, n_boot=n_boot, evaluation=evaluation)  # type: ignore[arg-type]


def _controls(out: Path, report: Path, plan: ComparisonPlan | None, evaluation: Any, n_boot: int, controls: Any) -> Any:
    from dynashape.study.controls_results import write_controls_results

    return write_controls_results(out, report, plan, controls=controls, evaluation=evaluation)  # type: ignore[arg-type]


def _generic(out: Path, report: Path, plan: ComparisonPlan | None, evaluation: Any, n_boot: int, controls: Any) -> Any:
    from dynashape.study.generic_page import write_generic_results

    return write_generic_results(out, report, plan, evaluation=evaluation)  # type: ignore[arg-type]


def _frontiers(
    out: Path, report: Path, plan: ComparisonPlan | None, evaluation: Any, n_boot: int, controls: Any
) -> Any:
    from dynashape.study.frontier_page import write_frontier_results

    return write_frontier_results(out, report, plan, evaluation=evaluation)  # type: ignore[arg-type]


PAGES: Mapping[str, Page] = {
    "claims": Page(_claims),
    "holm": Page(_holm),
    "controls": Page(_controls, keeps_committed_page=True),
    "generic": Page(_generic),
    "frontiers": Page(_frontiers),
}
"""page kind (a study file's ``page``, ``plan_file.PAGE_KINDS``) -> its writer."""


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
    plan = study_of(out, meta)
    if controls is not None and not (plan and plan.controls):
        name = plan and plan.name
        raise ValueError(
            f"--controls applies to a study with controls (the field comparison's page only); {out} ran plan {name!r}"
        )
    evaluation = evaluation_record(out, plan)
    if evaluation["deviations"] and not deviating:
        raise EvaluationMismatchError(
            f"{len(evaluation['deviating_runs'])} runs of {out} were not evaluated as "
            f"{'plan ' + str(plan.name) if plan else 'the other runs'} registered: "
            + "; ".join(evaluation["deviations"])
            + ". No verdict is written; --deviating writes a page marked as deviating"
        )
    page = PAGES[plan.page if plan else "claims"]
    return page.write(out, Path(report), plan, evaluation, n_boot, controls)
