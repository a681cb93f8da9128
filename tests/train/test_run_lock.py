"""A run folder is trained by one process at a time: ``train`` holds its lock, a second one is refused naming the
holder's pid (the CLI says so in one line and exits 2), and the temporaries of a killed run are removed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dynashape.cli import main
from dynashape.io.state import TMP_PREFIX, FolderBusyError, FolderLock
from dynashape.train.run import train
from dynashape.train.run_folder import RunFolder
from lock_holder import child_env, held_by_another_process

_PROBE = (
    "import sys\n"
    "from dynashape.io.state import FolderBusyError\n"
    "from dynashape.train.run_folder import RunFolder\n"
    "try:\n"
    "    RunFolder(sys.argv[1]).lock().acquire()\n"
    "    print('acquired')\n"
    "except FolderBusyError as err:\n"
    "    print(err)\n"
)


def test_a_running_train_holds_its_folder_and_cleans_what_a_killed_run_left(tiny_config, tmp_path, parity_verifier):
    cfg = tiny_config("grpo", steps=2, checkpoint_every=1)
    run = tmp_path / "run"
    (run / "checkpoints" / ".step_1.tmp123-456").mkdir(parents=True)  # an older writer's killed checkpoint
    (run / "checkpoints" / f"{TMP_PREFIX}step_1.1a2b3c4d").mkdir()
    (run / f"{TMP_PREFIX}eval.json.deadbeef").write_text('{"torn')
    seen: list[str] = []

    def during_a_step(metrics: dict) -> None:
        if seen:
            return
        # a real second process, while this one trains
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, str(run)], capture_output=True, text=True, env=child_env(), timeout=120
        )
        seen.append(probe.stdout.strip() or probe.stderr)
        # and a second train() in this process: refused before it touches anything
        with pytest.raises(FolderBusyError, match="already locked by this process"):
            train(cfg, run, progress=False, verifier=parity_verifier, report=False)

    result = train(cfg, run, progress=False, verifier=parity_verifier, report=False, on_step=during_a_step)
    assert result.eval is not None
    assert seen == [
        f"{run} is in use by another process (pid {os.getpid()}) running a training run (dynashape train); wait for "
        "it to finish or stop it, or use another folder"
    ]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1", "step_2"]
    assert not [p.name for p in run.iterdir() if p.name.startswith(TMP_PREFIX)]
    assert not (run / FolderLock.PID_NAME).exists(), "released at the end"
    with RunFolder(run).lock():
        pass


def test_train_on_a_folder_another_process_holds_is_refused(tiny_config, tmp_path, parity_verifier, capsys):
    cfg = tiny_config("grpo", steps=1)
    run = tmp_path / "run"
    with held_by_another_process(run, "dynashape train") as pid:
        with pytest.raises(FolderBusyError, match=rf"in use by another process \(pid {pid}\)"):
            train(cfg, run, progress=False, verifier=parity_verifier)
        code = main(["train", "--method", "grpo", "--run-dir", str(run), "--no-progress", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"dynashape train: error: {run} is in use by another process")
    assert f"(pid {pid})" in err
    # the refused runs wrote nothing; the killed holder's pid file stays until the next holder replaces it
    assert {p.name for p in run.iterdir()} == {FolderLock.LOCK_NAME, FolderLock.PID_NAME}
    # the holder was killed with SIGKILL: the folder is free again
    train(cfg, run, progress=False, verifier=parity_verifier, report=False)
    assert (run / "eval.json").exists()
