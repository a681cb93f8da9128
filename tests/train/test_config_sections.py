"""TrainConfig's nested sections (drpo, entropy_advantage, overlong, budget_prompt): validation, --set, and old
flat config.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynashape.cli import build_parser
from dynashape.cli.commands import _run_config
from dynashape.train.config import (
    FLAT_TRAIN_KEYS,
    SECTIONS,
    BudgetPromptConfig,
    DrpoConfig,
    EntropyAdvantageConfig,
    OverlongConfig,
    RunConfig,
    TrainConfig,
    train_sections,
)
from dynashape.train.overrides import parse_overrides
from dynashape.train.presets import make_train_config

RUNS = Path(__file__).resolve().parents[2] / "results" / "comparison" / "runs"


def _cfg(*sets: str, method: str = "lead") -> RunConfig:
    argv = ["train", "--method", method]
    for s in sets:
        argv += ["--set", s]
    args = build_parser().parse_args(argv)
    return _run_config(args, args.method, args.seed)


def test_sections_and_their_defaults():
    assert dict(train_sections()) == {
        "overlong": OverlongConfig,
        "entropy_advantage": EntropyAdvantageConfig,
        "drpo": DrpoConfig,
        "budget_prompt": BudgetPromptConfig,
    }
    assert not set(train_sections()) & set(SECTIONS)  # `--set drpo.tau` can never mean a top-level section
    cfg = TrainConfig()
    assert cfg.overlong == OverlongConfig(buffer=10, factor=1.0)
    assert cfg.entropy_advantage == EntropyAdvantageConfig(enabled=False, alpha=0.4, kappa=2.0)
    assert cfg.drpo == DrpoConfig(tau=10.0, lam=0.1, beta=1e3, delta=1e-4)
    assert cfg.budget_prompt == BudgetPromptConfig(enabled=False, form="exact", low=None, high=None, eval_budget=None)
    # off on the command line too: `--set budget_prompt.enabled=true` turns it on, the rest kept
    on = _cfg("budget_prompt.enabled=true", "budget_prompt.eval_budget=50", "shaper=l1_exact", method="grpo")
    assert on.train.budget_prompt == BudgetPromptConfig(enabled=True, eval_budget=50)
    # a mapping of a section's fields is built into the section (presets and config.yaml are plain data)
    assert TrainConfig(drpo={"tau": 5.0}).drpo == DrpoConfig(tau=5.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"drpo": {"tau": 0.0}}, ValueError, r"drpo\.tau must be a finite number > 0, got 0\.0"),
        ({"drpo": {"lam": -1.0}}, ValueError, r"drpo\.lam must be a finite number > 0, got -1\.0"),
        ({"drpo": {"beta": float("nan")}}, ValueError, r"drpo\.beta must be a finite number >= 0, got nan"),
        ({"entropy_advantage": {"kappa": 0.0}}, ValueError, r"entropy_advantage\.kappa must be .* > 0, got 0\.0"),
        ({"entropy_advantage": {"enabled": 1}}, ValueError, r"entropy_advantage\.enabled must be true or false"),
        ({"overlong": {"buffer": 0}}, ValueError, r"overlong\.buffer must be an int >= 1, got 0"),
        ({"overlong": {"factor": -1.0}}, ValueError, r"overlong\.factor must be a finite number >= 0, got -1\.0"),
        ({"overlong": {"buffer": 65}}, ValueError, r"overlong\.buffer must be in \[1, max_new_tokens=64\], got 65"),
        ({"overlong": {"buffr": 4}}, TypeError, r"overlong has no key 'buffr'; its keys: buffer, factor"),
        ({"drpo": 5.0}, ValueError, r"drpo must be a DrpoConfig or a mapping of its fields, got 5\.0"),
    ],
)
def test_section_errors_name_the_field_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        TrainConfig(**kwargs)


def test_set_reaches_train_sections_with_or_without_the_train_prefix():
    cfg = _cfg(
        "drpo.tau=5", "train.drpo.lam=0.2", "overlong.factor=0.5", "entropy_advantage.enabled=true", method="dapo"
    )
    assert cfg.train.drpo == DrpoConfig(tau=5.0, lam=0.2)
    assert isinstance(cfg.train.drpo.tau, float)
    # merged into the preset's section: dapo's buffer (B / 6) stays
    assert cfg.train.overlong == OverlongConfig(buffer=make_train_config("dapo").overlong.buffer, factor=0.5)
    assert cfg.train.entropy_advantage.enabled is True and cfg.train.entropy_advantage.alpha == 0.4
    assert (
        parse_overrides({"train.drpo.tau": 5}) == parse_overrides({"drpo.tau": 5}) == {"train": {"drpo": {"tau": 5.0}}}
    )


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("drpo.taux=1", r"--set drpo\.taux: train\.drpo has no key 'taux'; its keys: tau, lam, beta, delta"),
        ("train.overlong.size=1", r"train\.overlong has no key 'size'; its keys: buffer, factor"),
        ("entropy_advantage=true", r"entropy_advantage is a section; set its keys as entropy_advantage\.KEY=VALUE"),
        ("drpo.tau=hot", r"--set drpo\.tau must be float, got 'hot'"),
        ("overlong.buffer=2.5", r"--set overlong\.buffer must be int, got '2\.5'"),
        ("drpo_tau=5", r"train has no key 'drpo_tau'; its keys: .*overlong.*drpo"),
    ],
)
def test_bad_section_set_names_the_key(item, message):
    with pytest.raises(ValueError, match=message):
        _cfg(item)


def test_cli_help_documents_the_section_form(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    assert "drpo.tau=5" in " ".join(capsys.readouterr().out.split())


# ------------------------------------------------------------------------------------ old flat config.yaml
@pytest.mark.parametrize("run", ["tight/dapo-seed3", "tight/meds-seed0", "tight/drpo-seed1", "loose/lead-seed2"])
def test_a_committed_flat_config_yaml_loads_with_the_same_values(run):
    old = yaml.safe_load((RUNS / run / "config.yaml").read_text())
    t = old["train"]
    assert "overlong_buffer" in t and "overlong" not in t, "this test needs a config.yaml with the flat keys"
    cfg = RunConfig.from_dict(old)
    assert cfg.train.overlong == OverlongConfig(buffer=t["overlong_buffer"], factor=t["overlong_factor"])
    assert cfg.train.entropy_advantage == EntropyAdvantageConfig(
        enabled=t["entropy_advantage"], alpha=t["entropy_adv_alpha"], kappa=t["entropy_adv_kappa"]
    )
    assert cfg.train.drpo == DrpoConfig(
        tau=t["drpo_tau"], lam=t["drpo_lambda"], beta=t["drpo_beta"], delta=t["drpo_delta"]
    )
    new = cfg.to_dict()
    kept = {k: v for k, v in t.items() if k not in FLAT_TRAIN_KEYS and k != "entropy_advantage"}
    assert {k: new["train"][k] for k in kept} == kept  # every other key reads back as written
    for section, written in old.items():  # every other section reads back as written...
        if section != "train":
            got = new[section]
            assert {k: got[k] for k in written} == written if isinstance(written, dict) else got == written
    # ...and a field added since the folder was written takes its default (eval.passk_keys: the world's subset)
    assert new["eval"] == {**RunConfig().to_dict()["eval"], **old["eval"]}
    # the same training the preset makes today (these rows are not tuned)
    assert cfg.train == make_train_config(t["method"], regime=t["regime"], seed=t["seed"])
    assert RunConfig.from_dict(new) == cfg  # and the new layout reads back as itself


def test_a_value_given_flat_and_nested_must_agree():
    data = RunConfig().to_dict()
    data["train"]["drpo_tau"] = 10.0  # the same as the section's: accepted
    assert RunConfig.from_dict(data) == RunConfig()
    data["train"]["drpo_tau"] = 3.0
    with pytest.raises(ValueError, match=r"train\.drpo_tau=3\.0 and train\.drpo\.tau=10\.0 disagree"):
        RunConfig.from_dict(data)


def test_a_committed_flat_run_folder_still_counts_as_finished():
    """The comparison runner skips a finished run of the same job: a folder written with the flat layout is one."""
    from dynashape.study.scheduler import Job, finished_eval

    folder = RUNS / "tight" / "dapo-seed3"
    cfg = RunConfig.from_dict(yaml.safe_load((folder / "config.yaml").read_text()))
    ev = finished_eval(Job("dapo tight seed 3", cfg, folder))
    assert ev is not None and ev["steps"] == cfg.train.steps
    other = RunConfig.from_dict({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "drpo": {"tau": 5.0}}})
    assert finished_eval(Job("dapo tight seed 3", other, folder)) is None
