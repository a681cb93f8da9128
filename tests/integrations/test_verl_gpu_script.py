"""scripts/gpu_check_verl.py (the verl part of scripts/gpu_check.sh) on the CPU: its main_ppo command line is the
end-to-end test's with the GPU settings in place of the CPU harness's, so the two cannot drift apart unseen. The
GPU run itself has not happened yet (docs/engines.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

for _module in ("verl", "transfer_queue", "ray", "pyarrow", "transformers", "gguf"):
    pytest.importorskip(_module)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integrations"))


def _driver():
    spec = importlib.util.spec_from_file_location("gpu_check_verl", ROOT / "scripts" / "gpu_check_verl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("estimator", "mode"), [("lead", "sync"), ("meds", "dynashape")])
def test_the_gpu_command_line_is_the_e2e_one_on_vllm_bf16_and_one_gpu(estimator, mode, tmp_path):
    import test_verl_e2e as e2e

    driver = _driver()
    case = e2e.Case(f"gpu_{estimator}", estimator, mode, 1, {"fingerprint_layers": 2} if estimator == "meds" else {})
    args = driver.gpu_overrides(e2e, case, tmp_path / "assets", tmp_path / "run")
    cpu = e2e.overrides(case, tmp_path / "assets", tmp_path / "run", None)
    assert "actor_rollout_ref.rollout.name=vllm" in args
    assert "actor_rollout_ref.rollout.dtype=bfloat16" in args
    assert f"data.max_response_length={driver.RESPONSE_LENGTH}" in args
    assert not any(
        a.startswith(("trainer.device=", "+actor_rollout_ref.actor.fsdp_config.mixed_precision")) for a in args
    )
    for kept in (
        "actor_rollout_ref.actor.strategy=fsdp2",
        "trainer.n_gpus_per_node=1",
        f"trainer.v1.trainer_mode={mode}",
    ):
        assert kept in args and kept in cpu
    assert f"algorithm.adv_estimator={estimator}" in args
    assert set(args) - set(cpu) == set(driver.GPU_INSTEAD.values()) - {None} | set(driver.GPU_EXTRA)


def test_the_driver_states_it_needs_a_model_and_an_output_folder():
    with pytest.raises(SystemExit) as info:
        _driver().main([])
    assert info.value.code == 2  # argparse: --model and --out are required
