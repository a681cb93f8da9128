"""Plain GRPO's numbers beside a run's report: from the comparison the package ships, or a results.json named.

``grpo_reference.json`` (next to this file, installed with the package) holds, per budget regime, the mean over
seeds of the plain ``grpo`` runs of the pre-registered comparison (docs/results.json): their seeds, their
step count, final accuracy, final and base mean length. ``summarise_results`` makes it from a comparison's
results.json (``tests/train/test_report_data.py`` checks that the shipped file equals what it makes of
docs/results.json), so a report reads the same reference whatever the working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynashape.core.text import counted
from dynashape.io import state
from dynashape.shapers import reference_shaper

__all__ = ["SHIPPED", "load_reference", "reference_line", "summarise_results"]

SHIPPED = Path(__file__).with_name("grpo_reference.json")


def summarise_results(results: dict[str, Any], *, source: str, steps: int | None) -> dict[str, Any]:
    """The reference of a comparison's results.json content: per regime, the plain ``grpo`` runs' seeds and
    means (accuracy, mean length, base mean length); ``steps`` is what those runs trained (None: not known)."""
    reference = reference_shaper()  # plain GRPO, the registry's reference method
    regimes: dict[str, Any] = {}
    for regime in sorted({r["regime"] for r in results.get("runs", []) if r["method"] == reference}):
        runs = [r for r in results["runs"] if r["method"] == reference and r["regime"] == regime]
        regimes[regime] = {
            "seeds": sorted(r["seed"] for r in runs),
            "accuracy": sum(r["final"]["accuracy"] for r in runs) / len(runs),
            "mean_length": sum(r["final"]["mean_length"] for r in runs) / len(runs),
            "base_mean_length": sum(r["base"]["mean_length"] for r in runs) / len(runs),
        }
    return {"source": source, "steps": steps, "regimes": regimes}


def load_reference(results: str | Path | None = None) -> dict[str, Any]:
    """The shipped reference, or the one of a comparison's ``results`` file (whose runs' steps it cannot know)."""
    if results is None:
        return state.read_json(SHIPPED)
    path = Path(results)
    return summarise_results(state.read_json(path), source=path.name, steps=None)


def reference_line(evaluation: dict[str, Any], reference: dict[str, Any]) -> str:
    """report.md's sentence on plain ``grpo`` in the run's regime: the numbers with their seeds, step count and
    source, and a caveat when the run trained another number of steps."""
    regime = evaluation.get("regime", "tight")
    flag = "" if regime == "tight" else f" --regime {regime}"
    how = f"`dynashape train --method grpo{flag}` runs one seed of it."
    ref = reference["regimes"].get(regime)
    if ref is None:
        return (
            f"Beside plain `grpo` on the same world and regime: {reference['source']} holds no `grpo` run in the "
            f"{regime} regime, so this report cannot show it. {how}"
        )
    steps = reference["steps"]
    trained = "steps not recorded there" if steps is None else f"{steps} steps"
    text = (
        f"Beside plain `grpo` on the same world and regime ({reference['source']}: {trained}, seeds "
        f"{', '.join(map(str, ref['seeds']))}; mean over seeds): accuracy {ref['accuracy']:.3f}, mean length "
        f"{ref['mean_length']:.1f} tokens ({ref['mean_length'] / ref['base_mean_length']:.0%} of base)."
    )
    if steps is not None and evaluation.get("steps") not in (None, steps):
        text += (
            f" This run trained {counted(evaluation['steps'], 'step')}, not {steps}: the reference is scale, not a "
            "like-for-like comparison."
        )
    return f"{text} {how}"
