"""The v1 trainer ``dynashape`` of verl 0.9.1 on CPU: registration, extras, metrics, checkpointed shaper state.

Ray, the rollout servers and the workers are out of reach on CPU, so TransferQueue is replaced by an in-memory
store holding the fields verl keeps per trajectory; verl's own ``_compute_advantage`` (and through it
``compute_advantage_for_multi_trajectories`` -> ``compute_advantage`` -> our estimator) runs unchanged.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")
tq = pytest.importorskip("transfer_queue")
omegaconf = pytest.importorskip("omegaconf")
v1 = pytest.importorskip("verl.trainer.ppo.v1")

from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations._prompts import prompt_key_of  # noqa: E402
from dynashape.integrations.verl.fingerprint import (  # noqa: E402
    ANSWER_POS_FIELD,
    ANSWER_TARGET_FIELD,
    FINGERPRINT_FIELD,
    FLAG_KEY,
)
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

GROUP = 4
LEAD = {"b_max": 40, "l_min": 10}


class Meta:
    """Stands in for transfer_queue.KVBatchMeta (keys, partition, extra_info)."""

    def __init__(self, n: int) -> None:
        self.keys = [f"k{i}" for i in range(n)]
        self.partition_id = "train"
        self.extra_info: dict = {}

    def __len__(self) -> int:
        return len(self.keys)


@pytest.fixture
def store(monkeypatch):
    """An in-memory TransferQueue: one TensorDict of per-trajectory fields."""
    box: dict = {}

    def get(keys, partition_id, select_fields):
        td = box["td"]
        return td.select(*[f for f in select_fields if f in td.keys()])

    def put(keys, partition_id, fields):
        for key in fields.keys():
            box["td"][key] = fields[key]
        return box.get("meta")

    monkeypatch.setattr(tq, "kv_batch_get", get)
    monkeypatch.setattr(tq, "kv_batch_put", put)
    return box


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def trajectories(seed: int, prompts: int = 3, width: int = 30):
    gen = torch.Generator().manual_seed(seed)
    n = prompts * GROUP
    lengths = torch.randint(1, width, (n,), generator=gen)
    acc = torch.rand(n, generator=gen) < 0.5
    # The score disagrees with the verdict on purpose (a DAPO-like -1 for wrong): the trainer must use `acc`.
    scores = [torch.zeros(int(n_)) for n_ in lengths]
    for i, s in enumerate(scores):
        s[-1] = 1.0 if acc[i] else -1.0
    raw = [[{"role": "user", "content": f"question {i // GROUP} of step {seed}"}] for i in range(n)]
    fields = {
        "uid": [f"u{seed}-{i // GROUP}" for i in range(n)],
        "response_mask": nested([torch.ones(int(n_), dtype=torch.long) for n_ in lengths]),
        "rm_scores": nested(scores),
        "raw_prompt": raw,
        "extra_fields": [{"reward_extra_info": {"acc": bool(a), "score": 0.0}} for a in acc],
    }
    truth = {"group_ids": torch.arange(n) // GROUP, "correct": acc, "lengths": lengths}
    return tu.get_tensordict(tensor_dict=fields), truth, [m[0]["content"] for m in raw]


def config(tmp_path, name="lead", section=None):
    return omegaconf.OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": name,
                name: dict(LEAD if section is None else section),
                "use_kl_in_reward": False,
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": True,
            },
            "actor_rollout_ref": {"rollout": {"n": GROUP, "temperature": 1.0}},
            "trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto", "v1": {"trainer_mode": "dynashape"}},
        }
    )


@pytest.fixture
def make_trainer(monkeypatch):
    """Our __init__ runs for real; verl's PPOTrainer.__init__ (replay buffer, Ray pools) is reduced to config."""

    def init(self, cfg):
        self.config = cfg
        self.trainer_mode = cfg.trainer.v1.trainer_mode  # as verl does: our property must ignore it

    monkeypatch.setattr(PPOTrainer, "__init__", init)
    cls = v1.get_trainer_cls("dynashape")
    return lambda cfg: cls(cfg)


def test_registered_through_the_plugin_and_reports_sync_mode(make_trainer, tmp_path):
    cls = v1.get_trainer_cls("dynashape")
    assert issubclass(cls, v1.PPOTrainerSync)
    trainer = make_trainer(config(tmp_path))
    assert trainer.trainer_mode == "sync"  # verl's replay buffer and refill logic branch on this


def test_bad_section_fails_at_trainer_start(make_trainer, tmp_path):
    with pytest.raises(ValueError, match=r"algorithm\.lead\.lmin"):
        make_trainer(config(tmp_path, section={"lmin": 3}))


def test_advantages_use_the_verifier_verdict_and_metrics_reach_verl(make_trainer, store, tmp_path):
    trainer = make_trainer(config(tmp_path))
    core = get_shaper("lead", **LEAD)
    for step in range(2):
        store["td"], truth, _ = trajectories(step)
        meta = Meta(len(truth["lengths"]))
        metrics: dict = {}
        trainer._compute_advantage(meta, metrics)
        got = store["td"]["advantages"].to_padded_tensor(padding=0.0)
        shaped = core(RolloutBatch(**truth))
        mask = (torch.arange(got.shape[1])[None, :] < truth["lengths"][:, None]).float()
        torch.testing.assert_close(got, shaped.advantages[:, None] * mask, rtol=0, atol=0)
        for key, value in shaped.metrics.items():
            assert metrics[key] == value, key


def test_meds_fields_flow_from_old_log_prob_to_the_estimator(make_trainer, store, monkeypatch, tmp_path):
    tokenizer = build_char_tokenizer()
    td, truth, questions = trajectories(0)
    n = len(truth["lengths"])
    texts = [f"so \\boxed{{{i % 3}}}" if i % 4 else "no answer" for i in range(n)]
    responses = [torch.tensor(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    td["responses"] = nested(responses)
    store["td"] = td
    seen_flags = []

    def fake_old_log_prob(self, batch, metrics):  # the actor: reads our fields, returns fingerprints [n, 14]
        seen_flags.append(dict(batch.extra_info.get(FLAG_KEY, {})))
        pos = store["td"][ANSWER_POS_FIELD]
        prints = torch.where((pos >= 0)[:, None], pos[:, None].float() + torch.arange(14.0), float("nan"))
        store["td"][FINGERPRINT_FIELD] = prints
        return batch

    monkeypatch.setattr(v1.PPOTrainerSync, "_compute_old_log_prob", fake_old_log_prob)
    trainer = make_trainer(config(tmp_path, "meds", {}))
    trainer.tokenizer = tokenizer
    meta = Meta(n)
    trainer._compute_old_log_prob(meta, {})
    assert seen_flags == [{"layers": 14, "diff": False, "norm": "raw"}]
    assert FLAG_KEY not in meta.extra_info  # later forwards (ref, update) must not capture
    pos = store["td"][ANSWER_POS_FIELD]
    assert [int(p) for p in pos] == [t.rindex("{") if "{" in t else -1 for t in texts]
    targets = tokenizer.convert_ids_to_tokens([int(t) for t in store["td"][ANSWER_TARGET_FIELD] if t >= 0])
    assert targets == [str(i % 3) for i in range(n) if i % 4]

    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    core = get_shaper("meds")
    keys = [prompt_key_of([{"role": "user", "content": q}]) for q in questions]
    batch = RolloutBatch(**truth, prompt_keys=keys, fingerprints=store["td"][FINGERPRINT_FIELD])
    expected = core(batch).advantages
    got = store["td"]["advantages"].to_padded_tensor(padding=0.0)
    mask = (torch.arange(got.shape[1])[None, :] < truth["lengths"][:, None]).float()
    torch.testing.assert_close(got, expected[:, None] * mask, rtol=0, atol=0)
    assert metrics["meds/points"] == float((truth["correct"] == 0).logical_and(pos >= 0).sum())


def test_verl_default_sync_trainer_logs_the_shaper_metrics(monkeypatch, store, tmp_path):
    """verl's default v1 trainer (``trainer_mode=sync``, no dynashape mode) with ``adv_estimator=lead``: the
    shaper's metrics reach verl's step metrics (the real trainer on CPU logged none before the plugin's hook)."""

    def init(self, cfg):
        self.config = cfg
        self.trainer_mode = cfg.trainer.v1.trainer_mode

    monkeypatch.setattr(PPOTrainer, "__init__", init)
    cfg = config(tmp_path)
    cfg.trainer.v1.trainer_mode = "sync"
    trainer = v1.get_trainer_cls("sync")(cfg)
    core = get_shaper("lead", **LEAD)
    store["td"], truth, _ = trajectories(0)
    store["td"]["rm_scores"] = nested([(s > 0).float() * s for s in store["td"]["rm_scores"].unbind()])
    metrics: dict = {}
    trainer._compute_advantage(Meta(len(truth["lengths"])), metrics)
    shaped = core(RolloutBatch(**truth))
    for key, value in shaped.metrics.items():
        assert metrics[key] == value, key
    assert metrics["dynashape/excluded_rows"] == 0.0
