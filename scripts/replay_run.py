"""Does this machine log a committed run's numbers? Trains the first K steps of a run folder's own config.yaml in a
scratch folder and compares their metrics with the committed metrics.jsonl, value for value (timings aside, as
``same_run_numbers``).

    python scripts/replay_run.py results/comparison-field/runs/loose/thinkprune-seed5 /tmp/replay [--steps 8]

Why: a long study outlives its machine (a session ends, the next may get a new one). CPU kernels can differ between
machines (the follow-up's determinism check found 8 such runs), so before a study's runs trained on two machines
are pooled, a few steps of one run from the first machine are trained again on the second. Exit status 0 when
every number of those steps is equal, 1 otherwise (each difference printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from same_run_numbers import differences


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def replay(run_dir: str | Path, scratch: str | Path, steps: int, verifier=None) -> list[str]:
    """Train ``steps`` steps of ``run_dir``'s config.yaml in ``scratch`` (a new folder) and return the differences
    of their metrics from the committed ones (empty: the same numbers)."""
    import yaml

    from dynashape.train.config import RunConfig
    from dynashape.train.run import train

    run_dir, scratch = Path(run_dir), Path(scratch)
    committed = _metrics(run_dir)
    if len(committed) < steps:
        raise ValueError(f"steps={steps}: {run_dir} logs only {len(committed)} steps")
    if scratch.exists() and any(scratch.iterdir()):
        raise ValueError(f"scratch={str(scratch)!r} is not empty: the replay trains from step 0 in a new folder")
    cfg = RunConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    train(cfg, scratch, progress=False, stop_after=steps, report=False, verifier=verifier)
    return differences(committed[:steps], _metrics(scratch)[:steps], "metrics")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished run folder (config.yaml, metrics.jsonl)")
    parser.add_argument("scratch", help="a new folder to train the replay in")
    parser.add_argument("--steps", type=int, default=8, help="steps to train again (default 8)")
    args = parser.parse_args(argv)
    diffs = replay(args.run_dir, args.scratch, args.steps)
    for d in diffs:
        print(d)
    verdict = f"{len(diffs)} differences" if diffs else "the same numbers"
    print(f"{args.run_dir}: first {args.steps} steps, {verdict}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
