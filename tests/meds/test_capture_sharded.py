"""MEDS fingerprints on sharded models: the head and the final norm are read only inside their own forward.

Risk 1 of issue 14: verl's FSDP2 path shards ``lm_head`` (and ``embed_tokens``) as their own units when the
embeddings are untied, so during the decoder layers' forward ``lm_head.weight`` is a sharded DTensor; DeepSpeed
ZeRO-3 gathers each module's parameters only around its own forward. Reading them in a layer hook failed with
``aten.index.Tensor got mixed torch.Tensor and DTensor``.

- ``test_fsdp2_two_processes_equal_unsharded``: 2 processes (torchrun, gloo), a tiny Qwen2 with an untied head
  sharded the way verl 0.9.1 shards it; fingerprints equal a brute force on the unsharded model and the capture on
  the unsharded model to 1e-6 (tests/meds/sharded_worker.py holds the per-rank checks), also for a forward that
  never calls the head module (TRL's fused LM head: the rows come from the gathered DTensor in result()).
- tests/integrations/test_trl_zero3.py: the same worker under DeepSpeed ZeRO-3 (the TRL environment has it).
- The seam, in one process: a model whose modules hold their parameters only inside their own forward (what
  ZeRO-3 does, simulated with hooks that fill and empty ``param.data``), and a forward that never calls the head.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dynashape.meds.capture import FingerprintCapture, fingerprint
from launcher import run_launcher

WORKER = Path(__file__).with_name("sharded_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _run_worker(mode: str, extra_env: dict[str, str] | None = None) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    returncode, output = run_launcher([*cmd, str(WORKER), "--mode", mode], env=env, timeout=300)
    assert returncode == 0, output[-6000:]
    return output


def test_fsdp2_two_processes_equal_unsharded():
    output = _run_worker("fsdp2")
    for rank in (0, 1):
        assert f"RANK {rank} OK fsdp2 cases=9" in output, output[-3000:]


# ---------------------------------------------------------------------------------------------------------
# The seam in one process: parameters that exist only inside their module's own forward
# ---------------------------------------------------------------------------------------------------------


def _tiny_qwen2(tiny_model) -> nn.Module:
    return tiny_model("qwen2", num_layers=4, tie=False, seed=5)


class _OwnForwardOnly:
    """Simulated ZeRO-3: each module's direct parameters are empty except between its forward pre/post hooks.

    The hooks are registered before any capture (as an engine does at start-up), so a capture's pre-hooks run
    after the fill and its post-hooks after the release.
    """

    def __init__(self, model: nn.Module) -> None:
        self.full: dict[nn.Parameter, torch.Tensor] = {}
        self.handles = []
        for module in model.modules():
            params = list(module.parameters(recurse=False))
            if not params:
                continue
            for p in params:
                self.full[p] = p.data
                p.data = p.data.new_empty(0)
            self.handles.append(module.register_forward_pre_hook(self._fill(params)))
            self.handles.append(module.register_forward_hook(self._release(params)))

    def _fill(self, params):
        def hook(module, args):
            for p in params:
                p.data = self.full[p]

        return hook

    def _release(self, params):
        def hook(module, args, output):
            for p in params:
                p.data = p.data.new_empty(0)

        return hook


def _batch():
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(1, 160, (3, 8), generator=gen)
    positions = torch.tensor([2, 6, -1])
    targets = torch.tensor([int(ids[0, 3]), int(ids[1, 7]), -1])
    return ids, positions, targets


def _hand_brute_force(model, ids, positions, targets, norm: str) -> np.ndarray:
    """Layer logits from hidden_states[1:] and the full head (the unsharded model)."""
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[1:]
        out = np.full((len(positions), len(hidden)), np.nan)
        for n, h in enumerate(hidden):
            if norm == "final" and n < len(hidden) - 1:
                h = model.model.norm(h)
            logits = model.lm_head(h)
            for i, (p, y) in enumerate(zip(positions.tolist(), targets.tolist(), strict=True)):
                if p >= 0:
                    out[i, n] = float(logits[i, p, y])
    return out


@pytest.mark.parametrize("norm", ["raw", "final"])
def test_params_present_only_in_own_forward(tiny_model, norm):
    model = _tiny_qwen2(tiny_model)
    ids, positions, targets = _batch()
    expected = _hand_brute_force(model, ids, positions, targets, norm)
    sim = _OwnForwardOnly(model)
    assert model.lm_head.weight.numel() == 0 and model.model.norm.weight.numel() == 0
    with torch.no_grad(), FingerprintCapture(model, positions, targets, layers=4, norm=norm) as cap:
        model(input_ids=ids)
    np.testing.assert_allclose(cap.result().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert model.lm_head.weight.numel() == 0  # the simulation really released it again
    # the stand-alone function under the same simulation
    alone = fingerprint(model, ids, None, positions, targets, layers=4, norm=norm)
    np.testing.assert_allclose(alone.numpy(), expected, rtol=1e-5, atol=1e-5)
    for handle in sim.handles:
        handle.remove()


class _FusedHeadQwen(nn.Module):
    """A causal LM forward that reads head.weight directly (a fused log-prob kernel) and never calls the head."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        hidden = self.inner.model(input_ids=input_ids).last_hidden_state
        return hidden @ self.inner.lm_head.weight.T


def test_forward_without_head_call_reads_the_whole_weight(tiny_model):
    model = _tiny_qwen2(tiny_model)
    ids, positions, targets = _batch()
    expected = _hand_brute_force(model, ids, positions, targets, "raw")
    fused = _FusedHeadQwen(model)
    with torch.no_grad(), FingerprintCapture(model, positions, targets, layers=4) as cap:
        fused(ids)
    np.testing.assert_allclose(cap.result().numpy(), expected, rtol=1e-5, atol=1e-5)


def test_forward_without_head_call_on_a_sharded_head_is_refused(tiny_model):
    model = _tiny_qwen2(tiny_model)
    ids, positions, targets = _batch()
    sim = _OwnForwardOnly(model)
    fused = _FusedHeadQwen(model)
    capture = FingerprintCapture(model, positions, targets, layers=4)
    with torch.no_grad(), capture:
        fused.inner.model(input_ids=ids)  # the head's weight stays an empty shard: nothing exact to read
    with pytest.raises(RuntimeError, match="output head of Qwen2ForCausalLM was not called"):
        capture.result()
    for handle in sim.handles:
        handle.remove()


def test_capture_runs_on_the_models_device_meta(tiny_model):
    # The meta device stands in for an accelerator: a tensor the capture created on the default (CPU) device
    # would meet the meta hidden states and raise. Validation inputs stay on the host, as callers pass them.
    model = _tiny_qwen2(tiny_model).to("meta")
    ids, positions, targets = _batch()
    with torch.no_grad(), FingerprintCapture(model, positions, targets, layers=4, norm="final") as cap:
        model(input_ids=ids.to("meta"))
    out = cap.result()
    assert out.device.type == "meta" and out.shape == (3, 4) and out.dtype == torch.float32
