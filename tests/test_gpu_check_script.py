"""scripts/gpu_check.sh on a CPU machine: a clean one-line skip, and its plumbing with a stand-in interpreter.

The GPU parts themselves (pytest -m gpu, the fingerprint benchmark at the Qwen2.5-1.5B shape, dynashape train on
cuda, ShapedGRPOTrainer for 5 steps) run only where a CUDA GPU is; here we check that the script skips without
installing anything, runs each part with the intended command, reports one line per part and fails when one does.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def run(env: dict, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_skips_with_one_line_and_exit_0_where_no_gpu_is_listed(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "nvidia-smi", "#!/usr/bin/env bash\necho 'No devices were found' >&2\nexit 9\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", GPU_CHECK_LOG_DIR=str(tmp_path / "logs"))
    out = run(env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "gpu_check: SKIP all 0 s no CUDA GPU on this machine (nvidia-smi lists none); nothing to check"
    ]
    assert not (tmp_path / "logs").exists()  # nothing prepared, nothing installed


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_skips_on_this_cpu_machine():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    out = run(env)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 1 and out.stdout.startswith("gpu_check: SKIP all")


STAND_IN = """#!/usr/bin/env bash
# Stands in for a CUDA Python: records each command line, fails the benchmark, finds no TRL gpu tests.
printf '%s\\n' "$*" >> "{calls}"
case "$*" in
  *bench_fingerprint.py*) echo "boom: the benchmark failed"; exit 3 ;;
  *"-m gpu tests/integrations"*) exit 5 ;;
  *) exit 0 ;;
esac
"""


def test_runs_every_part_reports_one_line_each_and_fails_when_one_fails(tmp_path):
    calls = tmp_path / "calls.txt"
    python = executable(tmp_path / "python", STAND_IN.format(calls=calls))
    env = dict(os.environ, GPU_CHECK_PYTHON=str(python), GPU_CHECK_LOG_DIR=str(tmp_path / "logs"))
    out = run(env)
    assert out.returncode == 1, out.stdout + out.stderr
    summary = out.stdout.split("---- gpu_check summary", 1)[1].splitlines()[1:]
    parts = [(line.split()[1], line.split()[2]) for line in summary]
    assert parts == [
        ("PASS", "setup"),
        ("PASS", "gpu-tests"),
        ("FAIL", "fingerprint"),
        ("PASS", "train"),
        ("PASS", "evaluate"),
        ("SKIP", "trl"),
    ]
    assert all(line.split()[4] == "s" and line.split()[3].isdigit() for line in summary)  # seconds per part
    assert "exit 3" in summary[2] and "no gpu-marked tests collected" in summary[5]
    assert "[fingerprint] boom: the benchmark failed" in out.stdout  # the failing part's log tail

    commands = calls.read_text().splitlines()
    assert any("-m pytest" in c and "-m gpu tests --ignore=tests/integrations" in c for c in commands)
    assert "benchmarks/bench_fingerprint.py --preset qwen2.5-1.5b --device cuda --skip-positions" in commands
    assert any(c.endswith("-m gpu tests/integrations") for c in commands)
    train = next(c for c in commands if c.startswith("-m dynashape.cli train"))
    # The train command line is one the real CLI accepts, on cuda, for 3 steps.
    from dynashape.cli import build_parser

    args = build_parser().parse_args(shlex.split(train)[2:])
    assert (args.command, args.device, args.steps, args.eval_samples) == ("train", "cuda", 3, 1)
    from dynashape.cli.commands import _run_config

    cfg = _run_config(args, args.method, args.seed)
    assert (cfg.device, cfg.train.steps, cfg.eval.n_samples, cfg.eval.max_new_tokens) == ("cuda", 3, 1, 96)
    # dynashape evaluate on the vLLM backend, a command line the real CLI accepts
    evaluate = next(c for c in commands if c.startswith("-m dynashape.cli evaluate"))
    args = build_parser().parse_args(shlex.split(evaluate)[2:])
    assert (args.backend, args.protocol, args.samples, args.max_problems) == ("vllm", "lead", 4, 8)
    assert any(c.startswith("-m dynashape.cli model smollm2") for c in commands)


def test_the_evaluate_part_skips_where_vllm_does_not_import(tmp_path):
    calls = tmp_path / "calls.txt"
    no_vllm = STAND_IN.replace('case "$*" in', 'case "$*" in\n  *"import vllm"*) exit 1 ;;')
    python = executable(tmp_path / "python", no_vllm.format(calls=calls))
    env = dict(os.environ, GPU_CHECK_PYTHON=str(python), GPU_CHECK_LOG_DIR=str(tmp_path / "logs"))
    out = run(env)
    line = next(x for x in out.stdout.split("---- gpu_check summary", 1)[1].splitlines() if " evaluate " in x)
    assert line.split()[1] == "SKIP" and "vllm does not import" in line
    assert not any("dynashape.cli evaluate" in c for c in calls.read_text().splitlines())


VERL_STAND_IN = """#!/usr/bin/env bash
# Stands in for the verl GPU environment's Python: records each command line; the verl driver reports its checks.
printf '%s\\n' "$*" >> "{calls}"
case "$*" in
  *gpu_check_verl.py*)
    echo "gpu_check: PASS verl-lead-run 61 s 3 steps"
    echo "gpu_check: PASS verl-lead-advantages 2 s 48 rows, max |diff| 0.00e+00"
    echo "gpu_check: FAIL verl-meds-run 70 s RuntimeError: main_ppo exit 1"
    exit 1 ;;
  *) exit 0 ;;
esac
"""


def test_the_verl_part_reports_each_check_of_its_driver_and_fails_when_one_fails(tmp_path):
    calls = tmp_path / "calls.txt"
    python = executable(tmp_path / "python", VERL_STAND_IN.format(calls=calls))
    env = dict(os.environ, GPU_CHECK_VERL_PYTHON=str(python), GPU_CHECK_LOG_DIR=str(tmp_path / "logs"))
    out = subprocess.run(["bash", str(SCRIPT), "verl"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 1, out.stdout + out.stderr
    summary = out.stdout.split("---- gpu_check summary", 1)[1].splitlines()[1:]
    parts = [(line.split()[1], line.split()[2]) for line in summary]
    assert parts == [
        ("PASS", "setup-verl"),
        ("PASS", "verl-model"),
        ("FAIL", "verl"),
        ("PASS", "verl-lead-run"),
        ("PASS", "verl-lead-advantages"),
        ("FAIL", "verl-meds-run"),
    ]
    assert all(line.split()[4] == "s" and line.split()[3].isdigit() for line in summary)
    commands = calls.read_text().splitlines()
    logs = tmp_path / "logs"
    assert f"scripts/gpu_check_verl.py --model {logs}/smollm2 --out {logs}/verl-runs" in commands
    assert f"-m dynashape.cli model smollm2 {logs}/smollm2" in commands
    assert not any("dynashape.cli train" in c or "-m gpu" in c for c in commands)  # the verl part alone
