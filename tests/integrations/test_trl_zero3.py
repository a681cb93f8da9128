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
import sys
from pathlib import Path

import pytest
import torch

from launcher import run_launcher

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 300  # each run takes 10-30 s on 2 idle cores once DeepSpeed's op is built


@pytest.fixture(scope="module", autouse=True)
def deepspeed_cpu_op_built():
    """DeepSpeed on the CPU JIT-compiles its shared-memory collective op (``deepspeed_shm_comm``) in the first
    process that initialises ``deepspeed.comm``: 25 s on 2 idle cores, 150 s on a loaded one. Built here, once per
    environment (under the venv, so that no other checkout's build or stale lock is shared) and outside the
    launches' timeouts; the launched workers find it built through TORCH_EXTENSIONS_DIR."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
        code = (
            "from deepspeed.accelerator import get_accelerator\n"
            "builder = get_accelerator().create_op_builder('ShareMemCommBuilder')\n"
            "assert builder is not None and builder.load() is not None\n"
        )
        env = {**os.environ, "DS_ACCELERATOR": "cpu"}
        code_rc, output = run_launcher([sys.executable, "-c", code], env=env, timeout=1200)
        assert code_rc == 0, output[-6000:]
        yield


def test_zero3_two_processes_equal_unsharded():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    returncode, output = run_launcher(
        [*cmd, str(ROOT / "tests" / "meds" / "sharded_worker.py"), "--mode", "zero3"], env=env, timeout=LAUNCH_TIMEOUT_S
    )
    assert returncode == 0, output[-6000:]
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
    returncode, output = run_launcher(cmd, env=env, timeout=LAUNCH_TIMEOUT_S)
    assert returncode == 0, output[-6000:]
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
