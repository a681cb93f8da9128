"""The field's length shapers (issue 37) beside LEAD, on one batch in one process.

Each shaper is timed on 8192 rollouts (512 prompts x 16, as bench_lead.py) with per-rollout budgets (L1) and a
format column (SAW's second channel); we print the median wall time and the CPU time per call, each with its
ratio to LEAD's. The target is under 5 ms per call for each.

    python benchmarks/bench_field_shapers.py [--prompts 512] [--group 16] [--repeats 50] [--threads 1] [--json]
"""

from __future__ import annotations

import torch

from bench_lead import make_batch
from bench_length_shapers import print_beside_lead, shaper_arguments, time_beside_lead
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
    args = shaper_arguments(__doc__)
    full = field_batch(args.prompts, args.group)
    calls = {}
    for shown, (name, params) in SHAPERS.items():
        shaper, batch = prepared(name, params, full)
        calls[shown] = lambda s=shaper, b=batch: s(b)
    res = time_beside_lead(calls, args.repeats)
    print_beside_lead(res, args, len(full), json_out=args.json)
    if not args.json:
        slow = [name for name, r in res.items() if r["cpu_ms"] >= 5]
        print(f"CPU time under 5 ms per call: {'all' if not slow else 'all but ' + ', '.join(slow)}")


if __name__ == "__main__":
    main()
