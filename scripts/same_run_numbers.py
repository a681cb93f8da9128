"""Do two run folders hold the same numbers? The check that a refactor changed none (timings aside).

    python scripts/same_run_numbers.py runs/before runs/after [--additions-ok]

Compares eval.json and metrics.jsonl value by value, exactly, leaving out what measures time or names a place
(``time/*``, ``*_seconds``, ``*/seconds`` such as MEDS's ``meds/seconds``, ``wall_seconds``, the base model's cache
path and provenance). Exit status 0 when every number is equal, 1 otherwise (each difference printed). With
``--additions-ok`` a key only the second run has (a new metric) is listed as an addition and is no difference;
a key only the first has, and every changed value, still is.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

IGNORED = {"wall_seconds", "final_eval_seconds", "train_seconds", "warmup_seconds", "seconds", "cache", "source",
           "trained_now", "sha256"}  # fmt: skip


def _ignored(key: str) -> bool:
    # A namespaced timing ("meds/seconds") is a timing too: its last segment says so.
    return key.rsplit("/", 1)[-1] in IGNORED or key.startswith("time/") or key.endswith("_seconds")


def differences(a: Any, b: Any, where: str = "", added: list[str] | None = None) -> list[str]:
    """Every place where ``a`` and ``b`` differ; with a list for ``added``, keys only ``b`` has go there instead."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if _ignored(key):
                continue
            if key not in a and added is not None:
                added.append(f"{where}/{key}")
            elif key not in a or key not in b:
                out.append(f"{where}/{key}: only in {'second' if key not in a else 'first'}")
            else:
                out += differences(a[key], b[key], f"{where}/{key}", added)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]", added)]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main(first: str, second: str, *flags: str) -> int:
    a, b = Path(first), Path(second)
    added: list[str] | None = [] if "--additions-ok" in flags else None
    ev_a, ev_b = json.loads((a / "eval.json").read_text()), json.loads((b / "eval.json").read_text())
    diffs = differences(ev_a, ev_b, "eval", added)
    ma = [json.loads(x) for x in (a / "metrics.jsonl").read_text().splitlines() if x.strip()]
    mb = [json.loads(x) for x in (b / "metrics.jsonl").read_text().splitlines() if x.strip()]
    diffs += differences(ma, mb, "metrics", added)
    for d in diffs:
        print(d)
    if added:  # one line per new key, not per step
        names = sorted({re.sub(r"\[\d+\]", "[*]", x) for x in added})
        print(f"added in the second run ({len(added)} values): " + ", ".join(names))
    n = sum(len(m) for m in ma)
    print(f"{'same numbers' if not diffs else f'{len(diffs)} differences'}: eval.json and {len(ma)} steps ({n} values)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
