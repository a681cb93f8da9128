"""A training run and its folder: config, base model, evaluation, the RL loop, checkpoints, resume, report.

    run_dir/config.yaml          resolved RunConfig
    run_dir/metrics.jsonl        one line per RL step
    run_dir/checkpoints/step_N/  model, optimiser, RNG, data position, shaper state
    run_dir/eval_base.json       the base model's held-out evaluation (and its seconds), written before training
    run_dir/eval.json            base vs final on the held-out split, AES
    run_dir/report.md, *.png     plots (``dynashape.report``)
    run_dir/tb/                  TensorBoard scalars, when tensorboard is installed (``dynashape[tensorboard]``)

Starting a run on a folder that has checkpoints continues from the last one; the resumed steps reproduce
the uninterrupted run's metrics exactly on CPU (same RNG states, data position, optimiser and shaper state).
metrics.jsonl drops the steps after that checkpoint and tb/ gets a new event file that tells TensorBoard to
drop them too, so both hold each step once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dynashape.train import checkpoint as ckpt
from dynashape.train.config import RunConfig
from dynashape.train.task import Problem, world_splits

__all__ = ["RunResult", "default_cache_dir", "load_base", "prompt_format", "read_metrics", "train"]

log = logging.getLogger(__name__)
TIME_PREFIX = "time/"


@dataclass
class RunResult:
    run_dir: Path
    eval: dict[str, Any] | None
    metrics: list[dict[str, float]]
    resumed_from: int | None


def default_cache_dir() -> Path:
    """``$DYNASHAPE_CACHE`` or ``~/.cache/dynashape``."""
    return Path(os.environ.get("DYNASHAPE_CACHE", Path.home() / ".cache" / "dynashape"))


def _problems(cfg: RunConfig) -> tuple[list[Problem], list[Problem]]:
    """Training problems and the held-out split ``cfg.eval.split`` evaluates."""
    if cfg.data_path is not None:
        from dynashape.train.data import load_dataset_problems

        if cfg.eval.split != "test":
            raise ValueError(f"eval.split={cfg.eval.split!r}: a dataset (data_path) has a test split only")
        return load_dataset_problems(cfg.data_path, seed=cfg.task.seed)
    splits = world_splits(cfg.task)
    return splits.train, getattr(splits, cfg.eval.split)


def load_base(
    cfg: RunConfig, *, progress: bool = False
) -> tuple[torch.nn.Module, Any, list[Problem], list[Problem], dict[str, Any]]:
    """Base model, tokenizer, train and held-out problems (of ``cfg.eval.split``), and where the base came from."""
    from dynashape.train.policy import load_or_train_base, load_pretrained

    train_problems, test_problems = _problems(cfg)
    if cfg.model_path is not None:
        model, tokenizer = load_pretrained(cfg.model_path, device=cfg.device)
        return model, tokenizer, train_problems, test_problems, {"source": cfg.model_path, "cache": None}
    bar = _bar(cfg.warmup.steps, "warm-up", progress)
    model, tokenizer, info = load_or_train_base(
        cfg.task,
        cfg.model,
        cfg.warmup,
        train_problems,
        cache_dir=cfg.cache_dir or default_cache_dir(),
        device=cfg.device,
        on_step=lambda step, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")) if bar else None,
    )
    if bar:
        bar.close()
    meta = {
        "source": "warm-up",
        "cache": str(info.path),
        "key": info.key,
        "trained_now": info.trained_now,
        "warmup_seconds": info.seconds,
        "warmup_final_loss": info.losses[-1] if info.losses else None,
    }
    return model, tokenizer, train_problems, test_problems, meta


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from dynashape.train.progress import progress_bar

    return progress_bar(total, desc, enabled)


def prompt_format(cfg: RunConfig, tokenizer: Any) -> Any:
    """How this run turns problems into prompts: ``cfg.prompt`` on ``tokenizer``; a dataset's default suffix
    asks for a boxed answer, the toy's is empty (its prompts are unchanged)."""
    from dynashape.train.prompts import BOXED_INSTRUCTION, PromptFormat

    default_suffix = "" if cfg.data_path is None else BOXED_INSTRUCTION
    return PromptFormat(tokenizer, cfg.prompt, default_suffix=default_suffix)


def _eval_key(cfg: RunConfig, test: list[Problem], fmt: Any = None) -> str:
    from dynashape.report.evaluation import EVAL_FORMAT

    problems = [(p.prompt if fmt is None else fmt.render(p.prompt), p.answer) for p in test]
    # EVAL_FORMAT: a cached evaluation of an older layout (without per-problem results) is computed again
    blob = json.dumps({"eval": cfg.to_dict()["eval"], "problems": problems, "format": EVAL_FORMAT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def evaluate_base(
    cfg: RunConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    test: list[Problem],
    verifier: Any,
    base: dict,
    *,
    use_cache: bool = True,
    fmt: Any = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The base model's held-out evaluation, cached next to the cached base model (shared by all presets).

    The cache key hashes the evaluation config and the prompts as the model sees them (``fmt``).
    """
    from dynashape.report.evaluation import evaluate

    path = None
    if base.get("cache") and use_cache:
        path = Path(base["cache"]) / f"eval-{_eval_key(cfg, test, fmt)}.json"
        if path.exists():
            return json.loads(path.read_text())
    result = evaluate(
        model,
        tokenizer,
        test,
        cfg.eval,
        verifier,
        device=cfg.device,
        prompt_format=fmt,
        progress=progress,
        desc="eval base",
    )
    if path is not None:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
    return result


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_config(run_dir: Path, cfg: RunConfig) -> str:
    """Write config.yaml; if the folder already has one of a different trajectory, refuse."""
    import yaml

    resolved = cfg.to_dict()
    cfg_hash = ckpt.config_hash(resolved)
    path = run_dir / "config.yaml"
    if path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        if ckpt.config_hash(old) != cfg_hash:
            raise ckpt.CheckpointError(
                f"{path} holds a different config than this run (only train.steps and "
                "train.checkpoint_every may change on resume); use a new run folder"
            )
    path.write_text(yaml.safe_dump(resolved, sort_keys=False))
    return cfg_hash


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    progress: bool = True,
    stop_after: int | None = None,
    on_step: Callable[[dict[str, float]], None] | None = None,
    verifier: Any = None,
    report: bool = True,
) -> RunResult:
    """Run (or resume) the RL training of ``cfg`` in ``run_dir``; evaluate and report at the end.

    Args:
        stop_after: stop after this many steps of this invocation, without the final evaluation (what an
            interrupted run leaves behind; tests use it).
        on_step: called with every step's metrics.
        verifier: object with ``verify(golds, responses)`` (default: a ``MathVerifier``); tests and custom
            rewards pass their own.
        report: write report.md and its plots at the end.
    """
    from dynashape.rewards import MathVerifier

    start_wall = time.perf_counter()
    own_verifier = verifier is None
    with contextlib.ExitStack() as owned:  # the verifier this call starts is closed on every way out
        if own_verifier:
            verifier = owned.enter_context(MathVerifier(timeout=5.0, workers=1))
        return _train(
            cfg,
            Path(run_dir),
            verifier,
            own_verifier=own_verifier,
            progress=progress,
            stop_after=stop_after,
            on_step=on_step,
            report=report,
            start_wall=start_wall,
        )


def _train(
    cfg: RunConfig,
    run_dir: Path,
    verifier: Any,
    *,
    own_verifier: bool,
    progress: bool,
    stop_after: int | None,
    on_step: Callable[[dict[str, float]], None] | None,
    report: bool,
    start_wall: float,
) -> RunResult:
    """``train`` with its verifier open."""
    from dynashape.metrics import aes
    from dynashape.report.evaluation import evaluate
    from dynashape.train.loop import Trainer

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_hash = _write_config(run_dir, cfg)
    model, tokenizer, train_problems, test_problems, base = load_base(cfg, progress=progress)
    # A caller's own verifier may judge differently: its base evaluation is not cached.
    fmt = prompt_format(cfg, tokenizer)
    base_eval = _run_base_eval(
        run_dir,
        cfg,
        model,
        tokenizer,
        test_problems,
        verifier,
        base,
        own_verifier=own_verifier,
        fmt=fmt,
        progress=progress,
    )

    ref_model = None
    if cfg.train.kl_coef > 0:
        import copy

        ref_model = copy.deepcopy(model).eval()
        ref_model.requires_grad_(False)
    trainer = Trainer(
        model, tokenizer, train_problems, cfg.train, verifier, ref_model=ref_model, device=cfg.device, prompt_format=fmt
    )

    # -- resume ------------------------------------------------------------------------------------------
    ckpt_dir = run_dir / "checkpoints"
    resumed_from = None
    latest = ckpt.latest_checkpoint(ckpt_dir)
    metrics = read_metrics(run_dir)
    if latest is not None:
        state = ckpt.load(latest, cfg_hash=cfg_hash, map_location=cfg.device)
        model.load_state_dict(state.model)
        trainer.optimizer.load_state_dict(state.optimizer)
        trainer.load_state_dict(state.state)
        resumed_from = state.step
    elif metrics:
        log.warning("%s has metrics but no checkpoint; starting over", run_dir)
    metrics = [m for m in metrics if m["step"] <= trainer.step_index]  # drop steps after the checkpoint
    _rewrite_metrics(run_dir, metrics)

    total = cfg.train.steps
    done = run_dir / "eval.json"
    if trainer.step_index >= total and done.exists():  # a finished run: report what it measured
        previous = json.loads(done.read_text())
        if previous.get("steps") == trainer.step_index and previous.get("split", "test") == cfg.eval.split:
            return RunResult(run_dir, previous, metrics, resumed_from)
    writer = _tensorboard(run_dir, first_step=trainer.step_index + 1)
    bar = _bar(total, f"train {cfg.train.method}", progress)
    if bar:
        bar.update(trainer.step_index)
    done_here = 0
    try:
        with (run_dir / "metrics.jsonl").open("a") as out:
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
                every = cfg.train.checkpoint_every
                if trainer.step_index == total or (every and trainer.step_index % every == 0):
                    _save(ckpt_dir, trainer, cfg_hash)
    finally:  # also on an exception or Ctrl-C
        if bar:
            bar.close()
        if writer is not None:
            writer.close()
    if trainer.step_index < total:
        return RunResult(run_dir, None, metrics, resumed_from)

    eval_start = time.perf_counter()
    final_eval = evaluate(
        model,
        tokenizer,
        test_problems,
        cfg.eval,
        verifier,
        device=cfg.device,
        prompt_format=fmt,
        progress=progress,
        desc="eval final",
    )
    eval_seconds = time.perf_counter() - eval_start
    budget = cfg.train.max_new_tokens
    for ev in (base_eval, final_eval):  # how much of the held-out output the training budget would cut
        ev["truncated_at_budget"] = _truncated_at(ev, budget)
    score = None  # AES is undefined for a base model with zero accuracy or zero length
    if base_eval["accuracy"] > 0 and base_eval["mean_length"] > 0:
        score = aes(final_eval["accuracy"], final_eval["mean_length"], base_eval["accuracy"], base_eval["mean_length"])
    result = {
        "method": cfg.train.method,
        "steps": trainer.step_index,
        "base": base_eval,
        "final": final_eval,
        "aes": None if score is None else score.value,
        "aes_constants": {"alpha": 1.0, "beta": 3.0, "gamma": 5.0, "on": "averages"},
        "length_ratio": final_eval["mean_length"] / max(base_eval["mean_length"], 1e-9),
        "accuracy_delta": final_eval["accuracy"] - base_eval["accuracy"],
        "wall_seconds": time.perf_counter() - start_wall,
        "final_eval_seconds": eval_seconds,
        "train_seconds": sum(m.get("time/step", 0.0) for m in metrics),
        "base_model": base,
        "resumed_from": resumed_from,
        "budget": budget,
        "regime": cfg.train.regime,
        "split": cfg.eval.split,
        "seed": cfg.train.seed,
    }
    lam = [(m["step"], m["lead/lambda_c"], m["lead/lambda_l"]) for m in metrics if "lead/lambda_l" in m]
    if lam:
        result["lambda_trajectory"] = {
            "step": [s for s, _, _ in lam],
            "lambda_c": [c for _, c, _ in lam],
            "lambda_l": [x for _, _, x in lam],
        }
    (run_dir / "eval.json").write_text(json.dumps(result, indent=1))
    if report:
        try:
            from dynashape.report.markdown import write_report

            write_report(run_dir)
        except ImportError as err:  # matplotlib missing: the run itself is complete
            log.warning("no report written: %s", err)
    return RunResult(run_dir, result, metrics, resumed_from)


def _run_base_eval(
    run_dir: Path,
    cfg: RunConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    test: list[Problem],
    verifier: Any,
    base: dict,
    *,
    own_verifier: bool,
    fmt: Any,
    progress: bool,
) -> dict[str, Any]:
    """The base evaluation, written to ``run_dir/eval_base.json`` as soon as it exists (before any training
    step), and read back from there when the run is started again (a real model's evaluation takes minutes).

    The file holds the evaluation's result and its ``eval_key`` (evaluation config and prompts); a caller's
    own verifier (tests) always evaluates anew, as it does for the shared cache.
    """
    path = run_dir / "eval_base.json"
    key = _eval_key(cfg, test, fmt)
    if own_verifier and path.exists():
        try:
            stored = json.loads(path.read_text())
        except json.JSONDecodeError:  # a torn write of an older version: evaluate again
            stored = {}
        stored.pop("seconds", None)
        if stored.pop("eval_key", None) == key:
            return stored
    start = time.perf_counter()
    result = evaluate_base(
        cfg, model, tokenizer, test, verifier, base, use_cache=own_verifier, fmt=fmt, progress=progress
    )
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({**result, "eval_key": key, "seconds": time.perf_counter() - start}, indent=1))
    tmp.replace(path)
    return result


def _truncated_at(ev: dict[str, Any], budget: int) -> float | None:
    """Share of the evaluation's responses longer than ``budget`` (from its length histogram)."""
    hist = ev.get("length_histogram")
    if not hist:
        return None
    total = sum(hist.values())
    return sum(c for length, c in hist.items() if int(length) > budget) / max(total, 1)


def run_audit(
    run_dir: Path,
    *,
    samples: int = 8,
    warmup_steps: int | None = None,
    device: str = "cpu",
    cache_dir: str | None = None,
    write_rules: bool = False,
    docs: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Audit the default world's base model on the validation split; write audit.json / audit.md to
    ``run_dir`` and, with ``write_rules``, the budget rules (``train/world_rules.json``) and ``docs``."""
    import dataclasses

    from dynashape.report.evaluation import sample_responses
    from dynashape.rewards import MathVerifier
    from dynashape.train.audit import audit_markdown, audit_samples, eval_cap
    from dynashape.train.audit import write_rules as save_rules
    from dynashape.train.task import world_splits

    cfg = RunConfig(device=device, cache_dir=cache_dir)
    if warmup_steps is not None:
        cfg = dataclasses.replace(cfg, warmup=dataclasses.replace(cfg.warmup, steps=warmup_steps))
    model, tokenizer, _, _, base = load_base(cfg, progress=progress)
    validation = world_splits(cfg.task).validation
    start = time.perf_counter()
    with MathVerifier(timeout=5.0, workers=1) as verifier:
        s = sample_responses(
            model,
            tokenizer,
            validation,
            verifier,
            n=samples,
            max_new_tokens=cfg.eval.max_new_tokens,
            temperature=cfg.eval.temperature,
            seed=cfg.eval.seed,
            batch_size=cfg.eval.batch_size,
            fingerprint_layers=4,
            device=device,
        )
    audit = audit_samples(s)
    audit["eval_cap_sampled"] = cfg.eval.max_new_tokens
    audit["base_model"] = base
    audit["seconds"] = time.perf_counter() - start
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "audit.json").write_text(json.dumps(audit, indent=1))
    text = audit_markdown(audit, header="## Audit of the base model (`dynashape audit --write-rules`)\n")
    (run_dir / "audit.md").write_text(text)
    if write_rules:
        cap = eval_cap(audit["budgets"]["loose"], cfg.eval.max_new_tokens)
        save_rules(audit, base_key=base.get("key"), cap=cap)
        if docs is not None:
            _write_world_doc(docs, text)
    return audit


def _write_world_doc(path: Path, audit_text: str) -> None:
    """Replace the audit section of docs/world.md (between its markers) with ``audit_text``."""
    begin, end = "<!-- audit:begin -->", "<!-- audit:end -->"
    old = path.read_text() if path.exists() else f"# The toy world\n\n{begin}\n{end}\n"
    if begin not in old:
        old += f"\n{begin}\n{end}\n"
    head, rest = old.split(begin, 1)
    tail = rest.split(end, 1)[1] if end in rest else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{head}{begin}\n{audit_text}{end}{tail}")


def _save(ckpt_dir: Path, trainer: Any, cfg_hash: str) -> None:
    if (ckpt_dir / f"step_{trainer.step_index}").exists():
        return  # already written by an earlier invocation (resume right at a checkpoint)
    ckpt.save(
        ckpt_dir,
        step=trainer.step_index,
        model=trainer.model,
        optimizer=trainer.optimizer,
        state=trainer.state_dict(),
        cfg_hash=cfg_hash,
    )


def _rewrite_metrics(run_dir: Path, metrics: list[dict[str, float]]) -> None:
    path = run_dir / "metrics.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(m) + "\n" for m in metrics))
    tmp.replace(path)


def _postfix(m: dict[str, float]) -> dict[str, str]:
    out = {"acc": f"{m.get('accuracy', float('nan')):.2f}", "len": f"{m.get('length/mean', float('nan')):.1f}"}
    if "lead/lambda_l" in m:
        out["lam_l"] = f"{m['lead/lambda_l']:.2f}"
    return out


def _tensorboard(run_dir: Path, *, first_step: int) -> Any:
    """A writer on ``run_dir/tb`` whose steps start at ``first_step``; None when tensorboard is not installed.

    ``purge_step`` writes a restart marker at ``first_step``: TensorBoard drops the events that earlier
    invocations wrote at that step or later (the steps a resume redoes, or a run started over without a
    checkpoint) and keeps the ones before it. (It reads the files in name order, which begins with the second
    each was created in: two invocations started within the same second may not be told apart.)
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(run_dir / "tb"), purge_step=first_step)
