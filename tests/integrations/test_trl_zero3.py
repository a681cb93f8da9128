"""MEDS fingerprints under DeepSpeed ZeRO-3 (the sharding TRL / accelerate users get), 2 CPU processes.

Risk 1 of issue 14. tests/meds/sharded_worker.py partitions a tiny untied Qwen2 with ``deepspeed.initialize``
(ZeRO stage 3, persistence threshold 0 so every parameter is partitioned; what accelerate's DeepSpeed plugin
calls for TRL) and checks that the capture around the ordinary forward gives the unsharded model's fingerprints
(brute force to 1e-5, unsharded capture to 1e-6). Runs in the TRL environment, which installs deepspeed.

Note: with DeepSpeed 0.19.8 on the CPU this tiny model's head is already gathered while the decoder layers run,
so this run alone would not catch a read outside the head's forward; tests/meds/test_capture_sharded.py
simulates the per-module gathering (and the FSDP2 run there reproduces the original DTensor failure).

``test_trl_zero3_fingerprints_equal_one_process``: TRL's own path, ``accelerate launch --use_deepspeed
--zero_stage 3`` of ShapedGRPOTrainer (MEDS) in 2 processes. TRL's fused LM head reads ``lm_head.weight`` without
calling the head module, so the capture gathers the head with DeepSpeed's GatheredParameters after the forward
(before that fix this run failed: the head was an empty ZeRO-3 partition). The fingerprints and advantages must
equal a 1-process run on the same deterministic batch.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def test_trl_zero3_fingerprints_equal_one_process(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "integrations"))
    import trl_worker

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TRL_EXPERIMENTAL_SILENCE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [
        str(Path(sys.executable).with_name("accelerate")), "launch", "--use_deepspeed", "--zero_stage", "3",
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--zero3_init_flag", "false",
        "--offload_param_device", "none", "--offload_optimizer_device", "none", "--gradient_accumulation_steps", "1",
        "--gradient_clipping", "1.0", "--dynamo_backend", "no", "--main_process_port", str(port),
        str(ROOT / "tests" / "integrations" / "trl_worker.py"), str(tmp_path / "two"), "--shaper", "meds",
        "--steps", "1",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    two = [torch.load(tmp_path / "two" / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    one = trl_worker.run(str(tmp_path / "one"), steps=1, shaper="meds")
    expected = one["record"][0]["fingerprints"]
    got = torch.cat([t["record"][0]["fingerprints"] for t in two])  # each rank's local rows, in rank order
    assert expected.shape == got.shape == (8, 2) and torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for t in two:
        assert t["world"] == 2
        torch.testing.assert_close(
            t["record"][0]["global_advantages"], one["record"][0]["global_advantages"], rtol=1e-5, atol=1e-6
        )
