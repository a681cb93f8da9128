"""Engine-free logic of the adapters: verl inputs -> RolloutBatch -> token advantages, settings, extras, hooks.

Runs in the main suite (no verl, no TRL needed).
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape import RolloutBatch, get_shaper
from dynashape.integrations._post_import import when_imported
from dynashape.integrations._prompts import prompt_key_of, prompt_text
from dynashape.integrations.verl import estimators as ve
from dynashape.integrations.verl.queue_fields import extras_from_fields


def test_group_ids_from_uids_hand_worked():
    ids = ve.group_ids_from_index(np.array(["b", "a", "b", "c", "a"], dtype=object))
    assert ids.dtype == torch.long
    assert ids.tolist() == [1, 0, 1, 2, 0]  # numbered by sorted uid


@given(st.lists(st.sampled_from(["u1", "u2", "x", "zz", "0"]), min_size=1, max_size=40))
def test_group_ids_partition_equals_a_loop_reference(uids):
    ids = ve.group_ids_from_index(np.array(uids, dtype=object)).tolist()
    for i in range(len(uids)):  # same uid <=> same id, pair by pair
        for j in range(len(uids)):
            assert (ids[i] == ids[j]) == (uids[i] == uids[j])


def test_rollout_batch_from_verl_hand_worked():
    rewards = torch.tensor([[0, 0, 1.0, 0], [0, 0, 0, 0], [0.7, 0, 0, 0], [0, 0.5, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    batch = ve.rollout_batch_from_verl(rewards, mask, ["p", "p", "q", "q"])
    assert batch.correct.tolist() == [True, False, True, False]  # 0.5 is not > 0.5
    assert batch.lengths.tolist() == [3, 4, 1, 2]
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    assert batch.rewards is None


def test_residual_reward_is_score_minus_verdict():
    rewards = torch.tensor([[1.0, 0], [0, -1.0], [0.0, 0.5]])  # DAPO-like +1 / -1, then 1 - 0.5 overlong
    mask = torch.ones(3, 2)
    verdict = torch.tensor([True, False, True])
    batch = ve.rollout_batch_from_verl(rewards, mask, ["a", "a", "a"], correct=verdict, residual_reward=True)
    assert batch.correct.tolist() == [True, False, True]
    assert batch.rewards[:, 0].tolist() == [0.0, -1.0, -0.5]


def test_broadcast_hand_worked():
    out = ve.broadcast_advantages(torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert out.tolist() == [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]
    assert out.dtype == torch.float32


def test_estimator_without_verl_equals_core_shaper():
    estimator = ve.make_estimator("lead")
    core = get_shaper("lead", b_max=10, l_min=2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lengths = torch.randint(1, 12, (8,), generator=gen)
        correct = torch.rand(8, generator=gen) < 0.5
        mask = (torch.arange(12)[None, :] < lengths[:, None]).float()
        rewards = torch.zeros(8, 12)
        rewards[torch.arange(8), lengths - 1] = correct.float()
        index = np.array([f"g{i // 4}" for i in range(8)], dtype=object)
        adv, ret = estimator(rewards, mask, index=index, config={"lead": {"b_max": 10, "l_min": 2}})
        expected = core(RolloutBatch(group_ids=torch.arange(8) // 4, correct=correct, lengths=lengths))
        torch.testing.assert_close(adv, expected.advantages[:, None] * mask, rtol=0, atol=0)
        assert ret is adv


def test_settings_validation_messages():
    with pytest.raises(ValueError, match=r"algorithm\.lead\.bmax: not a parameter.*allowed keys.*b_max"):
        ve.parse_settings("lead", {"lead": {"bmax": 1}})
    with pytest.raises(ValueError, match=r"algorithm\.lead: invalid parameters"):
        ve.parse_settings("lead", {"lead": {"l_min": -1}})
    with pytest.raises(ValueError, match=r"algorithm\.meds\.fingerprint_norm: must be 'raw' or 'final', got 'x'"):
        ve.parse_settings("meds", {"meds": {"fingerprint_norm": "x"}})
    with pytest.raises(ValueError, match=r"algorithm\.lead\.state_dir"):
        ve.parse_settings("lead", {"lead": {"state_dir": ""}})
    with pytest.raises(ValueError, match=r"algorithm\.lead: expected a mapping"):
        ve.parse_settings("lead", {"lead": 3})
    settings = ve.parse_settings("lead", {"lead": {"b_max": 2000, "correct_threshold": 0}})
    assert dict(settings.shaper_params) == {"b_max": 2000}
    assert settings.correct_threshold == 0.0
    assert ve.parse_settings("lead", None).shaper_params == ()


def test_index_missing_is_explained():
    with pytest.raises(ValueError, match="needs per-prompt uids"):
        ve.make_estimator("lead")(torch.zeros(2, 3), torch.ones(2, 3), index=None, config=None)


def test_extras_rows_must_match():
    extras = ve.EstimatorExtras(prompt_keys=["a"], fingerprints=torch.zeros(1, 2))
    with ve.provide_extras(extras), pytest.raises(ValueError, match=r"extras\.prompt_keys: has 1 rows"):
        ve.make_estimator("lead")(torch.zeros(2, 3), torch.ones(2, 3), index=np.array(["x", "x"]), config=None)


def test_extras_from_trajectory_fields():
    raw = [[{"role": "user", "content": "What is  1+1?"}], [{"role": "user", "content": "What is 1+1?\n"}]]
    fields = [{"reward_extra_info": {"acc": True}}, {"reward_extra_info": {"acc": False}}]
    extras = extras_from_fields(raw, fields, None)
    assert extras.prompt_keys[0] == extras.prompt_keys[1]  # whitespace-normalised, as MEDS keys prompts
    assert extras.prompt_keys[0] == prompt_key_of("What is 1+1?")
    assert extras.correct.tolist() == [True, False]
    partial = extras_from_fields(raw, [fields[0], {"reward_extra_info": {}}], None)
    assert partial.correct is None  # a verdict for some rows only: fall back to the score threshold


def test_prompt_text_formats():
    assert prompt_text("plain") == "plain"
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert prompt_text(chat) == "be brief\n2+2?"
    assert prompt_text(np.array(chat, dtype=object)) == "be brief\n2+2?"


def test_state_is_written_atomically(tmp_path):
    path = tmp_path / "sub" / "state.pt"
    ve.save_state_atomic({"ema": 0.25, "t": torch.tensor([1, 2])}, str(path))
    loaded = torch.load(path, weights_only=False)
    assert loaded["ema"] == 0.25 and loaded["t"].tolist() == [1, 2]
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.pt"]  # no temporary file left behind


def test_when_imported_fires_after_import_and_for_loaded_modules(tmp_path, monkeypatch):
    name = "dynashape_probe_module_xyz"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("VALUE = 41\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported(name, lambda module: seen.append(module.VALUE + 1))
    assert seen == []
    __import__(name)
    assert seen == [42]
    when_imported(name, lambda module: seen.append(module.VALUE))  # already imported: runs now
    assert seen == [42, 41]
    sys.modules.pop(name, None)


def test_verdict_setting_is_validated():
    assert ve.parse_settings("lead", {"lead": {}}).verdict == "auto"
    assert ve.parse_settings("lead", {"lead": {"verdict": "acc"}}).verdict == "acc"
    with pytest.raises(ValueError, match=r"algorithm\.lead\.verdict: must be one of auto, acc, threshold, got 'yes'"):
        ve.parse_settings("lead", {"lead": {"verdict": "yes"}})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (np.array([True, False, True]), [True, False, True]),  # bools (dynashape's and verl's math functions)
        (np.array([1.0, 0.0, 1.0]), [True, False, True]),  # a 0/1 score stored as acc
        (np.array([1, -1, -1]), [True, False, False]),  # DAPO's +1/-1 score stored as acc
        (np.array([True, 0.0, 1], dtype=object), [True, False, True]),  # mixed per-row Python values
        (np.array([True, None], dtype=object), None),  # one row without a verdict: no verdicts at all
        (np.array(["yes", "no"], dtype=object), None),
        (None, None),
    ],
)
def test_correct_from_acc(values, expected):
    got = ve.correct_from_acc(values)
    if expected is None:
        assert got is None
    else:
        assert got.dtype == torch.bool and got.tolist() == expected


def test_correct_from_acc_rejects_nan():
    with pytest.raises(ValueError, match=r"reward_extra_info\['acc'\]: row 1 is nan"):
        ve.correct_from_acc(np.array([1.0, float("nan")]))


def test_empty_and_padding_rows_get_zero_advantage_without_verl():
    estimator = ve.make_estimator("grpo_length")
    lengths = torch.tensor([3, 5, 0, 4, 2, 6])  # row 2: empty response mask
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(6, 8)
    correct = torch.tensor([1, 0, 1, 1, 0, 0]).bool()
    rewards[torch.arange(6), (lengths - 1).clamp(min=0)] = correct.float() * (lengths > 0)
    index = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    padding = torch.tensor([False, False, False, False, False, True])  # row 5: tagged is_padding
    with ve.provide_extras(ve.EstimatorExtras(padding=padding)):
        adv, _ = estimator(rewards, mask, index=index, config=None)
    keep = torch.tensor([0, 1, 3, 4])
    expected = get_shaper("grpo_length")(
        RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=correct[keep], lengths=lengths[keep])
    ).advantages
    torch.testing.assert_close(adv[keep], expected[:, None] * mask[keep], rtol=0, atol=0)
    assert bool((adv[[2, 5]] == 0).all())


class _Evil:
    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (self.marker,))


def test_state_file_round_trip_and_refusals(tmp_path):
    from dynashape.integrations.verl import state as vs

    run = {"project_name": "p", "experiment_name": "e"}
    shaper = get_shaper("lead", b_max=10, l_min=2)
    shaper(RolloutBatch(group_ids=torch.tensor([0, 0]), correct=torch.tensor([1, 0]), lengths=torch.tensor([3, 9])))
    path = str(tmp_path / "global_step_3" / vs.state_file_name("lead"))
    vs.write_state_file(path, estimator="lead", global_step=3, run=run, shaper_state=shaper.state_dict())
    assert vs.load_state_file(path, estimator="lead", global_step=3, run=run) == shaper.state_dict()
    with pytest.raises(ValueError, match="another run"):
        vs.load_state_file(path, estimator="lead", global_step=3, run={**run, "experiment_name": "other"})
    with pytest.raises(ValueError, match="written at global step 3, but verl resumes from step 4"):
        vs.load_state_file(path, estimator="lead", global_step=4, run=run)
    with pytest.raises(ValueError, match="state of estimator 'lead', this run uses 'meds'"):
        vs.load_state_file(path, estimator="meds", global_step=3, run=run)
    marker = tmp_path / "ran"
    torch.save({"format": 1, "shaper": _Evil(marker)}, path)
    with pytest.raises(ValueError, match=rf"{path}: not a dynashape shaper state of plain values and tensors"):
        vs.load_state_file(path, estimator="lead", global_step=3, run=run)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["empty", "truncated", "list", "foreign_run_field"])
def test_a_damaged_state_file_is_a_state_file_error_naming_it(tmp_path, damage):
    from dynashape.integrations.verl import state as vs
    from dynashape.io.state import StateFileError

    run = {"project_name": "p", "experiment_name": "e"}
    path = str(tmp_path / "global_step_3" / vs.state_file_name("lead"))
    vs.write_state_file(path, estimator="lead", global_step=3, run=run, shaper_state={"x": torch.ones(64)})
    raw = open(path, "rb").read()
    if damage == "empty":
        open(path, "wb").close()
    elif damage == "truncated":
        open(path, "wb").write(raw[: len(raw) // 2])
    elif damage == "list":
        torch.save([1, 2], path)
    else:
        torch.save({"format": 1, "estimator": "lead", "global_step": 3, "run": ["p", "e"], "shaper": {}}, path)
    with pytest.raises(StateFileError, match=rf"^{path}: ") as err:
        vs.load_state_file(path, estimator="lead", global_step=3, run=run)
    assert err.value.path == path
    assert sorted(p.name for p in (tmp_path / "global_step_3").iterdir()) == [vs.state_file_name("lead")]


def test_state_paths_follow_verls_folders(tmp_path):
    from dynashape.integrations.verl import state as vs

    cfg = {"trainer": {"default_local_dir": str(tmp_path / "ck"), "resume_mode": "auto"}}
    assert vs.state_path(cfg, "lead", 5, None, resuming=False) == str(
        tmp_path / "ck" / "global_step_5" / "dynashape_lead_state.pt"
    )
    resume = {"trainer": {**cfg["trainer"], "resume_mode": "resume_path", "resume_from_path": str(tmp_path / "x")}}
    assert vs.state_path(resume, "lead", 5, None, resuming=True) == str(tmp_path / "x" / "dynashape_lead_state.pt")
    assert vs.state_path(resume, "lead", 5, str(tmp_path / "s"), resuming=True) == str(
        tmp_path / "s" / "global_step_5" / "dynashape_lead_state.pt"
    )


@pytest.mark.skipif(__import__("importlib").util.find_spec("verl") is not None, reason="verl is installed here")
def test_doctor_without_verl_says_so_and_exits_0(capsys):
    from dynashape.cli import main

    assert main(["doctor"]) == 0
    assert capsys.readouterr().out.strip() == "SKIP verl plugin: verl is not installed in this environment"


def test_nested_extras_holding_tensors_unwind_by_identity():
    # equal-looking extras holding tensors: a comparison by value would raise (a tensor's truth is ambiguous)
    outer = ve.EstimatorExtras(correct=torch.tensor([True, False]), padding=torch.tensor([False, False]))
    inner = ve.EstimatorExtras(correct=torch.tensor([True, False]), padding=torch.tensor([False, False]))
    with ve.provide_extras(outer):
        with ve.provide_extras(inner):
            assert ve.pending_extras() is inner
        assert ve.pending_extras() is outer
    assert ve.pending_extras() is None


@pytest.mark.parametrize("name", ["lead", "meds", "lead_meds"])
@pytest.mark.parametrize("excluded", [(), (1, 6), (0, 3, 4, 9)])
def test_estimator_equals_the_shaper_on_the_kept_rows_in_content_order(name, excluded):
    """Per-row reduction, then selection (estimators.estimate), against a test-local reference that selects the
    [bs, T] rows first and orders a memory shaper's rows by content with a plain sort."""
    gen = torch.Generator().manual_seed(len(excluded))
    bs, width, group = 12, 10, 4
    lengths = torch.randint(1, width + 1, (bs,), generator=gen)
    correct = torch.rand(bs, generator=gen) < 0.5
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(bs, width)
    rewards[torch.arange(bs), lengths - 1] = correct.float()
    index = np.array([f"u{i // group}" for i in range(bs)], dtype=object)
    keys = [f"key-{(i // group) % 2}" for i in range(bs)]
    fingerprints = torch.randn(bs, 3, generator=gen)
    fingerprints[::5] = float("nan")  # rows without an answer
    padding = torch.zeros(bs, dtype=torch.bool)
    padding[list(excluded)] = True
    extras = ve.EstimatorExtras(prompt_keys=keys, fingerprints=fingerprints, correct=correct, padding=padding)
    config = {name: {"b_max": width, "l_min": 2} if name.startswith("lead") else {}}
    ve.reset_sessions()
    with ve.provide_extras(extras):
        adv, _ = ve.make_estimator(name)(rewards, mask, index=index, config=config)
    ve.reset_sessions()

    kept = [i for i in range(bs) if i not in excluded]
    if ve.shaper_needs(name).prompt_keys:  # by key, verdict, taken, fingerprint values, length (as documented)

        def content(i):
            fp = fingerprints[i]
            taken = bool(torch.isfinite(fp).all())
            return (keys[i], bool(correct[i]), not taken, tuple(fp.tolist()) if taken else (0.0,) * 3, int(lengths[i]))

        kept = sorted(kept, key=content)
    uids = sorted(set(index[kept].tolist()))
    batch = RolloutBatch(
        group_ids=torch.tensor([uids.index(index[i]) for i in kept]),
        correct=correct[kept],
        lengths=lengths[kept],
        prompt_keys=[keys[i] for i in kept],
        fingerprints=fingerprints[kept],
    )
    expected = torch.zeros(bs)
    expected[kept] = get_shaper(name, **config[name])(batch).advantages.float()
    torch.testing.assert_close(adv, expected[:, None] * mask, rtol=0, atol=0)
    assert bool((adv[list(excluded)] == 0).all())
