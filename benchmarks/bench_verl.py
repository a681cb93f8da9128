"""Our ``lead`` estimator vs verl's own ``grpo``, ``grpo_vectorized`` and ``gdpo``, all through ``compute_advantage``.

Identical inputs (outcome score at the last response token, right-padded response mask, uid per prompt), one
process, CPU, median of ``--repeats`` timed calls each on a fresh copy of the batch. gdpo gets two reward
channels (the verdict and a length score) so that it does comparable multi-channel work. Targets (issue 38): our
LEAD <= 0.5x the time of verl's ``grpo`` and <= 1.2x its ``grpo_vectorized``.

    .venv-verl/bin/python benchmarks/bench_verl.py                       # 512 prompts x 16 x 2048 tokens
    .venv-verl/bin/python benchmarks/bench_verl.py --prompts 64 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage


def make_batch(prompts: int, group: int, width: int, prompt_width: int, seed: int) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    bs = prompts * group
    lengths = torch.randint(1, width + 1, (bs,), generator=gen)
    correct = torch.rand(bs, generator=gen) < 0.5
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(bs, width)
    rewards[torch.arange(bs), lengths - 1] = correct.float()
    attention = torch.cat([torch.ones(bs, prompt_width), mask], dim=1).long()
    uids = np.array([f"uid-{i // group}" for i in range(bs)], dtype=object)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "prompts": torch.zeros(bs, prompt_width, dtype=torch.long),
            "attention_mask": attention,
        },
        non_tensors={
            "uid": uids,
            "acc": correct.float().numpy(),
            "length_score": (1.0 - lengths.float() / width).numpy(),
        },
    )


def time_estimator(batch: DataProto, name: str, config: object, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # first call warms up (and, for lead, builds the shaper)
        data = DataProto(batch=batch.batch.clone(), non_tensor_batch=dict(batch.non_tensor_batch))
        start = time.perf_counter()
        compute_advantage(data, adv_estimator=name, config=config)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--width", type=int, default=2048, help="response tokens (padded width)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = leave as is)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    batch = make_batch(args.prompts, args.group, args.width, prompt_width=16, seed=0)
    configs = {
        "grpo": OmegaConf.create({"adv_estimator": "grpo"}),
        "grpo_vectorized": OmegaConf.create({"adv_estimator": "grpo_vectorized"}),
        "gdpo": OmegaConf.create(
            {"adv_estimator": "gdpo", "gdpo_reward_keys": ["acc", "length_score"], "gdpo_reward_weights": [1, 1]}
        ),
        "lead": OmegaConf.create({"adv_estimator": "lead", "lead": {"b_max": args.width, "l_min": 1}}),
    }
    seconds = {name: time_estimator(batch, name, cfg, args.repeats) for name, cfg in configs.items()}
    n = args.prompts * args.group
    print(
        f"{args.prompts} prompts x {args.group} rollouts x {args.width} tokens ({n} rows), "
        f"torch threads {torch.get_num_threads()}, median of {args.repeats}"
    )
    for name, value in seconds.items():
        print(f"  verl compute_advantage[{name:>15}]  {value * 1e3:9.1f} ms   {value / seconds['grpo']:6.3f}x grpo")
    for base, target in (("grpo", 0.5), ("grpo_vectorized", 1.2)):
        ratio = seconds["lead"] / seconds[base]
        print(f"lead / {base} = {ratio:.3f} (target <= {target}: {'met' if ratio <= target else 'NOT met'})")


if __name__ == "__main__":
    main()
