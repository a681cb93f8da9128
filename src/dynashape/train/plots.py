"""PNG plots of a run (matplotlib, Agg backend; imported only when a report is written)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state

__all__ = ["plot_run"]


def _series(metrics: Sequence[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    pts = [(m["step"], m[key]) for m in metrics if key in m]
    return [p[0] for p in pts], [p[1] for p in pts]


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], []
    for v in values:
        acc.append(v)
        acc = acc[-window:]
        out.append(sum(acc) / len(acc))
    return out


SMOOTH_WINDOW = 5
"""Steps in the running mean drawn over a per-step series."""


def _raw_and_smooth(ax: Any, x: list[float], y: list[float], *, color: str) -> None:
    """A per-step series (thin, light) and its running mean (thick, dark), each named in the legend."""
    ax.plot(x, y, alpha=0.45, linewidth=1.0, color=color, label="per step")
    ax.plot(x, _smooth(y, SMOOTH_WINDOW), linewidth=2.0, color=color, label=f"mean of the last {SMOOTH_WINDOW} steps")
    ax.legend(loc="best", fontsize="small")


def _steps_axis(ax: Any) -> None:
    """A step axis with whole-number ticks (a 3-step run would otherwise be ticked at 1.25, 1.5, ...)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")


def plot_run(run_dir: str | Path, metrics: Sequence[dict[str, float]], evaluation: dict[str, Any] | None) -> list[str]:
    """Write the run's plots into ``run_dir``; returns the file names written.

    Panels (LEAD Fig. 2 style where the shaper logs them): accuracy and length over steps, lambda_c and
    lambda_l, target length vs rollout length, r_l of correct rollouts; from ``eval.json``: length and
    accuracy per difficulty before vs after, pass@k curves.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        state.save_figure(fig, run_dir / name, dpi=90, bbox_inches="tight")  # keeps a legend placed below the axes
        plt.close(fig)
        written.append(name)

    if metrics:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        for ax, key, label in ((axes[0], "accuracy", "train accuracy"), (axes[1], "length/mean", "mean length")):
            _raw_and_smooth(ax, *_series(metrics, key), color="C0")
            _steps_axis(ax)
            ax.set_title(label)
        save(fig, "accuracy_length.png")

        if any("lead/lambda_c" in m for m in metrics):
            fig, ax = plt.subplots(figsize=(4.5, 3.2))
            for key in ("lead/lambda_c", "lead/lambda_l"):
                ax.plot(*_series(metrics, key), label=key.split("/")[1])
            ax.set_ylim(0, 1)
            _steps_axis(ax)
            ax.legend(loc="best", fontsize="small")
            ax.set_title("controller weights")
            save(fig, "lambdas.png")

            fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
            axes[0].plot(*_series(metrics, "lead/target_len_mean"), label="target L* (mean)")
            axes[0].plot(*_series(metrics, "length/mean_correct"), label="correct rollouts")
            axes[0].plot(*_series(metrics, "length/mean"), label="all rollouts")
            _steps_axis(axes[0])
            # below the axes: inside, the legend covered a line wherever it went
            axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize="small", frameon=False)
            axes[0].set_title("target length vs rollout length")
            _raw_and_smooth(axes[1], *_series(metrics, "lead/efficiency_correct_mean"), color="C2")
            _steps_axis(axes[1])
            axes[1].set_title("r_l of correct rollouts")
            save(fig, "lead_targets.png")

    if evaluation is not None:
        base, final = evaluation["base"], evaluation["final"]
        diffs = sorted(base["per_difficulty"], key=int)
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        xs = range(len(diffs))
        for ax, key in ((axes[0], "mean_length"), (axes[1], "accuracy")):
            ax.bar([x - 0.2 for x in xs], [base["per_difficulty"][d][key] for d in diffs], 0.4, label="base")
            ax.bar([x + 0.2 for x in xs], [final["per_difficulty"][d][key] for d in diffs], 0.4, label="final")
            ax.set_xticks(list(xs), diffs)
            ax.set_xlabel("difficulty (operands)")
            ax.set_title(key.replace("_", " ") + " per difficulty")
            ax.legend()
        save(fig, "per_difficulty.png")

        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for name, ev in (("base", base), ("final", final)):
            ks = sorted(ev["pass_at_k"], key=int)
            ax.plot([int(k) for k in ks], [ev["pass_at_k"][k] for k in ks], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ks = sorted({int(k) for ev in (base, final) for k in ev["pass_at_k"]})
        ax.set_xticks(ks, [str(k) for k in ks])  # 1, 2, 4, ... rather than 2^0, 2^1, ...
        ax.minorticks_off()
        ax.set_xlabel("k")
        ax.set_title("pass@k (held-out)")
        ax.legend()
        save(fig, "pass_at_k.png")
    return written
