"""PNG plots of a run (matplotlib, Agg backend; imported only when a report is written)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_run"]


def _series(metrics: Sequence[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    pts = [(m["step"], m[key]) for m in metrics if key in m]
    return [p[0] for p in pts], [p[1] for p in pts]


def _smooth(values: list[float], window: int = 5) -> list[float]:
    out, acc = [], []
    for v in values:
        acc.append(v)
        acc = acc[-window:]
        out.append(sum(acc) / len(acc))
    return out


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
        fig.savefig(run_dir / name, dpi=90)
        plt.close(fig)
        written.append(name)

    if metrics:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        for ax, key, label in ((axes[0], "accuracy", "train accuracy"), (axes[1], "length/mean", "mean length")):
            x, y = _series(metrics, key)
            ax.plot(x, y, alpha=0.3, color="C0")
            ax.plot(x, _smooth(y), color="C0")
            ax.set_xlabel("step")
            ax.set_title(label)
        save(fig, "accuracy_length.png")

        if any("lead/lambda_c" in m for m in metrics):
            fig, ax = plt.subplots(figsize=(4.5, 3.2))
            for key in ("lead/lambda_c", "lead/lambda_l"):
                ax.plot(*_series(metrics, key), label=key.split("/")[1])
            ax.set_ylim(0, 1)
            ax.set_xlabel("step")
            ax.legend()
            ax.set_title("controller weights")
            save(fig, "lambdas.png")

            fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
            axes[0].plot(*_series(metrics, "lead/target_len_mean"), label="target L* (mean)")
            axes[0].plot(*_series(metrics, "length/mean_correct"), label="correct rollouts")
            axes[0].plot(*_series(metrics, "length/mean"), label="all rollouts")
            axes[0].set_xlabel("step")
            axes[0].legend()
            axes[0].set_title("target length vs rollout length")
            x, y = _series(metrics, "lead/efficiency_correct_mean")
            axes[1].plot(x, y, alpha=0.3, color="C2")
            axes[1].plot(x, _smooth(y), color="C2")
            axes[1].set_xlabel("step")
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
        ax.set_xlabel("k")
        ax.set_title("pass@k (held-out)")
        ax.legend()
        save(fig, "pass_at_k.png")
    return written
