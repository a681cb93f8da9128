"""``dynashape audit``: sample the base model on the validation split, measure the world, render the audit.

Writes ``audit.json`` and ``audit.md`` into the folder it is given; ``--write-rules FILE`` also writes the
budget rules there (``dynashape.world.chain.rules``) and ``--docs PATH`` replaces the audit section of that page.
It writes nowhere else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["audit_markdown", "run_audit", "write_world_doc"]


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


def run_audit(
    out_dir: Path,
    *,
    samples: int = 8,
    warmup_steps: int | None = None,
    device: str = "cpu",
    cache_dir: str | None = None,
    rules_out: Path | None = None,
    docs: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Audit the default world's base model on the validation split; write audit.json / audit.md to
    ``out_dir``, the budget rules to ``rules_out`` and the audit section of ``docs`` when they are given."""
    import dataclasses
    import time

    from dynashape.io import state
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import load_base
    from dynashape.train.config import RunConfig
    from dynashape.train.evaluation import sample_responses
    from dynashape.world.chain.audit import audit_samples
    from dynashape.world.chain.rules import eval_cap, rules_from_audit

    cfg = RunConfig(device=device, cache_dir=cache_dir)
    if warmup_steps is not None:
        cfg = dataclasses.replace(cfg, warmup=dataclasses.replace(cfg.warmup, steps=warmup_steps))
    base = load_base(cfg, progress=progress)
    validation = base.world.split("validation")
    start = time.perf_counter()
    with MathVerifier(timeout=5.0, workers=1) as verifier:
        s = sample_responses(
            base.model,
            base.tokenizer,
            validation,
            verifier,
            n=samples,
            max_new_tokens=cfg.eval.max_new_tokens,
            temperature=cfg.eval.temperature,
            seed=cfg.eval.seed,
            batch_size=cfg.eval.batch_size,
            fingerprint_layers=cfg.eval.fingerprint_layers,
            device=device,
        )
    audit = audit_samples(s)
    audit["eval_cap_sampled"] = cfg.eval.max_new_tokens
    audit["base_model"] = base.meta
    audit["seconds"] = time.perf_counter() - start
    state.make_folder(out_dir)
    state.write_text(out_dir / "audit.json", json.dumps(audit, indent=1))
    header = "## Audit of the base model (`dynashape audit --write-rules FILE --docs docs/world.md`)\n"
    text = audit_markdown(audit, header=header)
    state.write_text(out_dir / "audit.md", text)
    if rules_out is not None:
        cap = eval_cap(audit["budgets"]["loose"], cfg.eval.max_new_tokens)
        state.write_text(
            rules_out, json.dumps(rules_from_audit(audit, base_key=base.meta.get("key"), cap=cap), indent=1) + "\n"
        )
    if docs is not None:
        write_world_doc(docs, text)
    return audit


def write_world_doc(path: Path, audit_text: str) -> None:
    """Replace the audit section of a page (between its markers, e.g. docs/world.md) with ``audit_text``."""
    from dynashape.io import state

    begin, end = "<!-- audit:begin -->", "<!-- audit:end -->"
    old = path.read_text() if path.exists() else f"# The toy world\n\n{begin}\n{end}\n"
    if begin not in old:
        old += f"\n{begin}\n{end}\n"
    head, rest = old.split(begin, 1)
    tail = rest.split(end, 1)[1] if end in rest else ""
    state.write_text(path, f"{head}{begin}\n{audit_text}{end}{tail}")
