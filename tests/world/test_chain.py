"""The toy world: hand-checked traces, the generator's properties (W1-W5), labels, seeded disjoint splits."""

from __future__ import annotations

import itertools
import random
import re
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynashape.meds.keys import prompt_key
from dynashape.world.chain import (
    ERROR_MODES,
    VERBOSITY,
    ChainTaskConfig,
    error_mode,
    expression,
    is_shortcut,
    make_problem,
    teacher_trace,
    world_splits,
)
from dynashape.world.chain.tokenizer import build_char_tokenizer

CFG = ChainTaskConfig(n_train=200, n_validation_per_difficulty=3, n_test_per_difficulty=3)
P = make_problem((47, 8, 3), ("+", "-"))  # 47+8 = 55 (carries), 55-3 = 52
TRAP = make_problem((60, 5, 4, 2), ("+", "-", "+"), group=2)  # 60+5-(4+2) = 59; dropped: 60+5-4+2 = 63
PLAIN = {"shortcut": "none", "careful": False, "drop_paren": False, "slip_prob": 0.0, "filler": False}


def trace(problem, **kw):
    return teacher_trace(problem, random.Random(0), CFG, **{**PLAIN, **kw})


def test_problem_hand_checked():
    assert P.answer == "52" and P.difficulty == 2 and P.group is None
    assert (
        P.prompt
        == {"terse": "47+8-3\n", "plain": "compute 47+8-3\n", "chatty": "please work out 47+8-3 step by step\n"}[
            P.verbosity
        ]
    )
    assert P.key == prompt_key(P.prompt)
    assert (
        expression(TRAP.operands, TRAP.ops, TRAP.group) == "60+5-(4+2)"
        and TRAP.answer == "59"
        and TRAP.difficulty == 3
        and TRAP.is_trap
    )
    assert make_problem((52, 7), ("-",)).answer == "45"


def test_concise_and_shortcut_traces_hand_checked():
    assert trace(P).text == "47+8=55\n55-3=52\n\\boxed{52}"
    assert trace(TRAP).text == "60+5=65\n4+2=6\n65-6=59\n\\boxed{59}"
    assert trace(P, shortcut="direct").text == "\\boxed{52}"
    assert trace(P, shortcut="merged").text == "47+8-3=52\n\\boxed{52}"
    four = make_problem((20, 1, 2, 3, 4), ("+", "+", "-", "+"))  # 21, 23, 20, 24
    assert trace(four, shortcut="merged").text == "20+1+2=23\n23-3+4=24\n\\boxed{24}"


def test_slips_checks_and_repairs_hand_checked():
    # a forgotten carry: 47+8 -> 45; the answer is 10 short
    t = trace(P, slip_prob=1.0)
    assert (t.text, t.mode) == ("47+8=45\n45-3=42\n\\boxed{42}", "carry")
    # a careful trace works the carry step again in place; the check differs from the slip and the fix restores 55
    t = trace(P, slip_prob=1.0, careful=True)
    assert (t.text, t.mode) == ("47+8=45\ncheck 47+8=55\nfix 47+8=55\n55-3=52\n\\boxed{52}", "")
    t = trace(P, careful=True)  # no slip: the check agrees with the line above and no fix follows
    assert t.text == "47+8=55\ncheck 47+8=55\n55-3=52\n\\boxed{52}"
    # a forgotten borrow: 52-7 -> 55, 10 over
    b = make_problem((52, 7), ("-",))
    assert (trace(b, slip_prob=1.0).text, trace(b, slip_prob=1.0).mode) == ("52-7=55\n\\boxed{55}", "borrow")
    # the misconception drops the parentheses: 65-4=61, 61+2=63
    t = trace(TRAP, drop_paren=True)
    assert (t.text, t.mode) == ("60+5=65\n65-4=61\n61+2=63\n\\boxed{63}", "parenthesis")


def test_filler_follows_the_trait_hand_checked():
    cfg = ChainTaskConfig(restate_plain=1.0, repeat_plain=1.0)
    assert P.verbosity == "plain"
    t = teacher_trace(P, random.Random(0), cfg, shortcut="none", careful=False, drop_paren=False, slip_prob=0.0)
    assert t.text == "problem 47+8-3\n47+8=55\nso 55\n55-3=52\nso 52\n\\boxed{52}"
    terse = ChainTaskConfig(restate_terse=0.0, repeat_terse=0.0)
    assert TRAP.verbosity == "terse"
    t = teacher_trace(TRAP, random.Random(0), terse, shortcut="none", careful=False, drop_paren=False, slip_prob=0.0)
    assert t.text == trace(TRAP).text  # a terse problem gets no filler


LINE = re.compile(r"^(?:check |fix |)(-?\d+)((?:[+-]\d+)+)=(-?\d+)$")


def _arithmetic_true(line: str) -> bool:
    m = LINE.match(line)
    assert m, line
    value = int(m[1])
    for op, x in re.findall(r"([+-])(\d+)", m[2]):
        value = value + int(x) if op == "+" else value - int(x)
    return value == int(m[3])


problems = st.builds(
    lambda seed, n_ops: world_splits(ChainTaskConfig(n_train=1, n_validation_per_difficulty=1, n_test_per_difficulty=1,
                                                     seed=seed)).test[n_ops - 1],
    st.integers(0, 40),
    st.integers(1, 8),
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(p=problems, seed=st.integers(0, 10**6))
def test_filler_never_changes_a_step_or_the_answer(p, seed):
    cfg = ChainTaskConfig(restate_terse=1, restate_plain=1, restate_chatty=1, repeat_terse=1, repeat_plain=1,
                          repeat_chatty=1)  # fmt: skip
    kw = {"shortcut": "none", "careful": False, "drop_paren": False, "slip_prob": 0.0}
    with_filler = teacher_trace(p, random.Random(seed), cfg, **kw).text
    without = teacher_trace(p, random.Random(seed), cfg, **kw, filler=False).text
    kept = [ln for ln in with_filler.split("\n") if not ln.startswith(("problem ", "so "))]
    assert kept == without.split("\n")
    assert without.endswith(f"\\boxed{{{p.answer}}}")


@settings(max_examples=60, deadline=None)
@given(p=problems, seed=st.integers(0, 10**6))
def test_verification_repairs_every_slip(p, seed):
    """Slipping at every carry / borrow step: a careful trace still ends right, a careless one does not."""
    careful = trace(p, slip_prob=1.0, careful=True)
    careless = trace(p, slip_prob=1.0)
    assert careful.text.endswith(f"\\boxed{{{p.answer}}}") and careful.mode == ""
    n_checks = careful.text.count("\ncheck ") + careful.text.startswith("check ")
    assert careful.text.count("fix ") == n_checks  # every step it checked had slipped, and each got its fix
    for line in careful.text.split("\n")[:-1]:
        if line.startswith(("check ", "fix ")):
            assert _arithmetic_true(line), line  # checks and fixes compute right
    if n_checks:
        slipped = sum(not _arithmetic_true(ln) for ln in careless.text.split("\n")[:-1])
        assert slipped == n_checks  # the same steps slip without the checks
        # one slip is 10 off; carries and borrows may cancel, so a careless answer can still be right
        assert careless.mode in ("", "carry", "borrow")
    else:
        assert careless.text == trace(p).text


@settings(max_examples=80, deadline=None)
@given(p=problems, seed=st.integers(0, 10**6))
def test_every_wrong_teacher_answer_has_the_labellers_mode(p, seed):
    """The generator's own record of its first error equals what the labeller reads back from the text."""
    rng = random.Random(seed)
    cfg = ChainTaskConfig(slip_prob=0.5, paren_prob=0.7)
    t = teacher_trace(p, rng, cfg)
    right = t.text.endswith(f"\\boxed{{{p.answer}}}")
    assert (t.mode == "") == right
    assert error_mode(p, t.text) == t.mode
    assert t.mode in ("", *ERROR_MODES)


def test_labeller_hand_checked():
    assert error_mode(P, "47+8=55\n55-3=52\n\\boxed{52}") == ""
    assert error_mode(P, "47+8=55\n55-3=5") == "truncated"
    assert error_mode(P, "\\boxed{50}") == "shortcut"
    assert error_mode(P, "47+8-3=50\n\\boxed{50}") == "shortcut"  # a merged line with a wrong result
    assert error_mode(P, "47+8=45\n45-3=42\n\\boxed{42}") == "carry"
    assert error_mode(P, "47+8=45\ncheck 47+8=55\nfix 47+8=55\n55-3=51\n\\boxed{51}") == "other"  # fixed, then off
    assert error_mode(P, "47+8=56\n56-3=53\n\\boxed{53}") == "other"  # off by one: no known misconception
    assert error_mode(P, "47+8=55\n55-3=52\n\\boxed{53}") == "other"  # every line right, the answer copied wrong
    assert error_mode(TRAP, "60+5=65\n65-4=61\n61+2=63\n\\boxed{63}") == "parenthesis"
    trap2 = make_problem((68, 5, 4, 2), ("+", "-", "+"), group=2)  # 68+5 = 73 carries; 73-(4+2) = 67
    assert error_mode(trap2, "68+5=63\n63-4=59\n59+2=61\n\\boxed{61}") == "carry"  # the first error counts
    b = make_problem((52, 7, 9), ("-", "+"))  # 45, 54
    assert error_mode(b, "52-7=55\n55+9=64\n\\boxed{64}") == "borrow"


def test_shortcut_detection_hand_checked():
    assert is_shortcut("\\boxed{52}")
    assert is_shortcut("47+8-3=52\n\\boxed{52}")
    assert not is_shortcut("47+8=55\n55-3=52\n\\boxed{52}")
    assert not is_shortcut("problem 47+8-3\n47+8=55\ncheck 47+8=55\n55-3=52\n\\boxed{52}")
    assert not is_shortcut("47+8=55\n55-3=52")  # no answer at all: truncated, not a shortcut


def test_needed_length_grows_about_4x_with_difficulty():
    """W1: the concise right trace (the length a correct solution needs) grows with the operations."""
    train = world_splits(ChainTaskConfig(n_train=2000)).train
    need = {d: statistics.mean(len(trace(p).text) + 1 for p in train if p.difficulty == d) for d in range(1, 9)}
    assert all(need[d + 1] > need[d] + 5 for d in range(1, 8)), need
    assert 3.5 <= need[8] / need[1] <= 4.5, need


def test_verbosity_is_independent_of_difficulty():
    """W2: every difficulty has each trait about a third of the time, and the prompt shows the trait."""
    train = world_splits(ChainTaskConfig(n_train=8000)).train
    for d in range(1, 9):
        traits = [p.verbosity for p in train if p.difficulty == d]
        for v in VERBOSITY:
            assert traits.count(v) / len(traits) == pytest.approx(1 / 3, abs=0.06), (d, v)
    for p in train[:200]:
        assert p.prompt.startswith("compute ") == (p.verbosity == "plain")
        assert p.prompt.startswith("please ") == (p.verbosity == "chatty")


def test_splits_seeded_disjoint_balanced():
    s, again = world_splits(CFG), world_splits(CFG)
    assert [p.prompt for p in s.train] == [p.prompt for p in again.train]
    assert [p.prompt for p in s.test] == [p.prompt for p in again.test]
    train, val, test = ({p.prompt for p in part} for part in s)
    assert not train & val and not train & test and not val & test
    assert len(train) == 200 and len(val) == len(test) == 24
    assert [p.difficulty for p in s.test] == [d for d in range(1, 9) for _ in range(3)]
    assert [p.difficulty for p in s.validation] == [d for d in range(1, 9) for _ in range(3)]
    other = world_splits(ChainTaskConfig(n_train=200, n_validation_per_difficulty=3, n_test_per_difficulty=3, seed=1))
    assert [p.prompt for p in other.train] != [p.prompt for p in s.train]
    for p in s.test:  # test-only oracle on our own generated text: the running value stays two-digit
        assert int(p.answer) == eval(expression(p.operands, p.ops, p.group))
        assert 10 <= int(p.answer) <= 99


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_ops", 0), ("max_ops", 13), ("slip_prob", 1.5), ("n_train", 0), ("repeat_chatty", -0.1),
     ("n_test_per_difficulty", 0)],
)  # fmt: skip
def test_config_validation_names_field(field, value):
    with pytest.raises(ValueError, match=field):
        ChainTaskConfig(**{field: value})


def test_make_problem_rejects_bad_group():
    with pytest.raises(ValueError, match="group"):
        make_problem((50, 3, 2), ("+", "+"), group=1)  # the pair must follow a minus


def test_tokenizer_round_trip_and_specials():
    tok = build_char_tokenizer()
    text = "problem 47+8-3\n47+8=45\ncheck 45-8=37\nfix 47+8=55\nso 55\n\\boxed{52}"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    assert tok.pad_token_id == 0
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id], skip_special_tokens=True) == text
    batch = tok(["1+2", "33+44"], add_special_tokens=False, padding=True)
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1]  # left padding


def test_tokenizer_save_load(tmp_path):
    from transformers import AutoTokenizer

    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "please work out 60+5-(4+2) step by step\n60+5=65\n\\boxed{59}"
    assert again(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    assert again.eos_token_id == tok.eos_token_id


def test_bare_answers_fall_linearly_with_difficulty():
    cfg = ChainTaskConfig(direct_prob_easy=0.3, direct_prob_hard=0.04)  # min_ops 1, max_ops 8
    assert cfg.direct_prob(1) == 0.3 and cfg.direct_prob(8) == pytest.approx(0.04)
    assert cfg.direct_prob(4) == pytest.approx(0.3 + (3 / 7) * (0.04 - 0.3))  # linear: 0.18857...
    assert cfg.direct_prob(0) == 0.3 and cfg.direct_prob(99) == pytest.approx(0.04)  # clamped to the range
    # the teacher's draws follow it: bare answers on 1-op problems about 0.3, on 8-op problems about 0.04
    easy, hard = make_problem((47, 8), ("+",)), world_splits(ChainTaskConfig()).test[-1]
    rng = random.Random(0)
    share = {p.difficulty: sum(teacher_trace(p, rng, cfg).choices["shortcut"] == "direct" for _ in range(4000)) / 4000
             for p in (easy, hard)}  # fmt: skip
    assert abs(share[1] - 0.3) < 0.025 and abs(share[8] - 0.04) < 0.01, share


@pytest.mark.parametrize("field", ["direct_prob_easy", "direct_prob_hard"])
def test_bare_answer_share_and_merged_share_cannot_exceed_one(field):
    with pytest.raises(ValueError, match=field):
        ChainTaskConfig(**{field: 0.95}, merged_prob=0.1)


@settings(max_examples=60, deadline=None)
@given(p=problems, seed=st.integers(0, 10**6))
def test_a_check_works_its_step_again_on_the_line_below(p, seed):
    """Every check line repeats the operands of the step line above it with the right result."""
    lines = teacher_trace(p, random.Random(seed), CFG, careful=True, shortcut="none", filler=False).text.split("\n")
    for above, line in itertools.pairwise(lines):
        if line.startswith("check "):
            assert above.split("=")[0] == line.removeprefix("check ").split("=")[0]
            assert _arithmetic_true(line), line
