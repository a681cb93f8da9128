"""The follow-up re-run's determinism check: every finished run of the registered re-run against the as-run run of
the same row and seed, metrics.jsonl value for value (timings aside, as ``same_run_numbers``).

    python scripts/rerun_determinism.py [results/comparison-v2] [results/comparison-v2-as-run]

The training reads no evaluation setting, so a run trained again on the same plan, seed and base must log the same
numbers at every step; a run that does not is named with its first differences. Writes ``determinism.json`` into
the re-run's folder and exits 1 when any run differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from same_run_numbers import differences


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def main(rerun: str = "results/comparison-v2", as_run: str = "results/comparison-v2-as-run") -> int:
    new_root, old_root = Path(rerun), Path(as_run)
    same, differ, missing = [], {}, []
    for done in sorted(new_root.glob("runs/*/*/eval.json")):
        run = done.parent.relative_to(new_root).as_posix()
        if not (old_root / run / "metrics.jsonl").exists():
            missing.append(run)
            continue
        diffs = differences(_metrics(old_root / run), _metrics(new_root / run), "metrics")
        if diffs:
            differ[run] = diffs[:5] + ([f"... {len(diffs) - 5} more"] if len(diffs) > 5 else [])
        else:
            same.append(run)
    report = {"checked": len(same) + len(differ), "identical": same, "different": differ, "no_as_run": missing}
    (new_root / "determinism.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(same)} of {len(same) + len(differ)} re-run runs log the as-run metrics value for value"
          + (f"; {len(differ)} differ: {', '.join(differ)}" if differ else "")
          + (f"; {len(missing)} without an as-run run" if missing else ""))  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
