"""Plots of a comparison's results (matplotlib, Agg; imported only when results are written), readable at page
width.

Per regime: the accuracy-length frontier (each method's mean over seeds with its 95 % t-interval over seeds on both
axes, and a table of the same numbers beside it, so methods that share a point stay apart), the lambda
trajectories of the LEAD presets (lambda_l, mean over seeds per step), and the pass@k curves of the hard + trap
subset (mean over seeds with its t-interval band, and each method's paired difference from the study's control).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.io import state
from dynashape.study.stats import paired_values, t_interval

__all__ = ["PALETTE", "frame_methods_and_base", "frontier_limits", "legend_outside", "method_styles", "plot_results"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")
PALETTE: tuple[str, ...] = (
    # tab10, then Dark2 and two darker hues: 20 colours of which no two are a light/dark pair of one hue
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#1b1b1b", "#9e0142",
)  # fmt: skip
FONT = 10


def method_styles(methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """method -> matplotlib keywords (``color``, ``marker``), one pair per method and never shared: 20 distinct
    colours, a marker cycle beside them, in the order of the sorted names (so a method keeps its style across a
    page's plots)."""
    names = sorted(set(methods))
    if len(names) > len(PALETTE) * len(MARKERS):
        raise ValueError(f"{len(names)} methods exceed the {len(PALETTE) * len(MARKERS)} distinct styles")
    return {m: {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]} for i, m in enumerate(names)}


def legend_outside(ax: Any, **kw: Any) -> None:
    """The legend to the right of the axes, where it never covers the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=FONT - 1, **kw)


def frontier_limits(xs: Sequence[float], ys: Sequence[float]) -> tuple[tuple[float, float], tuple[float, float]]:
    """(xlim, ylim) of a frontier plot: the methods' interval ends ``xs`` (lengths) and ``ys`` (accuracies) with
    15 % of their span on each side (at least 0.5 token and 0.005 accuracy)."""
    pad_x, pad_y = max(0.5, 0.15 * (max(xs) - min(xs))), max(0.005, 0.15 * (max(ys) - min(ys)))
    return (min(xs) - pad_x, max(xs) + pad_x), (min(ys) - pad_y, max(ys) + pad_y)


def frame_methods_and_base(
    ax: Any, xs: Sequence[float], ys: Sequence[float], bx: float, by: float, draw_base: Callable[[], Any]
) -> bool:
    """Set a frontier's limits around the methods (``frontier_limits``) and place the base (length ``bx``,
    accuracy ``by``): drawn by ``draw_base()`` when it lies within them, else an arrow from inside the axes
    towards where it lies, with its numbers, since a far base would squeeze every method into a corner. Returns
    whether the base is on the axes."""
    xlim, ylim = frontier_limits(xs, ys)
    inside = xlim[0] <= bx <= xlim[1] and ylim[0] <= by <= ylim[1]
    if inside:
        draw_base()
    else:
        cx, cy = min(max(bx, xlim[0]), xlim[1]), min(max(by, ylim[0]), ylim[1])
        ax.annotate(f"base: accuracy {by:.3f}, length {bx:.1f} (off the axes)", xy=(cx, cy),
                    xytext=(0.5, 0.08 if by < ylim[0] else 0.92), textcoords="axes fraction", ha="center",
                    fontsize=FONT - 1, arrowprops={"arrowstyle": "->", "color": "black"})  # fmt: skip
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    return inside


def _interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95 % t-interval over seeds; low = high = mean for a single seed."""
    t = t_interval(list(values))
    if not math.isfinite(t.low):
        return t.estimate, t.estimate, t.estimate
    return t.estimate, t.low, t.high


def _per_seed(runs: Sequence[Mapping[str, Any]], method: str, key: str) -> dict[int, float]:
    return {int(r["seed"]): float(r["final"][key]) for r in runs if r["method"] == method and key in r["final"]}


def _frontier(ax: Any, table_ax: Any, runs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
              styles: Mapping[str, Mapping[str, Any]]) -> None:  # fmt: skip
    """Each method's mean accuracy and length with its seed t-interval on both axes; the base as a point when it
    lies near the methods, else as an arrow at the edge (a far base would squeeze every method into a corner)."""
    cells, xs, ys = [], [], []
    for row in rows:
        m = row["method"]
        acc, length = _per_seed(runs, m, "accuracy"), _per_seed(runs, m, "mean_length")
        if not acc or not length:
            continue
        (ya, ylo, yhi), (xl, xlo, xhi) = _interval(list(acc.values())), _interval(list(length.values()))
        style = styles[m]
        ax.errorbar(xl, ya, xerr=[[xl - xlo], [xhi - xl]], yerr=[[ya - ylo], [yhi - ya]], fmt=style["marker"],
                    color=style["color"], markersize=7, capsize=3, label=f"{m} (n={len(acc)})")  # fmt: skip
        xs += [xlo, xhi]
        ys += [ylo, yhi]
        cells.append([m, str(len(acc)), f"{ya:.3f} [{ylo:.3f}, {yhi:.3f}]", f"{xl:.1f} [{xlo:.1f}, {xhi:.1f}]"])
    if not cells:
        return
    base = rows[0]["base"]
    frame_methods_and_base(
        ax, xs, ys, base["mean_length"], base["accuracy"],
        lambda: ax.scatter([base["mean_length"]], [base["accuracy"]], marker="*", s=140, color="black",
                           label="base", zorder=3),
    )  # fmt: skip
    ax.set_xlabel("mean length (tokens)", fontsize=FONT)
    ax.set_ylabel("accuracy", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=FONT - 2, framealpha=0.85)
    table_ax.axis("off")
    table = table_ax.table(cellText=cells, colLabels=["method", "n", "accuracy [95 %]", "length [95 %]"],
                           loc="center", cellLoc="left")  # fmt: skip
    table.auto_set_font_size(False)
    table.set_fontsize(FONT - 1)
    table.auto_set_column_width(list(range(4)))
    table.scale(1.0, 1.35)
    for i, row in enumerate(cells, start=1):  # the method's colour on its name: the table is the legend too
        table[i, 0].get_text().set_color(styles[row[0]]["color"])


def _passk(
    ax: Any, diff_ax: Any, runs: Sequence[Mapping[str, Any]], styles: Mapping[str, Mapping[str, Any]], control: str
) -> None:
    """pass@k mean over seeds with its t-interval band; beside it each method minus the study's ``control``,
    paired per seed, with its t-interval (methods dodged along k so that their bars do not overlap)."""
    curves: dict[str, dict[int, dict[int, float]]] = {}
    for r in runs:
        for k, v in (r["final"].get("pass_at_k_hard") or {}).items():
            curves.setdefault(r["method"], {}).setdefault(int(k), {})[int(r["seed"])] = float(v)
    methods = sorted(curves)
    for m in methods:
        ks = sorted(curves[m])
        stats = [_interval(list(curves[m][k].values())) for k in ks]
        ax.plot(ks, [s[0] for s in stats], color=styles[m]["color"], marker=styles[m]["marker"], markersize=5,
                label=m)  # fmt: skip
        ax.fill_between(ks, [s[1] for s in stats], [s[2] for s in stats], color=styles[m]["color"], alpha=0.12)
    treated = [m for m in methods if m != control] if control in curves else []
    for i, m in enumerate(treated):
        ks = sorted(set(curves[m]) & set(curves[control]))
        dodge = 2 ** ((i - (len(treated) - 1) / 2) * 0.06)
        for k in ks:
            d = list(paired_values(curves[m][k], curves[control][k]).values())
            if not d:
                continue
            mean, lo, hi = _interval(d)
            diff_ax.errorbar([k * dodge], [mean], yerr=[[mean - lo], [hi - mean]], fmt=styles[m]["marker"],
                             color=styles[m]["color"], markersize=4, capsize=2,
                             label=m if k == ks[0] else None)  # fmt: skip
    for a, label in ((ax, "pass@k (mean, 95 % t-band over seeds)"), (diff_ax, f"pass@k minus {control}'s (paired)")):
        a.set_xscale("log", base=2)
        a.xaxis.set_major_formatter(_integer_ticks())
        a.set_xlabel("k", fontsize=FONT)
        a.set_ylabel(label, fontsize=FONT)
        a.tick_params(labelsize=FONT - 1)
        a.grid(alpha=0.3)
    if treated:
        diff_ax.axhline(0, color="black", linewidth=0.8)
        diff_ax.legend(fontsize=FONT - 2, loc="best")
    else:
        diff_ax.axis("off")
    ax.legend(fontsize=FONT - 2, loc="lower right")


def _integer_ticks() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: f"{x:g}")


def plot_results(results: Mapping[str, Any], folder: str | Path, control: str | None = None) -> list[Path]:
    """Write the plots of ``results`` (``report.results.build_results``) into ``folder``; returns their paths.
    ``control``: the study's control, the reference of the pass@k differences (None: the reference method)."""
    from dynashape.shapers import reference_shaper

    control = control or reference_shaper()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    folder = Path(folder)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        state.make_folder(folder)
        fig.tight_layout()
        state.save_figure(fig, folder / name, dpi=100)
        plt.close(fig)
        written.append(folder / name)

    styles = method_styles([r["method"] for r in results["summary"]])
    regimes = sorted({r["regime"] for r in results["summary"]}, reverse=True)
    for regime in regimes:
        rows = [r for r in results["summary"] if r["regime"] == regime]
        runs = [r for r in results["runs"] if r["regime"] == regime]
        fig, (ax, table_ax) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.15, 1]})
        _frontier(ax, table_ax, runs, rows, styles)
        ax.set_title(f"{regime}: accuracy against length (95 % t-intervals over seeds)", fontsize=FONT + 1)
        save(fig, f"frontier_{regime}.png")

        lam: dict[str, list[dict[str, Any]]] = {}
        for r in runs:
            if "lambda_trajectory" in r:
                lam.setdefault(r["method"], []).append(r["lambda_trajectory"])
        if lam:
            fig, ax = plt.subplots(figsize=(10, 4))
            for method, trajs in sorted(lam.items()):
                steps = min(len(t["step"]) for t in trajs)
                mean = np.mean([t["lambda_l"][:steps] for t in trajs], axis=0)
                ax.plot(
                    trajs[0]["step"][:steps], mean, label=f"{method} (n={len(trajs)})", markevery=max(1, steps // 8),
                    **styles[method],
                )  # fmt: skip
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("step", fontsize=FONT)
            ax.set_ylabel("lambda_l (mean over seeds)", fontsize=FONT)
            ax.tick_params(labelsize=FONT - 1)
            ax.set_title(f"{regime}: LEAD weight of the efficiency channel", fontsize=FONT + 1)
            legend_outside(ax)
            save(fig, f"lambdas_{regime}.png")

        if any(r["final"].get("pass_at_k_hard") for r in runs):
            fig, (ax, diff_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
            _passk(ax, diff_ax, runs, styles, control)
            fig.suptitle(f"{regime}: pass@k on the hard + trap subset", fontsize=FONT + 1)
            save(fig, f"passk_{regime}.png")
    return written
