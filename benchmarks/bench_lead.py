"""One LEAD call on 512 prompts x 16 rollouts: our vectorised shaper vs a plain per-group Python loop.

Both run the same formulas (lead.md) on the same batch, side by side in one process; we print the median time
of each and their ratio, and check they agree. Target (issue 2): one `lead` call under 5 ms on one CPU core.

    python benchmarks/bench_lead.py [--prompts 512] [--group 16] [--repeats 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dynashape import RolloutBatch, get_shaper
from dynashape.testing.loop_reference import lead_loop


def make_batch(prompts: int, group: int, seed: int = 0) -> RolloutBatch:
    gen = torch.Generator().manual_seed(seed)
    n = prompts * group
    # shuffled, non-contiguous ids; per-prompt difficulty so some prompts are unsolved and some all correct
    ids = torch.arange(prompts).repeat_interleave(group) * 7 + 3
    ids = ids[torch.randperm(n, generator=gen)]
    p_solve = torch.rand(prompts, generator=gen)[(ids - 3) // 7]
    correct = torch.rand(n, generator=gen) < p_solve
    lengths = torch.randint(200, 6000, (n,), generator=gen)
    return RolloutBatch(group_ids=ids, correct=correct, lengths=lengths)


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def cpu_per_call(fn, repeats: int) -> float:
    """Process CPU seconds per call: on a shared machine this excludes time spent waiting for a core."""
    c0 = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - c0) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--loop-repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the target is on one core)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    batch = make_batch(args.prompts, args.group)
    ids, correct, lengths = batch.group_ids.tolist(), batch.correct.tolist(), batch.lengths.tolist()
    shaper = get_shaper("lead")

    # agreement first: a fast wrong answer is worth nothing
    fresh = get_shaper("lead")
    ours = fresh(batch).advantages.double()
    ref, _, _ = lead_loop(correct, lengths, ids)
    max_diff = (ours - torch.tensor(ref, dtype=torch.float64)).abs().max().item()

    for _ in range(5):  # warm-up
        shaper(batch)
    t_ours = timed(lambda: shaper(batch), args.repeats)
    t_loop = timed(lambda: lead_loop(correct, lengths, ids), args.loop_repeats)
    cpu_ours = cpu_per_call(lambda: shaper(batch), args.repeats)
    cpu_loop = cpu_per_call(lambda: lead_loop(correct, lengths, ids), args.loop_repeats)
    # the batch construction (validation) is part of what a trainer pays per step
    t_batch = timed(
        lambda: RolloutBatch(group_ids=batch.group_ids, correct=batch.correct, lengths=batch.lengths), args.repeats
    )
    res = {
        "rollouts": len(batch),
        "threads": args.threads,
        "lead_ms": 1e3 * statistics.median(t_ours),
        "lead_cpu_ms": 1e3 * cpu_ours,
        "loop_cpu_ms": 1e3 * cpu_loop,
        "batch_validation_ms": 1e3 * statistics.median(t_batch),
        "loop_ms": 1e3 * statistics.median(t_loop),
        "speedup_vs_loop": statistics.median(t_loop) / statistics.median(t_ours),
        "max_abs_diff_vs_loop": max_diff,
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"batch: {args.prompts} prompts x {args.group} rollouts = {len(batch)}; torch threads {args.threads}")
    print(
        f"lead (vectorised)       : {res['lead_ms']:8.2f} ms wall (median of {args.repeats}), "
        f"{res['lead_cpu_ms']:.2f} ms CPU per call"
    )
    print(f"RolloutBatch validation : {res['batch_validation_ms']:8.2f} ms")
    print(
        f"per-group Python loop   : {res['loop_ms']:8.2f} ms wall (median of {args.loop_repeats}), "
        f"{res['loop_cpu_ms']:.2f} ms CPU per call"
    )
    print(f"speed-up                : {res['speedup_vs_loop']:8.1f}x   max |diff| = {max_diff:.2e}")


if __name__ == "__main__":
    main()
