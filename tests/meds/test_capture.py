"""MEDS answer fingerprint (spec meds.md section 1): answer positions, index mapping and layer-logit capture.

Expected values come from (a) hand-worked token sequences, (b) a slow loop transcription of the position
rule, (c) a brute-force fingerprint from ``output_hidden_states=True`` and full-vocabulary logits per layer,
and (d) a hand-made two-dimensional model whose layer logits are computed on paper.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dynashape.meds.capture import FingerprintCapture, fingerprint
from dynashape.meds.model_parts import ModelParts, find_model_parts
from dynashape.meds.positions import (
    answer_positions,
    answer_targets,
    packed_token_index,
    padded_token_index,
)

# ---------------------------------------------------------------------------------------------------------
# answer_positions: hand-worked token sequences
# ---------------------------------------------------------------------------------------------------------


def _ids(tokenizer, tokens: list[str]) -> list[int]:
    ids = tokenizer.convert_tokens_to_ids(tokens)
    assert tokenizer.unk_token_id not in ids or "<unk>" in tokens, f"not in vocab: {tokens}"
    return ids


# (token strings of the byte-level BPE, expected p under rule "official", expected p under rule "last")
BPE_CASES = [
    # exact marker tokens "\\", "boxed", "{"
    (["\\", "boxed", "{", "1", "}"], 2, 2),
    # "Ġ\\" is not the marker's "\\": the fallback finds "boxed" then "{"
    (["The", "Ġanswer", "Ġis", "Ġ\\", "boxed", "{", "12", "}"], 5, 5),
    # merged "{\\": first token containing "{" after "boxed"
    (["$\\", "boxed", "{\\", "frac", "{", "1", "}{", "2", "}}"], 2, 2),
    # two exact boxes: the last
    (["\\", "boxed", "{", "1", "}", "\\", "boxed", "{", "2", "}"], 7, 7),
    # an exact box, then a later non-exact one: official keeps the exact one, "last" the later one
    (["\\", "boxed", "{", "1", "}", "Ġso", "Ġ\\", "boxed", "{", "2", "}"], 2, 8),
    # a later "Ġboxed" word with no brace in its window: fall back to the earlier box
    (["Ġ\\", "boxed", "{", "1", "}", "Ġthe", "Ġboxed", "Ġanswer"], 2, 2),
    # absent
    (["The", "Ġanswer", "Ġis", "12"], -1, -1),
    # "\\boxed" at the very end, no brace
    (["Ġis", "Ġ\\", "boxed"], -1, -1),
    # "\\boxed{" at the very end: no answer token y* exists
    (["Ġis", "\\", "boxed", "{"], -1, -1),
    # brace 9 tokens after "boxed" is inside the window of 10 (boxed itself counts)
    (["boxed", *["a"] * 8, "{", "1"], 9, 9),
    # brace 10 tokens after "boxed" is outside it
    (["boxed", *["a"] * 9, "{", "1"], -1, -1),
]


@pytest.mark.parametrize(("tokens", "official", "last"), BPE_CASES)
def test_answer_positions_bpe_hand_worked(bpe_tokenizer, tokens, official, last):
    ids = [_ids(bpe_tokenizer, tokens)]
    assert answer_positions(ids, bpe_tokenizer).tolist() == [official]
    assert answer_positions(ids, bpe_tokenizer, rule="last").tolist() == [last]


def test_answer_positions_bpe_real_text_merges_brace(bpe_tokenizer):
    text = "The answer is $\\boxed{\\frac{1}{2}}$"
    ids = bpe_tokenizer.encode(text, add_special_tokens=False)
    tokens = bpe_tokenizer.convert_ids_to_tokens(ids)
    # the tokenizer merges "{" with the following "\\": no exact "\\", "boxed", "{" sequence exists
    assert tokens[4:7] == ["$\\", "boxed", "{\\"]
    assert answer_positions([ids], bpe_tokenizer).tolist() == [6]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x=\\boxed{5}", 8),  # x = \ b o x e d { -> index 8
        ("\\boxed{1} or \\boxed{22}", 19),  # 13 characters before the second box, + 6
        ("boxed 5 {", -1),  # no backslash-boxed-brace and "boxed" is no single token here
        ("so \\boxed{", -1),  # brace is the last character: no answer token
        ("", -1),
    ],
)
def test_answer_positions_char_hand_worked(char_tokenizer, text, expected):
    ids = char_tokenizer.encode(text, add_special_tokens=False)
    assert answer_positions([ids], char_tokenizer).tolist() == [expected]


def test_answer_positions_byte_fallback_brace(sp_tokenizer):
    # "{" is the byte token "<0x7B>": only its decoded text contains "{"
    ids = sp_tokenizer.encode("$\\boxed{7}", add_special_tokens=False)
    assert sp_tokenizer.convert_ids_to_tokens(ids) == ["▁", "$", "\\", "boxed", "<0x7B>", "7", "}"]
    assert answer_positions([ids], sp_tokenizer).tolist() == [4]
    # the marker encodes as "▁\\", "boxed", "<0x7B>" and matches the second box exactly
    ids = sp_tokenizer.encode("$\\boxed{1} so \\boxed{2}", add_special_tokens=False)
    tokens = sp_tokenizer.convert_ids_to_tokens(ids)
    assert tokens[-5:] == ["▁\\", "boxed", "<0x7B>", "2", "}"]
    assert answer_positions([ids], sp_tokenizer).tolist() == [len(ids) - 3]


def test_answer_positions_tensor_mask_and_pad(bpe_tokenizer):
    rows = [
        ["Ġ\\", "boxed", "{", "1", "}"],
        ["Ġ\\", "boxed", "{"],  # the "1" after it is padding
        ["The"],
    ]
    ids = [_ids(bpe_tokenizer, r) for r in rows]
    width = 5
    one = bpe_tokenizer.convert_tokens_to_ids("1")
    pad = bpe_tokenizer.pad_token_id
    # padding cells hold tokens that WOULD match ("{", "1") to check they are ignored
    filler = [bpe_tokenizer.convert_tokens_to_ids("{"), one]
    padded = torch.tensor([r + (filler * 3)[: width - len(r)] for r in ids])
    mask = torch.tensor([[j < len(r) for j in range(width)] for r in ids])
    assert answer_positions(padded, bpe_tokenizer, response_mask=mask).tolist() == [2, -1, -1]
    with_pad = torch.tensor([r + [pad] * (width - len(r)) for r in ids])
    assert answer_positions(with_pad, bpe_tokenizer, pad_token_id=pad).tolist() == [2, -1, -1]
    assert answer_positions(ids, bpe_tokenizer).tolist() == [2, -1, -1]
    # without a mask the padding is read as text
    assert answer_positions(padded, bpe_tokenizer).tolist() == [2, 2, -1]


def test_answer_positions_ignores_ids_outside_the_tokenizer(bpe_tokenizer):
    # a padded model vocabulary (ids >= len(tokenizer)) and -100 labels match nothing and do not crash
    ids = torch.tensor([[len(bpe_tokenizer) + 3, -100, *_ids(bpe_tokenizer, ["Ġ\\", "boxed", "{"]), 10_000]])
    assert answer_positions(ids, bpe_tokenizer).tolist() == [4]


def test_answer_positions_sees_tokens_added_after_first_use(fresh_bpe_tokenizer):
    tok = fresh_bpe_tokenizer
    assert answer_positions([_ids(tok, ["Ġ\\", "boxed", "{", "1"])], tok).tolist() == [2]  # tables cached
    tok.add_tokens(["<boxed_open>"])
    ids = [[tok.convert_tokens_to_ids("<boxed_open>"), *_ids(tok, ["{", "1"])]]
    assert answer_positions(ids, tok).tolist() == [1]


def test_answer_positions_rejects_bad_arguments(bpe_tokenizer):
    with pytest.raises(ValueError, match="pad_token_id"):
        answer_positions(
            torch.zeros(1, 3, dtype=torch.long), bpe_tokenizer, response_mask=torch.ones(1, 3), pad_token_id=0
        )
    with pytest.raises(ValueError, match="window"):
        answer_positions([[1, 2]], bpe_tokenizer, window=0)
    with pytest.raises(ValueError, match="rule"):
        answer_positions([[1, 2]], bpe_tokenizer, rule="first")
    with pytest.raises(ValueError, match="response_token_ids"):
        answer_positions(torch.zeros(3, dtype=torch.long), bpe_tokenizer)


def test_answer_targets_hand_worked():
    responses = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    positions = torch.tensor([1, -1, 1])
    assert answer_targets(responses, positions).tolist() == [7, -1, 13]


# ---------------------------------------------------------------------------------------------------------
# answer_positions: equivalence to a slow transcription of the rule, on random texts
# ---------------------------------------------------------------------------------------------------------


def _reference_position(tokenizer, ids: list[int], window: int = 10, rule: str = "official") -> int:
    """The rule of the spec, one rollout, one token at a time."""
    marker = tokenizer.encode("\\boxed{", add_special_tokens=False)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    texts = [tokenizer.decode([i]) for i in ids]
    exact = -1
    for start in range(len(ids) - len(marker), -1, -1):
        if ids[start : start + len(marker)] == marker:
            exact = start + len(marker) - 1
            break
    fallback = -1
    for i in range(len(ids) - 1, -1, -1):
        if "boxed" in pieces[i].lower() or "boxed" in texts[i].lower():
            for j in range(i, min(i + window, len(ids))):
                if "{" in pieces[j] or "{" in texts[j]:
                    fallback = j
                    break
            if fallback >= 0:
                break
    position = exact if exact >= 0 else fallback
    if rule == "last":
        position = max(exact, fallback)
    return position if 0 <= position < len(ids) - 1 else -1


SEGMENTS = [
    "\\boxed{", "\\boxed{\\frac{1}{2}}", " \\boxed{12}", "$\\boxed{3}$", "boxed", " boxed", "{", "}", " ",
    "x", "12", "\\frac{a}{b}", " the answer is ", "\\", "$", "\n", "{{",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(SEGMENTS), max_size=12).map("".join)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(TEXTS, min_size=1, max_size=6), rule=st.sampled_from(["official", "last"]))
def test_answer_positions_matches_loop_reference(bpe_tokenizer, char_tokenizer, sp_tokenizer, texts, rule):
    for tokenizer in (bpe_tokenizer, char_tokenizer, sp_tokenizer):
        ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
        expected = [_reference_position(tokenizer, r, rule=rule) for r in ids]
        assert answer_positions(ids, tokenizer, rule=rule).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(text=TEXTS)
def test_answer_positions_char_level_is_the_last_brace_of_the_text(char_tokenizer, text):
    # one token per character: p is the character index of the "{" of the last "\boxed{"
    ids = char_tokenizer.encode(text, add_special_tokens=False)
    start = text.rfind("\\boxed{")
    expected = start + 6 if start >= 0 and start + 7 < len(text) else -1
    assert answer_positions([ids], char_tokenizer).tolist() == [expected]


# ---------------------------------------------------------------------------------------------------------
# Index mapping
# ---------------------------------------------------------------------------------------------------------


def test_padded_token_index_hand_worked():
    mask = torch.tensor(
        [
            [0, 1, 1, 1, 1, 1, 0, 0],  # verl: prompt left-padded to 4, response (2) right-padded
            [1, 1, 1, 1, 1, 0, 0, 0],  # prompt 2 + response 3, right-padded as a whole
            [0, 0, 0, 1, 1, 1, 1, 1],  # prompt 3 + response 2, left-padded as a whole
            [1, 1, 1, 1, 1, 1, 1, 1],  # no answer
        ]
    )
    index = padded_token_index(torch.tensor([1, 0, 1, -1]), mask, torch.tensor([2, 3, 2, 4]))
    assert index.positions.tolist() == [5, 2, 7, -1]
    assert index.rows.tolist() == [0, 1, 2, 3]


def test_packed_token_index_hand_worked():
    index = packed_token_index(torch.tensor([1, -1, 0]), torch.tensor([0, 5, 9, 12]), torch.tensor([2, 3, 1]))
    assert index.positions.tolist() == [4, -1, 11]
    assert index.rows.tolist() == [0, 0, 0]


# ---------------------------------------------------------------------------------------------------------
# Fingerprint: brute force from output_hidden_states and the full head
# ---------------------------------------------------------------------------------------------------------


def _final_norm(model: nn.Module) -> nn.Module:
    return model.transformer.ln_f if hasattr(model, "transformer") else model.model.norm


def _brute_force(model, forward_kwargs, rows, positions, targets, *, layers, diff, norm) -> np.ndarray:
    """f_n from HF's hidden_states[1:] and full-vocabulary logits of every layer, then index."""
    with torch.no_grad():
        hidden = model(**forward_kwargs, output_hidden_states=True).hidden_states[1:]
        num = len(hidden)
        values = np.zeros((len(positions), num))
        for n, h in enumerate(hidden):
            if norm == "final" and n < num - 1:  # the last entry is already normed
                h = _final_norm(model)(h)
            logits = model.get_output_embeddings()(h)  # [R, S, V]
            for i, (r, p, y) in enumerate(zip(rows.tolist(), positions.tolist(), targets.tolist(), strict=True)):
                values[i, n] = logits[r, p, y].item() if p >= 0 else np.nan
    if diff:
        values = np.diff(values, axis=1)
    return values[:, -layers:] if layers is not None else values


def _padded_batch(side: str, seed: int = 0):
    """4 sequences of lengths 9, 5, 7, 3 padded to 9 on the given side, positions (one absent) and targets."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [9, 5, 7, 3]
    width = max(lengths)
    input_ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        cols = slice(0, n) if side == "right" else slice(width - n, width)
        input_ids[b, cols] = torch.randint(1, VOCAB, (n,), generator=gen)
        mask[b, cols] = 1
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    # response-relative answer positions with responses = the last 4, 3, 5, 2 tokens
    response_lengths = torch.tensor([4, 3, 5, 2])
    response_positions = torch.tensor([2, 0, -1, 0])
    index = padded_token_index(response_positions, mask, response_lengths)
    targets = torch.full((len(lengths),), -1)
    present = index.positions >= 0
    targets[present] = input_ids[index.rows[present], index.positions[present] + 1]
    kwargs = {"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids}
    return kwargs, index, targets


MODEL_KINDS = ["qwen2", "llama", "gpt2"]
VOCAB = 160  # tests/meds/conftest.py builds every model with this vocabulary


@pytest.fixture(scope="module")
def models(tiny_model) -> dict[str, nn.Module]:
    return {kind: tiny_model(kind, tie=(kind == "llama")) for kind in MODEL_KINDS}


@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("norm", ["raw", "final"])
@pytest.mark.parametrize(("layers", "diff"), [(3, False), (3, True), (None, False), (None, True), (5, False)])
def test_capture_equals_brute_force_padded(models, kind, side, norm, layers, diff):
    model = models[kind]
    kwargs, index, targets = _padded_batch(side)
    expected = _brute_force(model, kwargs, index.rows, index.positions, targets, layers=layers, diff=diff, norm=norm)
    with (
        torch.no_grad(),
        FingerprintCapture(
            model, index.positions, targets, rows=index.rows, layers=layers, diff=diff, norm=norm
        ) as cap,
    ):
        model(**kwargs)  # the full forward with logits, as a log-prob pass runs it
    got = cap.result()
    assert got.dtype == torch.float32
    assert got.shape == expected.shape
    assert torch.isnan(got[2]).all() and not torch.isnan(got[[0, 1, 3]]).any()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    # the stand-alone function (backbone only, rows implied) gives the same numbers
    alone = fingerprint(
        model, **kwargs, positions=index.positions, targets=targets, layers=layers, diff=diff, norm=norm
    )
    np.testing.assert_allclose(alone.numpy(), expected, rtol=1e-5, atol=1e-5)


def _packed_batch(lengths=(6, 4, 7), seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(1, VOCAB, (n,), generator=gen) for n in lengths]
    total = sum(lengths)
    segment = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    steps = torch.arange(total)
    # block-diagonal causal mask: what flash-attention's varlen kernel does with cu_seqlens
    mask4 = ((segment[:, None] == segment[None, :]) & (steps[:, None] >= steps[None, :]))[None, None]
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    cu_seqlens = torch.tensor([0, *np.cumsum(lengths).tolist()])
    kwargs = {"input_ids": torch.cat(seqs)[None], "attention_mask": mask4, "position_ids": position_ids}
    return seqs, kwargs, cu_seqlens


@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("norm", ["raw", "final"])
@pytest.mark.parametrize("diff", [False, True])
def test_capture_packed_equals_brute_force_and_padded(models, kind, norm, diff):
    model = models[kind]
    seqs, kwargs, cu_seqlens = _packed_batch()
    response_lengths = torch.tensor([3, 2, 4])
    response_positions = torch.tensor([1, -1, 2])
    index = packed_token_index(response_positions, cu_seqlens, response_lengths)
    flat = kwargs["input_ids"][0]
    targets = torch.where(index.positions >= 0, flat[(index.positions + 1).clamp(max=len(flat) - 1)], -1)
    expected = _brute_force(model, kwargs, index.rows, index.positions, targets, layers=3, diff=diff, norm=norm)
    with (
        torch.no_grad(),
        FingerprintCapture(model, index.positions, targets, rows=index.rows, layers=3, diff=diff, norm=norm) as cap,
    ):
        model(**kwargs)
    np.testing.assert_allclose(cap.result().numpy(), expected, rtol=1e-5, atol=1e-5)

    # the same rollouts right-padded give the same fingerprints (the packing is transparent)
    width = max(len(s) for s in seqs)
    padded = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, s in enumerate(seqs):
        padded[b, : len(s)] = s
        mask[b, : len(s)] = 1
    pindex = padded_token_index(response_positions, mask, response_lengths)
    got = fingerprint(model, padded, mask, pindex.positions, targets, layers=3, diff=diff, norm=norm)
    np.testing.assert_allclose(got.numpy(), cap.result().numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_capture_with_head_bias(tiny_model):
    model = tiny_model("qwen2", num_layers=4)
    head = model.lm_head
    model.lm_head = nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        model.lm_head.weight.copy_(head.weight)
        model.lm_head.bias.normal_()
    kwargs, index, targets = _padded_batch("right")
    expected = _brute_force(model, kwargs, index.rows, index.positions, targets, layers=4, diff=False, norm="raw")
    got = fingerprint(model, **kwargs, positions=index.positions, targets=targets, layers=4)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    no_bias = expected - model.lm_head.bias[targets.clamp(min=0)].detach().numpy()[:, None]
    assert not np.allclose(got.numpy()[[0, 1, 3]], no_bias[[0, 1, 3]], atol=1e-3)


# ---------------------------------------------------------------------------------------------------------
# Fingerprint: a two-dimensional model computed on paper
# ---------------------------------------------------------------------------------------------------------


class _AddLayer(nn.Module):
    def __init__(self, delta: list[float], as_tuple: bool) -> None:
        super().__init__()
        self.register_buffer("delta", torch.tensor(delta))
        self.as_tuple = as_tuple

    def forward(self, h: torch.Tensor):
        out = h + self.delta + 0.0 * (h * h)  # h * h saves h for backward, so checkpointing recomputes
        return (out, None) if self.as_tuple else out


class _Scale(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return 2.0 * h


class _PaperModel(nn.Module):
    """h0 = embedding rows; layers add [1, 0], [0, 2], [-1, 1]; the final "norm" doubles; head rows below."""

    def __init__(self, checkpoint: bool = False) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.embed = nn.Embedding(3, 2)
        self.stack = nn.ModuleList(
            [_AddLayer([1.0, 0.0], True), _AddLayer([0.0, 2.0], False), _AddLayer([-1.0, 1.0], True)]
        )
        self.norm = _Scale()
        self.out = nn.Linear(2, 3, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
            self.out.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))

    def forward(self, input_ids: torch.Tensor, **_: object) -> torch.Tensor:
        h = self.embed(input_ids)
        for layer in self.stack:
            h = torch.utils.checkpoint.checkpoint(layer, h, use_reentrant=True) if self.checkpoint else layer(h)
            h = h[0] if isinstance(h, tuple) else h
        return self.out(self.norm(h))


def _paper_parts(model: _PaperModel) -> ModelParts:
    return ModelParts(backbone=model, layers=model.stack, final_norm=model.norm, head=model.out)


def test_fingerprint_paper_model_closed_form():
    model = _PaperModel()
    # row 0 = tokens [1, 2]: h0 at p=1 is [0, 1]; h1 = [1, 1], h2 = [1, 3], h3 = [0, 4]
    # row 1 = tokens [2, 1]: h0 at p=0 is [0, 1]; same path.
    # Targets: row 0 -> y* = 2 (head row [1, 1]), row 1 -> y* = 0 (head row [1, 0]).
    input_ids = torch.tensor([[1, 2], [2, 1]])
    positions, targets = torch.tensor([1, 0]), torch.tensor([2, 0])
    kw = {"rows": None, "parts": _paper_parts(model)}
    raw = fingerprint(model, input_ids, None, positions, targets, layers=3, **kw)
    # raw: h1, h2 as is, h3 normed (doubled): row 0 -> [2, 4, 8]; row 1 -> [1, 1, 0]
    assert raw.tolist() == [[2.0, 4.0, 8.0], [1.0, 1.0, 0.0]]
    final = fingerprint(model, input_ids, None, positions, targets, layers=3, norm="final", **kw)
    assert final.tolist() == [[4.0, 8.0, 8.0], [2.0, 2.0, 0.0]]
    diff = fingerprint(model, input_ids, None, positions, targets, layers=2, diff=True, **kw)
    assert diff.tolist() == [[2.0, 4.0], [0.0, -1.0]]
    last_one = fingerprint(model, input_ids, None, positions, targets, layers=1, **kw)
    assert last_one.tolist() == [[8.0], [0.0]]


def test_unknown_architecture_names_the_class():
    with pytest.raises(ValueError, match="_PaperModel"):
        find_model_parts(_PaperModel())
    with pytest.raises(ValueError, match="_PaperModel"):
        FingerprintCapture(_PaperModel(), torch.tensor([0]), torch.tensor([0]))


def test_find_model_parts_known_layouts(models):
    qwen = find_model_parts(models["qwen2"])
    assert qwen.layers is models["qwen2"].model.layers and qwen.final_norm is models["qwen2"].model.norm
    assert qwen.head is models["qwen2"].lm_head and qwen.backbone is models["qwen2"].model
    gpt2 = find_model_parts(models["gpt2"])
    assert gpt2.layers is models["gpt2"].transformer.h and gpt2.final_norm is models["gpt2"].transformer.ln_f
    assert gpt2.head.weight is models["gpt2"].transformer.wte.weight  # tied
    assert find_model_parts(models["llama"]).num_layers == 5


# ---------------------------------------------------------------------------------------------------------
# Fingerprint: grad mode, checkpointing, hook hygiene, validation
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hypothesis_model(tiny_model) -> nn.Module:
    return tiny_model("qwen2", num_layers=4, seed=3)


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_capture_under_grad_is_detached_and_equal(models):
    model = models["qwen2"]
    kwargs, index, targets = _padded_batch("left")
    reference = fingerprint(model, **kwargs, positions=index.positions, targets=targets, layers=4)
    with FingerprintCapture(model, index.positions, targets, rows=index.rows, layers=4) as cap:
        logits = model(**kwargs).logits
        logits.logsumexp(-1).sum().backward()
    model.zero_grad(set_to_none=True)
    got = cap.result()
    assert not got.requires_grad
    torch.testing.assert_close(got, reference, equal_nan=True)


def test_capture_under_hf_activation_checkpointing(tiny_model):
    model = tiny_model("llama", num_layers=4)
    kwargs, index, targets = _padded_batch("right")
    reference = fingerprint(model, **kwargs, positions=index.positions, targets=targets, layers=3, diff=True)
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # checkpointing is only active in training mode; the config has no dropout
    with FingerprintCapture(model, index.positions, targets, layers=3, diff=True) as cap:
        model(**kwargs).logits.sum().backward()
    torch.testing.assert_close(cap.result(), reference, equal_nan=True)


def test_capture_keeps_first_pass_when_checkpoint_recomputes_hooks():
    # torch.utils.checkpoint around layer.__call__ (transformers 4.x style) re-runs the hooks in backward
    model = _PaperModel(checkpoint=True)
    input_ids, positions, targets = torch.tensor([[1, 2], [2, 1]]), torch.tensor([1, 0]), torch.tensor([2, 0])
    calls = []
    counter = model.stack[-1].register_forward_hook(lambda *a: calls.append(1))
    with FingerprintCapture(model, positions, targets, layers=3, parts=_paper_parts(model)) as cap:
        logits = model(input_ids)
        for layer in model.stack:  # the recomputation in backward now yields different layer outputs
            layer.delta.add_(100.0)
        logits.sum().backward()
    counter.remove()
    assert len(calls) == 2
    assert cap.result().tolist() == [[2.0, 4.0, 8.0], [1.0, 1.0, 0.0]]


def test_hooks_removed_when_forward_raises(models):
    model = models["gpt2"]
    kwargs, index, targets = _padded_batch("right")
    before = _hook_count(model)
    # 3 positions for a 4-row batch without rows=: the hook raises inside the forward
    capture = FingerprintCapture(model, index.positions[:3], targets[:3], layers=3)
    with pytest.raises(ValueError, match="rows"), capture:
        model(**kwargs)
    assert _hook_count(model) == before
    with pytest.raises(RuntimeError, match="boom"), FingerprintCapture(model, index.positions, targets, layers=3):
        raise RuntimeError("boom")
    assert _hook_count(model) == before
    with pytest.raises(ValueError, match="positions"):
        fingerprint(model, **kwargs, positions=torch.tensor([0, 0, 0, 50]), targets=targets.clamp(min=0), layers=3)
    assert _hook_count(model) == before


def test_capture_validation(models):
    model = models["qwen2"]
    good = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="layers"):
        FingerprintCapture(model, good, good, layers=6)
    with pytest.raises(ValueError, match="layers"):
        FingerprintCapture(model, good, good, layers=5, diff=True)
    with pytest.raises(ValueError, match="layers"):
        FingerprintCapture(model, good, good, layers=0)
    with pytest.raises(ValueError, match="norm"):
        FingerprintCapture(model, good, good, norm="lens")
    with pytest.raises(ValueError, match="targets"):
        FingerprintCapture(model, good, torch.tensor([0, VOCAB]), layers=3)
    with pytest.raises(ValueError, match="targets"):
        FingerprintCapture(model, good, torch.tensor([0]), layers=3)
    with pytest.raises(ValueError, match="positions"):
        FingerprintCapture(model, torch.tensor([0, -2]), good, layers=3)
    with pytest.raises(ValueError, match="positions"):
        FingerprintCapture(model, torch.tensor([0.0, 1.0]), good, layers=3)
    # an absent row may carry any target
    FingerprintCapture(model, torch.tensor([0, -1]), torch.tensor([3, -1]), layers=3)
    with pytest.raises(RuntimeError, match="did not run"):
        FingerprintCapture(model, good, good, layers=3).result()


@settings(max_examples=15, deadline=None)
@given(
    data=st.data(),
    side=st.sampled_from(["left", "right"]),
    norm=st.sampled_from(["raw", "final"]),
    diff=st.booleans(),
)
def test_capture_random_positions_equal_brute_force(hypothesis_model, data, side, norm, diff):
    model = hypothesis_model
    kwargs, _, _ = _padded_batch(side, seed=data.draw(st.integers(0, 1000)))
    mask = kwargs["attention_mask"]
    n_rows = data.draw(st.integers(1, 8))
    rows = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=n_rows, max_size=n_rows)))
    positions, targets = [], []
    for r in rows.tolist():
        real = mask[r].nonzero()[:-1, 0].tolist()  # any real token that has a next token
        p = data.draw(st.sampled_from([-1, *real]))
        positions.append(p)
        targets.append(data.draw(st.integers(0, VOCAB - 1)) if p >= 0 else -1)
    positions, targets = torch.tensor(positions), torch.tensor(targets)
    layers = data.draw(st.integers(1, 3 if diff else 4))
    expected = _brute_force(model, kwargs, rows, positions, targets, layers=layers, diff=diff, norm=norm)
    got = fingerprint(
        model, **kwargs, positions=positions, targets=targets, rows=rows, layers=layers, diff=diff, norm=norm
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
