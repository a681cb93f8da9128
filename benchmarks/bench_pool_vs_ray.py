"""The study engine on Ray against the process pool it replaced, on the same tiny runs, alternately, on this machine.

The pool lives in the project's history (``--pool-commit``, the last commit before Ray): a temporary git worktree
of that commit runs its own ``benchmarks/bench_compare.py`` (pool ``--jobs N`` vs serial), and this checkout runs
``benchmarks/bench_compare.py`` (Ray ``--jobs N`` vs serial), one after the other, ``--rounds`` times in alternation,
each in a fresh process with the same methods, seeds, steps and jobs. Each engine's parallel runs/hour is divided
by the serial runs/hour measured in the same process (machine drift between processes cancels out of each ratio),
and the pool's ratio is set beside Ray's. Needs the git history (a clone, not an sdist).

    python benchmarks/bench_pool_vs_ray.py                       # 2 rounds of 2 methods x 4 seeds, 24 steps: ~20 min
    python benchmarks/bench_pool_vs_ray.py --rounds 1 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POOL_COMMIT = "065a5ba"  # the last commit whose compare ran on the process pool (the next one moved it to Ray)


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _bench(tree: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(tree / "benchmarks" / "bench_compare.py"), "--json", "--methods", args.methods]
    cmd += ["--seeds", str(args.seeds), "--steps", str(args.steps), "--jobs", str(args.jobs)]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}  # that tree's dynashape, whatever is installed
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-commit", default=POOL_COMMIT)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--methods", default="grpo,lead")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pool_tree = Path(tmp) / "pool"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(pool_tree), args.pool_commit],
                       check=True)  # fmt: skip
        try:
            for r in range(args.rounds):
                for engine, tree in (
                    (("pool", pool_tree), ("ray", ROOT)) if r % 2 == 0 else (("ray", ROOT), ("pool", pool_tree))
                ):
                    before = _load()
                    res = _bench(tree, args)
                    rows.append({"round": r, "engine": engine, "load_before": before, "load_after": _load(), **res})
                    print(
                        f"round {r} {engine:4s}: parallel {res['parallel_runs_per_hour']:6.1f} runs/h, serial "
                        f"{res['serial_runs_per_hour']:6.1f} -> {res['ratio']:.2f}x (same threads "
                        f"{res['ratio_vs_few_threads']:.2f}x); load {before} -> {rows[-1]['load_after']}",
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(pool_tree)], check=False)
    for engine in ("pool", "ray"):
        ratios = [x["ratio"] for x in rows if x["engine"] == engine]
        print(f"{engine}: --jobs {args.jobs} / serial = {', '.join(f'{v:.2f}x' for v in ratios)}")
    ray = [x["ratio"] for x in rows if x["engine"] == "ray"]
    pool = [x["ratio"] for x in rows if x["engine"] == "pool"]
    relative = (sum(ray) / len(ray)) / (sum(pool) / len(pool))
    print(f"ray / pool (each against its own serial, mean over rounds): {relative:.2f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
