"""The toy world: hand-checked traces, the teacher's invariants, seeded splits, the tokenizer."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynashape.meds.keys import prompt_key
from dynashape.train.task import (
    TRACE_STYLES,
    ChainTaskConfig,
    make_problem,
    make_splits,
    sample_style,
    teacher_trace,
)
from dynashape.train.tokenizer import build_char_tokenizer

CFG = ChainTaskConfig(n_train=50, n_test_per_difficulty=3)
P = make_problem((47, 38, 12, 9), ("+", "-", "+"))  # 47+38 = 85, 85-12 = 73, 73+9 = 82


def test_problem_hand_checked():
    assert P.prompt == "47+38-12+9\n"
    assert P.answer == "82"
    assert P.difficulty == 4
    assert P.key == prompt_key("47+38-12+9")  # whitespace-normalised
    assert make_problem((5, 9), ("-",)).answer == "-4"


def test_concise_trace_hand_checked():
    trace = teacher_trace(P, "concise", random.Random(0), CFG)
    assert trace == "47+38=85\n85-12=73\n73+9=82\n\\boxed{82}"


def test_shortcuts_hand_checked():
    rng = random.Random(0)
    assert teacher_trace(P, "direct", rng, CFG) == "\\boxed{82}"
    assert teacher_trace(P, "merged", rng, CFG) == "47+38-12=73\n73+9=82\n\\boxed{82}"


def test_slips_hand_checked():
    # forgotten carry: 47+38 -> 7+8 = 15 -> 5, 4+3 = 7 -> 75; then 75-12 = 63, 63+9 = 72
    assert teacher_trace(P, "slip", random.Random(0), CFG) == "47+38=75\n75-12=63\n63+9=72\n\\boxed{72}"
    # dropped sign: 12-47 -> 35
    q = make_problem((12, 47), ("-",))
    assert teacher_trace(q, "slip", random.Random(0), CFG) == "12-47=35\n\\boxed{35}"
    # no slip possible (no carry, no borrow): the concise trace
    r = make_problem((11, 22), ("+",))
    assert teacher_trace(r, "slip", random.Random(0), CFG) == teacher_trace(r, "concise", random.Random(0), CFG)


def test_verbose_hand_checked():
    cfg = ChainTaskConfig(restate_prob=1.0, check_prob=1.0, repeat_prob=0.0)
    trace = teacher_trace(P, "verbose", random.Random(0), cfg)
    # 47+38 carries, 85-12 does not borrow, 73+9 carries: two checks
    assert trace == ("problem 47+38-12+9\n47+38=85\ncheck 85-38=47\n85-12=73\n73+9=82\ncheck 82-9=73\n\\boxed{82}")


STEP = re.compile(r"^(?:check |)(-?\d+)((?:[+-]\d+)+)=(-?\d+)$")
TERM = re.compile(r"([+-])(\d+)")


def _check_lines(trace: str) -> list[str]:
    """Assert every arithmetic line is true; return the necessary step lines."""
    steps = []
    for line in trace.split("\n")[:-1]:
        if line.startswith(("problem ", "so ")):
            continue
        m = STEP.match(line)
        assert m, line
        value = int(m[1])
        for op, x in TERM.findall(m[2]):
            value = value + int(x) if op == "+" else value - int(x)
        assert value == int(m[3]), line
        if not line.startswith("check"):
            steps.append(line)
    return steps


@given(
    operands=st.lists(st.integers(0, 999), min_size=2, max_size=6),
    ops_seed=st.integers(0, 10**6),
    style_seed=st.integers(0, 10**6),
)
def test_teacher_invariants(operands, ops_seed, style_seed):
    ops = tuple(random.Random(ops_seed).choice("+-") for _ in operands[1:])
    p = make_problem(tuple(operands), ops)
    rng = random.Random(style_seed)
    concise = teacher_trace(p, "concise", random.Random(0), CFG)
    verbose = teacher_trace(p, "verbose", rng, ChainTaskConfig(restate_prob=1, check_prob=1, repeat_prob=1))
    for style in ("concise", "verbose", "merged", "direct"):
        trace = concise if style == "concise" else verbose if style == "verbose" else teacher_trace(p, style, rng, CFG)
        assert trace.endswith(f"\\boxed{{{p.answer}}}"), (style, trace)
        _check_lines(trace)
    # redundant lines never change a step: dropping them gives the concise trace exactly
    assert _check_lines(verbose) == concise.split("\n")[:-1]
    assert len(verbose) >= len(concise)
    assert len(concise.split("\n")) == len(operands)  # one necessary step per operation + the answer


def test_sample_style_mix():
    rng = random.Random(0)
    cfg = ChainTaskConfig(slip_prob=0.1, shortcut_prob=0.2, verbose_prob=0.5)
    draws = [sample_style(rng, cfg) for _ in range(20000)]
    share = {s: draws.count(s) / len(draws) for s in TRACE_STYLES}
    assert share["slip"] == pytest.approx(0.1, abs=0.01)
    assert share["direct"] + share["merged"] == pytest.approx(0.2, abs=0.015)
    assert share["verbose"] == pytest.approx(0.35, abs=0.015)  # 0.5 of the remaining 0.7


def test_splits_seeded_disjoint_balanced():
    train, test = make_splits(CFG)
    train2, test2 = make_splits(CFG)
    assert [p.prompt for p in train] == [p.prompt for p in train2]
    assert [p.prompt for p in test] == [p.prompt for p in test2]
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert [p.difficulty for p in test] == [d for d in range(2, 7) for _ in range(3)]
    other, _ = make_splits(ChainTaskConfig(n_train=50, n_test_per_difficulty=3, seed=1))
    assert [p.prompt for p in other] != [p.prompt for p in train]
    assert all(int(p.answer) == eval(p.prompt) for p in test)  # test-only oracle on our own generated text


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_operands", 1), ("max_digits", 0), ("verbose_prob", 1.5), ("n_train", 0), ("max_operands", 13)],
)
def test_config_validation_names_field(field, value):
    with pytest.raises(ValueError, match=field):
        ChainTaskConfig(**{field: value})


def test_tokenizer_round_trip_and_specials():
    tok = build_char_tokenizer()
    text = "problem 47+38-12+9\n47+38=85\ncheck 85-38=47\n\\boxed{82}"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    assert tok.pad_token_id == 0
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id], skip_special_tokens=True) == text
    assert tok.convert_ids_to_tokens(tok("{", add_special_tokens=False)["input_ids"]) == ["{"]
    batch = tok(["1+2", "33+44"], add_special_tokens=False, padding=True)
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1]  # left padding


def test_tokenizer_save_load(tmp_path):
    from transformers import AutoTokenizer

    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "12-47=-35\n\\boxed{-35}"
    assert again(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    assert again.eos_token_id == tok.eos_token_id
