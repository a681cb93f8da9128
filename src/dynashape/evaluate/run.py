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

from dynashape import state
from dynashape.evaluate.backends import Item, choose_backend
from dynashape.evaluate.benchmarks import Benchmark
from dynashape.evaluate.cache import GenerationCache, settings_key
from dynashape.evaluate.protocols import Protocol
from dynashape.evaluate.results import add_aes, summarise, summarise_benchmark
from dynashape.train.evaluation import select_problems
from dynashape.train.prompts import BOXED_INSTRUCTION, PromptConfig, PromptFormat

__all__ = ["RESULTS_FORMAT", "evaluate_checkpoint", "evaluate_with_base"]

RESULTS_FORMAT = 1
"""Layout version of results.json and of the cache's records; part of the cache key."""

FINGERPRINT_LAYERS = 14
"""MEDS's fingerprint: the last 14 decoder layers (spec meds.md section 1), fewer on a shallower model."""


def _model_identity(model_dir: str) -> dict[str, Any]:
    """The model folder and its files' sizes and modification times: new weights under the same path give a
    new cache key."""
    root = Path(model_dir).resolve()
    if not root.is_dir():
        raise ValueError(f"--model {model_dir!r}: not a folder")
    files = sorted(p for p in root.iterdir() if p.is_file())
    return {"path": str(root), "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def _make_backend(name: str, model_dir: str, protocol: Protocol, *, device: str, batch_size: int) -> Any:
    from dynashape.evaluate.backends import TransformersBackend, VLLMBackend

    if name == "vllm":
        return VLLMBackend(model_dir, batch_size=batch_size, seed=protocol.seed)
    layers = FINGERPRINT_LAYERS if protocol.eigen_ratio else None
    return TransformersBackend(model_dir, device=device, batch_size=batch_size, fingerprint_layers=layers)


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
        progress: a bar with an ETA on a terminal, a line every 5 s in a log.
        log: where one-line notes go (the command line prints them).
    """
    from dynashape.train.progress import progress_bar

    if max_problems is not None and max_problems < 1:
        raise ValueError(f"max_problems must be >= 1, got {max_problems}")
    out = Path(out_dir)
    prompt = prompt or PromptConfig()
    backend_name = choose_backend(backend)
    identity = _model_identity(model_dir)
    selected = {b.name: select_problems(list(b.problems), max_problems) for b in benchmarks}
    n_by = {b.name: protocol.samples_for(b.name) for b in benchmarks}
    settings = {
        **protocol.to_dict(),
        "samples_per_benchmark": n_by,
        "prompt": {"chat_template": prompt.chat_template, "suffix": prompt.suffix, "system": prompt.system},
        "backend": backend_name,
        "batch_size": batch_size,
        "max_problems": max_problems,
        "device": device if backend_name == "transformers" else "cuda",
        # the verdicts are cached: another verifier is another evaluation (its ``name``, else its class)
        "verifier": "dynashape.rewards.MathVerifier" if verifier is None else _verifier_name(verifier),
        "correct": "the verifier accepts the final answer and the response ended within max_new_tokens",
        "pass_at_k": "unbiased (Chen et al. 2021), k = 1, 2, 4, ... up to n and n itself",
        "benchmarks": {b.name: {"source": b.source, "problems": len(selected[b.name])} for b in benchmarks},
    }
    out.mkdir(parents=True, exist_ok=True)
    with state.FolderLock(out, what="an evaluation (dynashape evaluate)"):
        start = time.perf_counter()
        engine = _make_backend(backend_name, model_dir, protocol, device=device, batch_size=batch_size)
        fmt = PromptFormat(engine.tokenizer, prompt, default_suffix=BOXED_INSTRUCTION)
        settings["prompt"]["suffix_used"] = fmt.suffix
        settings["prompt"]["templated"] = fmt.templated
        key = settings_key({"model": identity, "settings": settings, "format": RESULTS_FORMAT})
        cache = GenerationCache(out / "cache.jsonl", key)
        done = cache.load()
        plans = {}
        for b in benchmarks:
            items = [
                Item(p.problem_id, j, tuple(fmt.encode([p.problem])[0][0].tolist()))
                for p in selected[b.name]
                for j in range(n_by[b.name])
            ]
            plans[b.name] = engine.plan(b.name, items, protocol.seed)
        todo = sum(
            len(batch.items)
            for name, plan in plans.items()
            for batch in plan
            if not all((name, it.problem_id, it.sample) in done for it in batch.items)
        )
        total = sum(len(batch.items) for plan in plans.values() for batch in plan)
        if log is not None:
            log(f"{model_dir}: {total - todo} of {total} samples cached, {todo} to sample ({backend_name})")
        bar = progress_bar(todo, f"evaluate {Path(model_dir).name}", progress, unit="samples", interval=5.0)
        own_verifier = verifier is None
        if own_verifier:
            from dynashape.rewards import MathVerifier

            verifier = MathVerifier(workers=1)
        try:
            for b in benchmarks:
                gold = {p.problem_id: p.answer for p in selected[b.name]}
                for batch in plans[b.name]:
                    if all((b.name, it.problem_id, it.sample) in done for it in batch.items):
                        continue
                    gens = engine.generate(
                        batch,
                        temperature=protocol.temperature,
                        top_p=protocol.top_p,
                        max_new_tokens=protocol.max_new_tokens,
                        on_finished=None if bar is None else bar.update,
                    )
                    verdicts = verifier.verify([gold[it.problem_id] for it in batch.items], [g.text for g in gens])
                    correct = np.array([bool(v.correct) and not g.truncated for v, g in zip(verdicts, gens)])
                    fps = engine.fingerprints(~correct) if protocol.eigen_ratio else None
                    records = [
                        {
                            "benchmark": b.name,
                            "problem_id": it.problem_id,
                            "sample": it.sample,
                            "correct": bool(c),
                            "length": g.length,
                            "truncated": g.truncated,
                            "text": g.text,
                            **({} if fps is None else {"fingerprint": _finite_or_none(fps[i])}),
                        }
                        for i, (it, g, c) in enumerate(zip(batch.items, gens, correct, strict=True))
                    ]
                    cache.append(records)
                    done.update({(r["benchmark"], r["problem_id"], r["sample"]): r for r in records})
        finally:
            if bar is not None:
                bar.close()
            if own_verifier:
                verifier.close()
        results: dict[str, Any] = {
            "format": RESULTS_FORMAT,
            "protocol": settings,
            "model": identity["path"],
            "base": None,
            "benchmarks": {},
        }
        lines = []
        for b in benchmarks:
            ids = [p.problem_id for p in selected[b.name]]
            records = [done[(b.name, pid, j)] for pid in ids for j in range(n_by[b.name])]
            with_eigen = protocol.eigen_ratio and engine.gives_fingerprints
            results["benchmarks"][b.name] = summarise_benchmark(records, ids, n_by[b.name], eigen_ratio=with_eigen)
            if protocol.eigen_ratio and not engine.gives_fingerprints:
                results["benchmarks"][b.name]["eigen_ratio"] = None
            lines += [{k: v for k, v in r.items() if k not in ("key", "fingerprint")} for r in records]
        results["overall"] = summarise(results["benchmarks"])
        if protocol.eigen_ratio and not engine.gives_fingerprints:
            results["overall"]["eigen_ratio_note"] = (
                "vLLM returns no hidden states, so no fingerprints: rerun with --backend transformers for the "
                "eigen ratio of the wrong answers"
            )
        results["seconds"] = round(time.perf_counter() - start, 1)
        results["sampled_now"] = todo
        state.write_text(out / "generations.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
        state.write_json(out / "results.json", results)
    return results


def _verifier_name(verifier: Any) -> str:
    return str(getattr(verifier, "name", type(verifier).__name__))


def _finite_or_none(row: np.ndarray) -> list[float] | None:
    return None if np.isnan(row).any() else [float(x) for x in row]


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings two evaluations must share to be compared (not where or how fast they ran)."""
    skip = {"device", "backend", "batch_size", "benchmarks"}
    return {k: v for k, v in settings.items() if k not in skip}


def evaluate_with_base(
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    out_dir: str | Path,
    *,
    base: str | None = None,
    plots: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """``evaluate_checkpoint`` of the model and, with ``base``, of the base under the same protocol (into
    ``out_dir/base``), or the base's results read from its own results folder (a folder with results.json,
    whose settings must match); then AES per benchmark and overall, and results.md with its plots.

    A base that is the model's own folder is not sampled twice: its results are the model's (AES 0 where the
    accuracy is positive; see ``results.aes_or_none``).
    """
    from dynashape.evaluate.report import write_report

    out = Path(out_dir)
    base_results, base_folder = None, None
    if base is not None:
        base_path = Path(base)
        if (base_path / "results.json").is_file():
            base_results, base_folder = state.read_json(base_path / "results.json"), base_path
        elif not base_path.is_dir():
            raise ValueError(f"--base {base!r}: not a model folder nor a results folder (with results.json)")
    results = evaluate_checkpoint(model_dir, benchmarks, protocol, out, **kwargs)
    if base is not None:
        if base_results is None:
            if Path(base).resolve() == Path(model_dir).resolve():
                base_results = json.loads(json.dumps(results))
                base_results["note"] = "the base is the model's own folder: its results are the model's"
                base_folder = out
            else:
                base_results = evaluate_checkpoint(base, benchmarks, protocol, out / "base", **kwargs)
                base_folder = out / "base"
        theirs, ours = _comparable(base_results["protocol"]), _comparable(results["protocol"])
        differing = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        if differing:
            raise ValueError(
                f"--base {base!r}: its results ran with other settings ({', '.join(differing)}); evaluate the base "
                "with the same protocol"
            )
        results["base"] = base_results["model"]
        results["base_results"] = {"benchmarks": base_results["benchmarks"], "overall": base_results["overall"]}
        add_aes(results, base_results)
        state.write_json(out / "results.json", results)
    write_report(out, results, plots=plots, base_folder=base_folder)
    return results
