"""MEDS fingerprints under DeepSpeed ZeRO-3 (the sharding TRL / accelerate users get), 2 CPU processes.

Risk 1 of issue 14. tests/meds/sharded_worker.py partitions a tiny untied Qwen2 with ``deepspeed.initialize``
(ZeRO stage 3, persistence threshold 0 so every parameter is partitioned; what accelerate's DeepSpeed plugin
calls for TRL) and checks that the capture around the ordinary forward gives the unsharded model's fingerprints
(brute force to 1e-5, unsharded capture to 1e-6). Runs in the TRL environment, which installs deepspeed.

Note: with DeepSpeed 0.19.8 on the CPU this tiny model's head is already gathered while the decoder layers run,
so this run alone would not catch a read outside the head's forward; tests/meds/test_capture_sharded.py
simulates the per-module gathering (and the FSDP2 run there reproduces the original DTensor failure).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]


def test_zero3_two_processes_equal_unsharded():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*cmd, str(ROOT / "tests" / "meds" / "sharded_worker.py"), "--mode", "zero3"],
        capture_output=True, text=True, timeout=180, env=env, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    for rank in (0, 1):
        assert f"RANK {rank} OK zero3 cases=8" in output, output[-3000:]
