"""The end-to-end SkyRL test's assets: a tiny fitted policy and SkyRL's prompt parquet (test-local).

The policy is the verl end-to-end test's (tests/integrations/tiny_policy.py): a 2-layer Qwen2 (hidden 64) with
SmolLM2's real BPE tokenizer and chat template, fitted for a few seconds, here to end its answer the way
skyrl-gym's ``gsm8k`` environment scores it (``#### 3`` or ``#### 4``, after a varying preamble: mixed verdicts
and lengths).
"""

from __future__ import annotations

from pathlib import Path

QUESTIONS = [
    ("What is 1 + 2?", "3"),
    ("What is 2 + 2?", "4"),
    ("What is 6 - 3?", "3"),
    ("What is 8 - 4?", "4"),
    ("What is 1 * 3?", "3"),
    ("What is 2 * 2?", "4"),
    ("What is 0 + 3?", "3"),
    ("What is 5 - 1?", "4"),
]


def fit_policy(out: Path) -> None:
    """The shared tiny policy (tests/integrations/tiny_policy.py), ending its answers as skyrl-gym's gsm8k reads."""
    from tiny_policy import fit_tiny_policy  # tests/integrations is on the path of every test module here

    fit_tiny_policy(out, QUESTIONS, lambda digit: f"#### {digit}")


def write_data(path: Path) -> None:
    """SkyRL's prompt dataset: chat messages, the environment class and its reward spec per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "prompt": [{"role": "user", "content": q}],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": a},
        }
        for q, a in QUESTIONS
    ]
    pq.write_table(pa.Table.from_pylist(rows), str(path))
