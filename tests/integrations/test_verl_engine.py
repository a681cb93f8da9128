"""Our estimators inside the real verl 0.9.1 (CPU): entry point, compute_advantage on a DataProto, config errors.

Run in the verl test environment (requirements/verl.txt, ci/integration.sh verl); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
omegaconf = pytest.importorskip("omegaconf")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

from verl import DataProto  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.verl import estimators as verl_estimators  # noqa: E402

OUR_NAMES = ("lead", "shorterbetter", "grpo_length", "meds", "lead_meds")


def make_data(seed: int, prompts: int = 4, group: int = 4, width: int = 48) -> tuple[DataProto, dict]:
    """A verl batch: outcome score at the last valid token, right-padded response mask, uid per prompt."""
    gen = torch.Generator().manual_seed(seed)
    bs = prompts * group
    lengths = torch.randint(1, width + 1, (bs,), generator=gen)
    correct = torch.rand(bs, generator=gen) < 0.5
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(bs, width)
    rewards[torch.arange(bs), lengths - 1] = correct.float()
    uids = np.array([f"uid-{seed}-{i // group}" for i in range(bs)], dtype=object)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids}
    )
    truth = {"correct": correct, "lengths": lengths, "group_ids": torch.arange(bs) // group}
    return data, truth


def run_verl(data: DataProto, name: str, section: dict) -> DataProto:
    config = omegaconf.OmegaConf.create({"adv_estimator": name, name: section})
    return ray_trainer.compute_advantage(data, adv_estimator=name, config=config)


def test_entry_point_registers_estimators_in_a_fresh_interpreter():
    code = (
        "import json, verl\n"
        "from verl.trainer.ppo import core_algos\n"
        "reg = core_algos.ADV_ESTIMATOR_REGISTRY\n"
        "names = ['lead', 'lead_meds', 'meds', 'shorterbetter', 'grpo_length']\n"
        "print(json.dumps({n: getattr(reg.get(n), '__module__', None) for n in names}))\n"
    )
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    from dynashape import available_shapers

    for name in OUR_NAMES:
        expected = "dynashape.integrations.verl.estimators" if name in available_shapers() else None
        assert found[name] == expected, (name, found)


def test_plugins_none_disables_registration():
    code = "import verl\nfrom verl.trainer.ppo import core_algos\nprint('lead' in core_algos.ADV_ESTIMATOR_REGISTRY)\n"
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize(
    ("name", "section"),
    [
        ("lead", {"b_max": 40, "l_min": 10}),
        ("lead", {"b_max": 30, "l_min": 5, "whiten": "sequence", "target": "median_correct"}),
        ("shorterbetter", {}),
        ("grpo_length", {}),
    ],
)
def test_compute_advantage_equals_core_shaper_broadcast(name, section):
    core = get_shaper(name, **section)
    for step in range(3):  # stateful shapers: every step must match, state advancing in lockstep
        data, truth = make_data(seed=step)
        mask = data.batch["response_mask"].clone()
        out = run_verl(data, name, section)
        expected = core(RolloutBatch(**truth)).advantages
        torch.testing.assert_close(out.batch["advantages"], expected[:, None] * mask, rtol=0, atol=0)
        torch.testing.assert_close(out.batch["returns"], out.batch["advantages"], rtol=0, atol=0)
        assert bool((out.batch["advantages"][mask == 0] == 0).all())


def test_lead_metrics_are_kept_for_the_trainer():
    data, _ = make_data(seed=0)
    run_verl(data, "lead", {"b_max": 40, "l_min": 10})
    metrics = verl_estimators.last_metrics("lead")
    assert 0.0 <= metrics["lead/lambda_c"] <= 1.0
    assert metrics["lead/lambda_c"] + metrics["lead/lambda_l"] == pytest.approx(1.0)


def test_unknown_key_is_a_clear_config_error():
    data, _ = make_data(seed=0)
    with pytest.raises(ValueError, match=r"algorithm\.lead\.bmax: not a parameter of the 'lead'.*b_max"):
        run_verl(data, "lead", {"bmax": 4000})


def test_bad_value_names_the_section_and_the_field():
    data, _ = make_data(seed=0)
    with pytest.raises(ValueError, match=r"algorithm\.lead: invalid parameters.*b_max"):
        run_verl(data, "lead", {"b_max": -5})


def test_meds_without_the_trainer_explains_how_to_enable_it():
    from dynashape import available_shapers

    if "meds" not in available_shapers():
        pytest.skip("meds shaper not in this build")
    data, _ = make_data(seed=0)
    with pytest.raises(ValueError, match=r"trainer\.v1\.trainer_mode=dynashape"):
        run_verl(data, "meds", {})


def test_verifier_reward_function_is_importable_by_verl_path():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = omegaconf.OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://dynashape.integrations.verl", "name": "compute_score"}}}
    )
    fn = get_custom_reward_fn(config)
    assert fn is not None
    result = fn(data_source="math", solution_str="so the answer is \\boxed{42}", ground_truth="42")
    score = result["score"] if isinstance(result, dict) else result
    assert score == 1.0
    result = fn(data_source="math", solution_str="\\boxed{41}", ground_truth="42")
    assert (result["score"] if isinstance(result, dict) else result) == 0.0


def meds_extras(seed: int, bs: int, width: int = 6):
    gen = torch.Generator().manual_seed(100 + seed)
    prints = torch.randn(bs, width, generator=gen)
    prints[::5] = float("nan")  # rollouts without a \boxed{} answer
    keys = [f"prompt-{i // 4 % 2}" for i in range(bs)]  # prompts recur across steps: memory must hit
    return verl_estimators.EstimatorExtras(prompt_keys=keys, fingerprints=prints)


@pytest.mark.parametrize(("name", "section"), [("meds", {}), ("lead_meds", {"b_max": 40, "l_min": 10})])
def test_meds_estimators_with_trainer_extras_equal_core_shaper(name, section):
    core = get_shaper(name, **section)
    for step in range(3):
        data, truth = make_data(seed=step)
        mask = data.batch["response_mask"].clone()
        extras = meds_extras(step, len(mask))
        with verl_estimators.provide_extras(extras):
            out = run_verl(data, name, section)
        batch = RolloutBatch(**truth, prompt_keys=extras.prompt_keys, fingerprints=extras.fingerprints)
        expected = core(batch).advantages[:, None] * mask
        torch.testing.assert_close(out.batch["advantages"], expected, rtol=0, atol=0)
    assert verl_estimators.last_metrics(name)["meds/points"] > 0


def test_meds_residual_reward_carries_the_dapo_score():
    """DAPO scores +1/-1 (+ overlong): with residual_reward the MEDS base reward is verl's score itself."""
    data, truth = make_data(seed=3)
    score = torch.where(truth["correct"], 1.0, -1.0) - 0.25 * (truth["lengths"] > 40)
    rewards = torch.zeros_like(data.batch["token_level_rewards"])
    rewards[torch.arange(len(score)), truth["lengths"] - 1] = score
    data.batch["token_level_rewards"] = rewards
    mask = data.batch["response_mask"].clone()
    extras = verl_estimators.EstimatorExtras(
        prompt_keys=[str(g) for g in truth["group_ids"].tolist()],
        fingerprints=torch.full((len(score), 3), float("nan")),  # no memory hits: plain GRPO on the score
        correct=truth["correct"],
    )
    with verl_estimators.provide_extras(extras):
        out = run_verl(data, "meds", {"residual_reward": True})
    # Hand-rolled GRPO on the score (unbiased std, eps 1e-6), as meds.md section 3 with a zero penalty.
    groups = truth["group_ids"]
    expected = torch.empty_like(score)
    for g in groups.unique():
        s = score[groups == g].double()
        expected[groups == g] = ((s - s.mean()) / (s.std() + 1e-6)).float()
    torch.testing.assert_close(out.batch["advantages"], expected[:, None] * mask, rtol=1e-5, atol=1e-6)


def test_meds_memory_does_not_depend_on_verl_row_order():
    """verl hands rows over in the order rollouts finished, which differs between runs (a resumed run stored the
    same points in another order). The memory's order decides its kNN ties and which points the per-bank cap
    drops, so the estimator stores rows in content order: state and advantages are the same for any order."""
    section = {"max_per_bank": 3}
    states, advantages = [], []
    for shuffle in (False, True):
        verl_estimators.reset_sessions()
        got = []
        for step in range(3):
            data, _ = make_data(seed=step)
            extras = meds_extras(step, len(data))
            order = torch.randperm(len(data), generator=torch.Generator().manual_seed(step)) if shuffle else None
            if order is not None:
                data = data.select_idxs(order.numpy())
                extras = verl_estimators.EstimatorExtras(
                    prompt_keys=[extras.prompt_keys[i] for i in order.tolist()], fingerprints=extras.fingerprints[order]
                )
            with verl_estimators.provide_extras(extras):
                out = run_verl(data, "meds", section)
            adv = out.batch["advantages"][:, 0].clone()
            if order is not None:
                adv = adv[torch.argsort(order)]
            got.append(adv)
        advantages.append(torch.stack(got))
        states.append(
            verl_estimators.session_for("meds", omegaconf.OmegaConf.create({"meds": section})).shaper.state_dict()
        )
    torch.testing.assert_close(advantages[0], advantages[1], rtol=0, atol=0)
    memory = [s["memory"] for s in states]
    assert memory[0]["prompt_keys"] == memory[1]["prompt_keys"] and memory[0]["correct"] == memory[1]["correct"]
    for field in ("lengths", "vectors", "labels"):
        assert torch.equal(memory[0][field], memory[1][field]), field
