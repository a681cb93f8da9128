"""The audit's measurements: what the chain world's properties W1-W7 look like in a base model's samples.

Pure functions of sampled responses (``Samples``) and the world: they read and count, never change anything.
The audit command (``dynashape audit``, ``dynashape.study.audit``) samples the base model and renders these.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import numpy as np

from dynashape.world.base import Problem
from dynashape.world.chain.config import WORLD_VERSION, ChainTaskConfig
from dynashape.world.chain.labels import error_mode, filler_chars, is_shortcut, parse_lines
from dynashape.world.chain.plan import risky_steps
from dynashape.world.chain.teacher import teacher_trace
from dynashape.world.measures import (
    budget_rules,
    cluster_mode_ari,
    mode_entropy,
    top_answer_share,
    truncation_at,
    wrong_eigen_ratio,
)

__all__ = ["audit_samples", "slip_repairs"]


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


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def audit_samples(s: Any, *, loose_quantile: float = 0.97) -> dict[str, Any]:
    """The audit's numbers from ``Samples`` of the base model on the validation split."""
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
        ns = [i for i in rows if not shortcut[i] and risky_steps(probs[i].operands, probs[i].ops, probs[i].group) > 0]
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
    cfg, rng = ChainTaskConfig(), random.Random(0)
    per: dict[int, list[float]] = defaultdict(list)
    for p in {p.key: p for p in problems}.values():
        t = teacher_trace(p, rng, cfg, shortcut="none", careful=False, drop_paren=False, slip_prob=0.0, filler=False)
        per[p.difficulty].append(len(t.text) + 1)
    return {str(d): _mean(v) for d, v in sorted(per.items())}
