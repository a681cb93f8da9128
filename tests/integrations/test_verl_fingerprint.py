"""The patched FSDPEngineWithLMHead.forward_step of verl 0.9.1, run for real on CPU on a packed micro-batch.

The engine object is built without FSDP (``object.__new__`` plus the attributes forward_step reads) around a
tiny random Qwen2; verl's own prepare_model_inputs / prepare_model_outputs run unchanged. What needs a GPU
(FSDP-sharded parameters, flash-attention varlen packing, Ulysses) is listed in the integration notes.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")
transformers = pytest.importorskip("transformers")
transformer_impl = pytest.importorskip("verl.workers.engine.fsdp.transformer_impl")

from verl.utils import tensordict_utils as tu  # noqa: E402

from dynashape.integrations.verl.fingerprint import (  # noqa: E402
    ANSWER_POS_FIELD,
    ANSWER_TARGET_FIELD,
    FINGERPRINT_FIELD,
    FLAG_KEY,
    answer_fields,
)
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

LAYERS = 3


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setattr(transformer_impl, "get_device_id", lambda: "cpu")
    monkeypatch.setattr(transformer_impl, "get_device_name", lambda: "cpu")
    tokenizer = build_char_tokenizer()
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    eng = object.__new__(transformer_impl.FSDPEngineWithLMHead)
    eng.module = transformers.Qwen2ForCausalLM(config).eval()
    eng.use_ulysses_sp = False
    eng.ulysses_sequence_parallel_size = 1
    eng._autocast_dtype = torch.float32
    eng.pad_to_length = None
    return eng, tokenizer


def micro_batch(tokenizer, prompts, responses, flag):
    enc = lambda text: torch.tensor(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    prompt_ids = [enc(p) for p in prompts]
    response_ids = [enc(r) for r in responses]
    full = [torch.cat([p, r]) for p, r in zip(prompt_ids, response_ids, strict=True)]
    padded = torch.nn.utils.rnn.pad_sequence(response_ids, batch_first=True, padding_value=tokenizer.pad_token_id)
    positions, targets = answer_fields(padded, torch.tensor([len(r) for r in response_ids]), tokenizer)
    nested = lambda ts: torch.nested.as_nested_tensor(ts, layout=torch.jagged)  # noqa: E731
    tensors = {
        "input_ids": nested(full),
        "position_ids": nested([torch.arange(len(f)) for f in full]),
        "responses": nested(response_ids),
        ANSWER_POS_FIELD: positions,
        ANSWER_TARGET_FIELD: targets,
    }
    extra = {"temperature": 1.0, "use_remove_padding": True}
    if flag:
        extra[FLAG_KEY] = {"layers": LAYERS, "diff": False, "norm": "raw"}
    return tu.get_tensordict(tensor_dict=tensors, non_tensor_dict=extra), full, response_ids, positions, targets


PROMPTS = ["Q: 1+2?", "Q: what is 7*6? think.", "Q: 9-3"]
RESPONSES = ["so \\boxed{3}", "no boxed answer here", "x \\boxed{5} then \\boxed{6}."]


def test_positions_and_targets_follow_the_last_boxed(engine):
    _, tokenizer = engine
    _, _, _, positions, targets = micro_batch(tokenizer, PROMPTS, RESPONSES, flag=True)
    # Character tokenizer: p is the index of the last "{" of "\boxed{", y* the character after it.
    assert positions.tolist() == [RESPONSES[0].rindex("{"), -1, RESPONSES[2].rindex("{")]
    assert tokenizer.convert_ids_to_tokens([int(targets[0]), int(targets[2])]) == ["3", "6"]
    assert int(targets[1]) == -1


def test_fingerprints_from_the_real_forward_step_match_the_definition(engine):
    eng, tokenizer = engine
    batch, full, response_ids, positions, targets = micro_batch(tokenizer, PROMPTS, RESPONSES, flag=True)
    _, output = eng.forward_step(batch, loss_function=None, forward_only=True)
    prints = output["model_output"][FINGERPRINT_FIELD]
    assert prints.shape == (3, LAYERS)
    assert torch.isnan(prints[1]).all() and torch.isfinite(prints[[0, 2]]).all()

    # Definition (meds.md 1), on each sequence alone: f_n = <hidden_states[n][p], W_U[y*]> over the last
    # LAYERS layers, hidden_states[1:] as Hugging Face returns them (the last one final-normed).
    weight = eng.module.lm_head.weight
    for i in (0, 2):
        with torch.no_grad():
            hidden = eng.module(full[i][None], output_hidden_states=True).hidden_states[1:]
        at = len(full[i]) - len(response_ids[i]) + int(positions[i])
        expected = torch.stack([h[0, at] @ weight[targets[i]] for h in hidden])[-LAYERS:]
        torch.testing.assert_close(prints[i], expected, rtol=1e-4, atol=1e-5)


def test_without_the_flag_the_forward_is_untouched(engine):
    eng, tokenizer = engine
    plain, *_ = micro_batch(tokenizer, PROMPTS, RESPONSES, flag=False)
    flagged, *_ = micro_batch(tokenizer, PROMPTS, RESPONSES, flag=True)
    _, out_plain = eng.forward_step(plain, loss_function=None, forward_only=True)
    _, out_flagged = eng.forward_step(flagged, loss_function=None, forward_only=True)
    assert FINGERPRINT_FIELD not in out_plain["model_output"]
    a, b = out_plain["model_output"]["log_probs"], out_flagged["model_output"]["log_probs"]
    torch.testing.assert_close(a.values(), b.values(), rtol=0, atol=0)  # hooks never change the forward


def test_ulysses_is_refused_rather_than_wrong(engine):
    eng, tokenizer = engine
    eng.use_ulysses_sp = True
    batch, *_ = micro_batch(tokenizer, PROMPTS, RESPONSES, flag=True)
    with pytest.raises(NotImplementedError, match="Ulysses"):
        eng.forward_step(batch, loss_function=None, forward_only=True)
