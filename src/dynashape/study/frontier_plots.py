"""The frontier page's plots (matplotlib, Agg), readable at page width with every method distinguishable.

Per regime:
* ``frontiers_<regime>.png``: one small panel per method, its three strengths joined in the file's order (seed
  means, 95 % t-intervals on both axes, the strengths' labels beside the points), over the single rows (GRPO,
  LEAD, the controls: fixed markers) and the base; every other method's frontier in light grey behind, so each
  panel reads alone and against the field;
* ``matched_<regime>.png``: accuracy at the matched lengths, each method its own colour and marker, its t-interval
  as a band;
* ``controllers_<regime>.png``: the logged controller state per step, a panel per key, one line per row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.results_plots import FONT, MARKERS, PALETTE, frontier_limits, legend_outside, method_styles

__all__ = ["frontier_styles", "plot_frontiers", "strength_label"]

SINGLE_MARKERS = ("s", "*", "D", "P", "X", "v", "^", "<", ">", "h")
"""Markers of the single rows, in the file's order (black: they are references, not methods)."""
NOT_GREY = tuple(c for c in PALETTE if len({c[1:3], c[3:5], c[5:7]}) > 1)
"""The palette without its greys and black: grey draws the other methods' frontiers and the base, black the single
rows, so no method may wear them."""


def frontier_styles(methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """method -> ``color`` and ``marker``, one pair per method, none grey or black, in the sorted names' order."""
    names = sorted(set(methods))
    if len(names) > len(NOT_GREY):
        raise ValueError(f"{len(names)} methods exceed the {len(NOT_GREY)} colours a frontier plot has")
    return {m: {"color": NOT_GREY[i], "marker": MARKERS[i % len(MARKERS)]} for i, m in enumerate(names)}


def strength_label(row: str) -> str:
    """A strength's label beside its point: the row's value (``alp@beta=4.99512e-06`` -> ``5e-06``), a number
    shortened to 3 significant digits so that neighbouring labels do not run into each other, a name as it is."""
    value = row.split("=", 1)[-1]
    try:
        return f"{float(value):.3g}"
    except ValueError:
        return value


def _err(entry: Mapping[str, Any]) -> tuple[float, float]:
    """(below, above) of an interval record, 0 where it has none."""
    if entry["low"] is None:
        return 0.0, 0.0
    return entry["estimate"] - entry["low"], entry["high"] - entry["estimate"]


def _point(ax: Any, row: Mapping[str, Any], **style: Any) -> None:
    x, y = row["mean_length"], row["accuracy"]
    xe, ye = _err(x), _err(y)
    ax.errorbar([x["estimate"]], [y["estimate"]], xerr=[[xe[0]], [xe[1]]], yerr=[[ye[0]], [ye[1]]], capsize=2, **style)


def _interval_ends(rows: Sequence[Mapping[str, Any]], measure: str) -> list[float]:
    """Every row's interval ends (its estimate where it has none) of ``measure``."""
    return [v for r in rows for v in (r[measure]["low"], r[measure]["high"], r[measure]["estimate"]) if v is not None]


def _limits(regime: Mapping[str, Any]) -> tuple[tuple[float, float], tuple[float, float]]:
    """The panels' (xlim, ylim): around every row's intervals, not the base's (a far base would squeeze them)."""
    return frontier_limits(_interval_ends(regime["rows"], "mean_length"), _interval_ends(regime["rows"], "accuracy"))


def _base_label(regime: Mapping[str, Any]) -> str:
    """The base's legend entry: its numbers, and where it lies when off the axes."""
    bx, by = regime["base"]["mean_length"]["estimate"], regime["base"]["accuracy"]["estimate"]
    if by is None:
        return "base model"
    xlim, ylim = _limits(regime)
    where = "" if ylim[0] <= by <= ylim[1] and xlim[0] <= bx <= xlim[1] else ", off the axes: the triangle on the edge"
    return f"base model (accuracy {by:.3f}, length {bx:.1f}{where})"


def _panel(ax: Any, method: str, regime: Mapping[str, Any], style: Mapping[str, Any], singles: Sequence[str]) -> None:
    rows = {r["row"]: r for r in regime["rows"]}
    for other, f in regime["frontiers"].items():  # the field, grey, behind
        pts = [rows[s] for s in f["strengths"] if s in rows]
        if other != method and pts:
            xs = [p["mean_length"]["estimate"] for p in pts]
            ax.plot(xs, [p["accuracy"]["estimate"] for p in pts], color="0.82", lw=1, zorder=1)
    for i, name in enumerate(singles):
        if name in rows:
            marker = SINGLE_MARKERS[i % len(SINGLE_MARKERS)]
            _point(ax, rows[name], color="black", marker=marker, ms=6, mfc="white", ls="none", zorder=3)
    bx, by = regime["base"]["mean_length"]["estimate"], regime["base"]["accuracy"]["estimate"]
    xlim, ylim = _limits(regime)
    if by is not None:  # off the axes (the rows' limits): a grey triangle on the edge it lies beyond, at its length
        inside = ylim[0] <= by <= ylim[1] and xlim[0] <= bx <= xlim[1]
        x, y = (bx, by) if inside else (min(max(bx, xlim[0]), xlim[1]), ylim[0] if by < ylim[0] else ylim[1])
        marker = "o" if inside else ("v" if by < ylim[0] else "^")
        ax.plot([x], [y], marker, color="0.5", ms=6, zorder=2, clip_on=False)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    pts = [rows[s] for s in regime["frontiers"][method]["strengths"] if s in rows]
    if pts:
        xs = [p["mean_length"]["estimate"] for p in pts]
        ax.plot(xs, [p["accuracy"]["estimate"] for p in pts], color=style["color"], lw=1.5, zorder=4)
        for p in pts:
            _point(ax, p, color=style["color"], marker=style["marker"], ms=6, ls="none", zorder=5)
            at = (p["mean_length"]["estimate"], p["accuracy"]["estimate"])
            ax.annotate(strength_label(p["row"]), at, fontsize=FONT - 3, xytext=(4, 4), textcoords="offset points",
                        color=style["color"])  # fmt: skip
    ax.set_title(method, fontsize=FONT, color=style["color"])
    ax.tick_params(labelsize=FONT - 2)
    ax.grid(alpha=0.3)


def _frontiers(plt: Any, regime: Mapping[str, Any], name: str, styles: Mapping[str, Any], singles: Sequence[str]):
    methods = list(regime["frontiers"])
    cols = 4
    rows_n = max(1, math.ceil(len(methods) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(13, 3.0 * rows_n + 1.2), sharex=True, sharey=True, squeeze=False)
    for ax, method in zip(axes.flat, methods, strict=False):
        _panel(ax, method, regime, styles[method], singles)
    for ax in list(axes.flat)[len(methods) :]:
        ax.axis("off")
    handles = [
        plt.Line2D([], [], color="black", marker=SINGLE_MARKERS[i % len(SINGLE_MARKERS)], mfc="white", ls="none",
                   label=s) for i, s in enumerate(singles)
    ] + [plt.Line2D([], [], color="0.5", marker="o", ls="none", label=_base_label(regime))]  # fmt: skip
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0 - 0.35 / fig.get_figheight()),
               ncol=len(handles), fontsize=FONT - 1, frameon=False)  # fmt: skip
    fig.supxlabel("mean response length (tokens)", fontsize=FONT)
    fig.supylabel("test accuracy", fontsize=FONT)
    fig.suptitle(f"{name}: each method through its three strengths (95 % t-intervals over seeds)", fontsize=FONT + 1)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.6 / fig.get_figheight()))
    return fig


def _matched(plt: Any, regime: Mapping[str, Any], name: str, styles: Mapping[str, Any]):
    if not regime["matched"]:
        return None
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    for method in regime["frontiers"]:
        at = [(m["length"], m["methods"][method]) for m in regime["matched"] if method in m["methods"]]
        if not at:
            continue
        xs = [x for x, _ in at]
        ys = [e["estimate"] for _, e in at]
        st = styles[method]
        ax.plot(xs, ys, color=st["color"], marker=st["marker"], label=method, lw=1.5, ms=5)
        lows = [e["low"] if e["low"] is not None else e["estimate"] for _, e in at]
        highs = [e["high"] if e["high"] is not None else e["estimate"] for _, e in at]
        ax.fill_between(xs, lows, highs, color=st["color"], alpha=0.12, lw=0)
    ax.set_xlabel("matched length (tokens)", fontsize=FONT)
    ax.set_ylabel("accuracy interpolated along the frontier", fontsize=FONT)
    ax.set_title(f"{name}: accuracy at matched lengths (seed means, 95 % t-interval bands)", fontsize=FONT + 1)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    return fig


def _controllers(plt: Any, regime: Mapping[str, Any], name: str):
    keys = sorted({t["key"] for t in regime["trajectories"]})
    if not keys:
        return None
    cols = min(3, len(keys))
    rows_n = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(13, 3.6 * rows_n), squeeze=False)
    styles = method_styles([t["row"] for t in regime["trajectories"]])
    for ax, key in zip(axes.flat, keys, strict=False):
        for i, t in enumerate(t for t in regime["trajectories"] if t["key"] == key):
            st = styles[t["row"]]
            ys = [math.nan if y is None else y for y in t["mean"]]  # a stand-in at every seed: a gap
            label = t["row"] + (" (some steps: 0 logged)" if any(t.get("zero_seeds", ())) else "")
            # dashes apart: two strengths often hold one value (a grid's top, a cap's start) and would hide
            ax.plot(t["steps"], ys, color=st["color"], label=label, lw=1.3, ls=("-", "--", "-.", ":")[i % 4])
        ax.set_title(key, fontsize=FONT)
        ax.set_xlabel("step", fontsize=FONT - 1)
        ax.tick_params(labelsize=FONT - 2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=FONT - 3, loc="best")
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(f"{name}: the controllers' state per step (seed means)", fontsize=FONT + 1)
    notes = sorted({(t["key"].split("/")[0], t["zero_means"]) for t in regime["trajectories"] if t.get("zero_means")})
    footnote = "\n".join(
        f"{owner}: a logged 0 is {what}; left out of the means (a gap where every seed logged it)"
        for owner, what in notes
    )
    if footnote:
        fig.text(0.5, 0.005, footnote, ha="center", va="bottom", fontsize=FONT - 1)
    fig.tight_layout(rect=(0, 0.03 * (footnote.count("\n") + 1) if footnote else 0, 1, 1))
    return fig


def plot_frontiers(results: Mapping[str, Any], folder: str | Path) -> list[Path]:
    """Write the plots of ``results`` (``frontier_results.build_frontier_results``) into ``folder``; returns their
    paths (a plot with nothing to draw is not written)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    written: list[Path] = []
    for regime_name, regime in results["regimes"].items():
        styles = frontier_styles(list(regime["frontiers"]))
        singles = [r["row"] for r in regime["rows"] if "@" not in r["row"]]
        figures = {
            f"frontiers_{regime_name}.png": _frontiers(plt, regime, regime_name, styles, singles)
            if regime["frontiers"] else None,
            f"matched_{regime_name}.png": _matched(plt, regime, regime_name, styles),
            f"controllers_{regime_name}.png": _controllers(plt, regime, regime_name),
        }  # fmt: skip
        for file, fig in figures.items():
            if fig is None:
                continue
            state.make_folder(folder)
            state.save_figure(fig, folder / file, dpi=100)
            written.append(folder / file)
            plt.close(fig)
    return written
