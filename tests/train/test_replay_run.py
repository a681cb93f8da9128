"""scripts/replay_run.py: a committed run's first steps trained again give its numbers, and a change is named."""

from __future__ import annotations

import json

import pytest

from dynashape.train.run import train


def test_a_replay_logs_the_committed_numbers_and_names_a_changed_one(
    tiny_config, parity_verifier, tmp_path, load_script
):
    replay = load_script("replay_run").replay
    run = tmp_path / "run"
    train(tiny_config("grpo"), run, progress=False, stop_after=2, report=False, verifier=parity_verifier)
    assert replay(run, tmp_path / "again", 2, verifier=parity_verifier) == []

    # a committed number that this machine does not reproduce is named with its step and key
    lines = (run / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[1])
    key = next(k for k, v in first.items() if isinstance(v, float) and not k.startswith("time/"))
    first[key] += 1e-9
    (run / "metrics.jsonl").write_text("\n".join([lines[0], json.dumps(first), *lines[2:]]) + "\n")
    diffs = replay(run, tmp_path / "third", 2, verifier=parity_verifier)
    assert len(diffs) == 1 and diffs[0].startswith(f"metrics[1]/{key}: ")

    with pytest.raises(ValueError, match=r"steps=9: .* logs only 2 steps"):
        replay(run, tmp_path / "fourth", 9)
    with pytest.raises(ValueError, match=r"scratch=.* is not empty"):
        replay(run, tmp_path / "again", 1)
