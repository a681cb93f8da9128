"""A training run, top to bottom: base model and its evaluation, resume, the RL loop, final evaluation, report.

A run holds its folder's lock from start to end: a second ``train`` on the same folder is refused
(``FolderBusyError``, naming the holder's pid). Starting a run on a folder that has checkpoints continues from
the last one; the resumed steps reproduce the uninterrupted run's metrics exactly on CPU (same RNG states, data
position, optimiser and shaper state). metrics.jsonl drops the steps after that checkpoint and tb/ gets a new
event file that tells TensorBoard to drop them too, so both hold each step once. The folder's files are
described in ``run_folder``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.io.provenance import code_version, numeric_platform
from dynashape.runtime.model_folder import check_model_folder
from dynashape.train import checkpoint as ckpt
from dynashape.train.base_model import (
    Base,
    base_eval_for_run,
    evaluate_held_out,
    load_base,
    prompt_format,
    validation_problems,
    world_of,
)
from dynashape.train.config import RunConfig
from dynashape.train.run_folder import RunFolder, read_metrics
from dynashape.train.signals import RunInterrupted, stop_requests
from dynashape.world import World

__all__ = ["RunResult", "check_runnable", "check_shaper", "read_metrics", "run_summary", "train", "truncated_at"]

log = logging.getLogger(__name__)

AES_CONSTANTS = {"alpha": 1.0, "beta": 3.0, "gamma": 5.0, "on": "averages"}
"""The AES of eval.json: the LEAD paper's constants, on the averages over the held-out split."""


@dataclass
class RunResult:
    run_dir: Path
    eval: dict[str, Any] | None
    metrics: list[dict[str, float]]
    resumed_from: int | None


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    progress: bool = True,
    stop_after: int | None = None,
    on_step: Callable[[dict[str, float]], None] | None = None,
    verifier: Any = None,
    report: bool = True,
    results: str | Path | None = None,
) -> RunResult:
    """Run (or resume) the RL training of ``cfg`` in ``run_dir``; evaluate and report at the end.

    Args:
        stop_after: stop after this many steps of this invocation, without the final evaluation (what an
            interrupted run leaves behind; tests use it).
        on_step: called with every step's metrics.
        verifier: object with ``verify(golds, responses)`` (default: a ``MathVerifier``); tests and custom
            rewards pass their own.
        report: write report.md and its plots at the end.
        results: a comparison's results.json, for the report's plain-GRPO reference line.
    """
    from dynashape.rewards import MathVerifier

    # before the first file is written (no lock, no config.yaml, no cache): a refused run leaves nothing behind
    world = check_runnable(cfg)
    folder = RunFolder(run_dir)
    folder.check_resumable(cfg.to_dict())
    start_wall = time.perf_counter()
    own_verifier = verifier is None
    with contextlib.ExitStack() as owned:  # the verifier this call starts is closed on every way out
        if own_verifier:
            verifier = owned.enter_context(MathVerifier(timeout=5.0, workers=1))
        folder.create()
        owned.enter_context(folder.lock())  # one run per folder, released on every way out (also a kill)
        folder.remove_stale_temporaries()
        cfg_hash = folder.write_config(cfg.to_dict())
        base = load_base(cfg, progress=progress, world=world)
        fmt = prompt_format(cfg, base.tokenizer, base.world)
        base_eval = base_eval_for_run(
            folder, cfg, base, verifier, own_verifier=own_verifier, fmt=fmt, progress=progress
        )
        trainer = _trainer(cfg, base, verifier, fmt)
        owned.callback(trainer.shaper.close)  # MEDS refit workers stop on every way out
        resumed_from, metrics = _resume(folder, trainer, cfg, cfg_hash)

        if trainer.step_index >= cfg.train.steps:  # a finished run: report what it measured
            previous = folder.read_eval()
            if (
                previous
                and previous.get("steps") == trainer.step_index
                and previous.get("split", "test") == cfg.eval.split
            ):
                return RunResult(folder.root, previous, metrics, resumed_from)
        # which code, on which CPU kernels, trained which steps: a study resumed across sessions must be able to say
        folder.append_history(
            {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "from_step": trainer.step_index}
            | code_version()
            | numeric_platform()
        )
        _train_steps(folder, trainer, cfg, cfg_hash, metrics, progress=progress, stop_after=stop_after, on_step=on_step)
        if trainer.step_index < cfg.train.steps:
            return RunResult(folder.root, None, metrics, resumed_from)

        final_eval, eval_seconds = _final_eval(cfg, base, verifier, fmt, progress)
        result = run_summary(cfg, trainer.step_index, base_eval, final_eval, metrics, base.meta, resumed_from)
        if cfg.train.budget_prompt.eval_budgets:  # L1's fixed-budget evaluation, on the prompts without one
            from dynashape.train.budget_following import evaluate_at_budgets

            start = time.perf_counter()
            held_out = base.world.split(cfg.eval.split)
            result["at_budget"] = evaluate_at_budgets(cfg, base.model, base.tokenizer, held_out, verifier, fmt=fmt)
            eval_seconds += time.perf_counter() - start
        result["wall_seconds"] = time.perf_counter() - start_wall
        result["final_eval_seconds"] = eval_seconds
        folder.write_eval(result)
        if report:
            _report(folder.root, results)
        return RunResult(folder.root, result, metrics, resumed_from)


# ----------------------------------------------------------------------------------------------- phases
def check_runnable(cfg: RunConfig) -> World:
    """Refuse, before anything is written or warmed up, what the run would refuse later, and return the run's
    world (read once here, so the data is not read twice): the model folder (``--model``), the data and the
    splits the run reads (``--data``, ``eval.split``), and the shaper's parameters (its config dataclass
    validates them; an unknown name is a ValueError naming it)."""
    if cfg.model_path is not None:
        check_model_folder(cfg.model_path, "--model")
    check_shaper(cfg)
    world = world_of(cfg)
    for split in dict.fromkeys(("train", cfg.eval.split)):
        try:
            world.split(split)
        except OSError as err:  # an unreadable file: one line naming it
            raise ValueError(f"--data {cfg.data_path!r}: cannot be read ({err.strerror or err})") from None
    return world


def check_shaper(cfg: RunConfig) -> None:
    """Refuse shaper parameters the shaper's config dataclass refuses, naming the shaper."""
    from dynashape.shapers import config_class

    try:
        config_class(cfg.train.shaper)(**cfg.train.shaper_kwargs)
    except (TypeError, ValueError) as err:  # an unknown keyword, a value out of range
        raise ValueError(f"shaper_kwargs of {cfg.train.shaper!r}: {err}") from None


def _trainer(cfg: RunConfig, base: Base, verifier: Any, fmt: Any) -> Any:
    from dynashape.train.loop import Trainer

    ref_model = None
    if cfg.train.kl_coef > 0:
        ref_model = copy.deepcopy(base.model).eval()
        ref_model.requires_grad_(False)
    return Trainer(
        base.model,
        base.tokenizer,
        base.train,
        cfg.train,
        verifier,
        ref_model=ref_model,
        device=cfg.device,
        prompt_format=fmt,
        validation=validation_problems(cfg, base.world) if _samples_validation(cfg) else (),
    )


def _samples_validation(cfg: RunConfig) -> bool:
    """Does the run sample the validation split while it trains (validations, a shaper's monitor set)?"""
    from dynashape.shapers import shaper_needs

    return bool(cfg.train.validation_every) or shaper_needs(cfg.train.shaper).monitor_rollouts


def _resume(folder: RunFolder, trainer: Any, cfg: RunConfig, cfg_hash: str) -> tuple[int | None, list[dict]]:
    """Restore the newest readable checkpoint into ``trainer``; keep the metrics of the steps it covers.

    A newest checkpoint that cannot be read (torn, tampered) is set aside with a warning and the one before it
    is used; a checkpoint of another config is refused, never skipped."""
    resumed_from = None
    metrics = folder.read_metrics()
    saved = None
    for path in ckpt.checkpoints_newest_first(folder.checkpoints):
        try:
            saved = ckpt.load(path, cfg_hash=cfg_hash, map_location=cfg.device)
            break
        except ckpt.ForeignCheckpointError:
            raise
        except ckpt.CheckpointError as err:
            log.warning("%s; set aside as %s, resuming from the checkpoint before it", err, ckpt.set_aside(path).name)
    if saved is not None:
        ckpt.restore(saved, model=trainer.model, optimizer=trainer.optimizer, load_state=trainer.load_state_dict)
        resumed_from = saved.step
    elif metrics:
        log.warning("%s has metrics but no checkpoint; starting over", folder.root)
    metrics = [m for m in metrics if m["step"] <= trainer.step_index]  # drop steps after the checkpoint
    folder.rewrite_metrics(metrics)
    return resumed_from, metrics


def _train_steps(
    folder: RunFolder,
    trainer: Any,
    cfg: RunConfig,
    cfg_hash: str,
    metrics: list[dict[str, float]],
    *,
    progress: bool,
    stop_after: int | None,
    on_step: Callable[[dict[str, float]], None] | None,
) -> None:
    """Steps until ``cfg.train.steps`` (or ``stop_after`` of them); each step's metrics are on disk (jsonl,
    TensorBoard) before the next begins; checkpoints every ``checkpoint_every`` steps and at the end."""
    import json

    from dynashape.runtime.progress import progress_bar

    total, every = cfg.train.steps, cfg.train.checkpoint_every
    writer = folder.tensorboard(first_step=trainer.step_index + 1)
    bar = progress_bar(total, f"train {cfg.train.method}", progress)
    if bar:
        bar.update(trainer.step_index)
    done_here = 0
    try:
        with state.appending(folder.metrics_path) as out, stop_requests() as stop:
            while trainer.step_index < total and (stop_after is None or done_here < stop_after):
                m = trainer.step().metrics
                done_here += 1
                metrics.append(m)
                out.write(json.dumps(m) + "\n")
                out.flush()
                if writer is not None:  # every metric but the step itself, at its step, on disk now
                    for k, v in m.items():
                        if k != "step":
                            writer.add_scalar(k, v, trainer.step_index)
                    writer.flush()
                if bar:
                    bar.update(1)
                    bar.set_postfix(_postfix(m))
                if on_step is not None:
                    on_step(m)
                if trainer.step_index == total or (every and trainer.step_index % every == 0) or stop:
                    folder.save_checkpoint(trainer, cfg_hash)
                if stop:
                    raise RunInterrupted(folder.root, trainer.step_index, stop[0])
    finally:  # also on an exception or Ctrl-C
        if bar:
            bar.close()
        if writer is not None:
            writer.close()


def _final_eval(cfg: RunConfig, base: Base, verifier: Any, fmt: Any, progress: bool) -> tuple[dict, float]:
    """The trained model's held-out evaluation (the base model object was trained in place) and its seconds."""
    start = time.perf_counter()
    result = evaluate_held_out(cfg, base, verifier, fmt=fmt, progress=progress, desc="eval final")
    return result, time.perf_counter() - start


def _report(run_dir: Path, results: str | Path | None) -> None:
    try:
        from dynashape.train.report import write_report

        write_report(run_dir, results=results)
    except ImportError as err:  # matplotlib missing: the run itself is complete
        log.warning("no report written: %s", err)


# ------------------------------------------------------------------------------------------------ summary
def truncated_at(ev: dict[str, Any], budget: int) -> float | None:
    """Share of the evaluation's responses longer than ``budget`` (from its length histogram)."""
    hist = ev.get("length_histogram")
    if not hist:
        return None
    total = sum(hist.values())
    return sum(c for length, c in hist.items() if int(length) > budget) / max(total, 1)


def run_summary(
    cfg: RunConfig,
    steps: int,
    base_eval: dict[str, Any],
    final_eval: dict[str, Any],
    metrics: list[dict[str, float]],
    base_meta: dict[str, Any],
    resumed_from: int | None,
) -> dict[str, Any]:
    """eval.json's content (without its timings): base vs final, AES, the lambda trajectory of LEAD runs, and the
    tokens the run sampled in all (``tokens_sampled``: prompt and response tokens of every rollout drawn, and the
    sampling rounds; ``step_metrics.TokenCount``)."""
    from dynashape.core.metrics import aes

    budget = cfg.train.max_new_tokens
    for ev in (base_eval, final_eval):  # how much of the held-out output the training budget would cut
        ev["truncated_at_budget"] = truncated_at(ev, budget)
    score = None  # AES is undefined for a base model with zero accuracy or zero length
    if base_eval["accuracy"] > 0 and base_eval["mean_length"] > 0:
        score = aes(final_eval["accuracy"], final_eval["mean_length"], base_eval["accuracy"], base_eval["mean_length"])
    result = {
        "method": cfg.train.method,
        "steps": steps,
        "base": base_eval,
        "final": final_eval,
        "aes": None if score is None else score.value,
        "aes_constants": dict(AES_CONSTANTS),
        "length_ratio": final_eval["mean_length"] / max(base_eval["mean_length"], 1e-9),
        "accuracy_delta": final_eval["accuracy"] - base_eval["accuracy"],
        "wall_seconds": None,
        "final_eval_seconds": None,
        "train_seconds": sum(m.get("time/step", 0.0) for m in metrics),
        "base_model": base_meta,
        "resumed_from": resumed_from,
        "budget": budget,
        "regime": cfg.train.regime,
        "split": cfg.eval.split,
        "seed": cfg.train.seed,
    }
    if metrics and "tokens/prompt_total" in metrics[-1]:  # absent for a run resumed from an older checkpoint
        last = metrics[-1]
        result["tokens_sampled"] = {
            "prompt": int(last["tokens/prompt_total"]),
            "response": int(last["tokens/response_total"]),
            "sampling_rounds": int(last["sampling_rounds_total"]),
        }
    lam = [(m["step"], m["lead/lambda_c"], m["lead/lambda_l"]) for m in metrics if "lead/lambda_l" in m]
    if lam:
        result["lambda_trajectory"] = {
            "step": [s for s, _, _ in lam],
            "lambda_c": [c for _, c, _ in lam],
            "lambda_l": [x for _, _, x in lam],
        }
    return result


def _postfix(m: dict[str, float]) -> dict[str, str]:
    out = {"acc": f"{m.get('accuracy', float('nan')):.2f}", "len": f"{m.get('length/mean', float('nan')):.1f}"}
    if "lead/lambda_l" in m:
        out["lam_l"] = f"{m['lead/lambda_l']:.2f}"
    return out
