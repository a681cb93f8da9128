"""Plots of the field comparison (matplotlib, Agg; imported only when its page is written), readable at page width
with 13 methods: per regime, the accuracy-length frontier and the controllers' trajectories over steps. The study's
control (``roles.StudyRoles.control``) is the reference of the differences and the zoom; a controller's panel is
titled by its method's declaration (display name and ``Trajectory.title``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.shapers import available_shapers, display_name, shaper_trajectory
from dynashape.study.results_plots import (
    FONT,
    MARKERS,
    PALETTE,
    frontier_limits,
    legend_outside,
)
from dynashape.study.roles import StudyRoles, roles_of

__all__ = ["BASE_STYLE", "CONTROL_STYLES", "plot_controls", "plot_differences"]

CONTROL_STYLES: tuple[Mapping[str, Any], ...] = (
    # the controls (in the study's controls.rows order) and the base in black and grey with large markers, apart
    # from the field's 11 colours
    {"color": "black", "marker": "s", "markersize": 10, "markerfacecolor": "white", "markeredgewidth": 2},
    {"color": "black", "marker": "*", "markersize": 15},
    {"color": "black", "marker": "D", "markersize": 9, "markerfacecolor": "white"},
)
BASE_STYLE: Mapping[str, Any] = {"color": "#555555", "marker": "X", "markersize": 11}


def _title(metric: str) -> str:
    """A controller panel's title: the display name of the method whose namespace ``metric`` is in and what its
    declared trajectory is (``Trajectory.title``)."""
    owner = metric.split("/", 1)[0]
    trajectory = shaper_trajectory(owner) if owner in available_shapers() else None
    return f"{display_name(owner)}: {trajectory.title}" if trajectory is not None else metric


FIELD_COLOURS = tuple(c for c in PALETTE if c not in ("#7f7f7f", "#666666", "#1b1b1b"))
"""The shared palette without its greys and black, which mark the base and the controls here."""


def _styles(results: Mapping[str, Any], rows: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """A colour and a marker per studied row (never shared; from the sorted names of the plan's ``rows`` and those
    with runs, so the same in every plot and regime of the page), the controls' (in their order) and the base's
    own."""
    # every field method's style, whether or not it has finished runs: one method, one style in every regime
    field = sorted(set(rows) | {r["method"] for r in results["summary"] if r["source"] == "field"})
    styles = {
        m: {"color": FIELD_COLOURS[i % len(FIELD_COLOURS)], "marker": MARKERS[i % len(MARKERS)], "markersize": 8}
        for i, m in enumerate(field)
    }
    controls = results["controls"]["methods"]
    if len(controls) > len(CONTROL_STYLES):
        raise ValueError(f"{len(controls)} control rows {controls}: the plots style at most {len(CONTROL_STYLES)}")
    return styles | {m: dict(s) for m, s in zip(controls, CONTROL_STYLES)} | {"base": dict(BASE_STYLE)}


def _point(
    ax: Any, entry_x: Mapping[str, Any], entry_y: Mapping[str, Any], style: Mapping[str, Any], label: str
) -> None:
    x, y = entry_x["mean"], entry_y["mean"]
    xerr = [[x - entry_x["interval"][0]], [entry_x["interval"][1] - x]] if entry_x.get("interval") else None
    yerr = [[y - entry_y["interval"][0]], [entry_y["interval"][1] - y]] if entry_y.get("interval") else None
    ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt=style["marker"], capsize=3, label=label, linewidth=1.2,
                **{k: v for k, v in style.items() if k != "marker"})  # fmt: skip


def _ends(entry: Mapping[str, Any]) -> tuple[float, ...]:
    """The interval's ends of a summary entry, or its mean alone when it has no interval (one seed)."""
    return tuple(entry["interval"]) if entry.get("interval") else (entry["mean"],)


def _frontier(ax: Any, results: Mapping[str, Any], regime: str, styles: Mapping[str, Mapping[str, Any]]) -> bool:
    rows = [r for r in results["summary"] if r["regime"] == regime and "accuracy" in r and "mean_length" in r]
    rows.sort(key=lambda r: (r["source"] != "controls", r["method"]))
    base = results["base"].get(regime, {})
    for row in rows:
        label = f"{row['method'].upper()} (control, n={row['n']})" if row["source"] == "controls" else (
            f"{row['method']} (n={row['n']})")  # fmt: skip
        _point(ax, row["mean_length"], row["accuracy"], styles[row["method"]], label)
    if rows:
        # the base on the axes with the methods (the zoom panel below separates the crowded rows)
        shown = [*rows, base] if "accuracy" in base and "mean_length" in base else rows
        xlim, ylim = frontier_limits([v for r in shown for v in _ends(r["mean_length"])],
                                     [v for r in shown for v in _ends(r["accuracy"])])  # fmt: skip
        if shown is not rows:
            _point(ax, base["mean_length"], base["accuracy"], styles["base"], f"base (n={base['accuracy']['n']})")
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
    ax.set_xlabel("mean length (tokens)", fontsize=FONT)
    ax.set_ylabel("accuracy", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.grid(alpha=0.3)
    ax.set_title(f"{regime}: accuracy against length (95 % t-intervals over seeds)", fontsize=FONT + 1)
    legend_outside(ax, numpoints=1)
    return bool(rows)


ZOOM_ACCURACY = 0.05
"""The zoom panel holds the methods whose mean accuracy lies within this of the control's (same regime)."""


def _zoom(
    ax: Any, results: Mapping[str, Any], regime: str, styles: Mapping[str, Mapping[str, Any]], roles: StudyRoles
) -> bool:
    """A second frontier panel, zoomed on the control and the methods near its accuracy, where most of the 13 sit
    on one another in the full panel; their seed intervals may run past its edges. Drawn (True) only when the full
    panel holds a method outside the zoom, else the full panel says it all."""
    rows = [r for r in results["summary"] if r["regime"] == regime and "accuracy" in r and "mean_length" in r]
    ref = next((r for r in rows if r["method"] == roles.control and r["source"] == "controls"), None)
    if ref is None:
        return False
    near = [r for r in rows if abs(r["accuracy"]["mean"] - ref["accuracy"]["mean"]) <= ZOOM_ACCURACY]
    if len(near) == len(rows):
        return False
    near.sort(key=lambda r: (r["source"] != "controls", r["method"]))
    for row in near:
        _point(ax, row["mean_length"], row["accuracy"], styles[row["method"]], "_nolegend_")
    xlim, ylim = frontier_limits([r["mean_length"]["mean"] for r in near], [r["accuracy"]["mean"] for r in near])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel("mean length (tokens)", fontsize=FONT)
    ax.set_ylabel("accuracy", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.grid(alpha=0.3)
    ax.set_title(f"{regime}, zoomed: the {len(near)} rows within {ZOOM_ACCURACY} accuracy of "
                 f"{roles.label(roles.control)} "
                 "(their intervals may run past the edges)", fontsize=FONT)  # fmt: skip
    return True


def _band(values: Sequence[Any], side: int) -> list[float]:
    return [math.nan if v is None else v[side] for v in values]


def _controllers(fig: Any, results: Mapping[str, Any], regime: str) -> bool:
    trajs = [t for t in results["trajectories"] if t["regime"] == regime]
    controls = results["controls"]["methods"]
    methods = sorted({t["method"] for t in trajs}, key=lambda m: (m in controls, m))  # the studied rows first
    if not methods:
        return False
    from matplotlib.ticker import MaxNLocator

    cols = min(3, len(methods))
    rows = -(-len(methods) // cols)
    fig.set_size_inches(13, 1.0 + 4.0 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    colours = ("#1f77b4", "#d95f02", "#2ca02c")
    for ax, method in zip(axes.flat, methods):
        mine = [t for t in trajs if t["method"] == method]
        for colour, t in zip(colours, mine):
            n = max(t["n"])
            ax.plot(t["steps"], t["mean"], color=colour, linewidth=1.6,
                    label=f"{t['metric'].split('/', 1)[1]} (n={n})")  # fmt: skip
            ax.fill_between(t["steps"], _band(t["interval"], 0), _band(t["interval"], 1), color=colour, alpha=0.2,
                            linewidth=0)  # fmt: skip
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(_title(mine[0]["metric"]), fontsize=FONT)
        ax.set_xlabel("step", fontsize=FONT - 1)
        ax.tick_params(labelsize=FONT - 1)
        ax.grid(alpha=0.3)
        # below the axes, where it covers no line or band
        ax.legend(fontsize=FONT - 2, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(mine), frameon=False)
    for ax in list(axes.flat)[len(methods) :]:
        ax.axis("off")
    fig.suptitle(f"{regime}: the controllers over steps (mean over seeds, 95 % t-band)", fontsize=FONT + 1)
    return True


DIFFERENCE_MEASURES: Mapping[str, str] = {
    "accuracy": "accuracy minus {}'s",
    "mean_length": "mean length minus {}'s (tokens)",
}


def plot_differences(
    fig: Any, results: Mapping[str, Any], styles: Mapping[str, Mapping[str, Any]], roles: StudyRoles | None = None
) -> bool:
    """The comparison itself: per regime (rows) and measure (columns), each field method minus the control
    (``roles.control``) at the same seed, mean with its 95 % t-interval over the paired seeds, one line per method
    in its own colour and marker, 0 marked; False when no difference against the control exists."""
    roles = roles or roles_of(None)
    versus = roles.label(roles.control)
    diffs = {(d["regime"], d["method"], d["metric"]): d for d in results["differences"] if d["versus"] == roles.control}
    regimes = sorted({r for r, _, _ in diffs}, reverse=True)
    if not regimes:
        return False
    methods = sorted({m for _, m, _ in diffs}, reverse=True)  # alphabetical from the top
    fig.set_size_inches(12, 1.2 + 0.42 * len(methods) * len(regimes))
    axes = fig.subplots(len(regimes), len(DIFFERENCE_MEASURES), squeeze=False)
    for row, regime in zip(axes, regimes):
        for ax, (metric, label) in zip(row, ((m, x.format(versus)) for m, x in DIFFERENCE_MEASURES.items())):
            for y, method in enumerate(methods):
                d = diffs.get((regime, method, metric))
                if d is None:
                    continue
                x = d["estimate"]
                xerr = [[x - d["interval"][0]], [d["interval"][1] - x]] if d.get("interval") else None
                style = styles[method]
                ax.errorbar([x], [y], xerr=xerr, fmt=style["marker"], color=style["color"], markersize=7, capsize=3,
                            linewidth=1.4)  # fmt: skip
            ax.axvline(0.0, color="black", linewidth=0.9)
            ax.set_yticks(range(len(methods)))
            ax.set_yticklabels([f"{m} (n={diffs[(regime, m, metric)]['n']})" if (regime, m, metric) in diffs else m
                                for m in methods], fontsize=FONT - 1)  # fmt: skip
            for tick, method in zip(ax.get_yticklabels(), methods):  # the method's colour on its name
                tick.set_color(styles[method]["color"])
            ax.set_ylim(-0.7, len(methods) - 0.3)
            ax.set_xlabel(label, fontsize=FONT)
            ax.tick_params(axis="x", labelsize=FONT - 1)
            ax.grid(axis="x", alpha=0.3)
            ax.set_title(f"{regime}: {label}", fontsize=FONT + 1)
    fig.suptitle(f"Each method minus {versus} at the same seed (mean, 95 % t-interval over the paired seeds)",
                 fontsize=FONT + 1)  # fmt: skip
    return True


def plot_controls(
    results: Mapping[str, Any], folder: str | Path, rows: Sequence[str] = (), roles: StudyRoles | None = None
) -> list[Path]:
    """Write the frontier and controller plots of ``results`` (``controls_results.build_controls_results``) into
    ``folder``, per regime; returns their paths. ``rows``: every row the plan trains (each keeps its style);
    ``roles``: the study's (None: the defaults)."""
    roles = roles or roles_of(None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    written: list[Path] = []
    styles = _styles(results, rows)
    fig = plt.figure()
    if plot_differences(fig, results, styles, roles):
        state.make_folder(folder)
        fig.tight_layout()
        state.save_figure(fig, folder / "differences.png", dpi=100)
        written.append(folder / "differences.png")
    plt.close(fig)
    for regime in sorted({r["regime"] for r in results["summary"]}, reverse=True):
        # the full frontier above, the zoom on the control's neighbourhood below (where it adds anything)
        fig, (ax, zoom) = plt.subplots(2, 1, figsize=(10.5, 11.0))
        drawn = _frontier(ax, results, regime, styles)
        if not _zoom(zoom, results, regime, styles, roles):
            zoom.remove()
            fig.set_size_inches(10.5, 5.8)
        if drawn:
            state.make_folder(folder)
            fig.tight_layout()
            state.save_figure(fig, folder / f"frontier_{regime}.png", dpi=100)
            written.append(folder / f"frontier_{regime}.png")
        plt.close(fig)
        fig = plt.figure(figsize=(13, 7))
        if _controllers(fig, results, regime):
            state.make_folder(folder)
            fig.tight_layout()
            state.save_figure(fig, folder / f"controllers_{regime}.png", dpi=100)
            written.append(folder / f"controllers_{regime}.png")
        plt.close(fig)
    return written
