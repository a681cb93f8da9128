"""Plots of a comparison's results (matplotlib, Agg; imported only when results are written).

Per regime: the accuracy-length frontier (mean over seeds, bars = the bootstrap 95 % interval of seeds then
problems), the lambda trajectories of the LEAD presets (lambda_l, mean over seeds per step) and the pass@k curves
of the hard + trap subset up to k = 64 (mean over seeds).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["legend_outside", "method_styles", "plot_results"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")


def method_styles(methods: list[str] | tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """method -> matplotlib keywords (``color``, ``marker``), one pair per method and never shared: ``tab20``'s
    20 colours, a marker cycle beside them, in the order of the sorted names (so a method keeps its style across
    a page's plots)."""
    import matplotlib

    colours = matplotlib.colormaps["tab20"].colors
    names = sorted(set(methods))
    if len(names) > len(colours) * len(MARKERS):
        raise ValueError(f"{len(names)} methods exceed the {len(colours) * len(MARKERS)} distinct styles")
    return {m: {"color": colours[i % len(colours)], "marker": MARKERS[i % len(MARKERS)]} for i, m in enumerate(names)}


def legend_outside(ax: Any, **kw: Any) -> None:
    """The legend to the right of the axes, where it never covers the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=7, **kw)


def plot_results(results: Mapping[str, Any], folder: str | Path) -> list[Path]:
    """Write the plots of ``results`` (``report.results.build_results``) into ``folder``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=90)
        plt.close(fig)
        written.append(folder / name)

    regimes = sorted({r["regime"] for r in results["summary"]}, reverse=True)
    for regime in regimes:
        rows = [r for r in results["summary"] if r["regime"] == regime]
        styles = method_styles([r["method"] for r in results["summary"]])
        fig, ax = plt.subplots(figsize=(8.5, 4.5))
        base = rows[0]["base"]
        ax.scatter([base["mean_length"]], [base["accuracy"]], marker="*", s=120, color="black", label="base")
        for row in rows:
            acc, length = row.get("accuracy"), row.get("mean_length")
            if acc is None or length is None:
                continue
            xerr = yerr = None
            if "bootstrap_interval" in length:
                lo, hi = length["bootstrap_interval"]
                xerr = [[length["mean"] - lo], [hi - length["mean"]]]
            if "bootstrap_interval" in acc:
                lo, hi = acc["bootstrap_interval"]
                yerr = [[acc["mean"] - lo], [hi - acc["mean"]]]
            style = styles[row["method"]]
            ax.errorbar(
                length["mean"], acc["mean"], xerr=xerr, yerr=yerr, fmt=style["marker"], color=style["color"],
                capsize=3, label=row["method"],
            )  # fmt: skip
        ax.set_xlabel("mean length (tokens)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{regime}: accuracy-length frontier (bars: bootstrap 95 %)")
        legend_outside(ax)
        save(fig, f"frontier_{regime}.png")

        runs = [r for r in results["runs"] if r["regime"] == regime]
        lam: dict[str, list[dict[str, Any]]] = {}
        for r in runs:
            if "lambda_trajectory" in r:
                lam.setdefault(r["method"], []).append(r["lambda_trajectory"])
        if lam:
            fig, ax = plt.subplots(figsize=(8.5, 3.8))
            for method, trajs in sorted(lam.items()):
                steps = min(len(t["step"]) for t in trajs)
                mean = np.mean([t["lambda_l"][:steps] for t in trajs], axis=0)
                ax.plot(
                    trajs[0]["step"][:steps], mean, label=f"{method} (n={len(trajs)})", markevery=max(1, steps // 8),
                    **styles[method],
                )  # fmt: skip
            ax.set_xlabel("step")
            ax.set_ylabel("lambda_l (mean over seeds)")
            ax.set_title(f"{regime}: LEAD weight of the efficiency channel")
            legend_outside(ax)
            save(fig, f"lambdas_{regime}.png")

        curves: dict[str, list[dict[str, float]]] = {}
        for r in runs:
            if r["final"].get("pass_at_k_hard"):
                curves.setdefault(r["method"], []).append(r["final"]["pass_at_k_hard"])
        if curves:
            fig, ax = plt.subplots(figsize=(8.5, 4.2))
            for method, cs in sorted(curves.items()):
                ks = sorted(set.intersection(*(set(c) for c in cs)), key=int)
                ax.plot([int(k) for k in ks], [np.mean([c[k] for c in cs]) for k in ks], label=method, **styles[method])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k")
            ax.set_ylabel("pass@k (hard + trap subset, mean over seeds)")
            ax.set_title(f"{regime}: pass@k")
            legend_outside(ax)
            save(fig, f"passk_{regime}.png")
    return written
