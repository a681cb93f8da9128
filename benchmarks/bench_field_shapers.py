"""The field's length shapers (issue 37) beside LEAD, on one batch in one process.

Each shaper is timed on 8192 rollouts (512 prompts x 16, as bench_lead.py) with per-rollout budgets (L1) and a
format column (SAW's second channel); we print the median wall time and the CPU time per call, each with its
ratio to LEAD's. The target is under 5 ms per call for each.

    python benchmarks/bench_field_shapers.py [--prompts 512] [--group 16] [--repeats 50] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from bench_lead import cpu_per_call, make_batch, timed
from dynashape import RolloutBatch, get_shaper

# name shown -> (registered name, keyword config); LEAD first, it is the yardstick
SHAPERS: dict[str, tuple[str, dict]] = {
    "lead": ("lead", {}),
    "l1_exact": ("l1_exact", {}),
    "l1_max": ("l1_max", {}),
    "thinkprune": ("thinkprune", {"max_length": 4000, "schedule": ((100, 3000),)}),
    "laser": ("laser", {}),
    "laser_d": ("laser_d", {}),
    "dler": ("dler", {}),
    "alp": ("alp", {}),
    "adlp": ("adlp", {}),
    "aalc": ("aalc", {}),
    "saw": ("saw", {}),
    "saw (gdpo)": ("saw", {"mode": "gdpo"}),
    "gfpo": ("gfpo", {}),
    "gfpo (adaptive)": ("gfpo", {"adaptive_keep": (4, 6, 8, 8)}),
}


def field_batch(prompts: int, group: int) -> RolloutBatch:
    """bench_lead's batch plus a budget per prompt (100..4000) and a 0/1 format column."""
    base = make_batch(prompts, group)
    gen = torch.Generator().manual_seed(1)
    budgets = torch.randint(100, 4001, (prompts,), generator=gen)[(base.group_ids - 3) // 7]
    fmt = (torch.rand(len(base), 1, generator=gen) < 0.8).double()
    return RolloutBatch(group_ids=base.group_ids, correct=base.correct, lengths=base.lengths, budgets=budgets,
                        rewards=fmt)  # fmt: skip


def prepared(name: str, params: dict, batch: RolloutBatch):
    """The shaper and the batch it reads (only SAW takes the format column), with its outside signals given."""
    shaper = get_shaper(name, **params)
    if name == "laser_d":
        shaper.observe(monitor=RolloutBatch(group_ids=batch.group_ids, correct=batch.correct, lengths=batch.lengths))
    if name == "aalc":
        shaper.observe(validation_accuracy=0.6)
    if name != "saw":
        batch = RolloutBatch(group_ids=batch.group_ids, correct=batch.correct, lengths=batch.lengths,
                             budgets=batch.budgets)  # fmt: skip
    return shaper, batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    full = field_batch(args.prompts, args.group)
    res: dict[str, dict[str, float]] = {}
    for shown, (name, params) in SHAPERS.items():
        shaper, batch = prepared(name, params, full)
        for _ in range(5):  # warm-up
            shaper(batch)
        wall = statistics.median(timed(lambda s=shaper, b=batch: s(b), args.repeats))
        cpu = cpu_per_call(lambda s=shaper, b=batch: s(b), args.repeats)
        res[shown] = {"ms": 1e3 * wall, "cpu_ms": 1e3 * cpu}
    for r in res.values():  # CPU time too: on a shared machine wall time includes waiting for a core
        r["ratio_to_lead"] = r["ms"] / res["lead"]["ms"]
        r["cpu_ratio_to_lead"] = r["cpu_ms"] / res["lead"]["cpu_ms"]
    if args.json:
        print(json.dumps({"rollouts": len(full), "threads": args.threads, "shapers": res}))
        return
    print(f"batch: {args.prompts} prompts x {args.group} rollouts = {len(full)}; torch threads {args.threads}")
    print(f"{'shaper':<18}{'wall ms':>9}{'x LEAD':>8}{'CPU ms':>9}{'x LEAD':>8}{'< 5 ms':>8}")
    for shown, r in res.items():
        ok = "yes" if r["ms"] < 5 else "NO"
        print(
            f"{shown:<18}{r['ms']:9.2f}{r['ratio_to_lead']:8.2f}{r['cpu_ms']:9.2f}{r['cpu_ratio_to_lead']:8.2f}{ok:>8}"
        )


if __name__ == "__main__":
    main()
