"""Does this machine log a committed run's numbers? Trains the first K steps of a run folder's own config.yaml in a
scratch folder and compares their metrics with the committed metrics.jsonl, value for value (timings aside, as
``same_run_numbers``).

    python scripts/replay_run.py results/comparison-field/runs/loose/thinkprune-seed5 /tmp/replay [--steps 8]
    python scripts/replay_run.py results/comparison-field/runs/tight/adlp-seed9 /tmp/replay --whole

Why: a long study outlives its machine (a session ends, the next may get a new one). CPU kernels can differ between
machines (the follow-up's determinism check found 8 such runs), so before a study's runs trained on two machines
are pooled, a few steps of one run from the first machine are trained again on the second. Exit status 0 when
every number of those steps is equal, 1 otherwise (each difference printed).

``--whole``: where a machine does not replay the float path, how far does that move a whole run? Trains the run
to its end (its final evaluation included) and prints the first step whose sampled rollouts differ and the final
evaluation's figures, committed and here (exit status 0 when all are equal).
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


ROLLOUT_KEYS = ("accuracy", "length/mean", "truncated_frac")  # decided by the sampled rollouts, not the update
FINAL_KEYS = ("accuracy", "mean_length", "truncated_frac")  # eval.json's final evaluation, beside its AES


def _train_again(run_dir: Path, scratch: Path, steps: int | None, verifier) -> None:
    """Train ``run_dir``'s config.yaml in ``scratch`` from step 0: ``steps`` steps, or (None) to its end."""
    import yaml

    from dynashape.train.config import RunConfig
    from dynashape.train.run import train

    if scratch.exists() and any(scratch.iterdir()):
        raise ValueError(f"scratch={str(scratch)!r} is not empty: the replay trains from step 0 in a new folder")
    cfg = RunConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    train(cfg, scratch, progress=False, stop_after=steps, report=False, verifier=verifier)


def replay(run_dir: str | Path, scratch: str | Path, steps: int, verifier=None) -> list[str]:
    """Train ``steps`` steps of ``run_dir``'s config.yaml in ``scratch`` (a new folder) and return the differences
    of their metrics from the committed ones (empty: the same numbers)."""
    run_dir, scratch = Path(run_dir), Path(scratch)
    committed = _metrics(run_dir)
    if len(committed) < steps:
        raise ValueError(f"steps={steps}: {run_dir} logs only {len(committed)} steps")
    _train_again(run_dir, scratch, steps, verifier)
    return differences(committed[:steps], _metrics(scratch)[:steps], "metrics")


def replay_whole(run_dir: str | Path, scratch: str | Path, verifier=None) -> dict:
    """Train a finished run again to its end in ``scratch`` and return ``{"first_rollout_difference": step or
    None, "final": {key: (committed, here)}}``: the first step whose ``ROLLOUT_KEYS`` differ, and the final
    evaluation's ``FINAL_KEYS`` and AES."""
    run_dir, scratch = Path(run_dir), Path(scratch)
    if not (run_dir / "eval.json").exists():
        raise ValueError(f"run_dir={str(run_dir)!r} has no eval.json: a whole replay compares a finished run")
    _train_again(run_dir, scratch, None, verifier)
    pairs = zip(_metrics(run_dir), _metrics(scratch))
    first = next((int(a["step"]) for a, b in pairs if any(a.get(k) != b.get(k) for k in ROLLOUT_KEYS)), None)
    committed, here = (json.loads((d / "eval.json").read_text()) for d in (run_dir, scratch))
    final = {k: (committed["final"][k], here["final"][k]) for k in FINAL_KEYS}
    final["aes"] = (committed["aes"], here["aes"])
    return {"first_rollout_difference": first, "final": final}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished run folder (config.yaml, metrics.jsonl)")
    parser.add_argument("scratch", help="a new folder to train the replay in")
    parser.add_argument("--steps", type=int, default=8, help="steps to train again (default 8)")
    parser.add_argument("--whole", action="store_true", help="train the whole run again and compare its result")
    args = parser.parse_args(argv)
    if args.whole:
        effect = replay_whole(args.run_dir, args.scratch)
        for key, (committed, here) in effect["final"].items():
            print(f"final {key}: committed {committed:.6f}, here {here:.6f}, difference {here - committed:+.6f}")
        first = effect["first_rollout_difference"]
        same_rollouts = first is None
        print(f"{args.run_dir}: " + ("the same rollouts at every step" if same_rollouts else
                                      f"the sampled rollouts first differ at step {first}"))  # fmt: skip
        return 0 if same_rollouts and all(c == h for c, h in effect["final"].values()) else 1
    diffs = replay(args.run_dir, args.scratch, args.steps)
    for d in diffs:
        print(d)
    verdict = f"{len(diffs)} differences" if diffs else "the same numbers"
    print(f"{args.run_dir}: first {args.steps} steps, {verdict}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
