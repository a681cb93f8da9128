"""A newcomer's mistakes, each typed as a real ``dynashape`` process: refused with exit 2 in one line that names
the path or flag, with no traceback and nothing written (no lock, no config.yaml, no cache, no results folder);
then the corrected command is accepted. Last, ``dynashape export`` feeds ``dynashape evaluate``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lock_holder import child_env

# small settings that keep each corrected run to seconds
TRAIN_SMALL = ["--steps", "1", "--eval-samples", "1", "--eval-max-new-tokens", "4", "--set", "eval.max_problems=2"]
REAL_SMALL = [
    "--set",
    "prompts_per_step=2",
    "--set",
    "group_size=2",
    "--set",
    "max_new_tokens=8",
    "--set",
    "overlong.buffer=2",
]
EVAL_SMALL = ["--data", "good.jsonl", "--protocol", "custom", "--samples", "1", "--max-new-tokens", "4"]
EVAL_SMALL += ["--backend", "transformers", "--no-plots", "--no-progress"]


def _cli(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = child_env() | {"DYNASHAPE_CACHE": str(work / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "dynashape.cli", *args], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )


def _tree(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``, with a hash of each file's bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(root.rglob("*"))
    }


def _refused(work: Path, args: list[str], message: str) -> str:
    """Run a mistake; assert exit 2, one line holding ``message``, no traceback, and ``work`` unchanged."""
    before = _tree(work)
    done = _cli(work, *args)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[0].startswith(f"dynashape {args[0]}: error: ") and message in lines[0], lines[0]
    assert _tree(work) == before, "a refused command wrote something"
    return lines[0]


def _accepted(work: Path, args: list[str]) -> subprocess.CompletedProcess:
    done = _cli(work, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_llama_dir):
    """A working folder as a newcomer has it: a good and a bad data file, an empty folder, a train run folder with
    a checkpoint (as ``dynashape train`` lays it out), and a real (tiny) Hugging Face model."""
    import shutil

    root = tmp_path_factory.mktemp("newcomer")
    rows = [{"problem": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(1, 9)]
    (root / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "noanswer.jsonl").write_text(json.dumps({"problem": "1 + 1?"}) + "\n")
    (root / "empty").mkdir()
    step = root / "oldrun" / "checkpoints" / "step_3"
    step.mkdir(parents=True)
    (root / "oldrun" / "config.yaml").write_text("train: {}\n")
    for name in ("model.pt", "optimizer.pt", "state.pt", "meta.json"):
        (step / name).write_text("")
    shutil.copytree(tiny_llama_dir, root / "model")
    return root


NOT_A_MODEL = "expected a Hugging Face model folder (config.json, model.safetensors, tokenizer.json)"

TRAIN_MISTAKES = {
    "a model path that does not exist": (
        ["--model", "nope-model/"],
        f"--model 'nope-model/': no such folder; {NOT_A_MODEL}",
    ),
    "an empty folder as the model": (["--model", "empty"], f"--model 'empty': has no config.json; {NOT_A_MODEL}"),
    "a train run folder as the model": (
        ["--model", "oldrun"],
        "--model 'oldrun': is a dynashape train run folder; make a model folder of it with: "
        "dynashape export oldrun OUT",
    ),
    "a train checkpoint as the model": (
        ["--model", "oldrun/checkpoints/step_3"],
        "is a dynashape train checkpoint; make a model folder of it with: dynashape export oldrun OUT --step 3",
    ),
    "a data file that does not exist": (["--data", "nope.jsonl"], "--data 'nope.jsonl': no such file"),
    "a data file without answers": (["--data", "noanswer.jsonl"], "noanswer.jsonl: line 1 has no gold answer"),
    "zero evaluation samples": (["--eval-samples", "0"], "--eval-samples must be >= 1, got 0"),
    "a shaper parameter that does not exist": (["--set", "shaper_kwargs.nope=1"], "shaper_kwargs of 'lead'"),
    "a misspelt method": (["--method", "leed"], "unknown method 'leed'"),
}


@pytest.mark.parametrize("case", sorted(TRAIN_MISTAKES))
def test_a_train_mistake_is_refused_in_one_line_and_writes_nothing(work, case):
    args, message = TRAIN_MISTAKES[case]
    # the mistake last: argparse keeps an option's last value
    _refused(work, ["train", *TRAIN_SMALL, "--run-dir", "runs/lead-seed0", "--no-progress", *args], message)


EVALUATE_MISTAKES = {
    "an empty folder as the model": (["--model", "empty"], f"--model 'empty': has no config.json; {NOT_A_MODEL}"),
    "a train checkpoint as the model": (
        ["--model", "oldrun/checkpoints/step_3"],
        "dynashape export oldrun OUT --step 3",
    ),
    "an empty folder as the base": (
        ["--model", "model", "--base", "empty"],
        "--base 'empty': neither a results folder of dynashape evaluate (with results.json) nor a model folder",
    ),
    "a train key in --set": (
        ["--model", "model", "--set", "nonsense=1"],
        "--set nonsense: dynashape evaluate takes prompt.",
    ),
    "a benchmark that does not exist": (["--model", "model", "--data", "nope.jsonl"], "--data 'nope.jsonl'"),
}


@pytest.mark.parametrize("case", sorted(EVALUATE_MISTAKES))
def test_an_evaluate_mistake_is_refused_in_one_line_and_writes_nothing(work, case):
    args, message = EVALUATE_MISTAKES[case]
    _refused(work, ["evaluate", *EVAL_SMALL, "--out", "evals/first", *args], message)


def test_a_compare_mistake_is_refused_before_comparison_json(work):
    _refused(
        work, ["compare", "--methods", "lead", "--model", "nope", "--out", "cmp"], "--model 'nope': no such folder"
    )
    _refused(work, ["compare", "--methods", "lead,leed", "--out", "cmp"], "unknown method 'leed'")


def test_corrected_commands_are_accepted_and_a_refused_resume_names_what_differs(work):
    # the model and data mistakes, corrected: a real model folder and a data file with answers
    _accepted(
        work,
        [
            "train",
            "--model",
            "model",
            "--data",
            "good.jsonl",
            *REAL_SMALL,
            *TRAIN_SMALL,
            "--run-dir",
            "real",
            "--no-progress",
        ],
    )
    assert json.loads((work / "real" / "eval.json").read_text())["steps"] == 1
    # the evaluation and shaper mistakes, corrected: the default toy run
    toy = ["train", *TRAIN_SMALL, "--run-dir", "runs/lead-seed0", "--no-progress"]
    _accepted(work, toy)
    # a changed setting on the same folder: refused before the lock, naming the field with old and new values
    line = _refused(work, [*toy, "--set", "lr=0.5"], "runs/lead-seed0/config.yaml: holds another run (train.lr: ")
    assert "-> 0.5" in line and "use a new --run-dir" in line
    _accepted(work, toy)  # the old settings are accepted again (the run is finished: it reports)

    # evaluate: the corrected command, then a base results folder with other settings is refused before sampling
    _accepted(work, ["evaluate", *EVAL_SMALL, "--model", "model", "--out", "evals/first"])
    line = _refused(
        work,
        [
            "evaluate",
            *EVAL_SMALL,
            "--model",
            "model",
            "--base",
            "evals/first",
            "--temperature",
            "0.5",
            "--out",
            "evals/2",
        ],
        "--base 'evals/first': its results ran with other settings (temperature: 1.0 there, 0.5 here)",
    )
    _accepted(work, ["evaluate", *EVAL_SMALL, "--model", "model", "--base", "evals/first", "--out", "evals/2"])


def test_export_feeds_evaluate_and_transformers(work):
    """The run's newest checkpoint as a model folder: transformers loads the trained weights, evaluate reads it."""
    import torch
    from transformers import AutoModelForCausalLM

    from dynashape.train import checkpoint as ckpt

    run = work / "runs" / "lead-seed0"
    if not (run / "eval.json").exists():  # run alone: train the toy run first
        _accepted(work, ["train", *TRAIN_SMALL, "--run-dir", str(run.relative_to(work)), "--no-progress"])
    _refused(work, ["export", "runs/lead-seed0", "exported", "--step", "9"], "--step 9: runs/lead-seed0 has no such")
    _refused(work, ["export", "empty", "exported"], "'empty': not a dynashape train run folder")
    _accepted(work, ["export", "runs/lead-seed0", "exported"])
    exported = work / "exported"
    assert json.loads((exported / "export.json").read_text())["step"] == 1
    assert (exported / "model.safetensors").stat().st_mode & 0o044 == 0o044, "readable by others, as the umask says"
    model = AutoModelForCausalLM.from_pretrained(str(exported), local_files_only=True)
    newest = ckpt.latest_checkpoint(run / "checkpoints")
    trained = torch.load(newest / "model.pt", weights_only=True)
    assert set(trained) <= set(model.state_dict())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in trained.items())
    done = _accepted(work, ["evaluate", *EVAL_SMALL, "--model", "exported", "--out", "evals/exported"])
    results = json.loads((work / "evals" / "exported" / "results.json").read_text())
    assert results["model"] == str(exported.resolve()) and results["benchmarks"]["good"]["n_problems"] == 8
    assert "unweighted over 1 benchmark)" in done.stdout


def test_compare_without_ray_writes_nothing(tmp_path, monkeypatch):
    """Ray missing is said before the comparison folder, its lock or comparison.json exist."""
    import importlib.util

    from dynashape.study.compare import run_comparison
    from dynashape.train.config import RunConfig

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(RuntimeError, match=r"Ray is not installed: pip install 'dynashape\[study\]'"):
        run_comparison(tmp_path / "cmp", rows={"tight": ["grpo"]}, seeds=[0], template=RunConfig(), tune=False)
    assert not (tmp_path / "cmp").exists()
