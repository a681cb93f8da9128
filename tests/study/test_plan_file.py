"""A study is a data file: the committed studies' files give today's plans, and every key of a file is checked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dynashape.study.compare import BEST_GLOBAL, ComparisonPlan, RunSpec
from dynashape.study.plan_file import StudyFileError, committed_plans, load_plan_file, parse_plan, studies_dir
from dynashape.train.presets import make_train_config


def _code_built_plans() -> dict[str, ComparisonPlan]:
    """The three plans as the code built them before they became files (study/compare.py at commit 007d0ca, its
    constants written out here): the files must say the same (their claims: ``test_the_files_claims_...``)."""
    frozen = json.loads((studies_dir() / "v2-frozen.json").read_text())
    V2_EVAL = {"n_samples": 16, "passk_samples": 64, "passk_keys": tuple(frozen["subset"]["keys"])}
    from dynashape.train.field_presets import FIELD_METHODS, FIELD_SEEDS

    lead_family = (
        "grpo", "grpo_length", "gdpo", "shorterbetter", "drpo", "lead", "lead_static", "lead_min_correct",
        "lead_mean_all", "lead_upper_only", "cosine", "kimi_length", "pass_rate_linear", "length_zscore",
    )  # fmt: skip
    meds_family = ("dapo", "meds", "meds_single_cluster", "lead_meds")
    full = ComparisonPlan(
        rows={
            "tight": lead_family + meds_family,
            "loose": ("grpo", "lead", "lead_static", "shorterbetter", BEST_GLOBAL),
        }
    )
    v2 = ComparisonPlan(
        rows={  # study/followup.py's ROWS, SEEDS and FIXED_VALUES at that commit
            "tight": ("grpo", "lead", "lead_static", "grpo_length", "gdpo", "dapo", "meds", "meds_single_cluster"),
            "loose": ("grpo", "lead", "gdpo"),
        },
        seeds=tuple(range(5, 25)),
        row_seeds=frozen["row_seeds"],
        fixed={
            "tight/grpo_length": {"shaper_kwargs": {"threshold": 25}},
            "tight/gdpo": {"length_threshold": 50},
            "tight/lead_static": {"shaper_kwargs": {"static_lambda_c": 0.8}},
            "loose/gdpo": {"length_threshold": 82},
        },
        eval=V2_EVAL,
        tune=False,
    )
    field = ComparisonPlan(
        rows={"tight": FIELD_METHODS, "loose": FIELD_METHODS},
        seeds=FIELD_SEEDS,
        eval=V2_EVAL,
        tune=False,
    )
    return {
        "full": dataclasses.replace(full, name="full", page="claims", report="docs/results.md"),
        "v2": dataclasses.replace(v2, name="v2", page="holm", report="docs/results-v2.md"),
        "field": dataclasses.replace(
            field,
            name="field",
            page="controls",
            report="docs/results-field.md",
            controls={"folder": "comparison-v2", "rows": ("grpo", "lead")},
        ),
    }


def test_each_committed_file_is_its_code_built_plan():
    plans = committed_plans()
    files = sorted(p.name for p in studies_dir().glob("*.toml"))
    assert files == ["field.toml", "frontiers.toml", "v1.toml", "v2.toml"]
    want = _code_built_plans()  # the frontier study was a data file from the start (test_frontiers_plan)
    assert set(plans) == {*want, "frontiers"}
    for name, plan in want.items():
        as_built = dataclasses.replace(
            plans[name], claims=(), decide=None, parts=(), alpha=0.05, frozen=None, best_global={}, roles=None
        )  # what the code held elsewhere (claims.CLAIMS, followup.PARTS, followup.json, names in the pages)
        assert as_built == plan, name
    assert plans["v2"].eval["passk_keys"] == tuple(want["v2"].eval["passk_keys"]) and len(plans["v2"].fixed) == 4


PART = {"regime": "tight", "treatment": "alp", "control": "grpo", "metric": "accuracy", "relation": ">", "bound": 0.0}


NO_BOUND = {k: v for k, v in PART.items() if k != "bound"}


def astuple(obj, keys):
    return tuple(getattr(obj, k) for k in keys)


def _claims_as_decided(page_json: str) -> list[tuple]:
    """(claim id, text, its parts' comparisons) as a committed page's JSON recorded them."""
    data = json.loads((Path(__file__).resolve().parents[2] / "docs" / page_json).read_text())
    keys = ("regime", "treatment", "control", "metric", "relation", "bound")
    return [(c["id"], c["text"], [tuple(p[k] for k in keys) for p in c["parts"]]) for c in data["claims"]]


def test_the_files_claims_are_the_claims_the_committed_pages_decided():
    plans = committed_plans()
    keys = ("regime", "treatment", "control", "metric", "relation", "bound")
    for name, page_json in (("full", "results.json"), ("v2", "results-v2.json")):
        best = json.loads((Path(__file__).resolve().parents[2] / "docs" / page_json).read_text())["best_global"]
        mine = [
            (
                c.id,
                c.text,
                [tuple(best[p.regime] if v == BEST_GLOBAL else v for v in astuple(p, keys)) for p in c.parts],
            )
            for c in plans[name].claims
        ]  # the page records the best_global its tuning chose
        assert mine == _claims_as_decided(page_json), name
    v2 = plans["v2"]
    assert (v2.decide, v2.alpha, plans["full"].decide, plans["field"].claims) == ("holm", 0.05, "interval", ())
    parts = json.loads((Path(__file__).resolve().parents[2] / "docs" / "results-v2.json").read_text())["claims"]
    assert [(p.id, p.margin) for p in v2.parts] == [(q["part"], q["margin"]) for c in parts for q in c["parts"]]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"decide": "vote"}, r"decide = 'vote': must be one of interval, holm"),
        ({"claims": []}, r"claims = \[\]: must be a non-empty array"),
        ({"claims": [{"id": "a", "text": "t", "parts": [{**PART, "metric": "joy"}]}]}, r"metric = 'joy': must be one"),
        (
            {"claims": [{"id": "a", "text": "t", "parts": [{**PART, "control": "gfpo"}]}]},
            r"control = 'gfpo': is not a row",
        ),
        ({"claims": [{"id": "a", "text": "t", "parts": [{**PART, "bound": "x"}]}]}, r"bound = 'x': must be a finite"),
        ({"claims": [{"id": "a", "text": "t", "parts": [{**PART, "mood": 1}]}]}, r"mood = 1: unknown key"),
        ({"claims": [{"id": "a", "text": "t"}]}, r"claims\[0\] = .*: a claim is a table of exactly id, text, parts"),
        (
            {"decide": "holm", "claims": [{"id": "a", "text": "t", "parts": [NO_BOUND]}]},
            r"parts\[0\] = .*: id is missing",
        ),
        ({"alpha": 1.5}, r"alpha = 1.5: must be a level in \(0, 1\)"),
        ({"best_global": {"tight": "lead"}}, r"best_global.tight = 'lead': must name a row"),
        ({"frozen": "nowhere.json"}, r"frozen = 'nowhere.json': must name a JSON file"),
    ],
)
def test_a_claims_keys_are_checked_naming_the_file_the_key_and_the_value(change, match):
    data = {"name": "mine", "page": "claims", "seeds": [0, 1], "rows": {"tight": ["grpo", "alp"]}}
    data.setdefault("decide", "interval")
    with pytest.raises(StudyFileError, match=match):
        parse_plan({**data, "claims": [{"id": "a", "text": "t", "parts": [PART]}], **change}, "mine.toml")


def test_a_claim_by_hand_from_a_file():
    data = {"name": "mine", "page": "claims", "seeds": [0, 1], "rows": {"tight": ["grpo", "alp"]}, "decide": "holm"}
    part = {**PART, "id": "a1", "relation": ">=", "margin": 0.02, "why": "two points"}
    del part["bound"]
    plan = parse_plan({**data, "claims": [{"id": "a", "text": "alp keeps accuracy", "parts": [part]}]}, "mine.toml")
    ((p,),) = [c.parts for c in plan.claims]
    assert (p.treatment, p.control, p.relation, p.bound) == ("alp", "grpo", ">=", -0.02)  # non-inferiority: -margin
    assert plan.parts[0].comparison == p and plan.parts[0].why == "two points"


def test_the_comparison_plans_come_from_the_files():
    from dynashape.study.compare import COMPARISON_PLAN

    assert dict(COMPARISON_PLAN) == committed_plans()


COMMITTED_RUNS = {
    # plan: (its committed folder, runs (regime, row, seed): a fixed value, a row's last seed, each regime)
    "full": ("results/comparison", [("tight", "lead", 0), ("loose", "grpo", 4), ("tight", "meds", 2)]),
    "v2": ("results/comparison-v2", [("tight", "grpo_length", 19), ("loose", "gdpo", 16), ("tight", "lead", 5)]),
    "field": ("results/comparison-field", [("tight", "alp", 5), ("loose", "thinkprune", 9), ("loose", "gfpo", 7)]),
}
ADDED_SINCE = {"v2": {"validation_samples", "validation_every", "validation_problems", "budget_prompt"}}
"""TrainConfig fields added after a study ran (at their defaults since); v1's runs predate more (and a layout)."""
WARMUP_ADDED = {"budget_prompt_share": 0.0, "budget_low": 2, "budget_high": 160}
"""WarmupConfig fields added after every committed study ran: at these defaults the base is the plain one, whose
key leaves them out, so the runs' base is the same."""


@pytest.mark.parametrize("name", sorted(COMMITTED_RUNS))
def test_a_committed_plans_runs_get_the_config_their_folder_holds(name):
    """spec_config of a few runs of each plan file, as the command builds them (the plan's evaluation under a
    default template), against the config.yaml the committed run wrote: the field's equal whole, v2's but for
    fields added since, v1's on every field of the same layout (it ran before the config's sections)."""
    import yaml

    from dynashape.study.compare import spec_config
    from dynashape.train.config import EvalConfig, RunConfig

    root = Path(__file__).resolve().parents[2]
    plan = committed_plans()[name]
    folder, picked = COMMITTED_RUNS[name]
    for regime, row, seed in picked:
        point = plan.fixed.get(f"{regime}/{row}", {})
        spec = RunSpec(method=plan.preset(row), regime=regime, seed=seed, overrides=point)
        have = yaml.safe_load((root / folder / spec.folder() / "config.yaml").read_text())
        cfg = spec_config(spec, RunConfig(eval=EvalConfig(**plan.eval)))
        got = yaml.safe_load(yaml.safe_dump(cfg.to_dict()))
        added = {k: got["warmup"].pop(k) for k in WARMUP_ADDED if k not in have.get("warmup", {})}
        assert added == WARMUP_ADDED, (regime, row)  # the plain base's warm-up, as the committed runs had
        if name == "field":
            assert got == have, (regime, row)
            continue
        assert got["train"]["shaper_kwargs"] == have["train"]["shaper_kwargs"]
        assert {k: v for k, v in got["eval"].items() if k in have["eval"]} == have["eval"]  # v1 predates passk_keys
        for key, value in have["train"].items():
            if key in got["train"] and isinstance(value, dict) == isinstance(got["train"][key], dict):
                assert got["train"][key] == value, (regime, row, key)
        if name == "v2":
            assert set(got["train"]) - set(have["train"]) == ADDED_SINCE["v2"]
            assert {k: v for k, v in got.items() if k != "train"} == {k: v for k, v in have.items() if k != "train"}


# --------------------------------------------------------------------------------------------- a sweep
SWEEP = {
    "name": "mine",
    "page": "generic",
    "baseline": "grpo",
    "seeds": [0, 1],
    "tune": False,
    "rows": {"tight": ["grpo", {"method": "alp", "sweep": {"shaper_kwargs": {"beta": [0.1, 0.25]}}, "seeds": 1}]},
}


def test_a_sweep_makes_one_named_row_per_value():
    plan = parse_plan(SWEEP, "mine.toml")
    assert plan.rows == {"tight": ("grpo", "alp@beta=0.1", "alp@beta=0.25")}
    assert plan.presets == {"alp@beta=0.1": "alp", "alp@beta=0.25": "alp"}
    assert plan.fixed == {
        "tight/alp@beta=0.1": {"shaper_kwargs": {"beta": 0.1}},
        "tight/alp@beta=0.25": {"shaper_kwargs": {"beta": 0.25}},
    }
    assert plan.row_seeds == {"tight/alp@beta=0.1": 1, "tight/alp@beta=0.25": 1}
    assert plan.preset("alp@beta=0.1") == "alp" and plan.preset("grpo") == "grpo"
    spec = RunSpec(method="alp", regime="tight", seed=1, overrides=plan.fixed["tight/alp@beta=0.1"], row="alp@beta=0.1")
    assert spec.folder().as_posix() == "runs/tight/alp@beta=0.1-seed1"
    assert spec.label() == "alp@beta=0.1 tight seed 1"
    # a quoted dotted key says the same, a top-level field sweeps too, and fixed values stay under the sweep
    row = {"method": "grpo_length", "sweep": {"lr": [2e-4]}, "fixed": {"shaper_kwargs.threshold": 9}}
    quoted = parse_plan({**SWEEP, "rows": {"tight": ["grpo", row]}}, "q.toml")
    assert quoted.fixed == {"tight/grpo_length@lr=0.0002": {"shaper_kwargs": {"threshold": 9}, "lr": 2e-4}}


def test_a_row_named_otherwise_labels_and_the_study_fixed_apply_to_every_row():
    schedules = [[[1, 40]], [[1, 20]]]
    rows = [
        "grpo",
        {"name": "grpo_g16", "method": "grpo", "fixed": {"group_size": 16}},
        {"method": "thinkprune", "sweep": {"shaper_kwargs.schedule": schedules}, "labels": ["cap40", "cap20"]},
    ]
    study = {**SWEEP, "fixed": {"lr": 2e-4}, "warmup": {"budget_prompt_share": 0.5}, "rows": {"loose": rows}}
    plan = parse_plan(study, "mine.toml")
    assert plan.warmup == {"budget_prompt_share": 0.5}
    assert plan.rows == {"loose": ("grpo", "grpo_g16", "thinkprune@schedule=cap40", "thinkprune@schedule=cap20")}
    assert plan.preset("grpo_g16") == "grpo" and plan.preset("thinkprune@schedule=cap20") == "thinkprune"
    share = {"lr": 2e-4}
    assert plan.fixed["loose/grpo"] == share
    assert plan.fixed["loose/grpo_g16"] == {**share, "group_size": 16}
    assert plan.fixed["loose/thinkprune@schedule=cap20"] == {**share, "shaper_kwargs": {"schedule": [[1, 20]]}}
    cfg = make_train_config("thinkprune", regime="loose", **plan.fixed["loose/thinkprune@schedule=cap20"])
    assert cfg.lr == 2e-4 and tuple(map(tuple, cfg.shaper_kwargs["schedule"])) == ((1, 20),)


@pytest.mark.parametrize(
    ("row", "study_fixed", "match"),
    [
        ({"name": "lead", "method": "grpo"}, {}, r"rows.tight.grpo.name = 'lead': is another preset's name"),
        ({"name": "a@b", "method": "grpo"}, {}, r"name = 'a@b': must be a name"),
        ({"method": "grpo", "labels": ["x"]}, {}, r"rows.tight.grpo.labels = \['x'\]: names a sweep's values"),
        ({"method": "alp", "sweep": {"shaper_kwargs.beta": [0.1, 0.2]}, "labels": ["x"]}, {},
         r"alp.labels = \['x'\]: must be a list of 2 names"),
        ({"method": "alp", "sweep": {"shaper_kwargs.beta": [0.1, 0.2]}, "labels": ["x", "x"]}, {}, r"must be distinct"),
        ({"method": "thinkprune", "sweep": {"shaper_kwargs.schedule": [[[1, 4]]]}}, {},
         r"thinkprune.sweep = \[\[1, 4\]\]: a swept value must be a number"),
        ({"method": "alp", "fixed": {"lr": 1e-4}}, {"lr": 2e-4},
         r"rows.tight.alp.fixed = 'lr': is fixed for every row by the study"),
        ({"method": "alp", "sweep": {"lr": [1e-4]}}, {"lr": 2e-4}, r"rows.tight.alp.sweep = 'lr': is also fixed"),
        ("grpo", {"seed": 1}, r"mine.toml: fixed.seed = 1: is set by the study"),
    ],
)  # fmt: skip
def test_names_labels_and_the_study_fixed_are_checked(row, study_fixed, match):
    with pytest.raises(StudyFileError, match=match):
        parse_plan({**SWEEP, "fixed": study_fixed, "rows": {"tight": ["grpo", row]}}, "mine.toml")


def _refused(change: dict, match: str) -> None:
    with pytest.raises(StudyFileError, match=match) as err:
        parse_plan({**SWEEP, **change}, "mine.toml")
    assert str(err.value).startswith("mine.toml: ")  # the file first, then the key and the value


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"colour": "red"}, r"colour = 'red': unknown key"),
        ({"page": "v3"}, r"page = 'v3': must be one of claims, holm, controls, generic, frontiers"),
        ({"seeds": [0, "1"]}, r"seeds = '1': must be an integer >= 0"),
        ({"seeds": [0, 0]}, r"seeds = \[0, 0\]: must be distinct"),
        ({"seeds": [True]}, r"seeds = True: must be an integer"),
        ({"tune": "yes"}, r"tune = 'yes': must be true or false"),
        ({"tuning_seeds": 0}, r"tuning_seeds = 0: must be an integer >= 1"),
        ({"baseline": "lead"}, r"baseline = 'lead': must be a row of every regime; tight lacks it"),
        ({"eval": {"n_samples": 0}}, r"eval: .*n_samples"),
        ({"eval": {"samples": 4}}, r"eval.samples = 4: unknown key"),
        ({"warmup": {"budget_share": 0.5}}, r"warmup.budget_share = 0.5: unknown key; WarmupConfig has"),
        ({"warmup": {"budget_prompt_share": 2.0}}, r"warmup: .*budget_prompt_share"),
        ({"rows": {"medium": ["grpo"]}}, r"rows.medium = \['grpo'\]: unknown regime"),
        ({"rows": {"tight": ["grpo", "lead_fast"]}}, r"rows.tight.method = 'lead_fast': unknown method"),
        ({"rows": {"tight": ["grpo", "grpo"]}}, r"rows.tight = 'grpo': names a row twice"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"shaper_kwargs.gamma": [1]}}]}},
         r"rows.tight.alp.sweep = 'shaper_kwargs.gamma': 'alp' has no such parameter"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"shaper_kwargs.beta": 0.1}}]}},
         r"sweep.shaper_kwargs.beta = 0.1: must be a non-empty list"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"a": [1], "b": [2]}}]}}, r"must be one parameter"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"shaper_kwargs.beta": [-1.0]}}]}},
         r"alp.sweep = .*beta"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "seeds": 3}]}}, r"alp.seeds = 3: a row takes the first n"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "fixed": {"shaper_kwargs.gamma": 1}}]}}, r"alp.fixed = .*gamma"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "colour": 1}]}}, r"rows.tight.colour = 1: unknown key"),
        ({"controls": {"folder": "x"}}, r"controls = .*must be a table with exactly folder, rows"),
        ({"page": "claims", "baseline": None},
         r"page = 'claims': rows named otherwise than their preset \(alp@beta=0.1, alp@beta=0.25\) need"),
        ({"rows": {"tight": ["grpo", "best_global"]}}, r"rows = 'best_global': the generic page reads rows by name"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "fixed": {"seed": 3}}]}},
         r"rows.tight.alp.fixed.seed = 3: is set by the study: the study's paired seeds"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"seed": [1, 2]}}]}}, r"sweep = 'seed': 'alp' has no"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"lr.x": [1]}}]}}, r"sweep = 'lr.x': 'alp' has no"),
        ({"rows": {"tight": ["grpo", {"method": "alp", "sweep": {"shaper_kwargs": [1]}}]}}, r"sweep = 'shaper_kwargs'"),
    ],
)  # fmt: skip
def test_every_key_is_checked_naming_the_file_the_key_and_the_value(change, match):
    _refused(change, match)


def test_a_missing_key_and_a_file_that_is_not_toml_are_named(tmp_path):
    with pytest.raises(StudyFileError, match=r"mine.toml: seeds is missing"):
        parse_plan({k: v for k, v in SWEEP.items() if k != "seeds"}, "mine.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(StudyFileError, match=rf"{bad}: not TOML"):
        load_plan_file(bad)
    with pytest.raises(StudyFileError, match=r"baseline = 'grpo': only a generic page reads a baseline"):
        parse_plan({**SWEEP, "page": "claims", "rows": {"tight": ["grpo"]}}, "mine.toml")


# ------------------------------------------------------------------------------------- a user's study, run
USER_STUDY = """
name = "mine"
page = "generic"
baseline = "grpo"
seeds = [0, 1]
tune = false

[eval]  # conftest's tiny evaluation, registered by the file (so the page checks the runs against it)
n_samples = 2
max_new_tokens = 24
passk_samples = 4
passk_hard = 1
passk_trap = 1

[rows]
tight = ["grpo", { method = "alp", sweep = { "shaper_kwargs.beta" = [1e-4, 1e-3] } }]
"""


def test_a_users_study_file_runs_end_to_end_through_the_command(base_cache, tmp_path, capsys, local_ray):
    """`dynashape compare --plan mine.toml`: two methods, two seeds, a sweep over one parameter (3 rows), three
    steps each; the run folders, runs.json, the folder's copy of the file and the generic page's numbers, by hand
    from the runs' eval.json; `dynashape results` rewrites the same page from the folder alone."""
    import json

    import yaml
    from scipy import stats as scipy_stats
    from test_compare import TINY_SET

    from dynashape.cli import main

    study = tmp_path / "mine.toml"
    study.write_text(USER_STUDY)
    out = tmp_path / "mine"
    tiny = {k: v for k, v in TINY_SET.items() if not k.startswith("eval.")}
    argv = ["compare", "--plan", str(study), "--jobs", "2", "--out", str(out), "--cache-dir", str(base_cache)]
    argv += ["--no-progress", *[a for k, v in {**tiny, "steps": 3}.items() for a in ("--set", f"{k}={v}")]]
    assert main(argv) == 0
    assert "6 runs in all" in capsys.readouterr().out
    rows = ("grpo", "alp@beta=0.0001", "alp@beta=0.001")
    evals = {}
    for row in rows:
        for seed in (0, 1):
            run = out / "runs" / "tight" / f"{row}-seed{seed}"
            evals[(row, seed)] = json.loads((run / "eval.json").read_text())
            assert evals[(row, seed)]["steps"] == 3
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            assert cfg["train"]["shaper"] == row.split("@")[0] and cfg["train"]["steps"] == 3
            assert cfg["eval"]["n_samples"] == 2  # the file's evaluation reached the runs
            if "@" in row:
                assert cfg["train"]["shaper_kwargs"]["beta"] == float(row.split("=")[1])
    records = json.loads((out / "runs.json").read_text())
    assert sorted((r.get("row", r["method"]), r["method"], r["seed"]) for r in records) == sorted(
        (row, row.split("@")[0], s) for row in rows for s in (0, 1)
    )
    assert all(("row" in r) == (r["method"] == "alp") for r in records)  # a plain row's record is as before
    meta = json.loads((out / "comparison.json").read_text())
    assert meta["plan"] == "mine" and meta["plan_file"] == "study.toml" and meta["presets"]["alp@beta=0.001"] == "alp"
    assert (out / "study.toml").read_text() == USER_STUDY

    page = json.loads((out / "results.json").read_text())
    assert page["baseline"] == "grpo" and [r["row"] for r in page["regimes"]["tight"]] == list(rows)
    for r in page["regimes"]["tight"]:
        acc = [evals[(r["row"], s)]["final"]["accuracy"] for s in (0, 1)]
        length = [evals[(r["row"], s)]["final"]["mean_length"] for s in (0, 1)]
        assert r["seeds"] == [0, 1] and r["accuracy"]["mean"] == pytest.approx(sum(acc) / 2)
        assert r["mean_length"]["mean"] == pytest.approx(sum(length) / 2)
        d = [evals[(r["row"], s)]["final"]["accuracy"] - evals[("grpo", s)]["final"]["accuracy"] for s in (0, 1)]
        half = scipy_stats.t.ppf(0.975, 1) * abs(d[0] - d[1]) / 2**0.5 / 2**0.5  # sd of 2 values: |a-b|/sqrt 2
        vs = r["accuracy_vs_baseline"]
        assert vs["estimate"] == pytest.approx(sum(d) / 2, abs=1e-12) and vs["n"] == 2
        if half > 0:
            assert (vs["low"], vs["high"]) == (pytest.approx(sum(d) / 2 - half), pytest.approx(sum(d) / 2 + half))
    text = (out / "results.md").read_text()
    assert text.startswith("# Results: mine") and "| alp@beta=0.001 | 2 |" in text
    assert main(["results", str(out), "--report", str(tmp_path / "again.md")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again == page


def test_the_generic_pages_row_by_hand():
    """Two seeds: accuracy 0.55, 0.58 against grpo's 0.5, 0.6: differences 0.05, -0.02, mean 0.015, sd 0.07 / sqrt 2,
    t(0.975, 1 df) = 12.7062: half-width 12.7062 x 0.049497 / sqrt 2 = 0.44472. An AES undefined at one seed
    leaves one paired seed: an estimate without an interval."""
    from dynashape.study.generic_page import _row, markdown

    def ev(accuracy, length, aes):
        return {"final": {"accuracy": accuracy, "mean_length": length}, "aes": aes}

    base = {0: ev(0.5, 40, None), 1: ev(0.6, 42, 0.1)}
    row = _row("alp@beta=0.001", {0: ev(0.55, 30, 0.3), 1: ev(0.58, 33, 0.2)}, base)
    assert row["accuracy"]["mean"] == pytest.approx(0.565) and row["accuracy"]["sd"] == pytest.approx(0.0212132)
    vs = row["accuracy_vs_baseline"]
    assert vs["estimate"] == pytest.approx(0.015) and vs["n"] == 2
    assert (vs["low"], vs["high"]) == (
        pytest.approx(0.015 - 0.44472, abs=1e-5),
        pytest.approx(0.015 + 0.44472, abs=1e-5),
    )
    assert row["mean_length_vs_baseline"]["estimate"] == pytest.approx(-9.5)
    assert row["aes_vs_baseline"] == {"estimate": pytest.approx(0.1), "low": None, "high": None, "n": 1, "seeds": [1]}
    text = markdown({"study": "mine", "baseline": "grpo", "regimes": {"tight": [_row("grpo", base, base), row]}}, "x")
    assert "| grpo | 2 | 0.550 ± 0.071 | 41.0 ± 1.4 | 0.100 | (baseline) | (baseline) | (baseline) |" in text
    assert "| alp@beta=0.001 | 2 | 0.565 ± 0.021 | 31.5 ± 2.1 | 0.250 ± 0.071 | +0.015 [-0.430, +0.460] (n=2) |" in text


def test_the_documented_example_is_a_valid_study(tmp_path):
    """docs/comparison.md's example, copied as a user would, loads: every row of it, its sweep's named rows."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "comparison.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my-study.toml").write_text(example)
    plan = load_plan_file(tmp_path / "my-study.toml")
    assert plan.name == "my-study" and plan.page == "generic" and plan.baseline == "grpo"
    assert plan.rows["tight"] == (
        "grpo", "lead", "grpo_length", "alp@beta=0.0001", "alp@beta=0.001", "gdpo", "grpo_g16",
        "thinkprune@schedule=cap50", "thinkprune@schedule=cap25",
    )  # fmt: skip
    assert plan.fixed["tight/grpo_length"] == {"lr": 2e-4, "shaper_kwargs": {"threshold": 32}}
    assert plan.row_seeds == {"tight/gdpo": 2} and plan.preset("grpo_g16") == "grpo"
    assert plan.fixed["tight/thinkprune@schedule=cap25"]["shaper_kwargs"] == {"schedule": [[16, 25]]}
    assert plan.warmup == {"budget_prompt_share": 0.5}


def test_the_documented_claims_example_registers_a_claim(tmp_path):
    """docs/comparison.md's claims example, on a study with those rows, registers claim c as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "comparison.md").read_text()
    claims = text.split("```toml\n", 2)[2].split("```", 1)[0]
    head = 'name = "mine"\npage = "claims"\nseeds = [0, 1]\n'
    (tmp_path / "mine.toml").write_text(head + claims + '\n[rows]\ntight = ["grpo", "lead", "lead_static"]\n')
    plan = load_plan_file(tmp_path / "mine.toml")
    ((part,),) = [c.parts for c in plan.claims]
    assert (plan.decide, part.treatment, part.control, part.relation, part.bound) == (
        "interval", "lead", "lead_static", ">=", -0.05
    )  # fmt: skip


def test_plan_names_a_committed_study_or_a_file(tmp_path):
    """--plan v2 finds the committed file by its name (the package's studies/, this checkout's studies/ through
    the link that ships the files in the wheel); a path loads that file; anything else is refused by name."""
    from dynashape.study.plan_file import find_plan

    root = Path(__file__).resolve().parents[2]
    assert studies_dir().resolve() == root / "studies"
    plan, path = find_plan("v2")
    assert plan.name == "v2" and path is None
    plan, path = find_plan(str(root / "studies" / "field.toml"))
    assert plan == committed_plans()["field"] and path == root / "studies" / "field.toml"
    committed = r"\(field, frontiers, full, v2\)"
    with pytest.raises(StudyFileError, match=rf"--plan 'v3': neither a committed study {committed} nor"):
        find_plan("v3")
    with pytest.raises(StudyFileError, match=r"nor a study file"):
        find_plan(str(tmp_path / "missing.toml"))


def test_the_architecture_pages_study_example_is_a_valid_study(tmp_path):
    """docs/architecture.md's "Add a study" example loads, with the run count its text states (12)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "alp-strength.toml").write_text(example)
    plan = load_plan_file(tmp_path / "alp-strength.toml")
    assert plan.rows == {"tight": ("grpo", "lead", "alp@beta=0.0001", "alp@beta=0.001")}
    assert len(plan.rows["tight"]) * len(plan.seeds) == 12 and "trains the 12 runs" in text
