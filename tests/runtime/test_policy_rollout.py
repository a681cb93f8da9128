"""Policy construction, warm-up and its cache; KV-cache sampling against a no-cache reference loop."""

from __future__ import annotations

import random

import pytest
import torch

from dynashape.runtime.policy import ModelConfig, build_policy
from dynashape.runtime.sampler import Rollouts, concat_rollouts, encode_prompts, sample, sequence_logprobs
from dynashape.train.warmup import WarmupConfig, _bucketed_batches, encode_sft_batch, load_or_train_base
from dynashape.world.chain import ChainTaskConfig, ChainWorld, world_splits
from dynashape.world.chain.tokenizer import build_char_tokenizer

TINY = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_policy(TINY, tok, seed=0).eval()


def test_default_policy_size(tok):
    m = build_policy(ModelConfig(), tok)
    n = sum(p.numel() for p in m.parameters())
    assert 0.5e6 < n < 1.2e6  # the spec's ~1M (4 layers, width 128, tied embeddings)
    assert m.config.tie_word_embeddings
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()


def test_sft_batch_masks_prompt(tok):
    b = encode_sft_batch(tok, ["1+2\n", "10+20\n"], ["\\boxed{3}", "\\boxed{30}"])
    # row 0: <bos> 1 + 2 \n | \ b o x e d { 3 } <eos> | 3 pads; row 1: 7 prompt + 10 response + <eos>
    assert b["input_ids"].shape == (2, 7 + 10 + 1)
    assert (b["labels"][0, :5] == -100).all()
    assert tok.decode(b["labels"][0, 5:15]) == "\\boxed{3}" + tok.eos_token
    assert b["labels"][0, 15] == -100 and b["attention_mask"][0, 15] == 0
    assert b["input_ids"][0, 0] == tok.bos_token_id


def test_warmup_loss_decreases_and_cache_reused(tmp_path):
    task = ChainTaskConfig(n_train=200, n_test_per_difficulty=1)
    train = world_splits(task).train
    wcfg = WarmupConfig(steps=25, batch_size=16, lr=1e-2)
    m1, _t1, info1 = load_or_train_base(ChainWorld(task), TINY, wcfg, train, cache_dir=tmp_path)
    assert info1.trained_now and len(info1.losses) == 25
    first, last = sum(info1.losses[:3]) / 3, sum(info1.losses[-3:]) / 3
    assert last < 0.75 * first, (first, last)  # from ~ln(101) = 4.6 toward the trace distribution
    m2, _t2, info2 = load_or_train_base(ChainWorld(task), TINY, wcfg, train, cache_dir=tmp_path)
    assert not info2.trained_now and info2.path == info1.path
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    # a different warm-up config is a different cache entry
    _, _, info3 = load_or_train_base(
        ChainWorld(task), TINY, WarmupConfig(steps=1, batch_size=4), train, cache_dir=tmp_path
    )
    assert info3.trained_now and info3.path != info1.path


def _reference_sample(model, ids, mask, max_new, eos, pad, generator):
    """No KV cache, no compaction: re-run the full (left-padded) batch every token and draw, in row order, for
    the unfinished rows only (the draw order ``sample`` promises)."""
    n = ids.shape[0]
    out = torch.full((n, max_new), pad, dtype=torch.long)
    finished = torch.zeros(n, dtype=torch.bool)
    seq, seq_mask = ids, mask
    for t in range(max_new):
        pos = (seq_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=seq, attention_mask=seq_mask, position_ids=pos).logits[:, -1]
        live = (~finished).nonzero().squeeze(1)
        drawn = torch.multinomial(torch.softmax(logits[live].float(), -1), 1, generator=generator).squeeze(-1)
        tok = torch.full((n,), pad, dtype=torch.long)
        tok[live] = drawn
        out[:, t] = tok
        finished[live[drawn == eos]] = True
        if finished.all():
            break
        seq = torch.cat([seq, tok[:, None]], 1)
        seq_mask = torch.cat([seq_mask, torch.ones(n, 1, dtype=seq_mask.dtype)], 1)
    return out, finished


@pytest.fixture(scope="module")
def peaky(tok):
    """A random policy with sharp next-token distributions (a random init is near uniform)."""
    model = build_policy(TINY, tok, seed=1).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(12.0)
    return model


def _frequent_token(model, ids, mask) -> int:
    """A token drawn at about 20 % of the steps: as EOS it ends rows early, at varied steps."""
    ro = sample(
        model, ids, mask, max_new_tokens=12, eos_token_id=-1, pad_token_id=0, generator=torch.Generator().manual_seed(0)
    )
    freq = torch.bincount(ro.response_ids.flatten(), minlength=128).float() / ro.response_ids.numel()
    return int((freq - 0.2).abs().argmin())


PROMPTS = ["47+38-12+9\n", "1+2\n", "300-25+7\n", "5-9\n", "8+8+8\n", "12-3\n", "6\n", "2+44-1\n"] * 2


@torch.no_grad()
def test_kv_cache_sampling_matches_reference(peaky, tok):
    model = peaky
    ids, mask = encode_prompts(tok, PROMPTS)
    eos = _frequent_token(model, ids, mask)  # so that rows finish at different times
    got = sample(
        model,
        ids,
        mask,
        max_new_tokens=12,
        eos_token_id=eos,
        pad_token_id=0,
        generator=torch.Generator().manual_seed(3),
    )
    ref, ref_finished = _reference_sample(model, ids, mask, 12, eos, 0, torch.Generator().manual_seed(3))
    # the batch was compacted along the way (a quarter finished early) and some rows still ran to the cap
    assert int((got.lengths < 12).sum()) >= 4 and bool(got.truncated.any())
    width = got.response_ids.shape[1]
    assert torch.equal(got.response_ids, ref[:, :width])
    assert torch.equal(got.truncated, ~ref_finished)
    # lengths count tokens up to and including EOS
    for i in range(len(PROMPTS)):
        row = ref[i].tolist()
        expect = row.index(eos) + 1 if eos in row else 12
        assert int(got.lengths[i]) == expect
    assert torch.equal(got.response_mask.sum(-1), got.lengths)


@torch.no_grad()
def test_the_inplace_kv_cache_draws_what_the_models_own_cache_draws(peaky, tok, monkeypatch):
    """The preallocated cache holds the same keys and values as transformers' DynamicCache, rows dropped along the
    way included: the same tokens, and it grows no tensor per token."""
    from dynashape.runtime import sampler as rollout
    from dynashape.runtime.kv_cache import inplace_cache

    cache = inplace_cache(peaky.config, 20)
    assert cache is not None  # this model takes the in-place path
    ids, mask = encode_prompts(tok, PROMPTS)
    eos = _frequent_token(peaky, ids, mask)
    kw = dict(max_new_tokens=12, eos_token_id=eos, pad_token_id=0)
    got = sample(peaky, ids, mask, generator=torch.Generator().manual_seed(5), **kw)
    monkeypatch.setattr(rollout, "inplace_cache", lambda *a, **k: None)
    own = sample(peaky, ids, mask, generator=torch.Generator().manual_seed(5), **kw)
    assert int((got.lengths < 12).sum()) >= 4  # compacted at least once
    assert torch.equal(got.response_ids, own.response_ids) and torch.equal(got.lengths, own.lengths)
    # writes go into the buffers sized at the prefill: keys are views of them
    out = peaky(input_ids=ids, attention_mask=mask, use_cache=True, **{rollout._cache_keyword(peaky): cache})
    layer = rollout._cache_of(out).layers[0]
    assert layer.keys.shape[-2] == ids.shape[1] and layer.keys.data_ptr() == layer._k.data_ptr()


@torch.no_grad()
def test_sequence_logprobs_match_manual_and_padding_invariant(model, tok):
    ids, mask = encode_prompts(tok, ["47+38\n", "1+2\n"])
    ro = sample(
        model,
        ids,
        mask,
        max_new_tokens=6,
        eos_token_id=tok.eos_token_id,
        pad_token_id=0,
        generator=torch.Generator().manual_seed(0),
    )
    stats = sequence_logprobs(model, ro, with_entropy=True)
    # row 1 alone, without left padding, token by token from a plain forward
    p1 = ids[1, mask[1].bool()]
    r1 = ro.response_ids[1, : int(ro.lengths[1])]
    full = torch.cat([p1, r1])[None]
    logp = torch.log_softmax(model(input_ids=full).logits[0].float(), -1)
    manual = logp[len(p1) - 1 : -1].gather(-1, r1[:, None]).squeeze(-1)
    assert torch.allclose(stats.logprobs[1, : len(r1)], manual, atol=1e-5)
    assert (stats.logprobs[1, len(r1) :] == 0).all()
    ent = -(logp.exp() * logp).sum(-1)[len(p1) - 1 : -1]
    assert torch.allclose(stats.entropy[1, : len(r1)], ent, atol=1e-5)


def test_concat_rollouts_repads():
    a = Rollouts(
        torch.tensor([[7, 8]]),
        torch.tensor([[1, 1]]),
        torch.tensor([[3]]),
        torch.tensor([[1]]),
        torch.tensor([1]),
        torch.tensor([False]),
    )
    b = Rollouts(
        torch.tensor([[9]]),
        torch.tensor([[1]]),
        torch.tensor([[4, 5]]),
        torch.tensor([[1, 1]]),
        torch.tensor([2]),
        torch.tensor([True]),
    )
    c = concat_rollouts([a, b], pad_token_id=0)
    assert c.prompt_ids.tolist() == [[7, 8], [0, 9]] and c.prompt_mask.tolist() == [[1, 1], [0, 1]]
    assert c.response_ids.tolist() == [[3, 0], [4, 5]] and c.response_mask.tolist() == [[1, 0], [1, 1]]
    assert c.lengths.tolist() == [1, 2] and c.truncated.tolist() == [False, True]


@pytest.mark.parametrize(("kw", "value"), [("temperature", 0.0), ("top_p", 0.0), ("max_new_tokens", 0)])
def test_sample_validation(model, tok, kw, value):
    ids, mask = encode_prompts(tok, ["1+2\n"])
    args = {"max_new_tokens": 4, "eos_token_id": 2, "pad_token_id": 0, kw: value}
    with pytest.raises(ValueError, match=kw):
        sample(model, ids, mask, **args)


def test_warmup_batches_group_by_problem_never_by_the_drawn_trace():
    """Batches are cut from traces sorted by (difficulty, prompt length): the trace's own habits stay independent
    draws within a batch. Sorted by trace length (chain-v2), the bare answers filled batches of their own."""
    cfg = ChainTaskConfig(n_train=400, n_validation_per_difficulty=2, n_test_per_difficulty=2,
                          direct_prob_easy=0.3, direct_prob_hard=0.3)  # fmt: skip
    train = world_splits(cfg).train
    batches = _bucketed_batches(random.Random(0), train, ChainWorld(cfg), batch_size=8, buckets=16)
    assert len(batches) == 16 and all(len(b[0]) == len(b[1]) == 8 for b in batches)
    keys = sorted((p.difficulty, len(p.prompt)) for b in batches for p in b[0])
    for problems, _ in batches:  # each batch is a contiguous slice of the problems' sorted order
        own = [(p.difficulty, len(p.prompt)) for p in problems]
        assert own == sorted(own)
        assert any(keys[i : i + 8] == own for i in range(0, len(keys) - 7))
    bare = [sum(r.startswith("\\boxed") for r in responses) for _, responses in batches]
    assert 0.15 < sum(bare) / 128 < 0.45  # about 30 % bare answers in all...
    assert max(bare) < 8  # ...and no batch made of bare answers only (a trace-length sort gives several)
