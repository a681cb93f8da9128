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


def test_a_whole_replay_gives_the_committed_result_and_names_the_first_step_and_figure_that_move(
    tiny_config, parity_verifier, tmp_path, load_script
):
    replay_whole = load_script("replay_run").replay_whole
    run = tmp_path / "run"
    train(tiny_config("grpo"), run, progress=False, report=False, verifier=parity_verifier)
    same = replay_whole(run, tmp_path / "again", verifier=parity_verifier)
    assert same["first_rollout_difference"] is None
    assert set(same["final"]) == {"accuracy", "mean_length", "truncated_frac", "aes"}
    assert all(committed == here for committed, here in same["final"].values())

    # a committed run whose step 2 sampled otherwise and whose final accuracy was 0.01 higher: both are named
    lines = (run / "metrics.jsonl").read_text().splitlines()
    second = json.loads(lines[1])
    second["length/mean"] += 1.0
    (run / "metrics.jsonl").write_text("\n".join([lines[0], json.dumps(second), *lines[2:]]) + "\n")
    ev = json.loads((run / "eval.json").read_text())
    ev["final"]["accuracy"] += 0.01
    (run / "eval.json").write_text(json.dumps(ev))
    moved = replay_whole(run, tmp_path / "third", verifier=parity_verifier)
    assert moved["first_rollout_difference"] == int(second["step"]) == 2
    committed, here = moved["final"]["accuracy"]
    assert committed == pytest.approx(here + 0.01) and moved["final"]["aes"][0] == moved["final"]["aes"][1]

    (tmp_path / "unfinished").mkdir()
    (run / "config.yaml").rename(tmp_path / "unfinished" / "config.yaml")
    with pytest.raises(ValueError, match=r"run_dir=.*unfinished.* has no eval.json"):
        replay_whole(tmp_path / "unfinished", tmp_path / "fourth")
