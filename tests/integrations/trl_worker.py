"""One process of the multi-process ShapedGRPOTrainer check (tests/integrations/test_trl_multiprocess.py).

    accelerate launch --num_processes 2 --cpu tests/integrations/trl_worker.py OUT_DIR [--resume]
    python tests/integrations/trl_worker.py OUT_DIR            # the one-process reference

Completions come from a deterministic ``rollout_func`` (a function of the prompt and the completion's copy
index, never of the process layout or the RNG), so a 2-process run and a 1-process run see the same global
batch of 2 prompts x 4 completions per step. Each process writes OUT_DIR/rank{r}.pt with what it used: its
local advantages, the global advantages and batch the shaper saw, the logged shaper metrics and the final state.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import datasets
import torch
import transformers
from trl import GRPOConfig

from dynashape import get_shaper
from dynashape.integrations.trl import ShapedGRPOTrainer
from dynashape.world.chain.tokenizer import build_char_tokenizer

GROUP = 4
PROMPTS_PER_STEP = 2


def tiny_model(tokenizer):
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config)


def make_rollout_func(tokenizer, boxed: bool = False):
    """Completion k of a prompt: digits of a hash of (prompt, k), length 2..7: the same in every layout.

    ``boxed``: the digits are written as ``\\boxed{digits}`` after a short lead-in (MEDS finds an answer).
    """

    def rollout(prompts, trainer):
        # TRL 1.16 passes each prompt once per completion (the sampler repeats it num_generations times).
        prompt_ids, completion_ids, logprobs = [], [], []
        seen: dict[str, int] = {}
        for prompt in prompts:
            k = seen[prompt] = seen.get(prompt, -1) + 1
            digest = hashlib.sha256(f"{prompt}|{k}".encode()).hexdigest()
            length = 2 + int(digest[0], 16) % 6
            text = "".join(str(int(ch, 16) % 10) for ch in digest[1 : 1 + length])
            if boxed:
                text = "x" * (k % 3) + "\\boxed{" + text + "}"
            prompt_ids.append(tokenizer.encode(prompt, add_special_tokens=False))
            completion_ids.append(tokenizer.encode(text, add_special_tokens=False))
            logprobs.append([0.0] * len(completion_ids[-1]))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout


def parity_reward(prompts, completions, completion_ids, **kwargs):
    """Correct when the completion's first digit is even."""
    digits = ["".join(ch for ch in text if ch.isdigit()) for text in completions]
    return [float(len(d) > 0 and int(d[0]) % 2 == 0) for d in digits]


class RecordingTrainer(ShapedGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.record.append(
            {
                "local_advantages": output["advantages"].detach().cpu().clone(),
                "global_advantages": self.last_shaped.advantages.detach().cpu().clone(),
                "rewards": self._ds_rewards.detach().cpu().clone(),
                "fingerprints": None if self._ds_fingerprints is None else self._ds_fingerprints.detach().cpu(),
            }
        )
        return output


def run(
    out: str, *, steps: int = 2, resume: bool = False, save_on_each_node: bool = False, shaper: str = "lead"
) -> dict:
    """Train `steps` steps (from OUT/run/checkpoint-1 with `resume`) and save what this process used."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = build_char_tokenizer()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dataset = datasets.Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]})
    config = GRPOConfig(
        output_dir=os.path.join(out, "run"),
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP // world,
        num_generations=GROUP,
        max_completion_length=8,
        max_steps=steps,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        save_on_each_node=save_on_each_node,
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
        beta=0.0,
        shuffle_dataset=False,
    )
    trainer = RecordingTrainer(
        shaper=get_shaper("lead", b_max=8, l_min=2, whiten="sequence") if shaper == "lead" else get_shaper(shaper),
        model=tiny_model(tokenizer),
        reward_funcs=[parity_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=make_rollout_func(tokenizer, boxed=shaper != "lead"),
        fingerprint_layers=2,
    )
    trainer.record = []
    trainer.train(resume_from_checkpoint=os.path.join(out, "run", "checkpoint-1") if resume else None)
    rank = trainer.accelerator.process_index
    metrics = [
        {k: v for k, v in entry.items() if k.startswith("lead/")}
        for entry in trainer.state.log_history
        if any(k.startswith("lead/") for k in entry)
    ]
    backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
    result = {
        "record": trainer.record,
        "metrics": metrics,
        "state": trainer.shaper.state_dict(),
        "world": world,
        "backend": backend,
    }
    torch.save(result, os.path.join(out, f"rank{rank}{'_resumed' if resume else ''}.pt"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--resume", action="store_true", help="resume from checkpoint-1 of OUT/run")
    parser.add_argument("--save-on-each-node", action="store_true")
    parser.add_argument("--shaper", default="lead")
    args = parser.parse_args()
    run(args.out, steps=args.steps, resume=args.resume, save_on_each_node=args.save_on_each_node, shaper=args.shaper)
    # Leave the process group, then skip the interpreter's finalisation: gloo's C++ worker threads can still hold
    # objects with Python references, and destroying them while the interpreter is torn down aborts the process
    # ("terminate called without an active exception", exit -6) after the work is done and saved. Leaving the
    # group alone did not stop it: CI under load 15 saw it once more (pytorch/pytorch#179291 describes the
    # mechanism). Everything the test reads was written by torch.save above; the streams are flushed first.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
