"""The field's length methods in verl 0.9.1 (CPU): budgets from the dataset, AALC's validation accuracy, LASER-D's
monitor from verl's validation, GFPO's dropped rows, the checkpointed state after a validation, refused configs.

As in test_verl_trainer.py, TransferQueue is an in-memory store and verl's PPOTrainer.__init__ is reduced to the
config; verl's own ``_compute_advantage`` (-> ``compute_advantage`` -> our estimator) and
``_val_metrics_update`` run unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
tq = pytest.importorskip("transfer_queue")
omegaconf = pytest.importorskip("omegaconf")
v1 = pytest.importorskip("verl.trainer.ppo.v1")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.verl import hooks  # noqa: E402
from dynashape.integrations.verl.checks import VerlConfigError, check_config, config_problems  # noqa: E402
from dynashape.integrations.verl.convert import budgets_from_non_tensor  # noqa: E402
from dynashape.integrations.verl.estimators import EstimatorExtras, provide_extras, reset_sessions  # noqa: E402
from dynashape.integrations.verl.settings import parse_settings  # noqa: E402
from dynashape.integrations.verl.state import state_path  # noqa: E402
from dynashape.io.state import torch_load  # noqa: E402

FIELD = ("l1_exact", "l1_max", "thinkprune", "laser", "laser_d", "dler", "alp", "adlp", "aalc", "saw", "gfpo")


@pytest.fixture(autouse=True)
def fresh_sessions():
    reset_sessions()
    yield
    reset_sessions()


class Meta:
    """Stands in for transfer_queue.KVBatchMeta."""

    def __init__(self, n: int, partition_id: str = "train") -> None:
        self.keys = [f"k{i}" for i in range(n)]
        self.partition_id = partition_id
        self.extra_info: dict = {}
        self.tags = [{} for _ in range(n)]

    def __len__(self) -> int:
        return len(self.keys)


@pytest.fixture
def store(monkeypatch):
    """An in-memory TransferQueue: one TensorDict per partition; kv_clear records what it cleared."""
    box: dict = {"cleared": [], "val_keys": []}

    def get(keys, partition_id, select_fields):
        td = box[partition_id]
        if partition_id == "val" and list(keys) != box["val_keys"]:  # as TransferQueue: tag-only keys hold no fields
            raise ValueError("Some fields are not ready in all the requested keys!")
        return td.select(*[f for f in select_fields if f in td.keys()])

    def put(keys, partition_id, fields):
        for key in fields.keys():
            box[partition_id][key] = fields[key]

    def clear(keys, partition_id):
        box["cleared"].append(partition_id)

    monkeypatch.setattr(tq, "kv_batch_get", get)
    monkeypatch.setattr(tq, "kv_batch_put", put)
    monkeypatch.setattr(tq, "kv_clear", clear)
    return box


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def rows_td(uids, lengths, acc, *, budgets=None, loss_mask=True):
    """verl's per-trajectory fields for rows in verl's order (groups interleaved, as rollouts finish)."""
    scores = [torch.zeros(n) for n in lengths]
    for s, a in zip(scores, acc, strict=True):
        s[-1] = float(a)
    fields = {
        "uid": list(uids),
        "response_mask": nested([torch.ones(n, dtype=torch.long) for n in lengths]),
        "rm_scores": nested(scores),
        "raw_prompt": [[{"role": "user", "content": f"question {u}"}] for u in uids],
        "extra_fields": [{"reward_extra_info": {"acc": bool(a), "score": float(a)}} for a in acc],
    }
    if loss_mask:
        fields["loss_mask"] = nested([torch.ones(n, dtype=torch.long) for n in lengths])
    if budgets is not None:
        fields["reward_model"] = [{"ground_truth": "3", "num_tokens": b} for b in budgets]
    return tu.get_tensordict(tensor_dict=fields)


def config(tmp_path, name, section=None, **over):
    cfg = {
        "algorithm": {
            "adv_estimator": name,
            name: dict(section or {}),
            "use_kl_in_reward": False,
            "gamma": 1.0,
            "lam": 1.0,
            "norm_adv_by_std_in_grpo": True,
        },
        "actor_rollout_ref": {
            "rollout": {"n": 3, "temperature": 1.0, "val_kwargs": {"n": 3, "do_sample": True, "temperature": 1.0}}
        },
        "trainer": {
            "default_local_dir": str(tmp_path),
            "resume_mode": "auto",
            "project_name": "p",
            "experiment_name": "e",
            "test_freq": 10,
            "val_before_train": True,
            "use_v1": True,
            "v1": {"trainer_mode": "dynashape"},
        },
    }
    conf = omegaconf.OmegaConf.create(cfg)
    for dotted, value in over.items():
        omegaconf.OmegaConf.update(conf, dotted.replace("__", "."), value)
    return conf


@pytest.fixture
def make_trainer(monkeypatch):
    def init(self, cfg):
        self.config = cfg
        self.trainer_mode = cfg.trainer.v1.trainer_mode
        self.global_steps = 0

    monkeypatch.setattr(PPOTrainer, "__init__", init)
    cls = v1.get_trainer_cls("dynashape")
    return lambda cfg: cls(cfg)


def per_row(td_advantages):
    """[bs] per-row advantage from verl's nested advantages (every token carries the row's value)."""
    return torch.tensor([float(row[0]) if len(row) else 0.0 for row in td_advantages.unbind()])


# ---------------------------------------------------------------------------------------------------------
# Every field method is a verl estimator equal to its shaper
# ---------------------------------------------------------------------------------------------------------

UIDS = ["b", "a", "b", "a", "a", "b"]  # verl's order: groups interleaved
LENGTHS = [12, 5, 30, 9, 40, 7]
ACC = [True, True, False, True, False, True]
BUDGETS = [10, 20, 30, 10, 20, 30]
TRUNCATED = [False, False, False, False, True, False]  # row 4 reached a cap of 40 tokens
FORMATTED = [True, True, True, True, False, True]


@pytest.mark.parametrize("name", FIELD)
def test_every_field_estimator_is_registered_and_equals_its_shaper(name):
    fn = core_algos.get_adv_estimator_fn(name)
    width = max(LENGTHS)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    rewards = torch.zeros(len(UIDS), width)
    for i, (n, a) in enumerate(zip(LENGTHS, ACC, strict=True)):
        rewards[i, n - 1] = float(a)
    extras = EstimatorExtras(
        correct=torch.tensor(ACC),
        budgets=torch.tensor(BUDGETS),
        truncated=torch.tensor(TRUNCATED),
        formatted=torch.tensor(FORMATTED),
        drops_rows=True,
    )  # what the trainer mode hands over
    with provide_extras(extras):
        adv, returns = fn(
            token_level_rewards=rewards, response_mask=mask, index=np.array(UIDS, dtype=object), config={}
        )
    groups = torch.tensor([1, 0, 1, 0, 0, 1])  # uids numbered by sorted value
    batch = RolloutBatch(group_ids=groups, correct=torch.tensor(ACC), lengths=torch.tensor(LENGTHS))
    if get_shaper(name).needs.budgets:
        batch = RolloutBatch(**{**batch.__dict__, "budgets": torch.tensor(BUDGETS)})
    flags = {"truncated": torch.tensor(TRUNCATED), "formatted": torch.tensor(FORMATTED)}
    batch = RolloutBatch(**{**batch.__dict__, **flags})
    expected = get_shaper(name)(batch).advantages
    torch.testing.assert_close(adv, expected[:, None] * mask, rtol=0, atol=0)
    torch.testing.assert_close(returns, adv)


# ---------------------------------------------------------------------------------------------------------
# Budgets (L1): read from the dataset's extra info, in verl's row order
# ---------------------------------------------------------------------------------------------------------


def test_budgets_read_each_row_from_the_dotted_key():
    rows = np.array(
        [{"ground_truth": "1", "num_tokens": 100}, {"ground_truth": "2", "num_tokens": 250.0}], dtype=object
    )
    got = budgets_from_non_tensor({"reward_model": rows})
    assert got.dtype == torch.long and got.tolist() == [100, 250]
    assert budgets_from_non_tensor({"extra_info": [{"l1": {"n": 7}}]}, "extra_info.l1.n").tolist() == [7]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"num_tokens": 5}, {"ground_truth": "2"}], r"'reward_model.num_tokens': row 1 has no 'num_tokens'"),
        ([{"num_tokens": 5}, {"num_tokens": -3}], r"row 1 holds -3; expected a non-negative integer"),
        ([{"num_tokens": 2.5}], r"row 0 holds 2.5"),
        ([{"num_tokens": True}], r"row 0 holds True"),
        ([{"num_tokens": "100"}], r"row 0 holds '100'"),
        ([{"num_tokens": float("nan")}], r"row 0 holds nan"),
    ],
)
def test_a_missing_or_bad_budget_names_the_key_the_row_and_the_value(rows, message):
    with pytest.raises(ValueError, match=message):
        budgets_from_non_tensor({"reward_model": rows})


def test_a_missing_budget_column_names_the_key():
    with pytest.raises(
        ValueError, match=r"budget key 'reward_model.num_tokens': the batch has no field 'reward_model'"
    ):
        budgets_from_non_tensor({"uid": ["a"]})


def test_trainer_mode_hands_each_row_its_own_budget(make_trainer, store, tmp_path):
    """Hand-worked L1-Exact (alpha 0.01), one group of three correct rows stored out of order:
    |budget - length| = 0, 0, 20 -> r = 1, 1, 0.8 -> GRPO (Bessel std 0.11547) = 0.57735, 0.57735, -1.1547.
    Rows with another prompt's budgets would give other values."""
    trainer = make_trainer(config(tmp_path, "l1_exact", {"alpha": 0.01}))
    # verl's order: row 0 = third rollout, row 1 = first, row 2 = second
    store["train"] = rows_td(["q", "q", "q"], [50, 10, 30], [True] * 3, budgets=[30, 10, 30])
    trainer._compute_advantage(Meta(3), {})
    got = per_row(store["train"]["advantages"])
    torch.testing.assert_close(got, torch.tensor([-1.1547, 0.57735, 0.57735]), rtol=0, atol=1e-4)


def test_trainer_mode_reads_a_configured_budget_key(make_trainer, store, tmp_path):
    trainer = make_trainer(config(tmp_path, "l1_exact", {"alpha": 0.01, "budget_key": "extra_info.target"}))
    td = rows_td(["q", "q", "q"], [50, 10, 30], [True] * 3)
    td["extra_info"] = [{"target": 30}, {"target": 10}, {"target": 30}]
    store["train"] = td
    trainer._compute_advantage(Meta(3), {})
    torch.testing.assert_close(
        per_row(store["train"]["advantages"]), torch.tensor([-1.1547, 0.57735, 0.57735]), rtol=0, atol=1e-4
    )


def test_trainer_mode_fails_at_step_one_without_the_budget(make_trainer, store, tmp_path):
    trainer = make_trainer(config(tmp_path, "l1_max"))
    store["train"] = rows_td(["q", "q"], [5, 6], [True, False], budgets=[100, None])
    with pytest.raises(ValueError, match=r"'reward_model.num_tokens': row 1 holds None"):
        trainer._compute_advantage(Meta(2), {})


def test_legacy_trainer_reads_budgets_from_non_tensor_batch():
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    width, lengths = 50, [50, 10, 30]
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.zeros(3, width)
    for i, n in enumerate(lengths):
        rewards[i, n - 1] = 1.0
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={
            "uid": np.array(["q"] * 3, dtype=object),
            "reward_model": np.array([{"num_tokens": b} for b in (30, 10, 30)], dtype=object),
        },
    )
    algo = omegaconf.OmegaConf.create({"adv_estimator": "l1_exact", "l1_exact": {"alpha": 0.01}})
    out = ray_trainer.compute_advantage(data, adv_estimator="l1_exact", num_repeat=3, config=algo)
    got = out.batch["advantages"][:, 0]
    torch.testing.assert_close(got, torch.tensor([-1.1547, 0.57735, 0.57735]), rtol=0, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# Truncation (DLER, stop_properly) and format (LASER): the rows verl cut at its cap, the reward's "formatted"
# ---------------------------------------------------------------------------------------------------------


def test_trainer_mode_hands_dler_the_rows_cut_at_max_response_length(make_trainer, store, tmp_path):
    """Hand-worked DLER, issue 49's group at a cap of 40: lengths 40 (cut, judged correct), 10, 20, 30; acc 1 1 0 0.
    r = [0.1, 1, 0, 0]; centred [-.175, .725, -.275, -.275]; token mean over 100 tokens -.135; deviations
    [-.04, .86, -.14, -.14]; var (40 * .0016 + 10 * .7396 + 50 * .0196) / 99 = .0852525; sqrt .2919803;
    A = [-.136995, 2.945404, -.479485, -.479485], plus the official boost 0.1 on the two rows scoring 1 before the
    multiplier: [-.036995, 3.045404, -.479485, -.479485]. Without the cut flag the first row's A would be larger."""
    trainer = make_trainer(config(tmp_path, "dler", data__max_response_length=40))
    store["train"] = rows_td(["q"] * 4, [40, 10, 20, 30], [True, True, False, False])
    trainer._compute_advantage(Meta(4), {})
    got = per_row(store["train"]["advantages"])
    torch.testing.assert_close(got, torch.tensor([-0.036995, 3.045404, -0.479485, -0.479485]), rtol=0, atol=1e-5)


def test_trainer_mode_reads_the_rollout_response_length_first(make_trainer, store, tmp_path):
    cfg = config(
        tmp_path, "grpo_length", data__max_response_length=4000, actor_rollout_ref__rollout__response_length=30
    )
    from dynashape.integrations.verl.queue_fields import max_response_length

    assert max_response_length(cfg) == 30
    assert max_response_length(config(tmp_path, "dler", data__max_response_length=64)) == 64
    assert max_response_length(config(tmp_path, "dler")) is None


def test_dler_without_a_response_cap_names_truncated(make_trainer, store, tmp_path):
    trainer = make_trainer(config(tmp_path, "dler"))
    store["train"] = rows_td(["q"] * 2, [40, 10], [True, False])
    with pytest.raises(ValueError, match=r"the 'dler' advantage estimator reads truncated \[bs\]"):
        trainer._compute_advantage(Meta(2), {})


def test_the_stop_properly_part_in_the_trainer_mode(make_trainer, store, tmp_path):
    """grpo_length with stop_properly=0.5 (key accepted under algorithm.<name>): rows [cut correct, correct]:
    c = [1, 1] -> [0.5, 1] -> GRPO of one group of 2 (Bessel std .353553): [-0.707105, 0.707105]."""
    section = {"stop_properly": 0.5, "weights": [1.0, 0.0]}
    trainer = make_trainer(config(tmp_path, "grpo_length", section, data__max_response_length=40))
    store["train"] = rows_td(["q"] * 2, [40, 10], [True, True])
    trainer._compute_advantage(Meta(2), {})
    torch.testing.assert_close(
        per_row(store["train"]["advantages"]), torch.tensor([-0.707105, 0.707105]), atol=1e-5, rtol=0
    )


def test_overlong_under_the_algorithm_section_is_checked_at_parse():
    ok = parse_settings("grpo_length", {"grpo_length": {"overlong": {"max_length": 40, "buffer": 10}}})
    assert dict(ok.shaper_params)["overlong"] == {"max_length": 40, "buffer": 10}
    assert ok.build_shaper().penalties[0].buffer == 10
    with pytest.raises(
        ValueError, match=r"algorithm.grpo_length: invalid penalty .*buffer must be in \(0, max_len=40\]"
    ):
        parse_settings("grpo_length", {"grpo_length": {"overlong": {"max_length": 40, "buffer": 50}}})


def test_laser_reads_formatted_from_the_reward_and_names_it_when_missing(make_trainer, store, tmp_path):
    """LASER's official score in the trainer mode: [correct formatted 10 tokens, wrong formatted, correct unformatted]
    r = [1 + .5, -.5, -1] (L_T 20), mean 0; Bessel var 3.5 / 2, std 1.322876: A = [1.133893, -.377964, -.755929]."""
    trainer = make_trainer(config(tmp_path, "laser", {"target_length": 20}))
    td = rows_td(["q"] * 3, [10, 12, 14], [True, False, True])
    store["train"] = td
    with pytest.raises(ValueError, match=r"the 'laser' advantage estimator reads formatted \[bs\]"):
        trainer._compute_advantage(Meta(3), {})
    td["extra_fields"] = [
        {"reward_extra_info": {"acc": a, "formatted": f}} for a, f in ((True, True), (False, True), (True, False))
    ]
    store["train"] = td
    trainer._compute_advantage(Meta(3), {})
    torch.testing.assert_close(
        per_row(store["train"]["advantages"]), torch.tensor([1.133893, -0.377964, -0.755929]), rtol=0, atol=1e-5
    )


def test_formatted_is_read_from_the_reward_extra_info():
    from dynashape.integrations.verl.trainer import extras_from_fields

    fields = [{"reward_extra_info": {"acc": a, "formatted": f}} for a, f in ((True, True), (False, False))]
    extras = extras_from_fields(None, fields, None, truncated=torch.tensor([False, True]))
    assert extras.formatted.tolist() == [True, False] and extras.truncated.tolist() == [False, True]
    missing = [{"reward_extra_info": {"acc": True}}, {"reward_extra_info": {"acc": False, "formatted": True}}]
    assert extras_from_fields(None, missing, None).formatted is None  # not every row says: none


def test_legacy_trainer_finds_the_rows_that_fill_the_padded_width():
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    width, lengths = 40, [40, 10, 20, 30]
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.zeros(4, width)
    for i, (n, a) in enumerate(zip(lengths, (1, 1, 0, 0), strict=True)):
        rewards[i, n - 1] = float(a)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": torch.zeros(4, width).long()},
        non_tensors={"uid": np.array(["q"] * 4, dtype=object)},
    )
    assert hooks.legacy_truncated(data.batch).tolist() == [True, False, False, False]
    algo = omegaconf.OmegaConf.create({"adv_estimator": "dler", "dler": {"correct_boost": 0.0}})
    out = ray_trainer.compute_advantage(data, adv_estimator="dler", num_repeat=4, config=algo)
    torch.testing.assert_close(
        out.batch["advantages"][:, 0], torch.tensor([-0.136995, 2.945404, -0.479485, -0.479485]), rtol=0, atol=1e-5
    )


# ---------------------------------------------------------------------------------------------------------
# AALC: verl's own validation metric
# ---------------------------------------------------------------------------------------------------------


def verl_val_metrics():
    """verl's validation metrics for two data sources, 2 prompts x 2 samples each, computed by verl itself.
    gsm8k rewards 1, 0 | 1, 1 -> mean@2 = (0.5 + 1) / 2 = 0.75; math 0, 0 | 1, 0 -> 0.25."""
    sources = ["gsm8k"] * 4 + ["math"] * 4
    uids = ["g1", "g1", "g2", "g2", "m1", "m1", "m2", "m2"]
    reward = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    infos = {"reward": reward, "acc": [r > 0.5 for r in reward]}
    return PPOTrainer._val_metrics_update(None, sources, uids, infos, [])


def test_first_validation_metric_is_verls_first_reward_mean():
    metrics = verl_val_metrics()
    # verl's first metric, the one AALC's code reads (val-aux: acc is verl's core variable when the reward returns it)
    assert next(iter(metrics)) == "val-aux/gsm8k/reward/mean@2"
    assert hooks.validation_accuracy(metrics, "first") == ("val-aux/gsm8k/reward/mean@2", 0.75)
    assert hooks.validation_accuracy(metrics, "val-core/math/acc/mean@2") == ("val-core/math/acc/mean@2", 0.25)
    with pytest.raises(ValueError, match=r"validation_metric=val-core/nope: not among"):
        hooks.validation_accuracy(metrics, "val-core/nope")
    with pytest.raises(ValueError, match=r"reported no val-\*/<data_source>/reward/mean@N"):
        hooks.validation_accuracy({"val-aux/num_turns/min": 1.0}, "first")


class FakeTrainer:
    def __init__(self, cfg, step=0):
        self.config = cfg
        self.global_steps = step


def test_aalc_observes_the_metric_after_each_validation(tmp_path):
    trainer = FakeTrainer(config(tmp_path, "aalc"), step=10)
    logged = hooks.observe_validation(trainer, verl_val_metrics())
    assert logged == {"dynashape/validation_accuracy": 0.75}
    session = hooks.session_for("aalc", trainer.config.algorithm)
    assert session.shaper.state_dict()["schedule"]["val_accuracy"] == 0.75
    # a shaper that reads no validation is left alone
    assert hooks.observe_validation(FakeTrainer(config(tmp_path, "adlp"), 10), verl_val_metrics()) == {}


def test_state_saved_before_a_validation_is_rewritten_after_it_and_resume_keeps_it(tmp_path):
    """verl saves at step 10, then validates at step 10: the file must hold A_val of that validation, and the
    resumed run's validation before training (same step) must not observe it a second time."""
    cfg = config(tmp_path, "aalc")
    trainer = FakeTrainer(cfg, step=10)
    hooks.save_shaper_state(trainer)
    path = state_path(cfg, "aalc", 10, None, resuming=False)
    assert torch_load(path)["shaper"]["schedule"]["val_accuracy"] is None and not torch_load(path)["validated"]
    hooks.observe_validation(trainer, verl_val_metrics())
    payload = torch_load(path)
    assert payload["shaper"]["schedule"]["val_accuracy"] == 0.75 and payload["validated"]

    reset_sessions()  # a new driver resumes from step 10
    resumed = FakeTrainer(cfg, step=10)
    hooks.load_shaper_state(resumed)
    session = hooks.session_for("aalc", cfg.algorithm)
    assert session.shaper.state_dict()["schedule"]["val_accuracy"] == 0.75
    other = {"val-aux/gsm8k/reward/mean@2": 0.5}
    assert hooks.observe_validation(resumed, other) == {}  # val_before_train at the restored step
    assert session.shaper.state_dict()["schedule"]["val_accuracy"] == 0.75
    resumed.global_steps = 20
    hooks.observe_validation(resumed, other)  # the next one is observed
    assert session.shaper.state_dict()["schedule"]["val_accuracy"] == 0.5


# ---------------------------------------------------------------------------------------------------------
# LASER-D: the monitor is verl's validation pass
# ---------------------------------------------------------------------------------------------------------

LASER_D = {"grid": [4, 8, 16, 32], "refresh_every": 10, "n_rollout": 3}


def test_laser_d_gets_the_validation_rows(make_trainer, store, monkeypatch, tmp_path):
    """Two validation batches; verl clears each from TransferQueue, the trainer reads it first. The shaper then
    holds the targets of exactly those rows, as the core shaper observing the same monitor."""
    batches = [
        rows_td(["v1", "v2", "v1", "v2", "v1", "v2"], [3, 7, 5, 20, 6, 30], [True, False, True, True, False, False]),
        rows_td(["v3", "v3", "v3"], [2, 9, 12], [True, True, True]),
    ]

    class ReplayBuffer:  # verl's: sampling partition "val" clears its tag-only prompt markers
        def sample(self, global_steps, partition_id, batch_size):
            tq.kv_clear(keys=["prompt-uid"], partition_id=partition_id)
            return Meta(batch_size, partition_id), {}

    def verl_validate(self):  # verl's loop: each batch generated, sampled, read for metrics, then cleared
        for td in batches:
            store["val"], store["val_keys"] = td, [f"k{i}" for i in range(len(td))]
            batch, _ = self.replay_buffer.sample(global_steps=0, partition_id="val", batch_size=len(td))
            tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        return {"val-core/arith/acc/mean@3": 0.5}

    monkeypatch.setattr(PPOTrainer, "_validate", hooks.wrap_validate(verl_validate))
    trainer = make_trainer(config(tmp_path, "laser_d", LASER_D))
    trainer.replay_buffer = ReplayBuffer()
    metrics = trainer._validate()
    assert metrics["dynashape/monitor_rows"] == 9.0
    assert store["cleared"] == ["val"] * 4 and tq.kv_clear.__name__ == "clear"  # verl's clear restored
    assert "sample" not in vars(trainer.replay_buffer)  # and the buffer's own sample

    core = get_shaper("laser_d", **LASER_D)
    core.observe(
        monitor=RolloutBatch(
            group_ids=torch.tensor([0, 1, 0, 1, 0, 1, 2, 2, 2]),
            correct=torch.tensor([True, False, True, True, False, False, True, True, True]),
            lengths=torch.tensor([3, 7, 5, 20, 6, 30, 2, 9, 12]),
        )
    )
    got = hooks.session_for("laser_d", trainer.config.algorithm).shaper.state_dict()
    assert got == core.state_dict() and got["buckets"]["refreshes"] == 1


# ---------------------------------------------------------------------------------------------------------
# GFPO: dropped rows carry no loss term
# ---------------------------------------------------------------------------------------------------------


def test_gfpo_masks_exactly_the_dropped_rows(make_trainer, store, tmp_path):
    """keep=2 shortest of each group of 3: group a (lengths 5, 9, 40) drops row 4; group b (12, 30, 7) drops
    row 2. Those rows' response_mask and loss_mask become 0 and their advantage 0; the others are untouched."""
    trainer = make_trainer(config(tmp_path, "gfpo", {"keep": 2}))
    store["train"] = rows_td(UIDS, LENGTHS, ACC)
    metrics: dict = {}
    trainer._compute_advantage(Meta(len(UIDS)), metrics)
    dropped = [False, False, True, False, True, False]
    for key in ("response_mask", "loss_mask"):
        rows = store["train"][key].unbind()
        assert [int(r.sum()) for r in rows] == [0 if d else n for n, d in zip(LENGTHS, dropped, strict=True)], key
        assert [len(r) for r in rows] == LENGTHS, key  # shapes kept
    assert metrics["dynashape/dropped_rows"] == 2.0
    adv = per_row(store["train"]["advantages"])
    assert adv[2] == 0 and adv[4] == 0
    core = get_shaper("gfpo", keep=2)(
        RolloutBatch(
            group_ids=torch.tensor([1, 0, 1, 0, 0, 1]), correct=torch.tensor(ACC), lengths=torch.tensor(LENGTHS)
        )
    )
    assert core.keep.tolist() == [not d for d in dropped]
    torch.testing.assert_close(adv, core.advantages, rtol=0, atol=0)


# verl's loss aggregations on a GFPO batch: two groups of 4 in verl's interleaved order, keep=3 (the 3 shortest)
AGG_UIDS = ["b", "a", "b", "a", "a", "b", "a", "b"]
AGG_LENGTHS = [7, 5, 12, 9, 40, 60, 50, 30]
AGG_ACC = [True, True, True, False, False, False, True, False]
AGG_LOG_RATIO = [0.02, -0.05, 0.1, 0.04, 0.0, 0.0, 0.0, -0.08]  # log(pi / pi_old) per row, inside the clip
VERL_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _gfpo_loss_by_hand(mode: str) -> float:
    """GFPO's loss over the kept rows only, worked per row. Kept: a = rows 1 (5 tokens, right), 3 (9, wrong),
    4 (40, wrong); b = rows 0 (7, right), 2 (12, right), 7 (30, wrong). Each group's kept rewards are one 1 and
    two 0s or two 1s and one 0: mean 1/3 or 2/3, Bessel std sqrt(1/3), so A = +-2/3 / (sqrt(1/3) + 1e-4) for
    the lone reward and -+1/3 / (sqrt(1/3) + 1e-4) for the pair. Ratio 1 + small: the clip is inactive, each
    token's loss is -A exp(log ratio)."""
    s = 3**-0.5 + 1e-4
    big, small = (2 / 3) / s, (1 / 3) / s
    kept = {1: big, 3: -small, 4: -small, 0: small, 2: small, 7: -big}
    token_loss = {i: -a * float(np.exp(AGG_LOG_RATIO[i])) for i, a in kept.items()}
    seq_sum = {i: token_loss[i] * AGG_LENGTHS[i] for i in kept}
    if mode == "token-mean":
        return sum(seq_sum.values()) / sum(AGG_LENGTHS[i] for i in kept)
    if mode == "token-sum":
        return sum(seq_sum.values())
    if mode == "seq-mean-token-mean":
        return sum(token_loss.values()) / len(kept)
    horizon = max(AGG_LENGTHS)  # verl's padded width, the default loss_scale_factor
    return sum(seq_sum.values()) / len(kept) / (horizon if mode == "seq-mean-token-sum-norm" else 1)


@pytest.mark.parametrize("mode", VERL_AGG_MODES)
def test_gfpo_loss_under_each_verl_aggregation_mode(make_trainer, store, tmp_path, mode):
    """Our trainer mode masks the dropped rows; verl 0.9.1's own policy loss then aggregates as its v1 trainer
    does (global_batch_size = ppo_mini_batch_size x n = 8 rows, batch_num_tokens = the masked loss_mask's sum).
    token-mean and token-sum give GFPO's loss over the kept rows exactly. The sequence means divide by all 8
    rows, so they give 6/8 of it: the start-up check refuses them with one line naming the key and value."""
    # the masking does not read the mode (a refused mode would stop the trainer at its start-up check)
    trainer = make_trainer(config(tmp_path, "gfpo", {"keep": 3}, actor_rollout_ref__rollout__n=4))
    store["train"] = rows_td(AGG_UIDS, AGG_LENGTHS, AGG_ACC)
    trainer._compute_advantage(Meta(len(AGG_UIDS)), {})
    response_mask = store["train"]["response_mask"].to_padded_tensor(0).bool()
    loss_mask = store["train"]["loss_mask"].to_padded_tensor(0)
    advantages = store["train"]["advantages"].to_padded_tensor(0.0).float()
    assert [int(r.sum()) for r in response_mask] == [7, 5, 12, 9, 40, 0, 0, 30]  # rows 5 and 6 dropped
    log_prob = torch.tensor(AGG_LOG_RATIO).unsqueeze(1).expand_as(advantages)
    actor = omegaconf.OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "global_batch_info": {
                "dp_size": 1,
                "batch_num_tokens": int(loss_mask.sum()),
                "global_batch_size": len(AGG_UIDS),  # ppo_mini_batch_size (2 prompts) x rollout.n (4)
                "loss_scale_factor": None,
            },
        }
    )
    pg_loss, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=torch.zeros_like(log_prob),
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=mode,
        config=actor,
    )
    want = _gfpo_loss_by_hand(mode)
    cfg = config(
        tmp_path, "gfpo", {"keep": 3}, actor_rollout_ref__rollout__n=4, actor_rollout_ref__actor__loss_agg_mode=mode
    )
    refused = [p for p in config_problems(cfg) if "loss_agg_mode" in p]
    if mode in ("token-mean", "token-sum"):
        assert float(pg_loss) == pytest.approx(want, rel=1e-5)
        assert refused == []
    else:
        assert float(pg_loss) == pytest.approx(want * 6 / 8, rel=1e-5)  # the 2 dropped rows in the divisor
        assert abs(want) > 1e-3  # so 6/8 of it is a different loss
        assert len(refused) == 1 and refused[0].startswith(f"actor_rollout_ref.actor.loss_agg_mode={mode}: ")
        assert "\n" not in refused[0] and "set actor_rollout_ref.actor.loss_agg_mode=token-mean" in refused[0]
        with pytest.raises(VerlConfigError, match=f"loss_agg_mode={mode}"):
            check_config(cfg)


def test_gfpo_outside_the_trainer_mode_is_refused_at_the_call():
    fn = core_algos.get_adv_estimator_fn("gfpo")
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"drops rows from the loss.*trainer.v1.trainer_mode=dynashape"):
        fn(token_level_rewards=mask, response_mask=mask, index=np.array(["a", "a"], dtype=object), config={})


# ---------------------------------------------------------------------------------------------------------
# Refused configurations name the setting and its value
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "section", "over", "message"),
    [
        ("aalc", {}, {"trainer__test_freq": -1}, r"trainer.test_freq=-1: 'aalc' reads the validation accuracy"),
        ("aalc", {}, {"trainer__test_freq": 0}, r"trainer.test_freq=0:"),
        ("laser_d", LASER_D, {"trainer__test_freq": 5}, r"trainer.test_freq=5: .*refresh_every=10"),
        ("laser_d", LASER_D, {"trainer__val_before_train": False}, r"trainer.val_before_train=false"),
        (
            "laser_d",
            LASER_D,
            {"actor_rollout_ref__rollout__val_kwargs__do_sample": False},
            r"val_kwargs.do_sample=false",
        ),
        ("laser_d", LASER_D, {"actor_rollout_ref__rollout__val_kwargs__n": 1}, r"val_kwargs.n=1: .*rollout.n=3"),
        (
            "laser_d",
            {**LASER_D, "n_rollout": 8},  # the official default, where verl samples 3 per validation prompt
            {},
            r"val_kwargs.n=3: 'laser_d' counts coverage .*n_rollout=8 .*set actor_rollout_ref.rollout.val_kwargs.n=8",
        ),
        (
            "laser_d",
            LASER_D,
            {"actor_rollout_ref__rollout__val_kwargs__temperature": 0.6},
            r"val_kwargs.temperature=0.6: .*rollout.temperature=1",
        ),
        ("laser_d", LASER_D, {"trainer__v1__trainer_mode": "sync"}, r"trainer_mode=sync: 'laser_d' reads the monitor"),
        ("gfpo", {}, {"trainer__v1__trainer_mode": "sync"}, r"trainer_mode=sync: 'gfpo' drops rows"),
        ("l1_exact", {}, {"trainer__v1__trainer_mode": "sync"}, r"trainer_mode=sync: 'l1_exact' reads each prompt"),
    ],
)
def test_refused_configs_name_the_setting_and_value(tmp_path, name, section, over, message):
    cfg = config(tmp_path, name, section, **over)
    with pytest.raises(VerlConfigError, match=message):
        check_config(cfg)


def test_accepted_configs(tmp_path):
    for name, section in (("aalc", {}), ("laser_d", LASER_D), ("gfpo", {}), ("l1_exact", {}), ("adlp", {})):
        assert config_problems(config(tmp_path, name, section)) == [], name
    legacy = config(tmp_path, "l1_max", {}, trainer__use_v1=False)  # verl's legacy trainer hands budgets over too
    assert config_problems(legacy) == []


def test_signal_keys_only_for_a_shaper_that_reads_the_signal():
    assert parse_settings("l1_exact", {"l1_exact": {"budget_key": "extra_info.n"}}).budget_key == "extra_info.n"
    assert parse_settings("aalc", {"aalc": {"validation_metric": "val-core/x/acc/mean@4"}}).validation_metric
    with pytest.raises(ValueError, match=r"algorithm.adlp.budget_key: the 'adlp' shaper reads no budgets"):
        parse_settings("adlp", {"adlp": {"budget_key": "reward_model.num_tokens"}})
    with pytest.raises(ValueError, match=r"algorithm.laser.validation_metric: the 'laser' shaper reads no validation"):
        parse_settings("laser", {"laser": {"validation_metric": "first"}})
    with pytest.raises(ValueError, match=r"algorithm.l1_max.budget_key: must be a non-empty key string"):
        parse_settings("l1_max", {"l1_max": {"budget_key": "a..b"}})


def test_contract_verl_validation_clears_val_rows_and_saves_before_validating():
    """What the plugin relies on in verl 0.9.1's v1 trainer: ``_validate`` reads each validation batch's rows from
    TransferQueue partition "val" and then clears them with ``tq.kv_clear`` (where LASER-D's monitor reads them;
    the replay buffer's ``sample`` also clears the partition's tag-only prompt markers),
    ``uid``, ``rm_scores`` and ``extra_fields`` among its fields; the agent loop stores ``response_mask`` and
    ``loss_mask`` per trajectory; ``fit`` saves a step's checkpoint before validating it (why the state file is
    rewritten after the validation)."""
    import inspect

    from verl.trainer.ppo.v1 import agent_loop_tq

    validate = inspect.getsource(PPOTrainer._validate)
    assert 'partition_id="val"' in validate
    assert "tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)" in validate
    assert '"uid", "rm_scores"' in validate and '"extra_fields"' in validate
    assert 'field["loss_mask"] = field["response_mask"]' in inspect.getsource(agent_loop_tq)
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert "self.replay_buffer.sample(" in validate  # the trajectories read are the batches it hands back
    assert "tq.kv_clear(partition_id=partition_id, keys=selected_prompt_uids)" in inspect.getsource(ReplayBuffer)
    fit = inspect.getsource(PPOTrainer.fit)
    assert fit.index("self._save_checkpoint()") < fit.rindex("self._validate()")
