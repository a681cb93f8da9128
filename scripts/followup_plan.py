"""Make the follow-up comparison's frozen data, once, before its first run: the pass@k subset (the rule in
``dynashape.study.followup.SUBSET_RULE``, on the shipped base model), the power analysis from v1's runs, and the
seeds per row. Writes ``--out`` (the package's ``src/dynashape/study/followup.json``).

    python scripts/followup_plan.py --v1 results/comparison --out src/dynashape/study/followup.json
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from dynashape.study import followup
from dynashape.study.results import load_runs, runs_by_row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v1", default="results/comparison", help="the first comparison's folder (its runs)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    candidates = followup.base_pass_at_8()
    keys = followup.choose_passk_subset(candidates["keys"], candidates["pass8"])
    rule = followup.SUBSET_RULE.format(
        samples=candidates["samples"], seed=candidates["seed"], max_pass=0.8, at_least=40
    )
    table = followup.power_table(runs_by_row(load_runs(args.v1)))
    data = {
        "command": "python scripts/followup_plan.py --v1 " + args.v1 + " --out " + args.out,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "subset": {"rule": rule, "keys": keys, "candidates": candidates},
        "power": {
            "alpha": followup.ALPHA,
            "planning_alpha": followup.planning_alpha(),
            "target_power": followup.TARGET_POWER,
            "min_seeds": followup.MIN_PLANNED,
            "max_seeds": followup.MAX_PLANNED,
            "v1": args.v1,
            "parts": table,
        },
        "row_seeds": followup.row_seeds(table),
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    n_trap = sum(t for k, t in zip(candidates["keys"], candidates["is_trap"]) if k in keys)
    print(f"subset: {len(keys)} of {len(candidates['keys'])} candidates ({n_trap} trap prompts)")
    for t in table:
        print(t)
    print(data["row_seeds"])


if __name__ == "__main__":
    main()
