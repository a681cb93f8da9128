"""Tokens sampled: every rollout drawn counts (dynamic sampling's discarded rounds, a filter's dropped rollouts),
per step and in all; a resumed run's totals continue from its checkpoint; eval.json carries the run's totals."""

from __future__ import annotations

import json

import torch

from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.runtime.sampler import Rollouts
from dynashape.train.loop import TokenCount, Trainer
from dynashape.train.presets import make_train_config
from dynashape.train.run import read_metrics, train
from dynashape.world.chain import ChainTaskConfig, world_splits
from dynashape.world.chain.tokenizer import build_char_tokenizer

TINY = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


def _rollouts(prompt_lengths, lengths, width=3, new=5):
    """Rollouts whose prompts have ``prompt_lengths`` real tokens (left-padded to ``width``) and whose responses
    have ``lengths`` tokens (right-padded to ``new``); token ids 5 everywhere (a valid id of the char tokenizer)."""
    n = len(lengths)
    prompt_mask = (torch.arange(width) >= width - torch.tensor(prompt_lengths)[:, None]).long()
    response_mask = (torch.arange(new) < torch.tensor(lengths)[:, None]).long()
    ids = torch.full((n, width), 5)
    return Rollouts(ids, prompt_mask, torch.full((n, new), 5), response_mask, response_mask.sum(-1),
                    torch.tensor(lengths) == new)  # fmt: skip


def _trainer(method, **overrides):
    tok = build_char_tokenizer()
    problems = world_splits(ChainTaskConfig(n_train=40, n_test_per_difficulty=1)).train
    cfg = make_train_config(method, prompts_per_step=2, group_size=2, max_new_tokens=5, overlong={"buffer": 2},
                            mini_batches=1, **overrides)  # fmt: skip
    return Trainer(build_policy(TINY, tok, seed=0), tok, problems, cfg, verifier=None)


def test_token_count_of_a_round_by_hand():
    """Prompts of 2, 2, 3, 3 real tokens (pads not counted) = 10; responses of 3, 5, 2, 4 = 14."""
    count = TokenCount.of(_rollouts([2, 2, 3, 3], [3, 5, 2, 4]))
    assert count == TokenCount(prompt=10, response=14, rounds=1)
    assert count + TokenCount(1, 2, 1) == TokenCount(11, 16, 2)


def test_a_dynamic_sampling_step_counts_both_rounds_and_the_totals_add_up():
    """DAPO's dynamic sampling, 2 prompts x 2 rollouts a round: round 1 all wrong (both groups uniform, thrown away)
    costs prompts 2+2+3+3 = 10 and responses 3+5+2+4 = 14; round 2 mixed costs 10 and 1+2+3+4 = 10.
    Step 1: 20 prompt, 24 response tokens, 2 rounds. Step 2 (one mixed round of the same shapes): 10, 10, 1 round;
    the totals 30, 34, 3."""
    trainer = _trainer("dapo", max_sampling_rounds=3)
    rounds = iter([
        (_rollouts([2, 2, 3, 3], [3, 5, 2, 4]), [False] * 4),
        (_rollouts([2, 2, 3, 3], [1, 2, 3, 4]), [True, False, False, True]),
        (_rollouts([2, 2, 3, 3], [1, 2, 3, 4]), [True, False, True, False]),
    ])  # fmt: skip
    verdicts = {}

    def generate(problems):
        ro, correct = next(rounds)
        verdicts[id(ro)] = torch.tensor(correct)
        return ro

    trainer._generate = generate
    trainer._verify = lambda ro, probs: (verdicts[id(ro)], torch.ones(len(probs), dtype=torch.bool))
    first = trainer.step().metrics
    assert (first["sampling_rounds"], first["tokens/prompt"], first["tokens/response"]) == (2.0, 20.0, 24.0)
    assert first["groups_kept"] == 2.0  # only round 2's groups reached the loss; round 1 still counts
    second = trainer.step().metrics
    assert (second["sampling_rounds"], second["tokens/prompt"], second["tokens/response"]) == (1.0, 10.0, 10.0)
    totals = (second["tokens/prompt_total"], second["tokens/response_total"], second["sampling_rounds_total"])
    assert totals == (30.0, 34.0, 3.0)
    assert trainer.state_dict()["tokens"] == {"prompt": 30, "response": 34, "rounds": 3}


def test_a_checkpoint_without_totals_leaves_them_unknown():
    """A state written before token counting: the per-step counts go on, the totals are left out (not 0)."""
    trainer = _trainer("grpo")
    state = trainer.state_dict()
    del state["tokens"]
    trainer.load_state_dict(state)
    trainer._generate = lambda problems: _rollouts([2, 2, 3, 3], [1, 2, 3, 4])
    trainer._verify = lambda ro, probs: (torch.tensor([True, False, True, False]), torch.ones(4, dtype=torch.bool))
    metrics = trainer.step().metrics
    assert metrics["tokens/response"] == 10.0 and "tokens/response_total" not in metrics
    assert "tokens" not in trainer.state_dict()


def test_a_resumed_run_continues_its_totals_and_eval_json_holds_them(tiny_config, parity_verifier, tmp_path):
    """Killed after step 3 (last checkpoint at step 2), resumed to step 4: the same totals as an uninterrupted run,
    equal to the sums of the per-step counts; eval.json's ``tokens_sampled`` is the last step's totals."""
    cfg = tiny_config("grpo", steps=4, checkpoint_every=2)
    full = train(cfg, tmp_path / "full", progress=False, verifier=parity_verifier, report=False)
    train(cfg, tmp_path / "part", progress=False, stop_after=3, verifier=parity_verifier)
    resumed = train(cfg, tmp_path / "part", progress=False, verifier=parity_verifier, report=False)
    assert resumed.resumed_from == 2
    metrics = read_metrics(tmp_path / "part")
    keys = ("tokens/prompt_total", "tokens/response_total", "sampling_rounds_total")
    assert [[m[k] for k in keys] for m in metrics] == [[m[k] for k in keys] for m in full.metrics]
    last = metrics[-1]
    assert last["tokens/response_total"] == sum(m["tokens/response"] for m in metrics) > 0
    assert last["tokens/prompt_total"] == sum(m["tokens/prompt"] for m in metrics) > 0
    assert last["sampling_rounds_total"] == 4.0  # no dynamic sampling: one round a step
    expected = {"prompt": int(last[keys[0]]), "response": int(last[keys[1]]), "sampling_rounds": 4}
    assert json.loads((tmp_path / "part" / "eval.json").read_text())["tokens_sampled"] == expected
    assert full.eval["tokens_sampled"] == expected


def test_a_filters_dropped_rollouts_count():
    """GFPO keeps the shortest 1 of each group of 2: the loss sees 2 rollouts, the count is all 4 (1+2+3+4 = 10)."""
    trainer = _trainer("gfpo", shaper_kwargs={"keep": 1, "by": "length"})
    trainer._generate = lambda problems: _rollouts([2, 2, 3, 3], [1, 2, 3, 4])
    trainer._verify = lambda ro, probs: (torch.tensor([True, False, True, False]), torch.ones(4, dtype=torch.bool))
    metrics = trainer.step().metrics
    assert (metrics["tokens/prompt"], metrics["tokens/response"]) == (10.0, 10.0)
    assert metrics["gfpo/kept_fraction"] == 0.5  # half the rollouts reached the loss
