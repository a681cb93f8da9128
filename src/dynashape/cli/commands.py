"""What each ``dynashape`` subcommand does, once ``dynashape.cli`` has parsed its arguments: ``COMMANDS`` maps a
subcommand's name to its ``run_<name>(args) -> exit status``. The parser (``dynashape.cli.build_parser``) holds
every option and its help; this module holds no argument definitions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COMMANDS"]


def _section_overrides(items: Sequence[str], section: str, keys: Sequence[str], command: str) -> dict[str, Any]:
    """``--set`` of a command that takes one config section only (``evaluate``: prompt.*, ``eval``: eval.*):
    any other key is refused naming that section's keys, not train's."""
    for item in items:
        key = item.split("=", 1)[0].strip()
        if not key.startswith(section + ".") or key.removeprefix(section + ".") not in keys:
            raise ValueError(
                f"--set {key}: dynashape {command} takes {section}.KEY=VALUE with KEY one of {', '.join(keys)}"
            )
    return _overrides(items).get(section, {})


def _overrides(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--set section.key=value`` pairs (YAML values) sorted by config section (``train.overrides.parse_overrides``):
    ``eval.n_samples=2``, ``task.max_ops=6``, ``prompt.chat_template=false``; a bare key is train's
    (``lr=5e-4``), and so is a key of train's sections (``drpo.tau=5``); ``shaper_kwargs.x=v`` goes into the
    shaper's kwargs."""
    from dynashape.train.overrides import SetText, parse_overrides

    pairs: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        pairs[key.strip()] = SetText(value)  # typed by the field it goes to, never by YAML
    return parse_overrides(pairs)


def _template(args: argparse.Namespace, plan: Any = None) -> tuple[Any, dict[str, Any]]:
    """The RunConfig of the command line's non-training sections (train at its default) and the training
    overrides (``--steps``, ``--set lr=...``, ``--set shaper_kwargs.x=...``) to put on a preset.
    ``plan``: a study whose evaluation and base model (its ``eval`` and ``warmup`` fields) lie under the
    command line's."""
    from dynashape.train.config import EvalConfig, RunConfig, WarmupConfig

    sections = _overrides(args.set or [])
    train_kw = sections.pop("train", {})
    if args.steps is not None:
        train_kw["steps"] = args.steps
    base = RunConfig(
        eval=EvalConfig(**(plan.eval if plan else {})), warmup=WarmupConfig(**(plan.warmup if plan else {}))
    )
    parts = {name: _replace(name, getattr(base, name), kw) for name, kw in sections.items()}
    if args.warmup_steps is not None:
        parts["warmup"] = dataclasses.replace(parts.get("warmup", base.warmup), steps=args.warmup_steps)
    # --eval-samples / --eval-max-new-tokens: short forms of --set eval.n_samples / eval.max_new_tokens
    for flag, field_name in (("eval_samples", "n_samples"), ("eval_max_new_tokens", "max_new_tokens")):
        if getattr(args, flag, None) is not None:
            try:
                parts["eval"] = dataclasses.replace(parts.get("eval", base.eval), **{field_name: getattr(args, flag)})
            except ValueError:  # the field's own message names eval.<field>; the user typed the flag
                option = "--" + flag.replace("_", "-")
                raise ValueError(f"{option} must be >= 1, got {getattr(args, flag)}") from None
    # every section starts from ``base`` (so a plan's evaluation reaches the runs), the command line's on top
    template = dataclasses.replace(
        base, model_path=args.model, data_path=args.data, device=args.device, cache_dir=args.cache_dir, **parts
    )
    return template, train_kw


def _run_config(args: argparse.Namespace, method: str, seed: int) -> Any:
    from dynashape.train.presets import make_train_config

    template, train_kw = _template(args)
    regime = getattr(args, "regime", None) or "tight"
    return dataclasses.replace(template, train=make_train_config(method, regime=regime, seed=seed, **train_kw))


def _replace(section: str, part: Any, values: dict[str, Any]) -> Any:
    try:
        return dataclasses.replace(part, **values)
    except ValueError as err:  # the section's own validation: say which section it was
        raise ValueError(f"--set {section}.*: {err}") from None


def _results_path(args: argparse.Namespace) -> Path | None:
    """``--results``, refused in one line when it names no file (checked before a run starts)."""
    if args.results is None:
        return None
    path = Path(args.results)
    if not path.is_file():
        raise ValueError(f"--results {args.results!r}: no such file; expected a comparison's results.json")
    return path


def run_train(args: argparse.Namespace) -> int:
    from dynashape.train.run import train

    cfg = _run_config(args, args.method, args.seed)
    results = _results_path(args)
    regime = "" if args.regime == "tight" else f"-{args.regime}"
    run_dir = Path(args.run_dir or f"runs/{args.method}{regime}-seed{args.seed}")
    result = train(cfg, run_dir, progress=not args.no_progress, results=results)
    ev = result.eval
    if ev is not None:
        print(
            f"{args.method}: accuracy {ev['base']['accuracy']:.3f} -> {ev['final']['accuracy']:.3f}, "
            f"length {ev['base']['mean_length']:.1f} -> {ev['final']['mean_length']:.1f} "
            f"({ev['length_ratio']:.0%}), AES {'n/a' if ev['aes'] is None else format(ev['aes'], '.4f')}; "
            f"report: {run_dir / 'report.md'}"
        )
    return 0


def _seeds(text: str | None, default: Sequence[int]) -> list[int]:
    """``0,1,2`` -> [0, 1, 2]; a bare count ``5`` -> [0, 1, 2, 3, 4]; ``7,`` -> [7]."""
    if text is None:
        return list(default)
    parts = [p.strip() for p in text.split(",")]
    try:
        seeds = list(range(int(parts[0]))) if len(parts) == 1 else [int(p) for p in parts if p]
    except ValueError:
        raise ValueError(f"--seeds expects a list like 0,1,2 or a count, got {text!r}") from None
    if not seeds:
        raise ValueError(f"--seeds {text}: no seed (a bare number is a count; seed 0 alone is written 0,)")
    return seeds


def run_compare(args: argparse.Namespace) -> int:
    from dynashape.study.compare import ComparisonPlan, plan_rows, run_comparison
    from dynashape.study.pages import PAGES
    from dynashape.study.plan_file import find_plan
    from dynashape.study.ray_tasks import Placement
    from dynashape.study.roles import roles_of

    plan, study_file = find_plan(args.plan) if args.plan else (None, None)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    if plan is None and methods is None:
        methods = ["lead", "grpo_length", "gdpo", "shorterbetter", "drpo"]
    rows = plan_rows(plan, methods=methods, regimes=[args.regime] if args.regime else None)
    plan = plan or ComparisonPlan(rows={})
    seeds = _seeds(args.seeds, plan.seeds)
    template, train_kw = _template(args, plan)
    _check_rows(template, plan, rows, seeds[0], train_kw)
    present = {f"{r}/{m}" for r, ms in rows.items() for m in ms}
    out = Path(args.out)
    result = run_comparison(
        out,
        rows=rows,
        seeds=seeds,
        template=template,
        train_overrides=train_kw,
        tuning_seeds=args.tuning_seeds,
        tune=plan.tune and not args.no_tuning,
        row_seeds={k: n for k, n in plan.row_seeds.items() if k in present},
        fixed={k: v for k, v in plan.fixed.items() if k in present},
        presets={k: v for k, v in plan.presets.items() if any(k in ms for ms in rows.values())},
        best_global_among=roles_of(plan).best_global_among,
        workers=args.jobs,
        placement=Placement(address=args.ray_address, cpus_per_run=args.cpus_per_run, gpus_per_run=args.gpus_per_run),
        progress=not args.no_progress,
        log=lambda line: print(f"{time.strftime('%H:%M:%S')} {line}", flush=True),
        command="dynashape " + shlex.join(args.argv),
        plan_name=plan.name,
        study_file=study_file,
        dry_run=args.dry_run,
    )
    if args.dry_run:
        return 0
    if PAGES[plan.page].keeps_committed_page:
        _committed_page_after_compare(out, args.report, plan)
    else:
        _write_results(out, args.report)
    return 1 if result["failed"] else 0


def _committed_page_after_compare(out: Path, report: str | None, plan: Any) -> None:
    """A page that keeps the plan block of a committed page (the field's, which also reads its controls):
    without ``--report`` there is no such page, so the command is named; a refusal (no plan block, a missing or
    unpaired control) is reported without failing the runs, which are all saved."""
    if report is None:
        print(f"results: write the {plan.page} page with `dynashape results {out} --report {plan.report or 'PAGE.md'}` "
              "(it keeps that page's plan block; --controls DIR names the controls' folder)", flush=True)  # fmt: skip
        return
    try:
        _write_results(out, report)
    except ValueError as error:  # ControlsError, EvaluationMismatchError, no plan block
        print(f"results: the {plan.page} page was not written: {error}", flush=True)


def _check_rows(template: Any, plan: Any, rows: dict[str, Sequence[str]], seed: int, train_kw: dict[str, Any]) -> None:
    """Refuse what a comparison's runs would refuse, before it writes anything: the model and data once (every
    run shares them), each row's preset, fixed value and shaper parameters (``best_global``: each candidate)."""
    from dynashape.study.compare import BEST_GLOBAL, RunSpec, spec_config
    from dynashape.study.roles import roles_of
    from dynashape.train.run import check_runnable, check_shaper

    configs = [
        spec_config(RunSpec(method=plan.preset(row), regime=regime, seed=seed, overrides=point), template, train_kw)
        for regime, names in rows.items()
        for name in names
        for row, point in (
            [(m, {}) for m in roles_of(plan).best_global_among] if name == BEST_GLOBAL
            else [(name, plan.fixed.get(f"{regime}/{name}", {}))]
        )
    ]  # fmt: skip
    if configs:
        check_runnable(configs[0])
    for cfg in configs[1:]:
        check_shaper(cfg)


def _write_results(out: Path, report: str | None, *, deviating: bool = False, controls: str | None = None) -> None:
    from dynashape.study.pages import write_page

    paths = write_page(out, Path(report) if report else out / "results.md", deviating=deviating, controls=controls)
    print("results: " + ", ".join(str(p) for p in paths), flush=True)


def run_results(args: argparse.Namespace) -> int:
    _write_results(Path(args.out), args.report, deviating=args.deviating, controls=args.controls)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import evaluate_held_out, prompt_format
    from dynashape.train.export import load_run
    from dynashape.train.run import truncated_at

    def with_overrides(cfg: Any) -> Any:
        eval_keys = [f.name for f in dataclasses.fields(cfg.eval)]
        eval_cfg = _replace("eval", cfg.eval, _section_overrides(args.set or [], "eval", eval_keys, "eval"))
        if args.samples is not None:
            eval_cfg = dataclasses.replace(eval_cfg, n_samples=args.samples)
        return dataclasses.replace(cfg, eval=eval_cfg)

    cfg, base, latest = load_run(args.run_dir, adjust=with_overrides)
    with MathVerifier(workers=1) as verifier:
        fmt = prompt_format(cfg, base.tokenizer, base.world)
        result = evaluate_held_out(cfg, base, verifier, fmt=fmt, progress=not args.no_progress)
    result["checkpoint"] = str(latest) if latest else "base"
    budget = cfg.train.max_new_tokens  # the budget the run trained at, whatever its regime
    result["regime"] = {"name": cfg.train.regime, "budget": budget, "truncated_at_budget": truncated_at(result, budget)}
    print(json.dumps(result, indent=1))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from dynashape.train.export import export_run

    out = export_run(args.run_dir, args.out, step=args.step)
    print(f"exported {args.run_dir} to {out}; evaluate it with: dynashape evaluate --model {out} --data ... --out ...")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from dynashape.core.text import counted
    from dynashape.evaluate.benchmarks import parse_data
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_with_base
    from dynashape.runtime.prompts import PromptConfig

    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    protocol = get_protocol(args.protocol).with_overrides(
        samples=args.samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    prompt_keys = [f.name for f in dataclasses.fields(PromptConfig)]
    prompt = _replace("prompt", PromptConfig(), _section_overrides(args.set or [], "prompt", prompt_keys, "evaluate"))
    results = evaluate_with_base(
        args.model,
        parse_data(args.data),
        protocol,
        Path(args.out),
        base=args.base,
        plots=not args.no_plots,
        backend=args.backend,
        device=args.device,
        batch_size=args.batch_size,
        max_problems=args.max_problems,
        prompt=prompt,
        progress=not args.no_progress,
        log=lambda line: print(line, flush=True),
    )
    overall = results["overall"]
    aes = overall.get("aes")
    print(
        f"{args.protocol}: accuracy {overall['accuracy']:.3f}, mean length {overall['mean_length']:.1f} "
        f"(unweighted over {counted(overall['n_benchmarks'], 'benchmark')})"
        + ("" if args.base is None else f", AES {'n/a' if aes is None else round(aes['value'], 4)}")
        + f"; {Path(args.out) / 'results.md'}"
    )
    return 0


def run_audit(args: argparse.Namespace) -> int:
    from dynashape.study.audit import run_audit

    audit = run_audit(
        Path(args.run_dir),
        samples=args.samples,
        warmup_steps=args.warmup_steps,
        device=args.device,
        cache_dir=args.cache_dir,
        rules_out=Path(args.write_rules) if args.write_rules else None,
        docs=Path(args.docs) if args.docs else None,
        progress=not args.no_progress,
    )
    b = audit["budgets"]
    print(
        f"audit: accuracy {audit['accuracy']:.3f}, mean length {audit['mean_length']:.1f}; budgets tight "
        f"{b['tight']}, loose {b['loose']}; {Path(args.run_dir) / 'audit.md'}"
    )
    return 0


def run_report(args: argparse.Namespace) -> int:
    from dynashape.train.report import write_report

    print(write_report(args.run_dir, results=_results_path(args)))
    return 0


def run_warmup(args: argparse.Namespace) -> int:
    from dynashape.train.config import RunConfig
    from dynashape.train.rebuild import rebuild_base
    from dynashape.train.warmup import BASES

    if args.base not in BASES:
        raise SystemExit(f"dynashape warmup: --base must be one of {', '.join(BASES)}, got {args.base!r}")
    report = rebuild_base(
        out=Path(args.out) if args.out else None,
        device=args.device,
        progress=not args.no_progress,
        cfg=RunConfig(warmup=BASES[args.base]),
    )
    print(report.summary())
    return 0 if report.equal in (True, None) else 1


def run_doctor(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        print("SKIP verl plugin: verl is not installed in this environment")
        return 0
    from dynashape.integrations.verl.doctor import run_check

    return run_check()


def run_model(args: argparse.Namespace) -> int:
    from dynashape.runtime.models import save_packaged_model

    out = save_packaged_model(args.name, args.out)
    print(f"saved {args.name} to {out}; train it with: dynashape train --model {out} --data gsm8k")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": run_train,
    "compare": run_compare,
    "results": run_results,
    "eval": run_eval,
    "evaluate": run_evaluate,
    "export": run_export,
    "report": run_report,
    "doctor": run_doctor,
    "model": run_model,
    "audit": run_audit,
    "warmup": run_warmup,
}
"""A subcommand's name -> what runs it (its exit status)."""
