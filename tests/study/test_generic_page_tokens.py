"""The generic page's tokens column: means over the seeds that recorded them; absent when no run did."""

from __future__ import annotations

from dynashape.study.generic_page import _row, markdown


def _ev(accuracy, tokens=None):
    ev = {"final": {"accuracy": accuracy, "mean_length": 40.0}, "aes": 0.1}
    if tokens is not None:
        ev["tokens_sampled"] = dict(zip(("prompt", "response", "sampling_rounds"), tokens, strict=True))
    return ev


def test_the_tokens_column_by_hand():
    """dapo's seeds sampled 100,000 + 300,000 tokens in 60 rounds and 120,000 + 500,000 in 80: means 110,000,
    400,000, 70 -> "110.0k + 400.0k (70)"; grpo's runs recorded none -> "n/a"."""
    base = {0: _ev(0.5), 1: _ev(0.6)}
    row = _row("dapo", {0: _ev(0.5, (100_000, 300_000, 60)), 1: _ev(0.6, (120_000, 500_000, 80))}, base)
    assert row["tokens_sampled"] == {"prompt": 110_000, "response": 400_000, "sampling_rounds": 70, "n": 2}
    grpo = _row("grpo", base, base)
    assert "tokens_sampled" not in grpo  # a row of runs without the counts has the JSON it always had
    text = markdown({"study": "s", "baseline": "grpo", "regimes": {"tight": [grpo, row]}}, "x")
    assert "| tokens sampled |" in text.splitlines()[6]
    assert text.splitlines()[9].endswith("| 110.0k + 400.0k (70) |")
    assert text.splitlines()[8].endswith("| (baseline) | n/a |")


def test_a_page_of_runs_without_counts_has_no_tokens_column():
    base = {0: _ev(0.5)}
    text = markdown({"study": "s", "baseline": "grpo", "regimes": {"tight": [_row("grpo", base, base)]}}, "x")
    assert "tokens" not in text
