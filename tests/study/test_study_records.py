"""What a study records of its runs: the plan's evaluation in the runs' configs, every resume, the code's commit."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dynashape import cli
from dynashape.cli import commands as cli_commands
from dynashape.io.provenance import code_version
from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.comparison_folder import trained_by
from dynashape.train.config import WarmupConfig
from dynashape.train.run import train
from dynashape.train.run_folder import read_history


def test_a_plans_evaluation_is_in_the_template_without_any_eval_flag():
    """The v2 plan's evaluation (16 samples, 64 on the 40-key subset) reaches the template its runs are made
    from when the command line sets no eval.* field; a command-line eval field still wins."""
    args = cli.build_parser().parse_args(["compare", "--plan", "v2", "--out", "x"])
    template, _ = cli_commands._template(args, COMPARISON_PLAN["v2"])
    registered = dict(COMPARISON_PLAN["v2"].eval)
    assert template.eval.n_samples == registered["n_samples"] == 16
    assert template.eval.passk_samples == 64
    assert template.eval.passk_keys == registered["passk_keys"] and len(template.eval.passk_keys) == 40
    args = cli.build_parser().parse_args(["compare", "--plan", "v2", "--out", "x", "--set", "eval.batch_size=8"])
    template, _ = cli_commands._template(args, COMPARISON_PLAN["v2"])
    assert (template.eval.batch_size, template.eval.n_samples) == (8, 16)
    assert template.warmup == WarmupConfig()  # v2 names no base: the default one


def test_a_plans_base_model_is_in_the_template_under_the_command_lines():
    """The frontier study's warm-up (the budget-tolerant base) reaches its runs' template; --set warmup.* wins."""
    args = cli.build_parser().parse_args(["compare", "--plan", "frontiers", "--out", "x"])
    template, _ = cli_commands._template(args, COMPARISON_PLAN["frontiers"])
    assert template.warmup == WarmupConfig(budget_prompt_share=0.5) and template.eval.n_samples == 16
    args = cli.build_parser().parse_args(["compare", "--plan", "frontiers", "--out", "x", "--set", "warmup.steps=10"])
    template, _ = cli_commands._template(args, COMPARISON_PLAN["frontiers"])
    assert template.warmup == WarmupConfig(budget_prompt_share=0.5, steps=10)


def test_history_records_every_invocation_and_its_code(tiny_config, parity_verifier, tmp_path):
    cfg = tiny_config("grpo", steps=4, checkpoint_every=2)
    train(cfg, tmp_path / "run", progress=False, stop_after=3, verifier=parity_verifier, report=False)
    train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)
    history = read_history(tmp_path / "run")
    assert [h["from_step"] for h in history] == [0, 2]  # killed after step 3, resumed from the step-2 checkpoint
    assert all(h["commit"] == code_version()["commit"] for h in history)
    # and the arithmetic: the CPU and the kernel level torch dispatched to (what moved the v2 seed-5 floats)
    import torch

    assert all(h["cpu_capability"] == torch.backends.cpu.get_cpu_capability() for h in history)
    assert all(h["torch"] == torch.__version__ and h["cpu"] for h in history)
    train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)  # finished: no line
    assert len(read_history(tmp_path / "run")) == 2
    record = trained_by(tmp_path / "run")
    assert record["resumes"] == [2]
    assert len(record["commits"]) == 1


def test_code_version_is_this_checkout_head():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    version = code_version()  # the tests run from the project's checkout (an editable install)
    assert version["commit"] == head and len(head) == 40
    assert isinstance(version["dirty"], bool)


def test_dirty_counts_a_change_anywhere_in_the_package(tmp_path, monkeypatch):
    """A copy of this checkout's package with one edit outside io/ (a shaper) is dirty; unedited, it is not."""
    import shutil

    from dynashape.io import provenance

    repo = tmp_path / "repo"
    src = Path(provenance.__file__).resolve().parents[1]
    shutil.copytree(src, repo / "dynashape", ignore=shutil.ignore_patterns("__pycache__", "*.pt", "*.safetensors"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    monkeypatch.setattr(provenance, "__file__", str(repo / "dynashape" / "io" / "provenance.py"))
    provenance.code_version.cache_clear()
    try:
        assert provenance.code_version()["dirty"] is False
        provenance.code_version.cache_clear()
        (repo / "dynashape" / "shapers" / "recipes.py").write_text("# edited\n")
        assert provenance.code_version()["dirty"] is True
    finally:
        provenance.code_version.cache_clear()


BASE_CACHE = Path(__file__).resolve().parents[2] / "results" / "comparison-v2" / "base-cache"


@pytest.mark.parametrize(
    ("plan", "regime", "method"),
    [("v2", "tight", "grpo"), ("field", "loose", "l1_exact")],
)
def test_compare_plan_through_the_cli_writes_the_registered_evaluation_into_a_runs_config(
    plan, regime, method, tmp_path
):
    """A real `dynashape compare --plan ...` with no eval flag (the as-run v2's command): the config.yaml its first
    run writes has the registered evaluation (16 samples, 64 on the 40-key subset), and the field plan's run its
    preset (L1's budgets in the prompt, scaled to the regime). The base evaluations come from the follow-up's
    committed cache (the same key on any machine), so the run starts within seconds; it is stopped by SIGTERM once
    its config exists (written atomically; the study is resumable; the test needs the file, not the run)."""
    from lock_holder import child_env

    cache = tmp_path / "cache"
    shutil.copytree(BASE_CACHE, cache)
    out = tmp_path / plan
    argv = [sys.executable, "-m", "dynashape.cli", "compare", "--plan", plan, "--methods", method, "--regime", regime]
    argv += ["--seeds", "5,", "--jobs", "1", "--out", str(out), "--cache-dir", str(cache), "--no-progress"]
    config = out / "runs" / regime / f"{method}-seed5" / "config.yaml"
    log = tmp_path / "compare.log"  # a file, not a pipe nobody reads while waiting: the child never blocks on it
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=child_env(), stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600  # Ray's start and the run's model on a busy machine
        while not config.exists():
            assert proc.poll() is None, f"the compare ended before writing a config: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no config after 600 s: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        written = yaml.safe_load(config.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert "base evaluation ready" in log.read_text() and "(new)" in log.read_text()
    registered = dict(COMPARISON_PLAN["v2"].eval)
    assert written["eval"]["n_samples"] == 16 and written["eval"]["passk_samples"] == 64
    assert written["eval"]["passk_keys"] == list(registered["passk_keys"]) and len(registered["passk_keys"]) == 40
    assert written["train"]["shaper"] == method
    if plan == "field":  # L1-Exact at the loose budget 164: 100..4000 of 4096 -> 4..160, eval budgets 512..3600
        assert written["train"]["budget_prompt"]["enabled"] is True
        assert (written["train"]["budget_prompt"]["low"], written["train"]["budget_prompt"]["high"]) == (4, 160)
        assert written["train"]["budget_prompt"]["eval_budgets"] == [21, 41, 82, 144]
