"""Comparison tables shaped like LEAD's Table 1 and MEDS's main table, next to the papers' numbers."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from dynashape.core.text import counted

__all__ = ["PUBLISHED", "PUBLISHED_LEAD", "PUBLISHED_MEDS", "compare_markdown", "summarise_runs"]

# LEAD (arXiv 2605.09806), DeepSeek-R1-Distill-Qwen-1.5B, 4K budget, mean over AIME24/25, AMC23, MATH-500,
# OlympiadBench (the LEAD paper's headline table, arXiv 2605.09806). Only the values the spec states are listed.
PUBLISHED_LEAD: dict[str, dict[str, float]] = {
    "lead": {"accuracy": 53.36, "length": 3714, "aes": 0.68},
}
# MEDS (arXiv 2604.11297), Qwen3-8B avg pass@1 over five benchmarks; Qwen3-1.7B pass@1 / pass@128.
PUBLISHED_MEDS: dict[str, dict[str, float]] = {
    "base": {"pass@1 (8B)": 53.89},
    "grpo": {"pass@1 (8B)": 50.38},
    "dapo": {"pass@1 (8B)": 63.11, "pass@1 (1.7B)": 46.60, "pass@128 (1.7B)": 80.29},
    "grpo+entropy_adv": {"pass@1 (8B)": 54.79},
    "meds": {"pass@1 (8B)": 66.72, "pass@1 (1.7B)": 52.49, "pass@128 (1.7B)": 81.76},
}
PUBLISHED: dict[str, dict[str, dict[str, float]]] = {"lead": PUBLISHED_LEAD, "meds": PUBLISHED_MEDS}
"""paper -> its published rows, as results.json's ``published`` keeps them (keyed as each paper names them)."""


def _mean_sd(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def summarise_runs(results: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, dict[str, list[float]]]:
    """Per method, the list over seeds of: accuracy, length, length ratio, AES, pass@1, pass@n (final)."""
    out: dict[str, dict[str, list[float]]] = {}
    for method, runs in results.items():
        rows: dict[str, list[float]] = {k: [] for k in ("accuracy", "length", "ratio", "aes", "pass@1", "pass@n")}
        for r in runs:
            final = r["final"]
            ks = sorted(final["pass_at_k"], key=int)
            rows["accuracy"].append(final["accuracy"])
            rows["length"].append(final["mean_length"])
            rows["ratio"].append(r["length_ratio"])
            rows["aes"].append(float("nan") if r["aes"] is None else r["aes"])
            rows["pass@1"].append(final["pass_at_k"][ks[0]])
            rows["pass@n"].append(final["pass_at_k"][ks[-1]])
        out[method] = rows
    return out


def compare_markdown(results: Mapping[str, Sequence[dict[str, Any]]]) -> str:
    """Markdown with two tables (ours, mean ± sd over seeds) and the papers' published rows for reference."""
    if not results:
        raise ValueError("results must name at least one method")
    first = next(iter(results.values()))[0]
    base = first["base"]
    n = base["n_samples"]
    summary = summarise_runs(results)
    c = first["aes_constants"]
    lines = [
        "## Accuracy, length, AES (shaped like LEAD Table 1)",
        "",
        f"Toy task, held-out split, {counted(base['n_problems'], 'problem')} x {counted(n, 'sample')}; seeds per "
        "method: "
        + ", ".join(f"{m}={len(r)}" for m, r in results.items())
        + f". AES constants alpha={c['alpha']}, beta={c['beta']}, gamma={c['gamma']}, on averages.",
        "",
        "| method | accuracy | mean length | length / base | AES |",
        "|---|---|---|---|---|",
        f"| base | {base['accuracy']:.3f} | {base['mean_length']:.1f} | 100% | 0 |",
    ]
    for method, row in summary.items():
        lines.append(
            f"| {method} | {_mean_sd(row['accuracy'])} | {_mean_sd(row['length'])} | "
            f"{_mean_sd(row['ratio'])} | {_mean_sd(row['aes'])} |"
        )
    lines += [
        "",
        "Published (LEAD, R1-Distill-Qwen-1.5B, 4K budget, 5-benchmark mean): "
        + "; ".join(
            f"{m}: acc {v['accuracy']}, {v['length']:.0f} tokens, AES +{v['aes']}" for m, v in PUBLISHED_LEAD.items()
        )
        + ". Static decoupled ratios AES >= 0.27; scalarised GRPO at best 0.08.",
        "",
        f"## pass@1 and pass@{n} (shaped like the MEDS main table)",
        "",
        f"| method | pass@1 | pass@{n} |",
        "|---|---|---|",
        f"| base | {base['pass_at_k'][min(base['pass_at_k'], key=int)]:.3f} | "
        f"{base['pass_at_k'][max(base['pass_at_k'], key=int)]:.3f} |",
    ]
    for method, row in summary.items():
        lines.append(f"| {method} | {_mean_sd(row['pass@1'])} | {_mean_sd(row['pass@n'])} |")
    lines += [
        "",
        "Published (MEDS): "
        + "; ".join(f"{m}: " + ", ".join(f"{k} {v}" for k, v in vals.items()) for m, vals in PUBLISHED_MEDS.items())
        + ".",
        "",
    ]
    return "\n".join(lines)
