"""Pieces of the RL step: reward columns, dynamic sampling, MEDS fingerprints from the old-log-prob forward."""

from __future__ import annotations

import pytest
import torch

from dynashape.rewards import Reason, Verdict
from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.runtime.sampler import Rollouts, encode_prompts
from dynashape.train.loop import PromptStream, Trainer, reward_columns
from dynashape.train.presets import make_train_config
from dynashape.world.chain import ChainTaskConfig, make_problem, teacher_trace, world_splits
from dynashape.world.chain.tokenizer import build_char_tokenizer

TINY = ModelConfig(hidden_size=32, num_layers=3, num_heads=2, num_kv_heads=2, intermediate_size=64)


def test_reward_columns_hand_checked():
    cfg = make_train_config("dapo", max_new_tokens=64, overlong={"buffer": 10}, length_threshold=32)
    correct = torch.tensor([True, False, True])
    lengths = torch.tensor([10, 60, 62])
    # overlong starts at 64 - 10 = 54: 10 -> 0, 60 -> (54 - 60) / 10 = -0.6, 62 -> -0.8
    cols = reward_columns(("correct", "overlong", "correct_overlong", "correct_short"), correct, lengths, cfg)
    expect = torch.tensor([[1, 0, 1, 1], [0, -0.6, -0.6, 0], [1, -0.8, 0.2, 0]], dtype=torch.float32)
    assert torch.allclose(cols, expect, atol=1e-6)
    assert reward_columns((), correct, lengths, cfg) is None


def test_prompt_stream_epochs_and_resume():
    problems = world_splits(ChainTaskConfig(n_train=7, n_test_per_difficulty=1)).train
    a = PromptStream(problems, seed=3)
    first = a.take(7)
    assert sorted(p.prompt for p in first) == sorted(p.prompt for p in problems)  # one epoch = a permutation
    a.take(3)
    b = PromptStream(problems, seed=3)
    b.load_state_dict(a.state_dict())
    assert [p.prompt for p in a.take(9)] == [p.prompt for p in b.take(9)]


class EvenAnswerVerifier:
    """Odd-indexed rollouts of problems with an even answer are right; everything else is wrong."""

    def verify(self, golds, responses):
        return [
            Verdict(int(g) % 2 == 0 and i % 2 == 1, None, Reason.MISMATCH)
            for i, (g, _) in enumerate(zip(golds, responses))
        ]


def test_dynamic_sampling_keeps_only_mixed_groups():
    tok = build_char_tokenizer()
    model = build_policy(TINY, tok).eval()
    problems = world_splits(ChainTaskConfig(n_train=40, n_test_per_difficulty=1)).train
    cfg = make_train_config(
        "dapo", prompts_per_step=4, group_size=2, max_new_tokens=4, overlong={"buffer": 2}, max_sampling_rounds=3
    )
    trainer = Trainer(model, tok, problems, cfg, EvenAnswerVerifier())
    trainer._verify = lambda ro, probs: (torch.zeros(len(probs), dtype=torch.bool),) * 2  # every group uniform
    timings = {"sample": 0.0, "verify": 0.0}
    col = trainer._collect(timings)
    assert col.rollouts is None and col.rounds == 3 and len(col.sampled["correct"]) == 3 * 4 * 2

    cfg = make_train_config(
        "dapo", prompts_per_step=4, group_size=2, max_new_tokens=4, overlong={"buffer": 2}, max_sampling_rounds=3
    )
    trainer = Trainer(model, tok, problems, cfg, EvenAnswerVerifier())
    trainer._verify = lambda ro, probs: (  # bypass truncation: judge the fake verdicts only (and all formatted)
        torch.tensor([int(p.answer) % 2 == 0 and i % 2 == 1 for i, p in enumerate(probs)]),
        torch.ones(len(probs), dtype=torch.bool),
    )
    stream = PromptStream(problems, cfg.seed)
    drawn = stream.take(12)
    col = trainer._collect(timings)
    even = [p for p in drawn if int(p.answer) % 2 == 0][:4]
    assert [p.prompt for p in col.problems[::2]] == [p.prompt for p in even]
    assert col.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3][: 2 * len(even)]
    assert col.correct.view(-1, 2).float().mean(1).tolist() == [0.5] * len(even)


def test_fingerprints_from_old_logprob_forward_match_manual():
    tok = build_char_tokenizer()
    model = build_policy(TINY, tok, seed=1).eval()
    cfg = ChainTaskConfig()
    probs = [make_problem((4, 7), ("+",)), make_problem((9, 3, 8, 1), ("-", "+", "-")), make_problem((5, 5), ("-",))]
    import random

    plain = {"shortcut": "none", "careful": False, "drop_paren": False, "slip_prob": 0.0, "filler": False}
    traces = [
        teacher_trace(probs[0], random.Random(0), cfg, careful=True, shortcut="none").text,
        teacher_trace(probs[1], random.Random(0), cfg, **plain).text,
    ]
    traces.append("5-5=0\nno answer here")  # no \boxed{: a NaN row
    ids, mask = encode_prompts(tok, [p.prompt for p in probs])
    rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in traces]
    width = max(map(len, rows))
    resp = torch.zeros(3, width, dtype=torch.long)
    rmask = torch.zeros(3, width, dtype=torch.long)
    for i, r in enumerate(rows):
        resp[i, : len(r)] = torch.tensor(r)
        rmask[i, : len(r)] = 1
    ro = Rollouts(ids, mask, resp, rmask, rmask.sum(-1), torch.zeros(3, dtype=torch.bool))
    trainer = Trainer(model, tok, probs, make_train_config("meds", fingerprint_layers=2), verifier=None)
    with torch.no_grad():
        _, fp = trainer._scored_forward(ro)
    assert fp.shape == (3, 2) and torch.isnan(fp[2]).all() and not torch.isnan(fp[:2]).any()
    w = model.get_output_embeddings().weight
    for i in range(2):
        seq = torch.tensor([tok.bos_token_id, *tok(probs[i].prompt, add_special_tokens=False)["input_ids"], *rows[i]])
        prompt_len = len(seq) - len(rows[i])
        p = traces[i].rindex("\\boxed{") + len("\\boxed{") - 1  # response index of the "{"
        y = rows[i][p + 1]
        with torch.no_grad():
            hs = model(input_ids=seq[None], output_hidden_states=True).hidden_states
        manual = torch.stack([hs[n][0, prompt_len + p] @ w[y] for n in (2, 3)])  # last 2 of 3 layers
        assert torch.allclose(fp[i], manual, atol=1e-4), (fp[i], manual)
    # the fused update runs the same forward with gradients: same fingerprints, log-probs with a graph
    stats, fp_grad = trainer._scored_forward(ro)
    assert torch.equal(fp_grad.isnan(), fp.isnan()) and torch.allclose(fp_grad[:2], fp[:2], atol=1e-6)
    assert stats.logprobs.requires_grad and not fp_grad.requires_grad


@pytest.mark.parametrize("method", ["lead", "drpo"])
def test_fused_update_equals_separate_old_logprob_pass(method, parity_verifier, monkeypatch):
    """One mini-batch, one epoch: taking the old log-probs from the update's forward changes nothing but the
    number of forwards."""
    import copy

    from dynashape.train import loop

    tok = build_char_tokenizer()
    model = build_policy(TINY, tok, seed=2)
    problems = world_splits(ChainTaskConfig(n_train=40, n_test_per_difficulty=1)).train
    forwards = {"n": 0}
    real = loop.sequence_logprobs

    def counted(*args, **kwargs):
        forwards["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "sequence_logprobs", counted)
    runs = {}
    for fuse in (True, False):
        cfg = make_train_config(
            method, prompts_per_step=4, group_size=4, max_new_tokens=12, mini_batches=1, fuse_old_logprobs=fuse
        )
        trainer = Trainer(copy.deepcopy(model), tok, problems, cfg, parity_verifier)
        forwards["n"] = 0
        steps = [trainer.step().metrics for _ in range(2)]
        runs[fuse] = (steps, forwards["n"], trainer.model.state_dict())
    (fused, n_fused, w_fused), (separate, n_separate, w_separate) = runs[True], runs[False]
    assert (n_fused, n_separate) == (2, 4)  # one scored forward per step instead of two
    assert all(m["groups_kept"] > 0 for m in fused)
    for a, b in zip(fused, separate, strict=True):
        for k in a:
            if not k.startswith("time/"):
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
    for k in w_fused:
        assert torch.allclose(w_fused[k], w_separate[k], atol=1e-6), k


@pytest.mark.parametrize("field", ["prompts_per_step", "group_size", "max_new_tokens"])
def test_train_config_validation(field):
    with pytest.raises(ValueError, match=field):
        make_train_config("lead", **{field: 0})


def test_the_passk_subset_is_the_world_choice_or_the_keys_named():
    from dynashape.train.config import EvalConfig
    from dynashape.train.evaluation import passk_problems
    from dynashape.world import get_world

    world = get_world()
    test = world.split("test")
    default = passk_problems(test, EvalConfig(), world)
    assert default == world.passk_subset(test, 6, 6) and len(default) == 12
    keys = (test[150].key, test[3].key, test[199].key)
    assert [p.key for p in passk_problems(test, EvalConfig(passk_keys=keys), world)] == list(keys)  # in that order
    with pytest.raises(ValueError, match=r"passk_keys names 2 problem\(s\) not in the evaluated problems"):
        passk_problems(test[:100], EvalConfig(passk_keys=keys), world)
    for bad in ((), ("a", "a"), ("",)):
        with pytest.raises(ValueError, match="passk_keys"):
            EvalConfig(passk_keys=bad)


class FormatVerifier:
    """Every rollout wrong; the verdict says formatted for even rows and leaves odd rows to the text."""

    def verify(self, golds, responses):
        return [
            Verdict(False, None, Reason.MISMATCH, formatted=True if i % 2 == 0 else None) for i in range(len(golds))
        ]


def test_the_shaper_gets_truncated_and_formatted():
    """The reference trainer fills batch.truncated (the cap reached without EOS) and batch.formatted (the verdict's
    own flag, else a closed boxed answer in the decoded text)."""
    tok = build_char_tokenizer()
    model = build_policy(TINY, tok).eval()
    problems = world_splits(ChainTaskConfig(n_train=8, n_test_per_difficulty=1)).train
    cfg = make_train_config("grpo", prompts_per_step=2, group_size=2, max_new_tokens=3, overlong={"buffer": 1})
    trainer = Trainer(model, tok, problems, cfg, FormatVerifier())
    seen = []
    shaper = trainer.shaper
    trainer.shaper = lambda batch: seen.append(batch) or shaper(batch)
    trainer.shaper.needs = shaper.needs  # type: ignore[attr-defined]
    col = trainer._collect({"sample": 0.0, "verify": 0.0})
    texts = tok.batch_decode(col.rollouts.response_ids, skip_special_tokens=True)
    odd_boxed = [i % 2 == 0 or ("\\boxed{" in t and t.rstrip().endswith("}")) for i, t in enumerate(texts)]
    assert col.formatted.tolist() == odd_boxed  # 3 random characters never close a box: odd rows False
    trainer.step()
    batch = seen[0]
    assert batch.truncated is not None and batch.formatted is not None
    # truncated only at the cap (a row shorter than 3 tokens ended with EOS); the untrained model rarely stops
    assert not bool((batch.truncated & (batch.lengths < 3)).any()) and bool(batch.truncated.any())
    assert batch.formatted[::2].all() and not batch.formatted[1::2].any()
