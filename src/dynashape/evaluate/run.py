"""``dynashape evaluate``: sample every benchmark under a protocol, verify, summarise, write the results folder.

    out/results.json       the settings that ran and the numbers (schema in ``evaluate.results``)
    out/generations.jsonl  one line per sample: benchmark, problem_id, sample, correct, length, truncated, text
    out/results.md         the papers' table (benchmarks as columns) and the plots beside it
    out/cache.jsonl        the generation cache a rerun continues from (``evaluate.cache``)
    out/base/              the base model's own results folder, when ``--base`` names a model

A sample is correct when the project's math verifier accepts its final answer and it ended within the cap (a
truncated response counts as wrong, as in the trainer's evaluation).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.evaluate.backends import Item
from dynashape.evaluate.benchmarks import Benchmark
from dynashape.evaluate.cache import GenerationCache, SampleKey, settings_key
from dynashape.evaluate.protocols import Protocol
from dynashape.evaluate.results import add_aes, summarise, summarise_benchmark
from dynashape.evaluate.sampling import pending_batches, sample_pending
from dynashape.evaluate.settings import EvalPlan, check_comparable, plan_evaluation, published, read_base_results
from dynashape.io import state
from dynashape.runtime.model_folder import model_folder_problem, results_folder
from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptConfig, PromptFormat

__all__ = ["RESULTS_FORMAT", "evaluate_checkpoint", "evaluate_with_base"]

RESULTS_FORMAT = 1
"""Layout version of results.json and of the cache's records; part of the cache key."""

FINGERPRINT_LAYERS = 14
"""MEDS's fingerprint: the last 14 decoder layers (MEDS, arXiv 2604.11297), fewer on a shallower model."""


def _make_backend(name: str, model_dir: str, protocol: Protocol, *, device: str, batch_size: int) -> Any:
    from dynashape.evaluate.backends import TransformersBackend, VLLMBackend

    if name == "vllm":
        return VLLMBackend(model_dir, batch_size=batch_size, seed=protocol.seed)
    layers = FINGERPRINT_LAYERS if protocol.eigen_ratio else None
    return TransformersBackend(model_dir, device=device, batch_size=batch_size, fingerprint_layers=layers)


class _Deferred:
    """A backend started on its first ``generate``: a rerun that finds every sample in the cache starts none (vLLM
    takes 15-40 s to start on a CPU). Prompts, batches and the fingerprint flag need no model: the tokenizer is the
    one both backends load (``train.policy.load_tokenizer``) and a backend's ``plan`` reads only its batch size."""

    def __init__(self, name: str, model_dir: str, protocol: Protocol, *, device: str, batch_size: int) -> None:
        from dynashape.evaluate.backends import TransformersBackend, VLLMBackend
        from dynashape.runtime.policy import load_tokenizer

        self._start = (name, model_dir, protocol, {"device": device, "batch_size": batch_size})
        self._cls: Any = VLLMBackend if name == "vllm" else TransformersBackend
        self.gives_fingerprints = self._cls.gives_fingerprints
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(model_dir)
        self._engine: Any = None

    def plan(self, benchmark: str, items: Sequence[Item], seed: int) -> list[Any]:
        return self._cls.plan(self, benchmark, items, seed)

    def generate(self, batch: Any, **kw: Any) -> list[Any]:
        if self._engine is None:
            name, model_dir, protocol, how = self._start
            self._engine = _make_backend(name, model_dir, protocol, **how)
        return self._engine.generate(batch, **kw)

    def fingerprints(self, wrong: np.ndarray) -> np.ndarray | None:
        return None if self._engine is None else self._engine.fingerprints(wrong)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


def evaluate_checkpoint(
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    out_dir: str | Path,
    *,
    backend: str = "auto",
    device: str = "cpu",
    batch_size: int = 32,
    max_problems: int | None = None,
    prompt: PromptConfig | None = None,
    verifier: Any = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    flag: str = "--model",
) -> dict[str, Any]:
    """Evaluate one model folder; write ``out_dir``'s files and return results.json's content.

    Args:
        model_dir: a local Hugging Face causal LM (with its tokenizer and chat template).
        benchmarks: ``evaluate.benchmarks.parse_data``'s benchmarks.
        protocol: the settings (``protocols.get_protocol(...).with_overrides(...)``).
        backend: auto, transformers or vllm (``backends.choose_backend``).
        device: the transformers backend's torch device.
        batch_size: samples per batch (transformers) or prompts per call (vLLM).
        max_problems: keep that many problems per benchmark, evenly spaced (None = all).
        prompt: chat template, suffix and system message, as ``dynashape train``'s ``prompt.*``; the suffix
            defaults to the instruction to box the answer.
        verifier: ``verify(golds, texts) -> verdicts``; default ``rewards.MathVerifier``.
        progress: a bar counting finished batches with an ETA on a terminal, a line every 5 s in a log.
        log: where one-line notes go (the command line prints them).
        flag: how the user named ``model_dir`` (``--model``, ``--base``), for the refusal of a folder that is
            not a model.
    """
    prompt = prompt or PromptConfig()
    plan = plan_evaluation(
        model_dir,
        benchmarks,
        protocol,
        backend=backend,
        device=device,
        batch_size=batch_size,
        max_problems=max_problems,
        prompt=prompt,
        verifier=verifier,
        flag=flag,
    )
    sample = {"prompt": prompt, "verifier": verifier, "progress": progress, "log": log}
    return _sample_and_score(model_dir, benchmarks, protocol, Path(out_dir), plan, **sample)


def _sample_and_score(
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    out: Path,
    plan: EvalPlan,
    *,
    prompt: PromptConfig,
    verifier: Any,
    progress: bool,
    log: Callable[[str], None] | None,
) -> dict[str, Any]:
    """``evaluate_checkpoint`` past its checks: start the backend, sample and score (``_run_batches``), and
    shut the backend down whatever happens."""
    settings = plan.settings
    state.make_folder(out)
    with state.FolderLock(out, what="an evaluation (dynashape evaluate)"):
        start = time.perf_counter()
        engine = _Deferred(
            settings["backend"], model_dir, protocol, device=settings["device"], batch_size=settings["batch_size"]
        )
        try:
            results = _run_batches(
                engine,
                model_dir,
                benchmarks,
                protocol,
                out,
                plan,
                start=start,
                prompt=prompt,
                verifier=verifier,
                progress=progress,
                log=log,
            )
        finally:
            engine.close()  # vLLM's engine processes, now: left to the interpreter's exit they may abort it
    return results


def _run_batches(
    engine: Any,
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    out: Path,
    plan: EvalPlan,
    *,
    start: float,
    prompt: PromptConfig,
    verifier: Any,
    progress: bool,
    log: Callable[[str], None] | None,
) -> dict[str, Any]:
    """``_sample_and_score`` with its engine: sample what the cache lacks, verify, write the folder."""
    from dynashape.runtime.progress import progress_bar

    fmt = PromptFormat(engine.tokenizer, prompt, default_suffix=BOXED_INSTRUCTION)
    key = settings_key({"model": plan.identity, "settings": plan.settings, "format": RESULTS_FORMAT})
    cache = GenerationCache(out / "cache.jsonl", key)
    done = cache.load()
    pending, total = pending_batches(engine, benchmarks, protocol, plan, fmt, done)
    todo = sum(len(batch.items) for _, batch in pending)
    if log is not None:
        log(
            f"{model_dir}: {total - todo} of {total} samples cached, {todo} to sample in "
            f"{len(pending)} {'batch' if len(pending) == 1 else 'batches'} ({plan.settings['backend']})"
        )
    # counted in batches, not samples: a batch's samples mostly finish together near its end (the longest
    # response sets its time), so finished samples stay near 0 for most of a run and the ETA misleads
    bar = progress_bar(len(pending), f"evaluate {Path(model_dir).name}", progress, unit="batches", interval=5.0)
    gold = {(b.name, p.problem_id): p.answer for b in benchmarks for p in plan.selected[b.name]}
    sample_pending(engine, pending, protocol, gold, cache, done, verifier=verifier, bar=bar)
    results, lines = _summarise(engine, benchmarks, protocol, plan, done)
    results["seconds"] = _seconds(
        out / "results.json", time.perf_counter() - start, settings=plan.settings, sampled_now=todo
    )
    results["sampled_now"] = todo
    state.write_text(out / "generations.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    state.write_json(out / "results.json", results)
    return results


def _summarise(
    engine: Any,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    plan: EvalPlan,
    done: dict[SampleKey, dict[str, Any]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """results.json's numbers (without ``seconds``) and generations.jsonl's lines, from every cached sample.
    A backend that gives no fingerprints (vLLM) gives no eigen ratio: it is None, and ``overall`` says why."""
    results: dict[str, Any] = {
        "format": RESULTS_FORMAT,
        "protocol": published(plan.settings),
        "model": plan.identity["path"],
        "base": None,
        "benchmarks": {},
    }
    lines = []
    for b in benchmarks:
        ids = [p.problem_id for p in plan.selected[b.name]]
        n = plan.samples[b.name]
        records = [done[(b.name, pid, j)] for pid in ids for j in range(n)]
        with_eigen = protocol.eigen_ratio and engine.gives_fingerprints
        results["benchmarks"][b.name] = summarise_benchmark(records, ids, n, eigen_ratio=with_eigen)
        if protocol.eigen_ratio and not engine.gives_fingerprints:
            results["benchmarks"][b.name]["eigen_ratio"] = None
        answers = {p.problem_id: p.answer for p in plan.selected[b.name]}
        lines += [_generation_line(r, answers[r["problem_id"]]) for r in records]
    results["overall"] = summarise(results["benchmarks"])
    if protocol.eigen_ratio and not engine.gives_fingerprints:
        results["overall"]["eigen_ratio_note"] = (
            "vLLM returns no hidden states, so no fingerprints: rerun with --backend transformers for the "
            "eigen ratio of the wrong answers"
        )
    return results, lines


def _generation_line(record: dict[str, Any], gold: str) -> dict[str, Any]:
    """generations.jsonl's line of a cached sample: the record with the gold answer and the answer the verifier
    read from the text (``rewards.answers.extract_answer``), without the cache key and fingerprint."""
    from dynashape.rewards.answers import extract_answer

    line = {k: v for k, v in record.items() if k not in ("key", "fingerprint")}
    return line | {"gold": gold, "extracted": extract_answer(record["text"])}


def _seconds(path: Path, now: float, *, settings: dict[str, Any], sampled_now: int) -> float:
    """results.json's ``seconds``: what sampling these results cost. A rerun that found every sample in the cache
    keeps the cost an earlier invocation recorded for the same settings, not its own few seconds."""
    if sampled_now == 0 and path.is_file():
        try:
            previous = state.read_json(path)
        except state.StateFileError:
            previous = None
        if isinstance(previous, dict) and previous.get("protocol") == published(settings):
            seconds = previous.get("seconds")
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                return float(seconds)
    return round(now, 1)


def evaluate_with_base(
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    out_dir: str | Path,
    *,
    base: str | None = None,
    plots: bool = True,
    backend: str = "auto",
    device: str = "cpu",
    batch_size: int = 32,
    max_problems: int | None = None,
    prompt: PromptConfig | None = None,
    verifier: Any = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``evaluate_checkpoint`` of the model and, with ``base``, of the base under the same protocol (into
    ``out_dir/base``), or the base's results read from its own results folder (a folder with results.json,
    whose settings must match); then AES per benchmark and overall, and results.md with its plots.

    Both folders are checked, and a base's settings compared with the model's, before anything is sampled or
    written: a refused base costs no sampling. A base that is the model's own folder is not sampled twice: its
    results are the model's (AES 0 where the accuracy is positive; see ``results.aes_or_none``).
    """
    from dynashape.evaluate.report import write_report

    out = Path(out_dir)
    prompt = prompt or PromptConfig()
    how = {"backend": backend, "device": device, "batch_size": batch_size, "max_problems": max_problems}
    plan = plan_evaluation(model_dir, benchmarks, protocol, **how, prompt=prompt, verifier=verifier, flag="--model")
    base_results, base_folder, base_plan = None, None, None
    same_folder = base is not None and Path(base).resolve() == Path(model_dir).resolve()
    if base is not None and results_folder(base):
        base_folder = Path(base)
        base_results = read_base_results(base_folder, base)
        check_comparable(base, base_results["protocol"], plan.settings)
    elif base is not None and not same_folder:
        problem = model_folder_problem(base)
        if problem is not None:
            raise ValueError(
                f"--base {base!r}: neither a results folder of dynashape evaluate (with results.json) nor a model "
                f"folder: it {problem}"
            )
        base_plan = plan_evaluation(base, benchmarks, protocol, **how, prompt=prompt, verifier=verifier, flag="--base")
        check_comparable(base, base_plan.settings, plan.settings)
    sample = {"prompt": prompt, "verifier": verifier, "progress": progress, "log": log}
    results = _sample_and_score(model_dir, benchmarks, protocol, out, plan, **sample)
    if base is not None:
        if same_folder:
            base_results = json.loads(json.dumps(results))
            base_results["note"] = "the base is the model's own folder: its results are the model's"
            base_folder = out
        elif base_plan is not None:
            base_folder = out / "base"
            base_results = _sample_and_score(base, benchmarks, protocol, base_folder, base_plan, **sample)
        assert base_results is not None
        results["base"] = base_results["model"]
        results["base_results"] = {"benchmarks": base_results["benchmarks"], "overall": base_results["overall"]}
        add_aes(results, base_results)
        state.write_json(out / "results.json", results)
    write_report(out, results, plots=plots, base_folder=base_folder)
    return results
