"""What an evaluation will run, known before anything is sampled or written, and whether two evaluations compare.

``plan_evaluation`` reads only the model folder's files and its tokenizer, so ``dynashape evaluate --base`` can
refuse a base whose settings differ from the model's (``check_comparable``) before either one samples. The
settings are results.json's ``protocol`` (``published``) and, whole, part of the generation cache's key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dynashape.evaluate.backends import choose_backend, vllm_device
from dynashape.evaluate.benchmarks import Benchmark
from dynashape.evaluate.protocols import Protocol
from dynashape.io import state
from dynashape.runtime.model_folder import check_model_folder
from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptConfig, PromptFormat, select_problems

__all__ = ["EvalPlan", "check_comparable", "plan_evaluation", "published", "read_base_results"]


class EvalPlan(NamedTuple):
    """What an evaluation will run, known before anything is sampled or written.

    Attributes:
        identity: the model folder and its files' sizes and modification times (part of the cache key).
        settings: every setting that decides the numbers (results.json's ``protocol``, see ``published``).
        selected: benchmark name -> the problems kept (``--max-problems``, evenly spaced).
        samples: benchmark name -> samples per problem.
    """

    identity: dict[str, Any]
    settings: dict[str, Any]
    selected: dict[str, list[Any]]
    samples: dict[str, int]


def _model_identity(model_dir: str, flag: str) -> dict[str, Any]:
    """The model folder and its files' sizes and modification times: new weights under the same path give a
    new cache key. A folder that is no model is refused here, naming ``flag``, before anything is written."""
    root = check_model_folder(model_dir, flag).resolve()
    files = sorted(p for p in root.iterdir() if p.is_file())
    return {"path": str(root), "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def plan_evaluation(
    model_dir: str,
    benchmarks: Sequence[Benchmark],
    protocol: Protocol,
    *,
    backend: str,
    device: str,
    batch_size: int,
    max_problems: int | None,
    prompt: PromptConfig,
    verifier: Any,
    flag: str,
) -> EvalPlan:
    """The settings of one evaluation (results.json's ``protocol``): only the model's files and tokenizer are
    read, so two evaluations can be checked to be comparable before either samples."""
    from dynashape.runtime.policy import load_tokenizer

    if max_problems is not None and max_problems < 1:
        raise ValueError(f"--max-problems must be >= 1, got {max_problems}")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    backend_name = choose_backend(backend)
    identity = _model_identity(model_dir, flag)
    fmt = PromptFormat(load_tokenizer(model_dir), prompt, default_suffix=BOXED_INSTRUCTION)
    selected = {b.name: select_problems(list(b.problems), max_problems) for b in benchmarks}
    samples = {b.name: protocol.samples_for(b.name) for b in benchmarks}
    settings = {
        **protocol.to_dict(),
        "samples_per_benchmark": samples,
        "prompt": {
            "chat_template": prompt.chat_template,
            "suffix": prompt.suffix,
            "system": prompt.system,
            "suffix_used": fmt.suffix,
            "templated": fmt.templated,
        },
        "backend": backend_name,
        "batch_size": batch_size,
        "max_problems": max_problems,
        "device": device if backend_name == "transformers" else vllm_device(),
        # the verdicts are cached: another verifier is another evaluation (its ``name``, else its class)
        "verifier": "dynashape.rewards.MathVerifier" if verifier is None else _verifier_name(verifier),
        "correct": "the verifier accepts the final answer and the response ended within max_new_tokens",
        "pass_at_k": "unbiased (Chen et al. 2021), k = 1, 2, 4, ... up to n and n itself",
        "benchmarks": {b.name: {"source": b.source, "problems": len(selected[b.name])} for b in benchmarks},
    }
    return EvalPlan(identity, settings, selected, samples)


def _verifier_name(verifier: Any) -> str:
    return str(getattr(verifier, "name", type(verifier).__name__))


def published(settings: dict[str, Any]) -> dict[str, Any]:
    """results.json's ``protocol``: the settings without the protocol's own per-benchmark table
    (``samples_by_benchmark``, keyed by canonical names), which ``samples_per_benchmark`` states for the benchmarks
    that ran. The cache key keeps hashing the whole settings, so existing caches stay valid."""
    return {k: v for k, v in settings.items() if k != "samples_by_benchmark"}


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings two evaluations must share to be compared (not where or how fast they ran; a results.json
    written before ``published`` also holds ``samples_by_benchmark``, which ``samples_per_benchmark`` decides)."""
    skip = {"device", "backend", "batch_size", "benchmarks", "samples_by_benchmark"}
    return {k: v for k, v in settings.items() if k not in skip}


def read_base_results(folder: Path, base: str) -> dict[str, Any]:
    """The results.json of a base results folder, refused in one line when it is not one ``evaluate`` wrote."""
    try:
        found = state.read_json(folder / "results.json")
    except state.StateFileError as err:
        raise ValueError(f"--base {base!r}: {err.problem}") from None
    needed = ("protocol", "model", "benchmarks", "overall")
    if not isinstance(found, dict) or any(k not in found for k in needed):
        raise ValueError(
            f"--base {base!r}: results.json is not one dynashape evaluate wrote (it needs {', '.join(needed)})"
        )
    return found


def check_comparable(base: str, theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    """Refuse a base evaluated (or to be evaluated) with other settings than the model, naming each setting
    with the base's value and the model's."""
    a, b = _comparable(theirs), _comparable(ours)
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if differing:
        shown = "; ".join(f"{k}: {json.dumps(a.get(k))} there, {json.dumps(b.get(k))} here" for k in differing)
        raise ValueError(
            f"--base {base!r}: its results ran with other settings ({shown}); evaluate the base with the same protocol"
        )
