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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    batch = make_batch(args.prompts, args.group)
    res: dict[str, dict[str, float]] = {}
    for name in SHAPERS:
        shaper = get_shaper(name)
        for _ in range(5):  # warm-up
            shaper(batch)
        wall = statistics.median(timed(lambda s=shaper: s(batch), args.repeats))
        cpu = cpu_per_call(lambda s=shaper: s(batch), args.repeats)
        res[name] = {"ms": 1e3 * wall, "cpu_ms": 1e3 * cpu}
    for name in SHAPERS:  # CPU time too: on a shared machine wall time includes waiting for a core
        res[name]["ratio_to_lead"] = res[name]["ms"] / res["lead"]["ms"]
        res[name]["cpu_ratio_to_lead"] = res[name]["cpu_ms"] / res["lead"]["cpu_ms"]
    if args.json:
        print(json.dumps({"rollouts": len(batch), "threads": args.threads, "shapers": res}))
        return
    print(f"batch: {args.prompts} prompts x {args.group} rollouts = {len(batch)}; torch threads {args.threads}")
    print(f"{'shaper':<18}{'wall ms':>9}{'x LEAD':>8}{'CPU ms':>9}{'x LEAD':>8}")
    for name in SHAPERS:
        r = res[name]
        print(f"{name:<18}{r['ms']:9.2f}{r['ratio_to_lead']:8.2f}{r['cpu_ms']:9.2f}{r['cpu_ratio_to_lead']:8.2f}")


if __name__ == "__main__":
    main()
