"""The audit of the base model in the toy world: what the world's properties W1-W7 look like in its samples.

The audit reads the world and the base model and writes numbers; it changes nothing. The budget rules of the
two regimes (``budget_rules``) are functions of its lengths, saved with the world's version in
``world_rules.json`` next to this module by ``dynashape audit --write-rules`` (one deterministic command on
CPU), and read by the presets. Nothing a method does may feed back into them.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.train.task import WORLD_VERSION, Problem, _carry_or_borrow, error_mode, is_shortcut, parse_lines

__all__ = ["RULES_PATH", "audit_markdown", "audit_samples", "load_rules", "slip_repairs", "write_rules"]

RULES_PATH = Path(__file__).with_name("world_rules.json")
RULES_COMMAND = "dynashape audit --write-rules"


def slip_repairs(response: str) -> tuple[int, int, int]:
    """(slips, checked, repaired) among the step lines of a response, read line by line.

    A slip is a single-operation step line whose result is wrong; it is *checked* when a ``check`` line
    follows it (filler in between allowed) and *repaired* when a ``fix`` line of the same operation with the
    right result follows that check.
    """
    lines = [ln.strip() for ln in response.split("\n") if ln.strip() and not ln.startswith(("so ", "problem "))]
    slips = checked = repaired = 0
    for i, line in enumerate(lines):
        steps, _, _ = parse_lines(line)
        if not steps or line.startswith("fix ") or len(steps[0].terms) != 1:
            continue
        s = steps[0]
        op, b = s.terms[0]
        right = s.left + b if op == "+" else s.left - b
        if right == s.result:
            continue
        slips += 1
        if i + 1 < len(lines) and lines[i + 1].startswith("check "):
            checked += 1
            if i + 2 < len(lines) and lines[i + 2].startswith("fix "):
                fix, _, _ = parse_lines(lines[i + 2])
                if fix and fix[0].left == s.left and fix[0].terms == s.terms and fix[0].result == right:
                    repaired += 1
    return slips, checked, repaired


def _risky_steps(p: Problem) -> int:
    """Carry / borrow steps of the right computation."""
    from dynashape.train.task import _plan

    value, g, n = p.operands[0], 0, 0
    for line in _plan(p.operands, p.ops, p.group):
        a = value if line.left is None else line.left
        b = (g if line.right is None else line.right) if line.left is None else line.right
        n += _carry_or_borrow(a, line.op, b)
        r = a + b if line.op == "+" else a - b
        if line.left is None:
            value = r
        else:
            g = r
    return n


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def audit_samples(s: Any, *, loose_quantile: float = 0.97) -> dict[str, Any]:
    """The audit's numbers from ``report.evaluation.Samples`` of the base model on the validation split."""
    from dynashape.report.world_metrics import (
        budget_rules,
        cluster_mode_ari,
        mode_entropy,
        top_answer_share,
        truncation_at,
        wrong_eigen_ratio,
    )
    from dynashape.train.task import filler_chars

    probs = s.problems
    lengths = [int(x) for x in s.lengths]
    diffs = [p.difficulty for p in probs]
    rules = budget_rules(lengths, diffs, loose_quantile=loose_quantile)
    modes = ["" if s.correct[i] else (error_mode(p, s.texts[i]) or "other") for i, p in enumerate(probs)]
    shortcut = [is_shortcut(t) for t in s.texts]
    per_d: dict[str, dict[str, float]] = {}
    for d in sorted(set(diffs)):
        rows = [i for i, x in enumerate(diffs) if x == d]
        ls = sorted(lengths[i] for i in rows)
        sc = [i for i in rows if shortcut[i]]
        ns = [i for i in rows if not shortcut[i] and _risky_steps(probs[i]) > 0]
        checked = [i for i in ns if parse_lines(s.texts[i])[2] > 0]
        unchecked = [i for i in ns if parse_lines(s.texts[i])[2] == 0]
        text_len = [max(1, len(s.texts[i])) for i in rows]
        per_d[str(d)] = {
            "accuracy": _mean([float(s.correct[i]) for i in rows]),
            "mean_length": _mean([float(lengths[i]) for i in rows]),
            "median_length": float(np.median(ls)),
            "trunc_tight": truncation_at([lengths[i] for i in rows], rules["tight"]),
            "trunc_loose": truncation_at([lengths[i] for i in rows], rules["loose"]),
            "shortcut_rate": len(sc) / len(rows),
            "shortcut_accuracy": _mean([float(s.correct[i]) for i in sc]),
            "checked_share": len(checked) / len(ns) if ns else float("nan"),
            "accuracy_checked": _mean([float(s.correct[i]) for i in checked]),
            "accuracy_unchecked": _mean([float(s.correct[i]) for i in unchecked]),
            "filler_share": _mean([filler_chars(s.texts[i]) / n for i, n in zip(rows, text_len, strict=True)]),
        }
    by_trait: dict[str, list[float]] = defaultdict(list)
    for i, p in enumerate(probs):
        by_trait[p.verbosity].append(filler_chars(s.texts[i]) / max(1, len(s.texts[i])))
    len_by_trait: dict[str, list[float]] = defaultdict(list)
    for i, p in enumerate(probs):
        len_by_trait[p.verbosity].append(float(lengths[i]))
    slips = np.array([slip_repairs(t) for t in s.texts]).reshape(-1, 3).sum(0)
    trap = [i for i, p in enumerate(probs) if p.is_trap]
    wrong = [i for i in range(len(probs)) if not s.correct[i]]
    out: dict[str, Any] = {
        "world_version": WORLD_VERSION,
        "n_responses": len(probs),
        "n_problems": len({p.key for p in probs}),
        "accuracy": _mean([float(c) for c in s.correct]),
        "mean_length": _mean([float(x) for x in lengths]),
        "budgets": rules,
        "trunc_tight": truncation_at(lengths, rules["tight"]),
        "trunc_loose": truncation_at(lengths, rules["loose"]),
        "per_difficulty": per_d,
        "concise_length": _concise_lengths(probs),
        "filler_by_trait": {k: _mean(v) for k, v in sorted(by_trait.items())},
        "length_by_trait": {k: _mean(v) for k, v in sorted(len_by_trait.items())},
        "slips": {"slips": int(slips[0]), "checked": int(slips[1]), "repaired": int(slips[2])},
        "error_modes": {m: modes.count(m) / max(1, len(wrong)) for m in sorted({m for m in modes if m})},
        "mode_entropy": mode_entropy([p.key for p in probs], modes),
        "trap_top_answer_share": top_answer_share(
            [probs[i].key for i in trap],
            [parse_lines(s.texts[i])[1] for i in trap],
            [bool(s.correct[i]) for i in trap],
        ),
        "trap_parenthesis_share": _mean([float(modes[i] == "parenthesis") for i in trap if modes[i]]),
    }
    if s.fingerprints is not None:
        rows = [i for i in wrong if np.isfinite(s.fingerprints[i]).all()]
        fp = s.fingerprints[rows]
        out["wrong_fingerprints"] = len(rows)
        out["fingerprint_layers"] = int(fp.shape[1]) if len(rows) else 0
        if len(rows) >= 2:
            out["ari"] = cluster_mode_ari(fp, [modes[i] for i in rows], [probs[i].key for i in rows])
            out["wrong_eigen_ratio"] = wrong_eigen_ratio(fp)
    return out


def _concise_lengths(problems: list[Problem]) -> dict[str, float]:
    """Mean token length (EOS included) of the concise right trace per difficulty: the length a correct
    solution needs (W1)."""
    import random

    from dynashape.train.task import ChainTaskConfig, teacher_trace

    cfg, rng = ChainTaskConfig(), random.Random(0)
    per: dict[int, list[float]] = defaultdict(list)
    for p in {p.key: p for p in problems}.values():
        t = teacher_trace(p, rng, cfg, shortcut="none", careful=False, drop_paren=False, slip_prob=0.0, filler=False)
        per[p.difficulty].append(len(t.text) + 1)
    return {str(d): _mean(v) for d, v in sorted(per.items())}


def eval_cap(loose: int, current: int) -> int:
    """The evaluation cap: the configured one when it is at least 1.25 x the loose budget, else the next
    power of two above 1.25 x loose (the cap must sit well above both training budgets)."""
    need = 1.25 * loose
    return current if current >= need else 2 ** math.ceil(math.log2(need))


def write_rules(audit: dict[str, Any], *, base_key: str | None, cap: int, path: Path = RULES_PATH) -> dict:
    """Save the budget rules with the world's version (and the audit's headline numbers) to ``path``."""
    b = audit["budgets"]
    rules = {
        "world_version": WORLD_VERSION,
        "base_key": base_key,
        "command": RULES_COMMAND,
        "regimes": {
            "tight": {
                "budget": b["tight"],
                "rule": f"median sampled length of the base model at the hardest difficulty ({b['hardest']} ops)",
                "base_truncated": audit["trunc_tight"],
            },
            "loose": {
                "budget": b["loose"],
                "rule": "97th percentile of the base model's sampled lengths (at most 3 % truncated)",
                "base_truncated": audit["trunc_loose"],
            },
        },
        "derived": "LEAD b_max = budget, l_min = budget // 4; global thresholds T = budget // 2; overlong buffer "
        "budget // 6; cosine max_len and pass_rate_linear budget = budget",
        "eval_cap": cap,
        "audit": {
            "n_responses": audit["n_responses"],
            "accuracy": audit["accuracy"],
            "mean_length": audit["mean_length"],
        },
    }
    path.write_text(json.dumps(rules, indent=1) + "\n")
    return rules


def load_rules(path: Path = RULES_PATH) -> dict[str, Any]:
    """The saved budget rules; a clear error when they are missing or belong to another world version."""
    if not path.exists():
        raise ValueError(f"no budget rules at {path}; run `{RULES_COMMAND}`")
    rules = json.loads(path.read_text())
    if rules.get("world_version") != WORLD_VERSION:
        raise ValueError(
            f"{path} holds rules of world {rules.get('world_version')!r}, not {WORLD_VERSION!r}; run `{RULES_COMMAND}`"
        )
    return rules


def _f(x: Any, digits: int = 3) -> str:
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.{digits}f}"
    return str(x)


def audit_markdown(a: dict[str, Any], *, header: str = "") -> str:
    """The audit as markdown tables (docs/world.md and the run folder's audit.md)."""
    b = a["budgets"]
    lines = [header] if header else []
    lines += [
        f"Base model sampled {a['n_responses']} times on {a['n_problems']} validation problems (world "
        f"`{a['world_version']}`): accuracy {_f(a['accuracy'])}, mean length {_f(a['mean_length'], 1)} tokens.",
        f"Budgets: tight = {b['tight']} tokens (median length at {b['hardest']} operations; truncates "
        f"{_f(a['trunc_tight'])} of all responses), loose = {b['loose']} (97th percentile; truncates "
        f"{_f(a['trunc_loose'])}).",
        "",
        "| ops | acc | mean len | median len | concise len | trunc tight | trunc loose | shortcut rate | "
        "shortcut acc | checked share | acc checked | acc unchecked | filler share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, r in a["per_difficulty"].items():
        lines.append(
            f"| {d} | {_f(r['accuracy'])} | {_f(r['mean_length'], 1)} | {_f(r['median_length'], 1)} | "
            f"{_f(a['concise_length'].get(d, float('nan')), 1)} | {_f(r['trunc_tight'])} | {_f(r['trunc_loose'])} | "
            f"{_f(r['shortcut_rate'])} | {_f(r['shortcut_accuracy'])} | {_f(r['checked_share'])} | "
            f"{_f(r['accuracy_checked'])} | {_f(r['accuracy_unchecked'])} | {_f(r['filler_share'])} |"
        )
    sl = a["slips"]
    lines += [
        "",
        "Filler share by verbosity trait: "
        + ", ".join(f"{k} {_f(v)}" for k, v in a["filler_by_trait"].items())
        + "; mean length by trait: "
        + ", ".join(f"{k} {_f(v, 1)}" for k, v in a["length_by_trait"].items())
        + ".",
        f"Slips the model wrote (wrong single-operation step lines): {sl['slips']}; followed by a check "
        f"{sl['checked']}; repaired {sl['repaired']}.",
        "Wrong answers by mode: "
        + ", ".join(f"{k} {_f(v)}" for k, v in a["error_modes"].items())
        + "; mean entropy of "
        f"the modes per prompt {_f(a['mode_entropy'])} nats.",
        f"Trap prompts: share of the most common wrong answer {_f(a['trap_top_answer_share'])}; share of their wrong "
        f"answers that drop the parentheses {_f(a['trap_parenthesis_share'])}.",
    ]
    if "ari" in a:
        lines.append(
            f"Wrong-answer fingerprints ({a['wrong_fingerprints']} rows, {a['fingerprint_layers']} layers): adjusted "
            f"Rand index of HDBSCAN clusters vs true mode, pooled {_f(a['ari']['pooled'])}, per prompt "
            f"{_f(a['ari']['per_prompt'])} (over {a['ari']['prompts']} prompts with >= 3 wrong answers); top-1 eigen "
            f"ratio {_f(a['wrong_eigen_ratio'])}."
        )
    return "\n".join(lines) + "\n"
