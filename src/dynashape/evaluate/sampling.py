"""Sample what the generation cache lacks, batch by batch: generate, verify, fingerprint, append to the cache.

A sample is correct when the verifier accepts its final answer and it ended within the cap (a truncated response
counts as wrong, as in the trainer's evaluation). A batch whose every sample is cached is not sampled again, so
an interrupted evaluation continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dynashape.evaluate.backends import Batch, Generation, Item
from dynashape.evaluate.benchmarks import Benchmark
from dynashape.evaluate.cache import GenerationCache, SampleKey
from dynashape.evaluate.protocols import Protocol
from dynashape.evaluate.settings import EvalPlan
from dynashape.runtime.prompts import PromptFormat

__all__ = ["pending_batches", "sample_pending"]


def pending_batches(
    engine: Any,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    plan: EvalPlan,
    fmt: PromptFormat,
    done: dict[SampleKey, dict[str, Any]],
) -> tuple[list[tuple[str, Batch]], int]:
    """The batches still to sample, as (benchmark name, batch) in the engine's order, and how many samples the
    evaluation has in all. Every problem x sample is planned (the engine's batching and per-sample seeds depend
    on the whole plan), then the batches whose every sample is in ``done`` (the cache) are dropped."""
    plans = {}
    for b in benchmarks:
        items = [
            Item(p.problem_id, j, tuple(fmt.encode([p.problem])[0][0].tolist()))
            for p in plan.selected[b.name]
            for j in range(plan.samples[b.name])
        ]
        plans[b.name] = engine.plan(b.name, items, protocol.seed)
    pending = [
        (name, batch)
        for name, batches in plans.items()
        for batch in batches
        if not all((name, it.problem_id, it.sample) in done for it in batch.items)
    ]
    total = sum(len(batch.items) for batches in plans.values() for batch in batches)
    return pending, total


def sample_pending(
    engine: Any,
    pending: Sequence[tuple[str, Batch]],
    protocol: Protocol,
    gold: dict[tuple[str, str], str],
    cache: GenerationCache,
    done: dict[SampleKey, dict[str, Any]],
    *,
    verifier: Any,
    bar: Any,
) -> None:
    """Sample, verify and cache each pending batch; ``done`` gains every new record.

    Args:
        gold: (benchmark, problem_id) -> the gold answer.
        verifier: ``verify(golds, texts) -> verdicts``; None: a ``rewards.MathVerifier`` started and closed here.
        bar: the progress bar counting batches (None: none); closed here.
    """
    own_verifier = verifier is None
    if own_verifier:
        from dynashape.rewards import MathVerifier

        verifier = MathVerifier(workers=1)
    todo = sum(len(batch.items) for _, batch in pending)
    try:
        sampled = 0
        for name, batch in pending:
            gens = engine.generate(
                batch,
                temperature=protocol.temperature,
                top_p=protocol.top_p,
                max_new_tokens=protocol.max_new_tokens,
                # every token: a line in a log still says the batch is being sampled
                on_finished=None if bar is None else (lambda _: bar.update(0)),
            )
            verdicts = verifier.verify([gold[(name, it.problem_id)] for it in batch.items], [g.text for g in gens])
            correct = np.array([bool(v.correct) and not g.truncated for v, g in zip(verdicts, gens)])
            fps = engine.fingerprints(~correct) if protocol.eigen_ratio else None
            records = _records(name, batch, gens, correct, fps)
            cache.append(records)
            done.update({(r["benchmark"], r["problem_id"], r["sample"]): r for r in records})
            sampled += len(records)
            if bar is not None:
                bar.set_postfix(samples=f"{sampled}/{todo}")
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if own_verifier:
            verifier.close()


def _records(
    name: str, batch: Batch, gens: Sequence[Generation], correct: np.ndarray, fps: np.ndarray | None
) -> list[dict[str, Any]]:
    """The cache records of one sampled batch.

    Args:
        correct: bool [B], the verdicts (a truncated sample is wrong).
        fps: float [B, D], the samples' fingerprints (a row of NaN: none), or None when the protocol wants none.
    """
    return [
        {
            "benchmark": name,
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


def _finite_or_none(row: np.ndarray) -> list[float] | None:
    return None if np.isnan(row).any() else [float(x) for x in row]
