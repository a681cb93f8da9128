"""ShapedGRPOTrainer for 5 steps on one CUDA device (issue 14, risk 6). Skipped without CUDA.

    python -m pytest -q -p no:cacheprovider -m gpu tests/integrations/test_trl_gpu.py

Needs the TRL test environment (requirements/trl.txt) with a CUDA build of torch. Two runs of 5 steps each on the
tiny model: LEAD with TRL's own sampling on the GPU, and MEDS (bf16) with a deterministic rollout that writes a
``\\boxed{}`` answer, so every completion gets a fingerprint from the hooks on the CUDA forward.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.trl import STATE_FILE, ShapedGRPOTrainer, load_shaper_state  # noqa: E402
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import trl_worker  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
GROUP, STEPS = 4, 5


class _Recording(ShapedGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.steps = [*getattr(self, "steps", []), {
            "device": output["completion_ids"].device,
            "advantages": output["advantages"].detach().cpu(),
            "rewards": self._ds_rewards.detach().cpu(),
            "lengths": output["completion_mask"].sum(-1).detach().cpu(),
            "fingerprints": None if self._ds_fingerprints is None else self._ds_fingerprints.detach(),
        }]  # fmt: skip
        return output


def _train(tmp_path, shaper, *, bf16: bool, rollout: bool):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = build_char_tokenizer()
    config = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2 * GROUP, num_generations=GROUP,
        max_completion_length=16, max_steps=STEPS, learning_rate=1e-3, logging_steps=1, save_strategy="steps",
        save_steps=STEPS, report_to=[], bf16=bf16, seed=0, beta=0.0,
    )  # fmt: skip
    extra = {"rollout_func": trl_worker.make_rollout_func(tokenizer, boxed=True)} if rollout else {}
    trainer = _Recording(
        shaper=shaper,
        model=trl_worker.tiny_model(tokenizer),
        reward_funcs=[trl_worker.parity_reward],
        args=config,
        train_dataset=datasets.Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(8) for b in range(8)]}),
        processing_class=tokenizer,
        fingerprint_layers=2,
        **extra,
    )
    trainer.train()
    return trainer


def test_lead_five_steps_on_cuda(tmp_path):
    trainer = _train(tmp_path, get_shaper("lead", b_max=16, l_min=2, whiten="sequence"), bf16=False, rollout=False)
    assert next(trainer.model.parameters()).device.type == "cuda"
    assert len(trainer.steps) == STEPS and all(s["device"].type == "cuda" for s in trainer.steps)
    # the advantages TRL trained on are the shaper's on the same batch, recomputed on the host
    reference = get_shaper("lead", b_max=16, l_min=2, whiten="sequence")
    for step in trainer.steps:
        n = step["rewards"].shape[0]
        batch = RolloutBatch(
            group_ids=torch.arange(n) // GROUP, correct=step["rewards"][:, 0] > 0.5, lengths=step["lengths"]
        )
        torch.testing.assert_close(step["advantages"], reference(batch).advantages, rtol=1e-5, atol=1e-6)
    saved = load_shaper_state(str(tmp_path / f"checkpoint-{STEPS}" / STATE_FILE))
    assert saved["controller"]["n_updates"] == STEPS


def test_meds_five_steps_on_cuda_bf16(tmp_path):
    trainer = _train(tmp_path, get_shaper("meds"), bf16=True, rollout=True)
    assert len(trainer.steps) == STEPS
    for step in trainer.steps:
        prints = step["fingerprints"]
        assert prints.device.type == "cuda" and prints.shape == (2 * GROUP, 2)
        assert torch.isfinite(prints).all()  # every completion has a boxed answer
    logged = [e for e in trainer.state.log_history if "meds/points" in e]
    assert len(logged) == STEPS and logged[-1]["meds/points"] > 0
