"""MEDS fingerprint cost: hooks on the log-prob forward vs that forward alone vs the official approach.

Three variants of one old-log-prob forward on a 28-layer Qwen2-architecture model with random weights (width
shrunk for a CPU; the vocabulary stays large so the head's cost is real), interleaved, median of repeats:

  (a) forward + log-probs of the response tokens (what verl/TRL run anyway);
  (b) (a) inside ``FingerprintCapture(layers=14)`` + ``result()``  (ours: gather [N, H] and a dot per layer);
  (c) official MEDS: (a) with ``output_hidden_states=True``, then per layer gather [N, H] -> full head
      [N, V] -> pick the target logit.

It prints (b)/(a) - 1 (target: under 2 %) and (c)/(b), checks (b) == (c), and on CUDA the peak memory of each.
A second part times ``answer_positions`` on 512 x 16 rollouts of 1000 tokens against a per-rollout Python loop
of the official rule (run on a subset and scaled).

    python benchmarks/bench_fingerprint.py                      # CPU, 2-3 minutes on 2 shared cores
    python benchmarks/bench_fingerprint.py --device cuda --hidden 1536 --heads 12 --kv-heads 2 \\
        --intermediate 8960 --vocab 151936 --batch 16 --prompt-len 512 --response-len 1536 --dtype bfloat16
    python benchmarks/bench_fingerprint.py --json results.json  # also write every number as JSON
    python benchmarks/bench_fingerprint.py --preset qwen2.5-1.5b --device cuda --skip-positions  # GPU check

``--preset qwen2.5-1.5b`` sets the shape of Qwen2.5-1.5B (28 layers, hidden 1536, 12 / 2 heads, intermediate
8960, vocabulary 151936; random weights, bfloat16) and a verl-like batch (16 x (512 + 1536) tokens); flags given
explicitly still win. The last line printed is always one ``bench_fingerprint: ...`` summary.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

from dynashape.meds.capture import FingerprintCapture
from dynashape.meds.positions import answer_positions, answer_targets, padded_token_index

# ------------------------------------------------------------------------------------------------------------
# Forward benchmark
# ------------------------------------------------------------------------------------------------------------


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.prompt_len + args.response_len,
        tie_word_embeddings=False,
    )
    # Built directly on the device in the target dtype: a 7B-width model initialised in float32 on the host
    # first would take minutes and 30 GB of RAM.
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
    return model.eval()


def build_batch(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """verl layout: prompts left-padded to prompt_len, responses right-padded to response_len."""
    gen = torch.Generator().manual_seed(1)
    b, p, r = args.batch, args.prompt_len, args.response_len
    prompt_lens = torch.randint(p // 2, p + 1, (b,), generator=gen)
    response_lens = torch.randint(r // 2, r + 1, (b,), generator=gen)
    steps_p, steps_r = torch.arange(p), torch.arange(r)
    mask = torch.cat([steps_p >= p - prompt_lens[:, None], steps_r < response_lens[:, None]], dim=1).long()
    input_ids = torch.randint(0, args.vocab, (b, p + r), generator=gen) * mask
    response_mask = mask[:, p:]
    # an answer position in 7 of 8 responses, somewhere in the second half, never the last token
    rel = (response_lens * (0.5 + 0.4 * torch.rand(b, generator=gen))).long()
    rel = torch.where(torch.arange(b) % 8 == 7, -1, rel)
    index = padded_token_index(rel, mask, response_lens)
    responses = input_ids[:, p:]
    targets = answer_targets(responses.masked_fill(response_mask == 0, 0), rel)
    dev = args.device
    return {
        "input_ids": input_ids.to(dev),
        "attention_mask": mask.to(dev),
        "position_ids": (mask.cumsum(1) - 1).clamp(min=0).to(dev),
        "rows": index.rows.to(dev),
        "positions": index.positions.to(dev),
        "targets": targets.to(dev),
    }


def response_log_probs(logits: torch.Tensor, input_ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log p(response token t | prefix): the old-log-prob computation the fingerprint piggybacks on."""
    shifted = logits[:, prompt_len - 1 : -1].float()
    return shifted.log_softmax(-1).gather(-1, input_ids[:, prompt_len:, None])[..., 0]


def run_variants(args: argparse.Namespace) -> dict[str, object]:
    model = build_model(args)
    batch = build_batch(args)
    forward_inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    keep = args.keep
    head = model.get_output_embeddings()
    outputs: dict[str, torch.Tensor] = {}

    def plain() -> None:
        logits = model(**forward_inputs).logits
        response_log_probs(logits, batch["input_ids"], args.prompt_len)

    def hooked() -> None:
        capture = FingerprintCapture(model, batch["positions"], batch["targets"], rows=batch["rows"], layers=keep)
        with capture:
            logits = model(**forward_inputs).logits
            response_log_probs(logits, batch["input_ids"], args.prompt_len)
        outputs["hooked"] = capture.result()

    def official() -> None:
        out = model(**forward_inputs, output_hidden_states=True)
        response_log_probs(out.logits, batch["input_ids"], args.prompt_len)
        rows, positions = batch["rows"], batch["positions"].clamp(min=0)
        values = []
        for hidden in out.hidden_states[1:][-keep:]:
            logits = head(hidden[rows, positions]).float()  # [N, V], full vocabulary per layer
            values.append(logits.gather(1, batch["targets"].clamp(min=0)[:, None])[:, 0])
        outputs["official"] = torch.stack(values, 1).masked_fill((batch["positions"] < 0)[:, None], float("nan"))

    variants: dict[str, Callable[[], None]] = {"a_plain": plain, "b_hooks": hooked, "c_official": official}
    times: dict[str, list[float]] = {name: [] for name in variants}
    peak: dict[str, int] = {}
    cuda = args.device.startswith("cuda")
    with torch.no_grad():
        for name, fn in variants.items():  # warm-up (allocator, kernels, lazy init)
            fn()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                fn()
                torch.cuda.synchronize()
                peak[name] = torch.cuda.max_memory_allocated()
        order = list(variants)
        for rep in range(args.repeats):
            for name in order[rep % 3 :] + order[: rep % 3]:  # rotate so no variant always runs first
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                variants[name]()
                if cuda:
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
        hook_s = time_inside_hooks(model, batch, forward_inputs, args, outputs)
    median = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    max_diff = (outputs["hooked"] - outputs["official"]).abs().nan_to_num(0.0).max().item()
    scale = outputs["official"].abs().nan_to_num(0.0).max().item()
    return {
        "median_s": median,
        "min_s": best,
        "all_s": times,
        "hook_overhead_pct_median": 100 * (median["b_hooks"] / median["a_plain"] - 1),
        "hook_overhead_pct_min": 100 * (best["b_hooks"] / best["a_plain"] - 1),
        "hook_work_s": hook_s,
        "hook_work_pct_of_plain": 100 * hook_s / median["a_plain"],
        "official_over_hooks_median": median["c_official"] / median["b_hooks"],
        "official_over_hooks_min": best["c_official"] / best["b_hooks"],
        "peak_memory_bytes": peak,
        "max_abs_diff_hooks_vs_official": max_diff,
        "max_abs_logit": scale,
    }


def time_inside_hooks(model, batch, forward_inputs, args, outputs) -> float:
    """Seconds per forward spent inside the fingerprint hooks plus result(), timed directly.

    The difference of two noisy forward timings cannot resolve a sub-percent cost on a shared machine; this
    wraps each hook with a clock (synchronising CUDA around it) and adds result(), so it is the overhead itself.
    """
    cuda = args.device.startswith("cuda")
    spent = [0.0]
    # Every hook the capture registers: the layer hooks (gather), the final norm's and the head's pre-hooks.
    makers = ("_make_hook", "_make_norm_hook", "_make_head_hook")
    originals = {name: getattr(FingerprintCapture, name) for name in makers}

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def timed_maker(original):
        def make(self, *args):
            hook = original(self, *args)

            def timed(*hook_args):
                sync()
                start = time.perf_counter()
                hook(*hook_args)
                sync()
                spent[0] += time.perf_counter() - start

            return timed

        return make

    for name, original in originals.items():
        setattr(FingerprintCapture, name, timed_maker(original))
    try:
        for _ in range(args.repeats):
            capture = FingerprintCapture(
                model, batch["positions"], batch["targets"], rows=batch["rows"], layers=args.keep
            )
            with capture:
                model(**forward_inputs)
            sync()
            start = time.perf_counter()
            outputs["timed"] = capture.result()
            sync()
            spent[0] += time.perf_counter() - start
    finally:
        for name, original in originals.items():
            setattr(FingerprintCapture, name, original)
    return spent[0] / args.repeats


# ------------------------------------------------------------------------------------------------------------
# answer_positions benchmark
# ------------------------------------------------------------------------------------------------------------


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on synthetic math text (GPT-2 / Qwen style pre-tokenisation)."""
    rng = random.Random(0)
    words = ["the", "answer", "is", "so", "we", "get", "let", "then", "frac", "sqrt", "cdot", "sum", "x", "y"]
    lines = []
    for _ in range(4000):
        body = " ".join(rng.choice(words) + str(rng.randint(0, 999)) for _ in range(rng.randint(5, 30)))
        lines.append(f"{body} $\\boxed{{\\frac{{{rng.randint(1, 99)}}}{{{rng.randint(1, 99)}}}}}$")
        lines.append(f"{body} \\boxed{{{rng.randint(0, 99999)}}}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")


def official_loop(tokenizer: PreTrainedTokenizerFast, rows: list[list[int]]) -> list[int]:
    """The official rule, one rollout at a time (exact marker search, then the token-string fallback)."""
    marker = tokenizer.encode("\\boxed{", add_special_tokens=False)
    out = []
    for ids in rows:
        pos = -1
        for j in range(len(ids) - len(marker), -1, -1):
            if ids[j : j + len(marker)] == marker:
                pos = j + len(marker) - 1
                break
        if pos < 0:
            tokens = tokenizer.convert_ids_to_tokens(ids)
            for i in range(len(tokens) - 1, -1, -1):
                if "boxed" in tokens[i].lower():
                    pos = next((m for m in range(i, min(i + 10, len(tokens))) if "{" in tokens[m]), -1)
                    if pos >= 0:
                        break
        out.append(pos if pos < len(ids) - 1 else -1)
    return out


def run_positions(args: argparse.Namespace) -> dict[str, object]:
    tokenizer = build_tokenizer(args.tok_vocab)
    rng = random.Random(2)
    endings = [
        tokenizer.encode(text, add_special_tokens=False)
        for text in ("so the answer is $\\boxed{\\frac{3}{4}}$", " \\boxed{42}.", "\\boxed{7}", " no box here")
    ]
    n, t = args.rollouts, args.tokens
    rows = []
    for _ in range(n):
        ending = rng.choice(endings)
        length = rng.randint(t // 2, t)
        body = [rng.randrange(len(tokenizer)) for _ in range(length - len(ending) - rng.randint(0, 5))]
        rows.append(body + ending + body[:5])
        rows[-1] = rows[-1][:t]
    lengths = torch.tensor([len(r) for r in rows])
    padded = torch.zeros(n, t, dtype=torch.long)
    mask = torch.arange(t) < lengths[:, None]
    padded[mask] = torch.tensor([i for r in rows for i in r])

    start = time.perf_counter()
    answer_positions(rows[:1], tokenizer)  # builds and caches the vocabulary tables
    tables_s = time.perf_counter() - start
    list_s, tensor_s = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        from_lists = answer_positions(rows, tokenizer)
        list_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        from_tensor = answer_positions(padded, tokenizer, response_mask=mask)
        tensor_s.append(time.perf_counter() - start)
    subset = min(args.peer_rollouts, n)
    start = time.perf_counter()
    reference = official_loop(tokenizer, rows[:subset])
    loop_s = (time.perf_counter() - start) * n / subset
    agree = from_tensor[:subset].tolist() == reference and torch.equal(from_lists, from_tensor)
    return {
        "rollouts": n,
        "tokens": t,
        "tokenizer_vocab": len(tokenizer),
        "tables_build_s": tables_s,
        "lists_median_s": statistics.median(list_s),
        "tensor_median_s": statistics.median(tensor_s),
        "official_loop_s_scaled": loop_s,
        "loop_over_tensor": loop_s / statistics.median(tensor_s),
        "found_frac": float((from_tensor >= 0).float().mean()),
        "agrees_with_official_loop": agree,
    }


# Real model shapes (config.json of the released checkpoints; the weights stay random).
PRESETS: dict[str, dict[str, object]] = {
    "qwen2.5-1.5b": {
        "layers": 28, "hidden": 1536, "heads": 12, "kv_heads": 2, "intermediate": 8960, "vocab": 151936,
        "dtype": "bfloat16", "batch": 16, "prompt_len": 512, "response_len": 1536,
    },
}  # fmt: skip


def summary_line(report: dict[str, object]) -> str:
    """One line with the numbers a GPU check reports."""
    args = report["args"]
    parts = [f"bench_fingerprint: {args['preset'] or 'custom'} shape on {args['device']} ({args['dtype']})"]
    forward = report.get("forward")
    if isinstance(forward, dict):
        med = forward["median_s"]
        parts.append(
            f"forward {med['a_plain'] * 1e3:.1f} ms, hooks {forward['hook_work_s'] * 1e3:.2f} ms "
            f"({forward['hook_work_pct_of_plain']:.2f} %), "
            f"official/hooks {forward['official_over_hooks_median']:.2f}x, "
            f"max|hooks-official| {forward['max_abs_diff_hooks_vs_official']:.2e}"
        )
        if forward["peak_memory_bytes"]:
            peak = forward["peak_memory_bytes"]
            parts.append(f"peak GiB plain/hooks/official {'/'.join(f'{peak[k] / 2**30:.1f}' for k in sorted(peak))}")
    positions = report.get("positions")
    if isinstance(positions, dict):
        parts.append(
            f"answer_positions {positions['tensor_median_s'] * 1e3:.0f} ms for {positions['rollouts']} rollouts"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=None, choices=sorted(PRESETS), help="a real model's shape")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=384)
    parser.add_argument("--keep", type=int, default=14, help="fingerprint layers (official 14)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--rollouts", type=int, default=512 * 16)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--tok-vocab", type=int, default=8000)
    parser.add_argument("--peer-rollouts", type=int, default=1024, help="rollouts the Python loop runs")
    parser.add_argument("--skip-forward", action="store_true")
    parser.add_argument("--skip-positions", action="store_true")
    parser.add_argument("--json", default=None, help="write all numbers to this path")
    preset = parser.parse_known_args()[0].preset
    if preset:  # the preset's values become the defaults: a flag given on the command line still wins
        parser.set_defaults(**PRESETS[preset])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    report: dict[str, object] = {"args": vars(args), "torch": torch.__version__}
    if not args.skip_forward:
        res = run_variants(args)
        report["forward"] = res
        med, best = res["median_s"], res["min_s"]
        print(
            f"forward: {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, batch {args.batch} x "
            f"{args.prompt_len + args.response_len}, {args.dtype} on {args.device}, fingerprint of the last "
            f"{args.keep} layers, {args.repeats} interleaved repeats"
        )
        for name in med:
            line = f"  {name:<11} median {med[name] * 1e3:9.1f} ms   min {best[name] * 1e3:9.1f} ms"
            if res["peak_memory_bytes"]:
                line += f"   peak {res['peak_memory_bytes'][name] / 2**30:6.2f} GiB"
            print(line)
        print(
            f"  hooks overhead (b)/(a) - 1: {res['hook_overhead_pct_median']:+.2f} % (median), "
            f"{res['hook_overhead_pct_min']:+.2f} % (min)   target < 2 %"
        )
        print(
            f"  time inside the hooks + result(), clocked directly: {res['hook_work_s'] * 1e3:.2f} ms per forward "
            f"= {res['hook_work_pct_of_plain']:.3f} % of (a)"
        )
        print(
            f"  official / hooks (c)/(b): {res['official_over_hooks_median']:.3f} (median), "
            f"{res['official_over_hooks_min']:.3f} (min)"
        )
        print(
            f"  max |hooks - official| = {res['max_abs_diff_hooks_vs_official']:.2e} "
            f"(max |logit| {res['max_abs_logit']:.2f})"
        )
    if not args.skip_positions:
        res = run_positions(args)
        report["positions"] = res
        print(
            f"answer_positions: {res['rollouts']} rollouts x {res['tokens']} tokens, byte-level BPE vocab "
            f"{res['tokenizer_vocab']}"
        )
        print(f"  vocabulary tables (once per tokenizer): {res['tables_build_s'] * 1e3:.1f} ms")
        tensor_ms, lists_ms = res["tensor_median_s"] * 1e3, res["lists_median_s"] * 1e3
        print(f"  tensor [N, T] + mask: {tensor_ms:.1f} ms   lists: {lists_ms:.1f} ms")
        print(
            f"  official per-rollout loop (scaled from {min(args.peer_rollouts, args.rollouts)}): "
            f"{res['official_loop_s_scaled']:.2f} s   loop / ours: {res['loop_over_tensor']:.1f}x   "
            f"agree: {res['agrees_with_official_loop']}   found: {res['found_frac']:.2f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    print(summary_line(report))


if __name__ == "__main__":
    main()
