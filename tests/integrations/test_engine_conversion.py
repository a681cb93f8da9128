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
from dynashape.integrations import verl_estimators as ve
from dynashape.integrations._post_import import when_imported
from dynashape.integrations._prompts import prompt_key_of, prompt_text
from dynashape.integrations.verl_trainer import extras_from_fields


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
