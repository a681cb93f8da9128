"""MEDS fingerprints on a CUDA device (issue 14, risk 6): the capture runs where the model runs. Skipped without CUDA.

python -m pytest -q -p no:cacheprovider -m gpu tests/meds/test_capture_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from dynashape.meds.capture import FingerprintCapture, fingerprint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _brute_force(model, ids, positions, targets) -> torch.Tensor:
    """Last 3 layers' logits of the target at p, from hidden_states[1:] and the full head (float32)."""
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[1:]
        weight = model.lm_head.weight.float()
        out = torch.full((len(positions), len(hidden)), float("nan"), device=ids.device)
        for n, h in enumerate(hidden):
            for i, (p, y) in enumerate(zip(positions.tolist(), targets.tolist(), strict=True)):
                if p >= 0:
                    out[i, n] = h[i, p].float() @ weight[y]
    return out[:, -3:]


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 5e-2)])
def test_capture_on_cuda_equals_brute_force(tiny_model, dtype, tol):
    model = tiny_model("qwen2", num_layers=4, tie=False).to("cuda", dtype)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 160, (3, 10), generator=gen).cuda()
    positions = torch.tensor([3, 8, -1], device="cuda")  # on the device, as an engine passes them
    targets = torch.where(positions >= 0, ids.gather(1, (positions + 1).clamp(max=9)[:, None])[:, 0], -1)
    expected = _brute_force(model, ids, positions, targets)
    with torch.no_grad(), FingerprintCapture(model, positions, targets, layers=3) as cap:
        model(input_ids=ids)
    got = cap.result()
    assert got.device.type == "cuda" and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)
    alone = fingerprint(model, ids, None, positions, targets, layers=3)
    torch.testing.assert_close(alone, got, rtol=tol, atol=tol, equal_nan=True)
