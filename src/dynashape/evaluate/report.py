"""results.md laid out as the papers' tables (benchmarks as columns, an average column; accuracy, length and AES
rows, the base's rows above the model's) and its plots: pass@k curves and length histograms, base vs model
(matplotlib, Agg; imported only here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynashape.io import state

__all__ = ["results_table", "write_report"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _aes(entry: Mapping[str, Any] | None) -> str:
    return "-" if entry is None else f"{entry['value']:.3f}"


def results_table(results: Mapping[str, Any]) -> str:
    """The markdown table: one column per benchmark and ``Average`` (the unweighted mean over benchmarks)."""
    names = list(results["benchmarks"])
    protocol = results["protocol"]
    n_by = protocol["samples_per_benchmark"]
    head = "| | " + " | ".join(f"{name} (avg@{n_by[name]})" for name in names) + " | Average |"
    lines = [head, "|---" * (len(names) + 2) + "|"]
    parts: list[tuple[str, Mapping[str, Any]]] = []
    if results.get("base_results"):
        parts.append(("base", results["base_results"]))
    parts.append(("model", results))

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for who, res in parts:
        cols = [res["benchmarks"][n] for n in names] + [res["overall"]]
        row(f"{who}: accuracy (%)", [_pct(c["accuracy"]) for c in cols])
        row(f"{who}: length (tokens)", [f"{c['mean_length']:.1f}" for c in cols])
        row(f"{who}: truncated (%)", [_pct(c["truncation_rate"]) for c in cols])
        if any("eigen_ratio" in c for c in cols):
            row(f"{who}: eigen ratio (wrong)", ["-" if c.get("eigen_ratio") is None else f"{c['eigen_ratio']:.3f}"
                                                for c in cols])  # fmt: skip
    if results.get("base_results"):
        cols = [results["benchmarks"][n] for n in names] + [results["overall"]]
        row("AES vs base", [_aes(c.get("aes")) for c in cols])
    return "\n".join(lines)


def _read_lengths(folder: Path) -> dict[str, list[int]]:
    path = folder / "generations.jsonl"
    out: dict[str, list[int]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            out.setdefault(r["benchmark"], []).append(int(r["length"]))
    return out


def _plots(out: Path, results: Mapping[str, Any], base_folder: Path | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["benchmarks"])
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, name in enumerate(names):
        color = f"C{i}"
        curve = results["benchmarks"][name]["pass_at_k"]
        ax.plot([int(k) for k in curve], list(curve.values()), "o-", color=color, label=f"{name} model")
        if results.get("base_results"):
            base = results["base_results"]["benchmarks"][name]["pass_at_k"]
            ax.plot([int(k) for k in base], list(base.values()), "s--", color=color, alpha=0.6, label=f"{name} base")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k", ylabel="pass@k", ylim=(0, 1.02), title="unbiased pass@k")
    ax.legend(fontsize=7)
    fig.tight_layout()
    state.save_figure(fig, out / "passk.png", dpi=110)
    plt.close(fig)
    written.append("passk.png")

    model_lengths = _read_lengths(out)
    base_lengths = _read_lengths(base_folder) if base_folder is not None else {}
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        if base_lengths.get(name):
            ax.hist(base_lengths[name], bins=30, alpha=0.5, label="base")
        ax.hist(model_lengths.get(name, []), bins=30, alpha=0.5, label="model")
        ax.set(title=name, xlabel="response tokens")
        ax.legend(fontsize=7)
    fig.tight_layout()
    state.save_figure(fig, out / "lengths.png", dpi=110)
    plt.close(fig)
    written.append("lengths.png")
    return written


def write_report(
    out_dir: str | Path, results: Mapping[str, Any], *, plots: bool = True, base_folder: str | Path | None = None
) -> Path:
    """Write ``out_dir/results.md`` (and its plots unless ``plots`` is False or matplotlib is missing);
    ``base_folder`` holds the base's generations.jsonl for the length histograms."""
    out = Path(out_dir)
    p = results["protocol"]
    text = [
        f"# Evaluation of {results['model']}",
        "",
        f"Protocol **{p['name']}**: temperature {p['temperature']}, top-p {p['top_p']}, "
        f"max {p['max_new_tokens']} new tokens, seed {p['seed']}, backend {p['backend']}; samples per problem "
        + ", ".join(f"{k} {v}" for k, v in p["samples_per_benchmark"].items())
        + ". Accuracy is avg@n (= pass@1); Average is the unweighted mean over benchmarks.",
        "",
    ]
    if results.get("base"):
        c = results["overall"]["aes_constants"]
        text += [
            f"Base: {results['base']}. AES (O1-Pruner) with alpha {c['alpha']}, beta {c['beta']}, gamma "
            f"{c['gamma']}, per benchmark; the Average column's AES is computed on the averaged accuracy and "
            f"length (the mean of the per-benchmark values: {results['overall']['aes_mean_over_benchmarks']}).",
            "",
        ]
    text += [results_table(results), ""]
    note = results["overall"].get("eigen_ratio_note")
    if note:
        text += [f"Eigen ratio: {note}.", ""]
    if plots:
        try:
            names = _plots(out, results, None if base_folder is None else Path(base_folder))
        except ImportError:  # matplotlib missing: the table alone
            names = []
        text += [f"![{n}]({n})" for n in names]
    path = out / "results.md"
    state.write_text(path, "\n".join(text) + "\n")
    return path
