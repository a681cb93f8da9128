"""Stand-ins for the two parts of SkyRL 0.4.0 that run only on GPUs, for tests/integrations/test_skyrl_e2e.py.

Run as ``python tests/integrations/skyrl_cpu_harness.py RECORD_DIR <SkyRL overrides>``: dynashape's SkyRL
entrypoint (``dynashape.integrations.skyrl.entrypoint.main``) with ``base=CPUExp``.

Stand-ins (each GPU-only in SkyRL 0.4.0, and named in docs/engines.md):

* **policy workers** (``PPORayActorGroup`` of its FSDP/Megatron ``PolicyWorker``): they ask Ray for GPU bundles,
  build a CUDA device mesh (``init_device_mesh("cuda", ...)`` in ``workers/worker.py``) and import flash-attn at
  module level; SkyRL has no CPU path for them. :class:`CPUDispatch` answers the trainer's ``dispatch`` calls with
  one transformers model in the trainer's process: per-token log-probs, a clipped policy-gradient step with
  AdamW per mini-batch, and the model saved to / loaded from SkyRL's ``global_step_N/policy`` folder.
* **inference engine** (vLLM HTTP servers): :class:`CPUInference` samples with ``generate`` from that same model
  (so every rollout is on-policy and no weight sync is needed).

SkyRL's own code does the rest: ``main_base.BasePPOExp`` (tokenizer, ``PromptDataset``, tracker, its
``SkyRLGymGenerator`` with skyrl-gym's ``gsm8k`` environment as the reward), ``RayPPOTrainer.train`` (batching,
uids, ``convert_to_training_input``, its padding, ``compute_advantages_and_returns`` calling the registered
dynashape estimator, its checkpoint folders, ``latest_ckpt_global_step.txt``, resume, callbacks), on a local Ray.

A recorder wraps ``RayPPOTrainer.compute_advantages_and_returns`` (calling SkyRL's own) and writes, per step,
SkyRL's raw inputs to the estimator and what it returned to ``RECORD_DIR/step_<N>.pt``.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

import torch

RECORD_ENV = "DYNASHAPE_SKYRL_E2E_RECORD"


class CPUPolicy:
    """One causal LM on the CPU: log-probs of response tokens, and a clipped policy-gradient step."""

    def __init__(self, path: str, lr: float = 1e-3) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=lr)

    def logprobs(self, data: Any) -> torch.Tensor:
        """[B, R] log-probs of the last R tokens of ``sequences`` (R = metadata ``response_length``)."""
        seqs, attn = data["sequences"], data["attention_mask"]
        r = data.metadata["response_length"]
        positions = (attn.long().cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=seqs, attention_mask=attn, position_ids=positions).logits[:, -r - 1 : -1]
        return torch.log_softmax(logits.float(), -1).gather(-1, seqs[:, -r:, None]).squeeze(-1)


class CPUDispatch:
    """What ``RayPPOTrainer`` asks of its ``WorkerDispatch``, answered by :class:`CPUPolicy` (policy only)."""

    def __init__(self, policy: CPUPolicy, clip: float = 0.2) -> None:
        self.policy, self.clip = policy, clip

    def forward(self, model: str, data: Any, **_: Any) -> Any:
        with torch.no_grad():
            lp = self.policy.logprobs(data)
        return SimpleNamespace(loss_fn_outputs=[{"logprobs": row.tolist()} for row in lp], metrics={})

    def forward_from_staged(self, model: str, chunk_refs: list, **_: Any) -> Any:
        (data,) = chunk_refs
        return self.forward(model, data)

    def stage_data(self, model: str, data: Any, boundaries: Any) -> list:
        return [[data[start:end]] for start, end in boundaries]

    def forward_backward_from_staged(self, model: str, chunk_refs: list, **_: Any) -> Any:
        (data,) = chunk_refs
        lp = self.policy.logprobs(data)
        ratio = torch.exp(lp - data["action_log_probs"])
        adv = data["advantages"]
        loss_tokens = -torch.minimum(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv)
        mask = data["loss_mask"].float()
        loss = (loss_tokens * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        return SimpleNamespace(loss_fn_outputs=[], metrics={"policy_loss": float(loss)})

    def optim_step(self, model: str, **_: Any) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), 1.0)
        self.policy.optim.step()
        self.policy.optim.zero_grad()
        return float(norm)

    def save_checkpoint(self, model: str, ckpt_dir: str, tokenizer: Any = None, **_: Any) -> None:
        os.makedirs(ckpt_dir, exist_ok=True)
        self.policy.model.save_pretrained(ckpt_dir)
        torch.save(self.policy.optim.state_dict(), os.path.join(ckpt_dir, "optim.pt"))

    def load_checkpoint(self, model: str, ckpt_dir: str, **_: Any) -> None:
        from safetensors.torch import load_file

        self.policy.model.load_state_dict(load_file(os.path.join(ckpt_dir, "model.safetensors")), strict=False)
        self.policy.optim.load_state_dict(torch.load(os.path.join(ckpt_dir, "optim.pt"), weights_only=True))

    def get_lcm_dp_size(self) -> int:
        return 1

    def get_node_ids(self) -> list:
        import ray

        return [ray.get_runtime_context().get_node_id()]  # the one local node (checkpoint clean-up reads it)

    def get_timing_metrics(self) -> dict:
        return {}

    def __getattr__(self, name: str) -> Any:
        # placement and memory calls (empty_cache, init_weight_sync_state, save_weights_for_sampler, ...):
        # nothing to move on one CPU process; awaited ones get an awaitable no-op
        if name in ("save_weights_for_sampler",):

            async def _async_noop(*args: Any, **kwargs: Any) -> None:
                return None

            return _async_noop
        return lambda *args, **kwargs: None


def make_inference(policy: CPUPolicy, tokenizer: Any) -> Any:
    """An ``InferenceEngineInterface`` sampling from ``policy``'s model (only what the generator calls)."""
    from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface

    class CPUInference(InferenceEngineInterface):
        @property
        def model_name(self) -> str:
            return "cpu-policy"

        async def generate(self, input_batch: Any, model: Any = None) -> dict:
            params = input_batch.get("sampling_params") or {}
            prompts = input_batch.get("prompt_token_ids")
            if prompts is None:
                prompts = [
                    tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
                    for p in input_batch["prompts"]
                ]
            out = {"responses": [], "response_ids": [], "stop_reasons": [], "response_logprobs": None}
            for ids in prompts:
                with torch.no_grad():
                    seq = policy.model.generate(
                        torch.tensor([ids]),
                        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                        do_sample=True,
                        temperature=params.get("temperature", 1.0),
                        top_p=params.get("top_p", 1.0),
                        max_new_tokens=params["max_tokens"],
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id,
                    )[0, len(ids) :].tolist()
                stopped = tokenizer.eos_token_id in seq
                if stopped:
                    seq = seq[: seq.index(tokenizer.eos_token_id) + 1]
                out["response_ids"].append(seq)
                out["responses"].append(tokenizer.decode(seq, skip_special_tokens=True))
                out["stop_reasons"].append("stop" if stopped else "length")
            return out

        def __getattr__(self, name: str) -> Any:  # sleep, wake_up, teardown, ...: nothing to do on the CPU
            async def _noop(*args: Any, **kwargs: Any) -> None:
                return None

            return _noop

    for method in InferenceEngineInterface.__abstractmethods__ - {"model_name", "generate"}:
        setattr(CPUInference, method, CPUInference.__getattr__(None, method))  # type: ignore[arg-type]
    CPUInference.__abstractmethods__ = frozenset()
    return CPUInference()


def record_advantages(record_dir: str) -> None:
    """Wrap SkyRL's ``compute_advantages_and_returns``: save its raw inputs and outputs per step."""
    from skyrl.train.trainer import RayPPOTrainer

    original = RayPPOTrainer.compute_advantages_and_returns

    def recorded(self: Any, data: Any) -> Any:
        raw = {
            "rewards": data["rewards"].clone(),
            "response_mask": data["response_mask"].clone(),
            "uids": list(data.metadata["uids"]),
            "pad_size": int(data.metadata.get("pad_size", 0)),
        }
        out = original(self, data)
        raw["advantages"] = out["advantages"].clone()
        raw["global_step"] = int(self.global_step)
        torch.save(raw, os.path.join(record_dir, f"step_{self.global_step}.pt"))
        return out

    RayPPOTrainer.compute_advantages_and_returns = recorded


def cpu_exp() -> type:
    from skyrl.train.entrypoints.main_base import BasePPOExp

    class CPUExp(BasePPOExp):
        """SkyRL's experiment with the policy workers and the inference engine replaced (see module doc)."""

        def get_train_dataset(self) -> Any:
            # SkyRL's PromptDataset, filtered in this process: SkyRL's own starts 8 processes for it, which on
            # 2 shared cores takes minutes for 8 prompts
            from skyrl.train.dataset import PromptDataset

            return PromptDataset(
                datasets=self.cfg.data.train_data,
                tokenizer=self.tokenizer,
                max_prompt_length=self.cfg.trainer.max_prompt_length,
                num_workers=1,
            )

        def get_eval_dataset(self) -> None:
            return None  # the test runs no evaluation (trainer.eval_interval=-1)

        def get_colocate_pg(self, *args: Any, **kwargs: Any) -> None:
            return None  # GPU placement groups: nothing to place

        def get_inference_client(self) -> Any:
            self._policy = CPUPolicy(self.cfg.trainer.policy.model.path)
            return make_inference(self._policy, self.tokenizer)

        def _setup_trainer(self) -> Any:
            os.makedirs(self.cfg.trainer.export_path, exist_ok=True)
            os.makedirs(self.cfg.trainer.ckpt_path, exist_ok=True)
            record_advantages(os.environ[RECORD_ENV])
            client = self.get_inference_client()
            trainer = self.get_trainer(
                cfg=self.cfg,
                tracker=self.get_tracker(),
                tokenizer=self.tokenizer,
                train_dataset=self.train_dataset,
                eval_dataset=self.eval_dataset,
                inference_engine_client=client,
                generator=self.get_generator(self.cfg, self.tokenizer, client),
                colocate_pg=None,
            )
            trainer.dispatch = CPUDispatch(self._policy)  # instead of build_models (GPU worker groups)
            self.trainer = trainer
            return trainer

    return CPUExp


if __name__ == "__main__":
    from dynashape.integrations.skyrl.entrypoint import main

    os.environ[RECORD_ENV] = os.path.abspath(sys.argv[1])
    main(sys.argv[2:], base=cpu_exp())
