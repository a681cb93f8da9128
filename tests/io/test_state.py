"""dynashape.io.state: atomic writes keep the old file on failure, safe loads name the file, the folder lock."""

from __future__ import annotations

import json
import os
import pickle
import re
import stat

import pytest
import torch

from dynashape.io import state
from lock_holder import child_env, held_by_another_process, start_holder, stop_holder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


class _FailsToSerialise:
    """An object whose serialisation raises part-way through a write."""

    def __reduce__(self):
        raise RuntimeError("cannot serialise this")


class _RunsCode:
    """Unpickling this would call os.system: what a tampered state file could do. It must never be unpickled."""

    def __reduce__(self):
        return (os.system, ("exit 0",))


# ------------------------------------------------------------------------------------------------- writes
def test_writes_replace_the_file_and_leave_nothing_beside_it(tmp_path):
    path = tmp_path / "sub" / "a.json"
    state.write_json(path, {"x": [1, 2]})
    assert json.loads(path.read_text()) == {"x": [1, 2]} and path.read_text().endswith("\n")
    state.write_text(path, "second")
    assert path.read_text() == "second"
    state.write_bytes(path, b"\x00third")
    assert path.read_bytes() == b"\x00third"
    state.torch_save(path, {"t": torch.arange(3)})
    assert torch.equal(state.torch_load(path, expect=dict)["t"], torch.arange(3))
    assert _names(path.parent) == ["a.json"]
    # an ordinary file's permissions (the umask's), not a private temporary file's 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()


def test_a_torch_save_that_fails_midway_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.pt"
    state.torch_save(path, {"step": 1})
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="cannot serialise"):
        state.torch_save(path, {"weights": torch.ones(1000), "bad": _FailsToSerialise()})
    assert path.read_bytes() == before
    assert _names(tmp_path) == ["state.pt"], "no temporary file left behind"


def test_a_write_whose_bytes_fail_midway_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "eval.json"
    state.write_json(path, {"old": True})
    before = path.read_bytes()

    def failing_fsync(fd: int) -> None:  # the bytes are written, the disk refuses them
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        state.write_json(path, {"new": True})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _names(tmp_path) == ["eval.json"]


def test_write_json_refuses_what_json_cannot_hold_before_touching_the_file(tmp_path):
    path = tmp_path / "a.json"
    state.write_json(path, {"old": 1})
    for bad in ({"x": float("nan")}, {"x": object()}):
        with pytest.raises((ValueError, TypeError)):
            state.write_json(path, bad)
    assert json.loads(path.read_text()) == {"old": 1} and _names(tmp_path) == ["a.json"]


def test_a_failed_replace_removes_its_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    state.write_text(path, "old")

    def failing_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(PermissionError):
        state.write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and _names(tmp_path) == ["a.txt"]


# --------------------------------------------------------------------------------------------------- reads
@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot be read"), (b"", "is empty"), (b'{"step": 3, "met', "is not JSON"), (b"\xff\xfe\x00", "UTF-8")],
)
def test_read_json_failures_are_state_file_errors_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "eval.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(state.StateFileError, match=rf"^{re.escape(str(path))}: .*{problem}") as err:
        state.read_json(path)
    assert err.value.path == str(path) and isinstance(err.value, ValueError)


def test_read_yaml_refuses_a_torn_file_and_never_builds_objects(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("train: {steps: 3\n")
    with pytest.raises(state.StateFileError, match=rf"^{re.escape(str(path))}: is not valid YAML"):
        state.read_yaml(path)
    path.write_text("!!python/object/apply:os.system ['exit 0']\n")
    with pytest.raises(state.StateFileError, match="is not valid YAML"):
        state.read_yaml(path)
    path.write_text("")
    assert state.read_yaml(path) is None


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_torch_load_refuses_a_file_that_needs_arbitrary_unpickling(tmp_path, writer):
    path = tmp_path / "state.pt"
    payload = {"step": 1, "evil": _RunsCode()}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(payload, f)
    with pytest.raises(state.StateFileError, match=rf"^{re.escape(str(path))}: .*arbitrary unpickling") as err:
        state.torch_load(path, expect=dict)
    assert "weights_only` set to `False`" not in str(err.value), "never advise turning the protection off"
    if writer == "torch.save":  # the refused global is named
        assert "would need arbitrary unpickling" in str(err.value) and "system" in str(err.value)


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing", "folder", "garbage", "list"])
def test_torch_load_names_the_file_of_every_failure(tmp_path, damage):
    path = tmp_path / "model.pt"
    state.torch_save(path, {"w": torch.randn(64, 64)})
    raw = path.read_bytes()
    problem = {
        "truncated": "truncated or corrupt",
        "empty": "is empty",
        "missing": "does not exist",
        "folder": "is a folder",
        "garbage": "(truncated or corrupt|is corrupt or not a plain file)",
        "list": "holds a list, expected a dict",
    }[damage]
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "missing":
        path.unlink()
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    elif damage == "garbage":
        path.write_bytes(os.urandom(4096))
    else:
        torch.save([1, 2], path)
    with pytest.raises(state.StateFileError, match=rf"^{re.escape(str(path))}: .*{problem}") as err:
        state.torch_load(path, expect=dict)
    assert err.value.path == str(path)


# -------------------------------------------------------------------------------------------------- folders
def test_atomic_folder_renames_a_complete_folder_into_place(tmp_path):
    target = tmp_path / "ckpt" / "step_1"
    with state.atomic_folder(target) as tmp:
        assert tmp.name.startswith(state.TMP_PREFIX) and tmp.parent == target.parent
        state.write_text(tmp / "a.txt", "a")
        (tmp / "b.txt").write_text("written by someone else")  # fsynced by atomic_folder before the rename
        assert not target.exists()
    assert _names(target) == ["a.txt", "b.txt"] and _names(target.parent) == ["step_1"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~_umask()


def test_atomic_folder_leaves_nothing_when_the_body_fails(tmp_path):
    with pytest.raises(RuntimeError, match="killed"):
        with state.atomic_folder(tmp_path / "out") as tmp:
            state.write_text(tmp / "half.txt", "half")
            raise RuntimeError("killed")
    assert _names(tmp_path) == []


def test_atomic_folder_refuses_an_existing_folder_and_one_that_appears_meanwhile(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "theirs").write_text("theirs")
    with pytest.raises(FileExistsError):
        with state.atomic_folder(full):
            pytest.fail("the body must not run")
    late = tmp_path / "late"
    with pytest.raises(FileExistsError, match="appeared meanwhile"):
        with state.atomic_folder(late) as tmp:
            state.write_text(tmp / "ours", "ours")
            late.mkdir()
            (late / "theirs").write_text("theirs")  # another process renamed its folder into place first
    assert _names(late) == ["theirs"]
    assert _names(tmp_path) == ["full", "late"], "our temporary folder is gone"
    empty = tmp_path / "empty"
    empty.mkdir()
    with state.atomic_folder(empty) as tmp:  # an empty folder is replaced
        state.write_text(tmp / "ours", "ours")
    assert _names(empty) == ["ours"]


def test_remove_stale_temporaries_removes_only_temporaries(tmp_path):
    (tmp_path / f"{state.TMP_PREFIX}eval.json.1a2b3c4d").write_text("torn")
    (tmp_path / f"{state.TMP_PREFIX}step_3.deadbeef").mkdir()
    (tmp_path / ".step_2.tmp99-123").mkdir()
    (tmp_path / "eval.json").write_text("{}")
    (tmp_path / "step_2").mkdir()
    removed = state.remove_stale_temporaries(tmp_path, also=(".step_*.tmp*",))
    assert sorted(p.name for p in removed) == [".step_2.tmp99-123", ".tmp-eval.json.1a2b3c4d", ".tmp-step_3.deadbeef"]
    assert _names(tmp_path) == ["eval.json", "step_2"]
    assert state.remove_stale_temporaries(tmp_path / "missing") == []


# ----------------------------------------------------------------------------------------------------- lock
def test_a_lock_held_by_another_process_is_refused_naming_its_pid_until_it_is_killed(tmp_path):
    folder = tmp_path / "run"
    holder = start_holder(folder, "a training run")
    try:
        lock = state.FolderLock(folder, what="a second run")
        with pytest.raises(state.FolderBusyError, match=rf"in use by another process \(pid {holder.pid}\)") as err:
            lock.acquire()
        assert err.value.pid == holder.pid and err.value.folder == str(folder)
        assert isinstance(err.value, RuntimeError) and not lock.held
        assert (folder / state.FolderLock.PID_NAME).read_text().strip() == str(holder.pid)
        lock.release()  # not held: a no-op that must not remove the holder's pid file
        assert (folder / state.FolderLock.PID_NAME).exists()
    finally:
        stop_holder(holder)  # kill -9: no clean-up runs in the holder
    with state.FolderLock(folder) as lock:  # the operating system released the dead holder's lock
        assert lock.held
        assert (folder / state.FolderLock.PID_NAME).read_text().strip() == str(os.getpid())
    assert not (folder / state.FolderLock.PID_NAME).exists()


def test_a_lock_held_here_refuses_another_process(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "run"
    probe = (
        "import sys\nfrom dynashape.io.state import FolderLock, FolderBusyError\n"
        "try:\n    FolderLock(sys.argv[1]).acquire()\nexcept FolderBusyError as err:\n    print(err)\n"
    )
    with state.FolderLock(folder):
        out = subprocess.run(
            [sys.executable, "-c", probe, str(folder)], capture_output=True, text=True, env=child_env()
        )
    assert f"in use by another process (pid {os.getpid()})" in out.stdout, out.stderr


def test_the_lock_is_reentrant_for_its_holder_and_refuses_a_second_lock_object(tmp_path):
    lock = state.FolderLock(tmp_path, what="a run")
    with lock:
        with lock:  # the same object: reentrant
            assert lock.held
        assert lock.held and (tmp_path / state.FolderLock.PID_NAME).exists()
        with pytest.raises(state.FolderBusyError, match=rf"already locked by this process \(pid {os.getpid()}\)"):
            state.FolderLock(tmp_path).acquire()
    assert not lock.held and not (tmp_path / state.FolderLock.PID_NAME).exists()


def test_holder_helper_releases_on_exit(tmp_path):
    with held_by_another_process(tmp_path) as pid:
        assert pid != os.getpid()
    with state.FolderLock(tmp_path):
        pass


def test_the_state_errors_survive_pickling_as_a_process_pool_or_ray_sends_them(tmp_path):
    """Rebuilt from their fields: the default pickling called __init__ with the message alone, so a run's
    FolderBusyError reached the study's driver as Ray's 'failed to deserialize'."""
    import pickle

    from dynashape.meds.memory import MemoryFileError
    from dynashape.train.checkpoint import ForeignCheckpointError
    from dynashape.train.signals import RunInterrupted, StudyInterrupted

    errors = [
        state.FolderBusyError(tmp_path, 4321, "a training run"),
        state.StateFileError(tmp_path / "x.json", "not JSON"),
        state.StateFileError(None, "a bare problem"),
        MemoryFileError(tmp_path / "m.pt", "truncated"),
        ForeignCheckpointError(tmp_path / "step_2", "another run's config"),
        RunInterrupted(tmp_path, 3, 15),
        StudyInterrupted(2, finished=4, cancelled=1),
    ]
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
        assert {k: v for k, v in vars(back).items()} == vars(err)


def test_append_text_ends_a_torn_line_before_appending(tmp_path):
    path = tmp_path / "new" / "log.jsonl"
    state.append_text(path, '{"a": 1}\n')
    with path.open("ab") as f:  # a kill mid-append leaves a line without its newline
        f.write(b'{"b": ')
    state.append_text(path, '{"c": 3}\n')
    state.append_text(path, "")
    assert path.read_text().splitlines() == ['{"a": 1}', '{"b": ', '{"c": 3}']


def test_save_figure_replaces_atomically_and_keeps_the_old_image_on_failure(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = tmp_path / "plot.png"
    state.save_figure(fig, path, dpi=50)
    first = path.read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"

    class Broken:
        def savefig(self, handle, **kw):
            handle.write(b"half")
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        state.save_figure(Broken(), path)
    assert path.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]  # no temporary left beside it
    plt.close(fig)


def test_make_folder_and_rename_aside(tmp_path):
    folder = state.make_folder(tmp_path / "a" / "b")
    assert folder.is_dir() and state.make_folder(folder) == folder
    (folder / "x").write_text("kept")
    moved = state.rename_aside(folder, ".broken-b")
    assert moved == tmp_path / "a" / ".broken-b" and (moved / "x").read_text() == "kept" and not folder.exists()
