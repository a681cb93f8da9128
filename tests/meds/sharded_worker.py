"""One rank of the sharded-fingerprint check (run by tests/meds/test_capture_sharded.py through torchrun).

Every rank builds the same tiny Qwen2 with an UNTIED head (random weights, perturbed norms), keeps an unsharded
copy, shards the model the way verl 0.9.1's FSDP2 path does (``verl/utils/fsdp_utils.py``: each decoder layer
class named in ``_no_split_modules``, every ``nn.Embedding`` and the modules named ``embed_tokens`` / ``lm_head``
when the embeddings are untied, each as its own ``fully_shard`` unit, then the root), and compares the
fingerprints of a capture around the sharded model's ordinary forward with

- a brute force on the unsharded copy: HF ``hidden_states[1:]`` -> full-vocabulary logits of every layer ->
  the target's logit (no package code), and
- the capture around the unsharded copy's forward (the sharded result must be the same to 1e-6).

Each rank uses its own batch (data parallel). Prints ``RANK r OK <cases> max_diff=...`` and exits 0, or raises.

    torchrun --nproc_per_node 2 tests/meds/sharded_worker.py [--mode fsdp2|zero3]
"""

from __future__ import annotations

import argparse
import copy
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from dynashape.meds.capture import FingerprintCapture, fingerprint

VOCAB, HIDDEN, LAYERS = 160, 32, 4


def build_model() -> nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # random-init norms are all ones: perturb them so applying the final norm matters
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn_like(param))
    return model.eval()


def batch_for(rank: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """3 left-padded rows of lengths 9, 6, 4 (+ one absent answer), positions and next-token targets."""
    gen = torch.Generator().manual_seed(100 + rank)
    lengths, width = [9, 6, 4], 9
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, width - n :] = torch.randint(1, VOCAB, (n,), generator=gen)
        mask[r, width - n :] = 1
    positions = torch.tensor([4 + rank, 6, -1])  # rank-dependent, so the ranks really differ
    targets = torch.where(positions >= 0, ids.gather(1, (positions + 1).clamp(max=width - 1)[:, None])[:, 0], -1)
    kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}
    return kwargs, positions, targets


def brute_force(model: nn.Module, kwargs, positions, targets, *, layers: int, diff: bool, norm: str) -> np.ndarray:
    """f_n from hidden_states[1:] and the full head, on the unsharded model."""
    with torch.no_grad():
        hidden = model(**kwargs, output_hidden_states=True).hidden_states[1:]
        values = np.full((len(positions), len(hidden)), np.nan)
        for n, h in enumerate(hidden):
            if norm == "final" and n < len(hidden) - 1:
                h = model.model.norm(h)
            logits = model.lm_head(h)
            for i, (p, y) in enumerate(zip(positions.tolist(), targets.tolist(), strict=True)):
                if p >= 0:
                    values[i, n] = logits[i, p, y].item()
    if diff:
        values = np.diff(values, axis=1)
    return values[:, -layers:]


def shard_like_verl_fsdp2(model: nn.Module) -> None:
    from torch.distributed.fsdp import fully_shard

    layer_classes = set(model._no_split_modules or [])
    tied = getattr(model.config, "tie_word_embeddings", False)
    by_name = set() if tied else {"embed_tokens", "lm_head"}
    targets = [
        module
        for name, module in model.named_modules()
        if type(module).__name__ in layer_classes
        or (isinstance(module, nn.Embedding) and not tied)
        or (name.rsplit(".", 1)[-1] in by_name and hasattr(module, "weight"))
    ]
    assert any(m is model.lm_head for m in targets) and any(m is model.model.embed_tokens for m in targets)
    for module in targets:
        fully_shard(module)
    fully_shard(model)


def partition_like_zero3(model: nn.Module) -> nn.Module:
    """DeepSpeed ZeRO-3 (what accelerate / TRL set up): every parameter partitioned, gathered per module.

    ``stage3_param_persistence_threshold: 0``: by default parameters under 1e5 elements stay whole, which would
    be all of this tiny model's.
    """
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 3,
            "stage3_param_persistence_threshold": 0,
            "stage3_max_live_parameters": 0,
            "stage3_max_reuse_distance": 0,
            "stage3_prefetch_bucket_size": 0,
        },
    }
    engine, *_ = deepspeed.initialize(model=model, config=config)
    return engine.module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="fsdp2", choices=["fsdp2", "zero3"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = build_model()
    plain = copy.deepcopy(model)
    if args.mode == "fsdp2":
        dist.init_process_group("gloo")
        shard_like_verl_fsdp2(model)
        from torch.distributed.tensor import DTensor

        assert isinstance(model.lm_head.weight, DTensor)  # sharded outside its own forward
    else:
        model = partition_like_zero3(model)
        assert model.lm_head.weight.numel() == 0  # partitioned outside its own forward
        assert model.model.norm.weight.numel() == 0
    rank = dist.get_rank()

    kwargs, positions, targets = batch_for(rank)
    worst, cases = 0.0, 0
    for norm in ("raw", "final"):
        for layers, diff in ((3, False), (3, True), (4, False)):
            expected = brute_force(plain, kwargs, positions, targets, layers=layers, diff=diff, norm=norm)
            options = {"layers": layers, "diff": diff, "norm": norm}
            with torch.no_grad(), FingerprintCapture(plain, positions, targets, **options) as c:
                plain(**kwargs)
            unsharded = c.result()
            with torch.no_grad(), FingerprintCapture(model, positions, targets, **options) as c:
                model(**kwargs)
            sharded = c.result()
            np.testing.assert_allclose(sharded.numpy(), expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(sharded.numpy(), unsharded.numpy(), rtol=0, atol=1e-6)
            assert torch.isnan(sharded[2]).all() and not torch.isnan(sharded[:2]).any()
            worst = max(worst, float((sharded - unsharded).abs().nan_to_num(0.0).max()))
            cases += 1
    # a training forward (grad enabled, backward through the sharded model): the capture stays detached
    if args.mode == "zero3":  # the backward of a bare ZeRO-3 module needs the engine's optimizer: forward only
        model.train()
        with FingerprintCapture(model, positions, targets, layers=3) as c:
            logits = model(**kwargs).logits
        expected = brute_force(plain, kwargs, positions, targets, layers=3, diff=False, norm="raw")
        np.testing.assert_allclose(c.result().numpy(), expected, rtol=1e-5, atol=1e-5)
        assert logits.requires_grad and not c.result().requires_grad
    else:
        _train_forward(model, plain, kwargs, positions, targets)
    model.eval()
    cases += 1
    # the stand-alone function (a forward with the logits of one position) on the sharded model
    alone = fingerprint(model, **kwargs, positions=positions, targets=targets, layers=3, norm="final")
    expected = brute_force(plain, kwargs, positions, targets, layers=3, diff=False, norm="final")
    np.testing.assert_allclose(alone.numpy(), expected, rtol=1e-5, atol=1e-5)
    cases += 1
    if args.mode == "fsdp2":
        cases += _fused_head_forward(model, plain, kwargs, positions, targets)
    dist.barrier()
    print(f"RANK {rank} OK {args.mode} cases={cases} max_diff_vs_unsharded={worst:.3e}", flush=True)
    dist.destroy_process_group()


def _fused_head_forward(model, plain, kwargs, positions, targets) -> int:
    """A root forward that never calls lm_head (TRL's fused LM head: backbone, then head.weight read directly).

    The capture then reads the head rows in result() from the gathered DTensor (a collective on every rank).
    """
    from torch.distributed.tensor import DTensor

    def fused_forward(input_ids, attention_mask=None, position_ids=None):
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        weight = model.lm_head.weight
        weight = weight.full_tensor() if isinstance(weight, DTensor) else weight
        return hidden.last_hidden_state @ weight.T

    model.forward = fused_forward  # FSDP2's hooks stay on the module's __call__
    try:
        with torch.no_grad(), FingerprintCapture(model, positions, targets, layers=3, norm="final") as c:
            model(**kwargs)
        got = c.result()
    finally:
        del model.forward
    expected = brute_force(plain, kwargs, positions, targets, layers=3, diff=False, norm="final")
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    return 1


def _train_forward(model, plain, kwargs, positions, targets) -> None:
    model.train()
    with FingerprintCapture(model, positions, targets, layers=3) as c:
        model(**kwargs).logits.float().logsumexp(-1).sum().backward()
    expected = brute_force(plain, kwargs, positions, targets, layers=3, diff=False, norm="raw")
    np.testing.assert_allclose(c.result().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert not c.result().requires_grad


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
