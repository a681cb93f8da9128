"""LEAD inside TRL's GRPOTrainer, on a CPU in about a minute.

The policy is the toy world's base model that ships with dynashape (a 0.9M-parameter Qwen2 that works out
arithmetic chains step by step, ``95+4=99``, ``99-2=97``, ... ``\\boxed{98}``); the prompts are the toy world's
training problems, with their gold answers in an ``answer`` column that ``correctness_reward`` reads.
``ShapedGRPOTrainer`` is TRL's ``GRPOTrainer`` with its advantages computed by the LEAD shaper. Swap in your own
model, dataset and budget: LEAD's ``b_max`` is the response budget and ``l_min`` its floor for the target length
(the paper: 4000 and 1000).

    pip install -e '.[trl]'          # dynashape with TRL 1.16 (torch first, as in the README)
    python examples/trl_lead.py --steps 20 --out runs/trl-lead

Prints the accuracy, mean length and LEAD's weights over the first and the last quarter of the steps. It keeps
no checkpoint (``save_strategy="no"``); with one, the shaper's state is saved beside each TRL checkpoint.
"""

from __future__ import annotations

import argparse

import torch
from datasets import Dataset
from trl import GRPOConfig

from dynashape import get_shaper
from dynashape.integrations.trl import ShapedGRPOTrainer
from dynashape.rewards import correctness_reward
from dynashape.runtime.policy import load_pretrained
from dynashape.world import get_world
from dynashape.world.chain.world import BASE_MODEL_DIR

BUDGET = 101
"""Response budget in tokens: the toy base model's median length on its hardest problems (its tight regime)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    parser.add_argument("--out", default="runs/trl-lead", help="TRL's output folder")
    args = parser.parse_args()

    # a 0.9M-parameter policy gains nothing from more threads, and on a busy machine their synchronisation costs
    # more than the work itself
    torch.set_num_threads(1)
    model, tokenizer = load_pretrained(BASE_MODEL_DIR)
    # the toy model reads a prompt after its BOS token; the tokenizer does not add one by itself
    problems = get_world().split("train")[: 8 * args.steps]
    dataset = Dataset.from_list([{"prompt": tokenizer.bos_token + p.prompt, "answer": p.answer} for p in problems])

    config = GRPOConfig(
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=32,  # completions per step: 4 prompts x 8 generations
        num_generations=8,
        max_completion_length=BUDGET,
        learning_rate=5e-5,  # the reference trainer's: larger rates collapse this small policy
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,  # TRL turns it on by default, and generation then runs without a KV cache
        seed=0,
    )
    trainer = ShapedGRPOTrainer(
        shaper=get_shaper("lead", b_max=BUDGET, l_min=BUDGET / 4),
        model=model,
        processing_class=tokenizer,
        reward_funcs=[correctness_reward],
        args=config,
        train_dataset=dataset,
    )
    trainer.train()

    steps = [h for h in trainer.state.log_history if "rewards/correctness_reward/mean" in h]
    window = max(1, len(steps) // 4)
    for name, part in ((f"first {window} steps", steps[:window]), (f"last {window} steps", steps[-window:])):
        mean = {k: sum(h[k] for h in part) / len(part) for k in KEYS}
        print(f"{name}: " + ", ".join(f"{label} {mean[k]:.3f}" for k, label in KEYS.items()))


KEYS = {
    "rewards/correctness_reward/mean": "accuracy",
    "completions/mean_length": "mean length",
    "lead/lambda_c": "lambda_c",
    "lead/lambda_l": "lambda_l",
}
"""What the summary prints: TRL's log key -> its name."""


if __name__ == "__main__":
    main()
