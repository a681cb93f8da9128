"""``report.md`` of a run folder: the held-out result, AES, what the controller did, and the plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynashape.core.text import counted
from dynashape.io import state
from dynashape.shapers import reference_shaper
from dynashape.train.grpo_reference import load_reference, reference_line

__all__ = ["summarise_lambda", "write_report"]


def summarise_lambda(metrics: list[dict[str, float]]) -> dict[str, float] | None:
    """lambda_l at the first logged step, the last, and its mean over the last 10 steps (``tail_steps``: fewer
    when the run has fewer); None if not logged."""
    values = [(m["step"], m["lead/lambda_l"]) for m in metrics if "lead/lambda_l" in m]
    if not values:
        return None
    tail = [v for _, v in values[-10:]]
    return {
        "first_step": int(values[0][0]),
        "first": values[0][1],
        "last": values[-1][1],
        "last10_mean": sum(tail) / len(tail),
        "tail_steps": len(tail),
    }


def _world_lines(evaluation: dict[str, Any], results: Path | None) -> list[str]:
    """The toy world's extra evaluation numbers (absent for a real dataset), and what plain GRPO does."""
    base, final = evaluation["base"], evaluation["final"]
    lines: list[str] = []
    if "budget" in evaluation:
        lines.append(
            f"Training budget {evaluation['budget']} tokens; share of held-out responses longer than it: base "
            f"{_fmt(base.get('truncated_at_budget'))}, final {_fmt(final.get('truncated_at_budget'))}."
        )
    if "shortcut_frac" in base:
        rows = [
            ("shortcut rate", "shortcut_frac"),
            ("mode entropy per prompt (nats)", "mode_entropy"),
            ("top-1 eigen ratio of wrong fingerprints", "wrong_eigen_ratio"),
        ]
        lines += ["", "| | base | final |", "|---|---|---|"]
        lines += [f"| {name} | {_fmt(base.get(k))} | {_fmt(final.get(k))} |" for name, k in rows]
        for name, ev in (("base", base), ("final", final)):
            modes = ", ".join(f"{m} {v:.2f}" for m, v in ev.get("error_modes", {}).items() if v)
            lines.append(f"| wrong answers by mode ({name}) | {modes} | |")
        if "pass_at_k_hard" in base:
            ks = sorted(base["pass_at_k_hard"], key=int)
            lines += [
                "",
                "pass@k on the fixed hard + trap subset "
                f"({counted(len(base.get('pass_at_k_hard_problems', [])), 'problem')}): "
                + "; ".join(
                    f"k={k}: {base['pass_at_k_hard'][k]:.3f} -> {final['pass_at_k_hard'].get(k, float('nan')):.3f}"
                    for k in ks
                ),
            ]
        if evaluation.get("method") != reference_shaper():  # the reference ran on the toy world: beside a toy run only
            lines += ["", reference_line(evaluation, load_reference(results))]
    lines.append("")
    return lines


def _fmt(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def write_report(run_dir: str | Path, *, results: str | Path | None = None) -> Path:
    """Write ``run_dir/report.md`` (and its PNGs) from ``metrics.jsonl`` and ``eval.json``; ``results`` (a
    comparison's results.json) supplies the plain-GRPO reference line instead of the shipped one
    (``train.grpo_reference``)."""
    from dynashape.train.plots import plot_run
    from dynashape.train.run_folder import read_metrics

    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    eval_path = run_dir / "eval.json"
    evaluation = state.read_json(eval_path) if eval_path.exists() else None
    images = plot_run(run_dir, metrics, evaluation)
    lines = [f"# Run report: {run_dir.name}", ""]
    if evaluation is not None:
        base, final = evaluation["base"], evaluation["final"]
        c = evaluation["aes_constants"]
        lines += [
            f"Method `{evaluation['method']}`, {counted(evaluation['steps'], 'RL step')}, wall time "
            f"{evaluation['wall_seconds']:.0f} s (this invocation). Held-out split: "
            f"{counted(base['n_problems'], 'problem')} x {counted(base['n_samples'], 'sample')}, cap "
            f"{base['max_new_tokens']} tokens, temperature {base['temperature']}.",
            "",
            "| model | accuracy (avg@n) | mean length | " + " | ".join(f"pass@{k}" for k in base["pass_at_k"]) + " |",
            "|---|---|---|" + "---|" * len(base["pass_at_k"]),
        ]
        for name, ev in (("base", base), ("final", final)):
            row = f"| {name} | {ev['accuracy']:.3f} | {ev['mean_length']:.1f} | "
            lines.append(row + " | ".join(f"{v:.3f}" for v in ev["pass_at_k"].values()) + " |")
        lines += [
            "",
            f"Length ratio final / base: **{evaluation['length_ratio']:.1%}**; accuracy change: "
            f"**{evaluation['accuracy_delta'] * 100:+.1f} points**; AES **{_fmt(evaluation['aes'])}** "
            f"(alpha={c['alpha']}, beta={c['beta']}, gamma={c['gamma']}, on {c['on']}).",
            "",
            "| difficulty | base acc | final acc | base length | final length |",
            "|---|---|---|---|---|",
        ]
        for d in sorted(base["per_difficulty"], key=int):
            b, f = base["per_difficulty"][d], final["per_difficulty"][d]
            lines.append(
                f"| {d} | {b['accuracy']:.3f} | {f['accuracy']:.3f} | {b['mean_length']:.1f} | {f['mean_length']:.1f} |"
            )
        lines.append("")
        lines += _world_lines(evaluation, None if results is None else Path(results))
    lam = summarise_lambda(metrics)
    if lam is not None:
        n = lam["tail_steps"]
        over = "the last 10 steps" if n == 10 else ("its one step" if n == 1 else f"all {n} steps")
        lines += [
            f"lambda_l: {lam['first']:.3f} at step {lam['first_step']}, {lam['last']:.3f} at the end "
            f"(mean over {over}: {lam['last10_mean']:.3f}).",
            "",
        ]
    lines += [f"![{name}]({name})" for name in images]
    path = run_dir / "report.md"
    state.write_text(path, "\n".join(lines) + "\n")
    return path
