"""Faults a real run survives: SIGTERM / SIGINT to a real ``dynashape train`` process, torn files, bad values."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

TINY = [
    "--method", "grpo", "--warmup-steps", "20", "--eval-samples", "1", "--eval-max-new-tokens", "16",
    "--set", "task.n_train=40", "--set", "task.max_ops=2", "--set", "task.n_test_per_difficulty=1",
    "--set", "task.n_validation_per_difficulty=1", "--set", "model.hidden_size=16", "--set", "model.num_layers=1",
    "--set", "model.num_heads=2", "--set", "model.num_kv_heads=2", "--set", "model.intermediate_size=32",
    "--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=12",
    "--set", "checkpoint_every=0", "--set", "eval.passk_samples=0", "--no-progress",
]  # fmt: skip


def _cli(args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "dynashape.cli", "train", *args, *TINY], env=env, **kw)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_finishes_the_step_saves_a_checkpoint_and_the_rerun_resumes(tmp_path, signum):
    run = tmp_path / "run"
    args = ["--run-dir", str(run), "--cache-dir", str(tmp_path / "cache"), "--steps", "500"]
    proc = _cli(args, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no training step within 240 s"
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    step = len(lines)
    assert [m["step"] for m in lines] == list(range(1, step + 1)) and 2 <= step < 500
    assert f"{signal.Signals(signum).name} received: stopped after step {step}" in err and "resume" in err
    assert (run / "checkpoints" / f"step_{step}" / "meta.json").is_file()
    assert not (run / "eval.json").exists()

    again = _cli([*args[:-1], str(step + 1)], stderr=subprocess.PIPE, text=True)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    ev = json.loads((run / "eval.json").read_text())
    assert (ev["resumed_from"], ev["steps"]) == (step, step + 1)
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == list(range(1, step + 2))


def test_refused_shaper_parameters_write_nothing(tmp_path):
    """A value the shaper refuses is refused before the first file: the corrected rerun is not 'a different
    config'."""
    run = tmp_path / "run"
    args = ["--run-dir", str(run), "--cache-dir", str(tmp_path / "cache"), "--steps", "1"]
    bad = _cli([*args, "--set", "shaper_kwargs.eps=nan"], stderr=subprocess.PIPE, text=True)
    _, err = bad.communicate(timeout=120)
    assert bad.returncode == 2 and "shaper_kwargs of 'grpo'" in err and "eps" in err, err
    assert not run.exists()
    unknown = _cli([*args, "--set", "shaper_kwargs.bogus=1"], stderr=subprocess.PIPE, text=True)
    _, err = unknown.communicate(timeout=120)
    assert unknown.returncode == 2 and "bogus" in err and not run.exists(), err


def test_a_torn_metrics_line_and_a_corrupt_eval_json_are_recovered(tiny_config, parity_verifier, tmp_path, caplog):
    """What a kill or a full disk could leave: the torn last line of metrics.jsonl is dropped with a warning
    (the step is redone from the checkpoint), and an unreadable eval.json is made again, not a dead end."""
    from dynashape.train.run import train

    cfg = tiny_config("grpo", steps=2, checkpoint_every=1)
    run = tmp_path / "run"
    train(cfg, run, progress=False, stop_after=1, verifier=parity_verifier, report=False)
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 2.0, "accur')  # step 2 was being written
    with caplog.at_level("WARNING"):
        done = train(cfg, run, progress=False, verifier=parity_verifier, report=False)
    assert "dropping a torn last line" in caplog.text
    assert done.resumed_from == 1 and [m["step"] for m in done.metrics] == [1.0, 2.0]
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1.0, 2.0]
    (run / "eval.json").write_text('{"method": "grp')
    again = train(cfg, run, progress=False, verifier=parity_verifier, report=False)
    assert again.eval["final"] == done.eval["final"] and json.loads((run / "eval.json").read_text())["steps"] == 2


def test_a_run_closes_its_shaper_on_every_way_out(tiny_config, parity_verifier, tmp_path, monkeypatch):
    """MEDS's refit workers are stopped when a run ends, and when it fails."""
    from dynashape.shapers.meds import MedsShaper
    from dynashape.train.run import train

    closed = []
    monkeypatch.setattr(MedsShaper, "close", lambda self: closed.append(type(self).__name__))
    train(tiny_config("meds", steps=1), tmp_path / "a", progress=False, verifier=parity_verifier, report=False)
    assert closed == ["MedsShaper"]

    def boom(self):
        raise RuntimeError("step failed")

    monkeypatch.setattr("dynashape.train.loop.Trainer.step", boom)
    with pytest.raises(RuntimeError, match="step failed"):
        train(tiny_config("meds", steps=1), tmp_path / "b", progress=False, verifier=parity_verifier, report=False)
    assert closed == ["MedsShaper", "MedsShaper"]


def test_a_torn_config_yaml_is_refused_naming_it(tiny_config, tmp_path):
    """A folder whose config.yaml cannot be read is not silently taken over (its run may be another's)."""
    from dynashape.io.state import StateFileError
    from dynashape.train.run import train

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: {n_train: 4\ntrain: [")
    with pytest.raises(StateFileError, match=r"config\.yaml: is not valid YAML"):
        train(tiny_config("grpo", steps=1), run, progress=False)
    assert (run / "config.yaml").read_text() == "task: {n_train: 4\ntrain: ["  # kept as it was
