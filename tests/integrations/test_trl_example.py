"""examples/trl_lead.py, as a user runs it: LEAD inside TRL's GRPOTrainer on the shipped toy model, on a CPU.

Run in the TRL test environment (requirements/trl.txt, ci/integration.sh trl); skipped elsewhere.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_lead.py"
LINE = re.compile(
    r"^(first|last) 2 steps: accuracy ([\d.]+), mean length ([\d.]+), lambda_c ([\d.]+), lambda_l ([\d.]+)$"
)


def test_the_trl_example_trains_lead_and_reports_its_weights(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "8", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [LINE.match(line) for line in done.stdout.splitlines() if LINE.match(line)]
    assert [m.group(1) for m in rows] == ["first", "last"], done.stdout[-2000:]
    for m in rows:
        accuracy, length, lambda_c, lambda_l = (float(m.group(i)) for i in range(2, 6))
        assert 0.0 <= accuracy <= 1.0 and 1.0 <= length <= 101.0  # the budget caps the completions
        assert math.isclose(lambda_c + lambda_l, 1.0, abs_tol=2e-3)  # LEAD's PSI weights sum to one
    first, last = rows
    # the controller moved: its EMA starts at 0.5 / 0.5 and the toy's correctness channel is the unstable one
    assert float(first.group(4)) != float(last.group(4))
