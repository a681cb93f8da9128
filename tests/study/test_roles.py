"""A study's roles (``study.roles``): what it compares against, declared in its data file and read by its pages
instead of method names; every key checked, an error naming the file, the key and the value."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.plan_checks import StudyFileError
from dynashape.study.plan_file import studies_dir
from dynashape.study.results import best_tuned, build_results
from dynashape.study.roles import ROLE_KEYS, StudyRoles, parse_roles, roles_of

ROWS = {"tight": ("grpo", "alp", "saw", "lead_static"), "loose": ("grpo", "alp", "saw")}
WHERE = "studies/mine.toml"


def test_the_committed_studies_declare_their_roles():
    field = roles_of(COMPARISON_PLAN["field"])
    assert field == StudyRoles(
        control="grpo", sampling_control="dapo", horizon="adlp/lambda", example=("loose", ("alp", "saw")),
        labels={"dapo": "DAPO"},
    )  # fmt: skip
    full = roles_of(COMPARISON_PLAN["full"])
    assert full.control == "grpo" and "lead_static" in full.not_baselines and "gdpo" not in full.not_baselines
    assert full.best_global_among == ("grpo_length", "gdpo")  # v1's best_global: the better tuned of the two
    assert (
        "[roles]" in (studies_dir() / "field.toml").read_text() and "[roles]" in (studies_dir() / "v1.toml").read_text()
    )
    assert roles_of(COMPARISON_PLAN["v2"]) == roles_of(None) == StudyRoles(control="grpo")  # the defaults


def test_a_row_is_named_by_the_study_then_by_its_method():
    roles = StudyRoles(control="grpo", labels={"dapo": "DAPO"})
    assert [roles.label(r) for r in ("dapo", "adlp", "l1_exact", "lead_static")] == [
        "DAPO", "A-DLP", "L1-Exact", "lead_static",
    ]  # fmt: skip


def test_a_plan_holds_its_roles_and_a_plan_without_them_gets_the_defaults():
    declared = StudyRoles(control="alp")
    assert roles_of(SimpleNamespace(roles=declared, name="field", rows=ROWS, controls={})) is declared
    assert roles_of(SimpleNamespace(roles=None, name=None, rows=ROWS, controls={})) == StudyRoles(control="grpo")


def test_the_keys_parse():
    roles = parse_roles(
        WHERE,
        {"control": "alp", "not_baselines": ["lead_static"], "sampling_control": "dapo", "horizon": "adlp/lambda",
         "example": {"regime": "tight", "rows": ["alp", "saw"]}, "labels": {"saw": "SAW-1"},
         "best_global_among": ["gdpo", "alp"]},
        ROWS,
        controls=("grpo", "lead"),
    )  # fmt: skip
    assert roles == StudyRoles(
        control="alp", not_baselines=("lead_static",), sampling_control="dapo", horizon="adlp/lambda",
        example=("tight", ("alp", "saw")), labels={"saw": "SAW-1"}, best_global_among=("gdpo", "alp"),
    )  # fmt: skip
    assert parse_roles(WHERE, {"control": "lead"}, ROWS, controls=("grpo", "lead")).control == "lead"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"controll": "grpo"}, f"roles.controll = 'grpo': unknown key; roles has {', '.join(ROLE_KEYS)}"),
        ({"control": "lead_static"}, "roles.control = 'lead_static': must be a row of every regime or one of"),
        ({"not_baselines": ["lead"]}, "roles.not_baselines = 'lead': is not a row of the study"),
        ({"not_baselines": "lead_static"}, "roles.not_baselines = 'lead_static': must be a list of row names"),
        ({"sampling_control": "dapo"}, "roles.sampling_control = 'dapo': must be a preset the controls' study ran"),
        ({"horizon": "adlp/lambda_next"}, "roles.horizon = 'adlp/lambda_next': must be a declared trajectory key"),
        ({"example": {"regime": "warm", "rows": ["alp", "saw"]}}, "roles.example.regime = 'warm': must be one of"),
        ({"example": {"regime": "loose", "rows": ["alp"]}}, r"roles.example.rows = \['alp'\]: must name two rows"),
        ({"example": {"regime": "loose", "rows": ["alp", "lead_static"]}},
         "roles.example.rows = 'lead_static': is not a row of the loose regime"),
        ({"labels": {"saw": ""}}, "roles.labels = {'saw': ''}: must be a table of row = display name"),
        ({"best_global_among": ["gdpo", "no_such"]}, "roles.best_global_among = 'no_such': is not a preset"),
        ({"best_global_among": ["gdpo", "gdpo"]}, r"roles.best_global_among = \['gdpo', 'gdpo'\]: must name each"),
        ("grpo", "roles = 'grpo': must be a table of"),
    ],
)  # fmt: skip
def test_a_bad_key_names_the_file_the_key_and_the_value(table, message):
    with pytest.raises(StudyFileError, match=f"^{WHERE}: {message}"):
        parse_roles(WHERE, table, ROWS)


def test_a_best_global_row_needs_its_candidates():
    rows = {"tight": ("grpo", "best_global")}
    with pytest.raises(StudyFileError, match=f"^{WHERE}: roles.best_global_among = \\[\\]: must name the presets"):
        parse_roles(WHERE, {}, rows)
    assert parse_roles(WHERE, {"best_global_among": ["gdpo"]}, rows).best_global_among == ("gdpo",)


def test_best_tuned_leaves_out_what_the_study_says_is_no_baseline():
    tuning = {"tight": {"lead_static": {"chosen_mean_aes": 0.9}, "gdpo": {"chosen_mean_aes": 0.5},
                        "grpo_length": {"chosen_mean_aes": 0.4}, "best_global": "gdpo"}}  # fmt: skip
    assert best_tuned(tuning, "tight") == "lead_static"  # no name is special
    assert best_tuned(tuning, "tight", exclude=("lead_static",)) == "gdpo"
    assert best_tuned(tuning, "tight", among=("grpo_length",), exclude=("lead_static",)) == "grpo_length"


def _ev(aes: float) -> dict:
    """One run's eval.json: accuracy 0.5 and length 40 on two difficulties of two problems each."""
    final = {
        "accuracy": 0.5, "mean_length": 40.0, "n_samples": 4, "pass_at_k": {"1": 0.5},
        "per_difficulty": {d: {"accuracy": 0.5, "mean_length": 40.0} for d in ("1", "2")},
        "per_problem": {"difficulty": [1, 1, 2, 2], "is_trap": [False] * 4, "n_correct": [2] * 4,
                        "mean_length": [40.0] * 4},
    }  # fmt: skip
    return {"aes": aes, "base": {"accuracy": 0.5, "mean_length": 40.0}, "final": final, "wall_seconds": 1.0}


def test_the_claims_pages_control_is_the_studys(tmp_path):
    """With gdpo declared the control, grpo is a treatment beside it, and the per-difficulty deltas are against gdpo
    (by hand: grpo's AES 0, 0.01, 0.02 minus gdpo's 0.1, 0.12, 0.1)."""
    out = tmp_path / "comparison"
    out.mkdir()
    aes = {"grpo": (0.0, 0.01, 0.02), "gdpo": (0.1, 0.12, 0.1), "lead": (0.3, 0.35, 0.4)}
    records = [
        {"method": m, "regime": "tight", "seed": s, "split": "test", "point": "", "run_dir": f"runs/tight/{m}-seed{s}",
         "status": "trained", "eval": _ev(aes[m][s])}
        for m in aes for s in range(3)
    ]  # fmt: skip
    (out / "runs.json").write_text(json.dumps(records))
    (out / "tuning.json").write_text(json.dumps({"tight": {"lead": {"chosen_mean_aes": 0.9}}}))
    roles = StudyRoles(control="gdpo", not_baselines=("lead",))
    data = build_results(out, n_boot=50, roles=roles)
    assert data["controls"] == {"tight": {"gdpo control": "gdpo"}}  # lead is no baseline: no best tuned row
    (d,) = [x for x in data["differences"] if (x["method"], x["metric"]) == ("grpo", "aes")]
    assert d["versus"] == "gdpo" and d["estimate"] == pytest.approx((-0.1 - 0.11 - 0.08) / 3)
    assert not [x for x in data["differences"] if x["method"] == "gdpo"]
    cell = next(x for x in data["per_difficulty"] if x["method"] == "lead")
    assert "vs_gdpo" in cell["accuracy"] and "vs_grpo" not in cell["accuracy"]
    default = build_results(out, n_boot=50)  # an ad-hoc folder: the reference method, nothing excluded
    assert default["controls"] == {"tight": {"grpo control": "grpo", "best tuned baseline": "lead"}}
