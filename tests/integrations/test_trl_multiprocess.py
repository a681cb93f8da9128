"""ShapedGRPOTrainer in 2 real processes (accelerate launch, gloo on the CPU), issue 14 risk 5.

tests/integrations/trl_worker.py trains 2 steps on a deterministic rollout_func (completions depend on the prompt
and the copy index only), so a 2-process run and a 1-process run see the same global batches. The shaper must
then produce the same global advantages, metrics and state on every process as in one process, each process
must train on its own slice, and a 2-process resume from checkpoint-1 must continue the same trajectory.

Run in the TRL environment (ci/integration.sh trl).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from launcher import kill_group, run_launcher

pytest.importorskip("trl")

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
sys.path.insert(0, str(HERE))
import trl_worker  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch_cmd(out: Path, port: int, *extra: str, machines: int = 1, machine_rank: int = 0) -> list[str]:
    """accelerate launch of 2 processes in all. On the CPU, accelerate's --cpu flag alone runs ONE process (its
    simple launcher); --multi_gpu goes through torch.distributed.run, and without CUDA the processes use gloo.
    """
    accelerate = Path(sys.executable).with_name("accelerate")
    return [
        str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", str(machines),
        "--machine_rank", str(machine_rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
        "--mixed_precision", "no", "--dynamo_backend", "no", str(HERE / "trl_worker.py"), str(out), *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    return env


def launch_two(out: Path, *extra: str) -> None:
    cmd = _launch_cmd(out, _free_port(), *extra)
    returncode, output = run_launcher(cmd, env=_env(), timeout=300)
    assert returncode == 0, output[-6000:]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("two")
    launch_two(out)
    return out


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=False)  # our own test output (lists of dicts of tensors)


def test_two_processes_equal_one_process(two_process_run, tmp_path):
    one = trl_worker.run(str(tmp_path))  # the 1-process reference, in this process
    ranks = [_load(two_process_run / f"rank{r}.pt") for r in (0, 1)]
    assert one["world"] == 1 and one["backend"] is None
    for rank, got in enumerate(ranks):
        assert got["world"] == 2 and got["backend"] == "gloo"
        assert len(got["record"]) == len(one["record"]) == 2
        for step, (mine, ref) in enumerate(zip(got["record"], one["record"], strict=True)):
            # the same gathered batch (precondition of the comparison), then the same shaped advantages
            torch.testing.assert_close(mine["rewards"], ref["rewards"], rtol=0, atol=0)
            torch.testing.assert_close(mine["global_advantages"], ref["global_advantages"], rtol=0, atol=0)
            n_local = mine["local_advantages"].shape[0]
            assert n_local == ref["global_advantages"].shape[0] // 2, f"step {step}"
            expected_slice = ref["global_advantages"][rank * n_local : (rank + 1) * n_local]
            torch.testing.assert_close(mine["local_advantages"], expected_slice, rtol=0, atol=0)
        assert got["metrics"] == one["metrics"] and len(got["metrics"]) == 2
        assert got["state"] == one["state"] and got["state"]["controller"]["n_updates"] == 2
    # the two processes trained on different halves: a real split, not one process's data twice
    assert not torch.equal(ranks[0]["record"][0]["local_advantages"], ranks[1]["record"][0]["local_advantages"])


def test_two_process_resume_continues_the_trajectory(two_process_run):
    assert (two_process_run / "run" / "checkpoint-1" / "dynashape_shaper.pt").exists()
    launch_two(two_process_run, "--resume")
    for rank in (0, 1):
        full = _load(two_process_run / f"rank{rank}.pt")
        resumed = _load(two_process_run / f"rank{rank}_resumed.pt")
        assert len(resumed["record"]) == 1  # only step 2 ran
        torch.testing.assert_close(
            resumed["record"][0]["global_advantages"], full["record"][1]["global_advantages"], rtol=0, atol=0
        )
        assert resumed["state"] == full["state"]


def test_two_nodes_with_node_local_disks_each_get_the_state(tmp_path):
    """2 "nodes" of 1 process each (2 launches, --num_machines 2), each writing to its own folder as a node-local
    disk would: with save_on_each_node=True node 1's checkpoints must hold the shaper state too, equal to node 0's.
    """
    port = _free_port()
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = []
    for rank, (node, log) in enumerate(zip(nodes, logs, strict=True)):
        cmd = _launch_cmd(node, port, "--save-on-each-node", machines=2, machine_rank=rank)
        with open(log, "w") as handle:  # files, not pipes: a full pipe would stall one node and hang the other
            procs.append(
                subprocess.Popen(
                    cmd, stdout=handle, stderr=subprocess.STDOUT, text=True, env=_env(), start_new_session=True
                )
            )
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p)  # the launcher and its workers: no orphan keeps the port for the next test
    for code, log in zip(codes, logs, strict=True):
        assert code == 0, log.read_text()[-6000:]
    finals = [_load(node / f"rank{r}.pt") for r, node in enumerate(nodes)]
    assert finals[0]["world"] == finals[1]["world"] == 2
    for step in (1, 2):
        states = [trl_worker_state(node, step) for node in nodes]
        assert states[0] == states[1] and states[0]["controller"]["n_updates"] == step
    assert trl_worker_state(nodes[1], 2) == finals[1]["state"] == finals[0]["state"]


def trl_worker_state(node: Path, step: int) -> dict:
    from dynashape.integrations.trl import STATE_FILE, load_shaper_state

    path = node / "run" / f"checkpoint-{step}" / STATE_FILE
    assert path.exists(), f"{path} missing: the node did not save its shaper state"
    return load_shaper_state(str(path))
