"""dynashape evaluate's pure parts: the protocols' settings against the spec, avg@n / pass@k / AES on fixed
verdicts computed by hand, the overall row, the cache, and the errors bad input gets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dynashape.evaluate.cache import GenerationCache
from dynashape.evaluate.protocols import canonical_benchmark, get_protocol
from dynashape.evaluate.results import add_aes, aes_or_none, summarise, summarise_benchmark


def test_protocols_are_the_specs():
    """spec baselines.md: LEAD = Sober Reasoning (T 0.8, top-p 0.9, avg@10 on AIME24/25 and AMC23, avg@3 on
    MATH-500 and OlympiadBench); MEDS = pass@k up to 128 at T 1.0, top-p 1.0; custom = T 1.0, top-p 1.0."""
    lead = get_protocol("lead")
    assert (lead.temperature, lead.top_p) == (0.8, 0.9)
    for name, n in [("aime24", 10), ("AIME_2024", 10), ("aime-2025", 10), ("amc23", 10), ("AMC2023_test", 10),
                    ("math500", 3), ("OlympiadBench", 3), ("gsm8k", 3)]:  # fmt: skip
        assert lead.samples_for(name) == n, name
    meds = get_protocol("meds")
    assert (meds.temperature, meds.top_p, meds.samples_for("math500"), meds.eigen_ratio) == (1.0, 1.0, 128, True)
    custom = get_protocol("custom")
    assert (custom.temperature, custom.top_p, custom.eigen_ratio) == (1.0, 1.0, False)
    # --samples N means N on every benchmark, the named ones included; None keeps the protocol's value
    five = lead.with_overrides(samples=5, temperature=None)
    assert (five.samples_for("aime24"), five.samples_for("gsm8k"), five.temperature) == (5, 5, 0.8)
    assert canonical_benchmark("Olympiad_Bench") == "olympiadbench" and canonical_benchmark("My Set") == "myset"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"samples": 0}, "samples"),
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_bad_settings_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        get_protocol("lead").with_overrides(**change)


def test_unknown_protocol_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"lead, meds, custom, got 'sober'"):
        get_protocol("sober")


def _records(verdicts, lengths, truncated=None, fingerprints=None):
    out = []
    for i, row in enumerate(verdicts):
        for j, c in enumerate(row):
            r = {"problem_id": f"p{i}", "sample": j, "correct": bool(c), "length": lengths[i][j],
                 "truncated": bool(truncated[i][j]) if truncated else False}  # fmt: skip
            if fingerprints is not None:
                r["fingerprint"] = fingerprints[i][j]
            out.append(r)
    return out


def test_avg_at_n_and_pass_at_k_by_hand():
    # p0: 2 of 4 right, p1: 1 of 4.  avg@4 = 3/8.
    # pass@2 = 1 - C(n-c, 2) / C(4, 2): p0 1 - 1/6 = 5/6, p1 1 - 3/6 = 1/2; mean 2/3.  pass@4 = 1 for both.
    recs = _records([[1, 0, 1, 0], [0, 0, 0, 1]], [[10, 20, 30, 40], [5, 5, 5, 5]],
                    truncated=[[0, 0, 0, 1], [0, 0, 0, 0]])  # fmt: skip
    out = summarise_benchmark(recs, ["p0", "p1"], 4)
    assert out["accuracy"] == pytest.approx(3 / 8)
    assert out["pass_at_k"] == pytest.approx({"1": 3 / 8, "2": 2 / 3, "4": 1.0})
    assert out["mean_length"] == pytest.approx(120 / 8) and out["truncation_rate"] == pytest.approx(1 / 8)
    assert (out["n_problems"], out["n_samples"]) == (2, 4)
    with pytest.raises(ValueError, match="sample 3 of problem 'p1' is missing"):
        summarise_benchmark(recs[:-1], ["p0", "p1"], 4)


def test_aes_by_hand_and_a_base_that_solves_nothing():
    # dL = (100 - 80) / 100 = 0.2; gain dA = (0.5 - 0.4) / 0.4 = 0.25 -> 0.2 + 3 * 0.25 = 0.95
    assert aes_or_none(0.5, 80, 0.4, 100)["value"] == pytest.approx(0.95)
    # loss dA = (0.3 - 0.4) / 0.4 = -0.25 -> 0.2 - 5 * 0.25 = -1.05
    assert aes_or_none(0.3, 80, 0.4, 100)["value"] == pytest.approx(-1.05)
    assert aes_or_none(0.0, 120, 0.0, 100)["value"] == pytest.approx(-0.2)  # no accuracy change: the length term
    assert aes_or_none(0.1, 80, 0.0, 100) is None  # a relative gain over 0 is undefined


def test_overall_is_the_unweighted_mean_and_aes_is_reported_both_ways():
    a = {"accuracy": 0.5, "mean_length": 80.0, "truncation_rate": 0.0, "pass_at_k": {"1": 0.5, "2": 0.7}}
    b = {"accuracy": 0.1, "mean_length": 200.0, "truncation_rate": 0.5, "pass_at_k": {"1": 0.1}}
    overall = summarise({"a": a, "b": b})
    assert overall["accuracy"] == pytest.approx(0.3) and overall["mean_length"] == pytest.approx(140.0)
    assert overall["pass_at_k"] == pytest.approx({"1": 0.3})  # only the ks every benchmark has
    base_a = {"accuracy": 0.4, "mean_length": 100.0, "truncation_rate": 0.0, "pass_at_k": {"1": 0.4}}
    base_b = {"accuracy": 0.2, "mean_length": 200.0, "truncation_rate": 0.0, "pass_at_k": {"1": 0.2}}
    base = {"benchmarks": {"a": base_a, "b": base_b}, "overall": summarise({"a": base_a, "b": base_b})}
    res = add_aes({"benchmarks": {"a": dict(a), "b": dict(b)}, "overall": overall}, base)
    assert res["benchmarks"]["a"]["aes"]["value"] == pytest.approx(0.95)
    assert res["benchmarks"]["b"]["aes"]["value"] == pytest.approx(0.0 - 5 * 0.5)  # dL 0, dA -0.5
    # on averages: A 0.3 vs 0.3 (dA 0), L 140 vs 150 (dL 1/15)
    assert res["overall"]["aes"]["value"] == pytest.approx(1 / 15)
    assert res["overall"]["aes_mean_over_benchmarks"] == pytest.approx((0.95 - 2.5) / 2)
    assert res["overall"]["aes_constants"] == {"alpha": 1.0, "beta": 3.0, "gamma": 5.0}


def test_eigen_ratio_of_the_wrong_answers_fingerprints():
    from dynashape.world.measures import wrong_eigen_ratio

    rng = np.random.default_rng(0)
    fps = rng.normal(size=(2, 3, 4)).tolist()
    fps[0][2] = None  # a wrong answer without a boxed answer: no fingerprint
    recs = _records([[1, 0, 0], [0, 0, 1]], [[1, 1, 1], [1, 1, 1]], fingerprints=fps)
    out = summarise_benchmark(recs, ["p0", "p1"], 3, eigen_ratio=True)
    wrong = np.array([fps[0][1], fps[1][0], fps[1][1]])  # right answers' fingerprints are left out
    assert out["fingerprinted_wrong"] == 3
    assert out["eigen_ratio"] == pytest.approx(wrong_eigen_ratio(wrong))
    none = summarise_benchmark(_records([[0]], [[1]], fingerprints=[[None]]), ["p0"], 1, eigen_ratio=True)
    assert none["eigen_ratio"] is None and none["fingerprinted_wrong"] == 0


def test_cache_survives_a_torn_line_and_ignores_other_settings(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = GenerationCache(path, "k1")
    rec = {"benchmark": "b", "problem_id": "0", "sample": 0, "text": "é \\boxed{1}", "correct": True}
    cache.append([rec])
    GenerationCache(path, "other").append([{**rec, "sample": 1}])
    with path.open("a") as f:
        f.write('{"key": "k1", "benchmark": "b", "problem_id": "0", "sam')  # killed mid-write
    cache.append([{**rec, "sample": 2}])  # starts on a line of its own
    loaded = cache.load()
    assert sorted(loaded) == [("b", "0", 0), ("b", "0", 2)]
    assert loaded[("b", "0", 0)]["text"] == "é \\boxed{1}"
    assert len(path.read_text(encoding="utf-8").splitlines()) == 4


def test_data_errors_name_the_field_and_value(tmp_path):
    from dynashape.evaluate.benchmarks import parse_data

    with pytest.raises(ValueError, match=r"--data 'nope.jsonl': not a file nor a named benchmark"):
        parse_data("nope.jsonl")
    bad = tmp_path / "AIME_2024.jsonl"
    bad.write_text(json.dumps({"question_text": "1+1?", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1 has no problem text in \['problem'"):
        parse_data(str(bad))
    bad.write_text(json.dumps({"problem": "1+1?"}) + "\n")
    with pytest.raises(ValueError, match="line 1 has no gold answer"):
        parse_data(str(bad))
    good = tmp_path / "AIME_2024.jsonl"
    good.write_text("".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1), "id": f"q{i}"}) + "\n"
                            for i in range(3)))  # fmt: skip
    (bench,) = parse_data(str(good))
    assert bench.name == "AIME_2024" and [p.problem_id for p in bench.problems] == ["q0", "q1", "q2"]
    assert get_protocol("lead").samples_for(bench.name) == 10
    with pytest.raises(ValueError, match="same name"):
        parse_data(f"{good},{good}")
