"""``report.md`` of a run folder: the held-out result, AES, what the controller did, and the plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynashape import state

__all__ = ["summarise_lambda", "write_report"]


def summarise_lambda(metrics: list[dict[str, float]]) -> dict[str, float] | None:
    """lambda_l at the first step, the last step, and its mean over the last 10 steps (None if not logged)."""
    values = [m["lead/lambda_l"] for m in metrics if "lead/lambda_l" in m]
    if not values:
        return None
    tail = values[-10:]
    return {"first": values[0], "last": values[-1], "last10_mean": sum(tail) / len(tail)}


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
                f"pass@k on the fixed hard + trap subset ({len(base.get('pass_at_k_hard_problems', []))} problems): "
                + "; ".join(
                    f"k={k}: {base['pass_at_k_hard'][k]:.3f} -> {final['pass_at_k_hard'].get(k, float('nan')):.3f}"
                    for k in ks
                ),
            ]
    if evaluation.get("method") != "grpo":
        lines += ["", _grpo_reference(evaluation, results)]
    lines.append("")
    return lines


def _grpo_reference(evaluation: dict[str, Any], results: Path | None) -> str:
    """Plain ``grpo`` on the same world and regime, from a comparison's results file (``results``), named as such."""
    regime = evaluation.get("regime", "tight")
    how = f"`dynashape train --method grpo{_regime_flag(evaluation)}` runs one seed of it."
    if results is None:
        return f"Beside plain `grpo` on the same world and regime: no comparison results were given (--results). {how}"
    path = Path(results)
    runs = []
    if path.exists():
        runs = [r for r in state.read_json(path).get("runs", []) if r["method"] == "grpo" and r["regime"] == regime]
    if not runs:
        return (
            f"Beside plain `grpo` on the same world and regime: the comparison's committed results ({path.name}) hold "
            f"no `grpo` run in the {regime} regime yet, so this report cannot show it. {how}"
        )
    seeds = sorted(r["seed"] for r in runs)
    acc = sum(r["final"]["accuracy"] for r in runs) / len(runs)
    length = sum(r["final"]["mean_length"] for r in runs) / len(runs)
    base = sum(r["base"]["mean_length"] for r in runs) / len(runs)
    return (
        f"Beside plain `grpo` on the same world and regime, from the comparison's committed results "
        f"({path.name}, seeds {', '.join(map(str, seeds))}; mean over seeds): accuracy {acc:.3f}, "
        f"mean length {length:.1f} tokens ({length / base:.0%} of base). {how}"
    )


def _regime_flag(evaluation: dict[str, Any]) -> str:
    regime = evaluation.get("regime", "tight")
    return "" if regime == "tight" else f" --regime {regime}"


def _fmt(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def write_report(run_dir: str | Path, *, results: str | Path | None = None) -> Path:
    """Write ``run_dir/report.md`` (and its PNGs) from ``metrics.jsonl`` and ``eval.json``; ``results`` (a
    comparison's results.json) supplies the plain-GRPO reference line."""
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
            f"Method `{evaluation['method']}`, {evaluation['steps']} RL steps, wall time "
            f"{evaluation['wall_seconds']:.0f} s (this invocation). Held-out split: {base['n_problems']} problems x "
            f"{base['n_samples']} samples, cap {base['max_new_tokens']} tokens, temperature {base['temperature']}.",
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
        lines += [
            f"lambda_l: {lam['first']:.3f} at step 1, {lam['last']:.3f} at the end "
            f"(mean of the last 10 steps {lam['last10_mean']:.3f}).",
            "",
        ]
    lines += [f"![{name}]({name})" for name in images]
    path = run_dir / "report.md"
    state.write_text(path, "\n".join(lines) + "\n")
    return path
