"""Make a Holm-decided study's frozen data (its file's ``frozen``), once, before its first run: the pass@k subset
(the rule in ``dynashape.study.preregistration.SUBSET_RULE``, on the shipped base model), the power analysis of its
claim parts from an earlier study's runs, and the seeds per row. The follow-up's (``studies/v2-frozen.json``):

    python scripts/followup_plan.py --plan v2 --v1 results/comparison --out studies/v2-frozen.json
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from dynashape.study import preregistration as followup
from dynashape.study.plan_file import find_plan
from dynashape.study.results import load_runs, runs_by_row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v1", default="results/comparison", help="the first comparison's folder (its runs)")
    ap.add_argument("--plan", default="v2", help="the study (a committed study's name or a study file)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    study, _ = find_plan(args.plan)

    candidates = followup.base_pass_at_8()
    keys = followup.choose_passk_subset(candidates["keys"], candidates["pass8"])
    rule = followup.SUBSET_RULE.format(
        samples=candidates["samples"], seed=candidates["seed"], max_pass=0.8, at_least=40
    )
    table = followup.power_table(runs_by_row(load_runs(args.v1)), study)
    data = {
        "command": f"python scripts/followup_plan.py --plan {args.plan} --v1 {args.v1} --out {args.out}",
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "subset": {"rule": rule, "keys": keys, "candidates": candidates},
        "power": {
            "alpha": study.alpha,
            "planning_alpha": followup.planning_alpha(study),
            "target_power": followup.TARGET_POWER,
            "min_seeds": followup.MIN_PLANNED,
            "max_seeds": followup.MAX_PLANNED,
            "v1": args.v1,
            "parts": table,
        },
        "row_seeds": followup.row_seeds(table, study),
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    n_trap = sum(t for k, t in zip(candidates["keys"], candidates["is_trap"]) if k in keys)
    print(f"subset: {len(keys)} of {len(candidates['keys'])} candidates ({n_trap} trap prompts)")
    for t in table:
        print(t)
    print(data["row_seeds"])


if __name__ == "__main__":
    main()
