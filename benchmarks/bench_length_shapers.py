"""The four engine length shapers (cosine, kimi_length, pass_rate_linear, length_zscore) beside LEAD and GRPO.

One call each on the same batch (512 prompts x 16 rollouts by default, as bench_lead.py), in one process; we
print the median wall time and the CPU time per call, each with its ratio to LEAD's.

    python benchmarks/bench_length_shapers.py [--prompts 512] [--group 16] [--repeats 50] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from bench_lead import cpu_per_call, make_batch, timed
from dynashape import get_shaper

SHAPERS = ("lead", "grpo", "cosine", "kimi_length", "pass_rate_linear", "length_zscore")


def shaper_arguments(doc: str) -> argparse.Namespace:
    """The options every "shapers beside LEAD" bench takes; sets torch's intra-op threads."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args


def time_beside_lead(calls: dict, repeats: int) -> dict[str, dict[str, float]]:
    """Median wall ms and CPU ms per call of each zero-argument call (one named "lead"), with the ratios to
    LEAD's: on a shared machine wall time includes waiting for a core, CPU time does not."""
    res: dict[str, dict[str, float]] = {}
    for name, call in calls.items():
        for _ in range(5):  # warm-up
            call()
        res[name] = {"ms": 1e3 * statistics.median(timed(call, repeats)), "cpu_ms": 1e3 * cpu_per_call(call, repeats)}
    for r in res.values():
        r["ratio_to_lead"] = r["ms"] / res["lead"]["ms"]
        r["cpu_ratio_to_lead"] = r["cpu_ms"] / res["lead"]["cpu_ms"]
    return res


def print_beside_lead(
    res: dict[str, dict[str, float]], args: argparse.Namespace, rollouts: int, *, json_out: bool
) -> None:
    if json_out:
        print(json.dumps({"rollouts": rollouts, "threads": args.threads, "shapers": res}))
        return
    print(f"batch: {args.prompts} prompts x {args.group} rollouts = {rollouts}; torch threads {args.threads}")
    print(f"{'shaper':<18}{'wall ms':>9}{'x LEAD':>8}{'CPU ms':>9}{'x LEAD':>8}")
    for name, r in res.items():
        print(f"{name:<18}{r['ms']:9.2f}{r['ratio_to_lead']:8.2f}{r['cpu_ms']:9.2f}{r['cpu_ratio_to_lead']:8.2f}")


def main() -> None:
    args = shaper_arguments(__doc__)
    batch = make_batch(args.prompts, args.group)
    shapers = {name: get_shaper(name) for name in SHAPERS}
    calls = {name: (lambda s=shaper: s(batch)) for name, shaper in shapers.items()}
    print_beside_lead(time_beside_lead(calls, args.repeats), args, len(batch), json_out=args.json)


if __name__ == "__main__":
    main()
