"""Throughput of the reference trainer's RL step, side by side with its peers, on CPU.

1. Sampling: our KV-cache loop (``dynashape.runtime.sampler.sample``) vs ``model.generate`` on the same tiny
   Qwen2, prompts and lengths (response tokens per second, ratio).
2. The whole RL step (sample, verify, old log-probs, shaper, update): our ``Trainer.step`` vs TRL's
   ``GRPOTrainer`` on the same model, batch (prompts x G) and completion cap (tokens per second, ratio).
   Both do the same algorithmic work: one optimiser step per generation batch (ours with ``mini_batches=1``,
   TRL's default), no reference model, entropy computed. Both are timed per step after a first warm-up step
   (TRL's with a callback around each optimiser step), over the same number of steps.
   TRL lives in a separate environment; without it that half is skipped with a message.

    .venv/bin/python benchmarks/bench_trainer.py                  # defaults: a couple of minutes on 2 cores
    .venv/bin/python benchmarks/bench_trainer.py --prompts 16 --group 8 --max-new 64 --steps 3
"""

from __future__ import annotations

import argparse
import time

import torch

from dynashape.rewards import MathVerifier
from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.runtime.sampler import encode_prompts, sample
from dynashape.train.config import RunConfig
from dynashape.train.loop import Trainer
from dynashape.train.presets import make_train_config
from dynashape.train.warmup import load_or_train_base
from dynashape.world.chain import ChainTaskConfig, ChainWorld, world_splits
from dynashape.world.chain.tokenizer import build_char_tokenizer


def bench_sampling(model, tok, prompts, max_new: int, repeats: int) -> tuple[float, float]:
    ids, mask = encode_prompts(tok, prompts)
    best_ours = best_hf = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        ro = sample(
            model,
            ids,
            mask,
            max_new_tokens=max_new,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            generator=torch.Generator().manual_seed(0),
        )
        best_ours = max(best_ours, int(ro.lengths.sum()) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        resp = out[:, ids.shape[1] :]
        # tokens up to and including the first EOS (generate pads after it)
        is_eos = resp == tok.eos_token_id
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, resp.shape[1])
        best_hf = max(best_hf, int(first.sum()) / (time.perf_counter() - t0))
    return best_ours, best_hf


def bench_ours(model, tok, problems, args) -> tuple[float, dict[str, float]]:
    """Response tokens per second over ``args.steps`` steps after a warm-up one, and seconds per step by phase."""
    cfg = make_train_config(
        "lead",
        prompts_per_step=args.prompts,
        group_size=args.group,
        max_new_tokens=args.max_new,
        steps=args.steps,
        mini_batches=1,  # one optimiser step per generation batch, as TRL's default
    )
    with MathVerifier(workers=1) as verifier:
        trainer = Trainer(model, tok, problems, cfg, verifier)
        trainer.step()  # warm-up step (allocator, first-call overheads)
        tokens, phases = 0, dict.fromkeys(("step", "sample", "old_logprob", "update"), 0.0)
        for _ in range(args.steps):
            out = trainer.step()
            tokens += int(out.lengths.sum())
            for k in phases:
                phases[k] += out.metrics[f"time/{k}"] / args.steps
    return tokens / (phases["step"] * args.steps), phases


def bench_trl(model, tok, problems, args) -> tuple[float, dict[str, float]] | None:
    """As ``bench_ours`` for TRL's GRPOTrainer (phases: the whole step and its ``model.generate`` calls)."""
    try:
        import trl  # noqa: F401
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print(
            "TRL / datasets not installed in this environment: TRL half skipped "
            "(install trl==1.16.0 in a separate venv and rerun there)"
        )
        return None
    from dynashape.rewards import MathVerifier as _MV

    verifier = _MV(workers=1)

    def reward(completions, answer, **_):
        return [float(v.correct) for v in verifier.verify(list(answer), list(completions))]

    # The BOS our trainer prepends, written into the text, so that both see the same prompt ids (and, from the
    # same weights, the same response-length distribution).
    data = Dataset.from_list(
        [{"prompt": tok.bos_token + p.prompt, "answer": p.answer} for p in problems[: 64 * args.prompts]]
    )
    cfg = GRPOConfig(
        output_dir="/tmp/bench_trl",
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.max_new,
        max_steps=args.steps + 1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        temperature=1.0,
        save_strategy="no",
        bf16=False,
    )

    class StepTimer(TrainerCallback):
        """Wall time of each optimiser step (generation, rewards, loss, backward, AdamW)."""

        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, *_, **__) -> None:
            self._t0 = time.perf_counter()

        def on_step_end(self, *_, **__) -> None:
            self.seconds.append(time.perf_counter() - self._t0)

    generate_seconds: list[float] = []
    plain_generate = model.generate

    def timed_generate(*a, **kw):
        t0 = time.perf_counter()
        out = plain_generate(*a, **kw)
        generate_seconds.append(time.perf_counter() - t0)
        return out

    model.generate = timed_generate  # TRL samples through the model's own generate (no vLLM on CPU)
    timer = StepTimer()
    tok.padding_side = "left"
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok, callbacks=[timer]
    )
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    verifier.close()
    # drop the first step (allocator, first-call overheads), as for ours
    tokens = sum(lengths[1:]) * args.prompts * args.group
    steps = len(timer.seconds) - 1
    phases = {"step": sum(timer.seconds[1:]) / steps, "generate": sum(generate_seconds[1:]) / steps}
    return tokens / sum(timer.seconds[1:]), phases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--base-cache",
        default=None,
        help="a base-model cache folder (e.g. ~/.cache/dynashape after `dynashape train`): both trainers start "
        "from the warmed-up default base model, whose responses end at varied lengths, instead of a random init",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = build_char_tokenizer()
    train = world_splits(ChainTaskConfig(n_train=2000, n_test_per_difficulty=1)).train

    def policy() -> torch.nn.Module:
        if args.base_cache is None:
            return build_policy(ModelConfig(), tok)
        cfg = RunConfig()
        task_train = world_splits(cfg.task).train
        return load_or_train_base(ChainWorld(cfg.task), cfg.model, cfg.warmup, task_train, cache_dir=args.base_cache)[0]

    model = policy().eval()
    prompts = [p.prompt for p in train[: args.prompts] for _ in range(args.group)]
    ours, hf = bench_sampling(model, tok, prompts, args.max_new, repeats=2)
    print(
        f"sampling, {len(prompts)} rollouts x <= {args.max_new} tokens ("
        f"{'random init' if args.base_cache is None else 'warmed-up base'}, torch threads "
        f"{torch.get_num_threads()}): ours {ours:,.0f} tok/s, model.generate {hf:,.0f} tok/s, ratio {ours / hf:.2f}x"
    )
    step, ph = bench_ours(model, tok, train, args)
    print(
        f"RL step (lead), {args.prompts} prompts x G={args.group}, cap {args.max_new}: ours {step:,.0f} response tok/s"
        f" | per step {ph['step']:.3f} s: sample {ph['sample']:.3f}, forward {ph['old_logprob']:.3f},"
        f" backward + AdamW {ph['update']:.3f}"
    )
    trl = bench_trl(policy(), tok, train, args)
    if trl is not None:
        rate, tp = trl
        print(
            f"RL step, TRL GRPOTrainer: {rate:,.0f} response tok/s | per step {tp['step']:.3f} s: generate"
            f" {tp['generate']:.3f}, the rest {tp['step'] - tp['generate']:.3f}; ratio ours / TRL {step / rate:.2f}x"
        )


if __name__ == "__main__":
    main()
