"""End-to-end runs on a tiny budget: every preset, checkpoint contents, resume equality, broken checkpoints."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from dynashape.train import checkpoint as ckpt
from dynashape.train.config import RunConfig
from dynashape.train.presets import PRESETS, make_train_config, regime_budget
from dynashape.train.run import train
from resume_check import assert_resumes_bit_identically


def _flat_finite(metrics):
    for m in metrics:
        for k, v in m.items():
            assert isinstance(v, float) and math.isfinite(v), (k, v)


@pytest.mark.parametrize("method", list(PRESETS))
def test_preset_three_steps(method, tiny_config, parity_verifier, tmp_path):
    result = train(
        tiny_config(method),
        tmp_path / method,
        progress=False,
        verifier=parity_verifier,
        report=method == "lead",
    )
    assert [m["step"] for m in result.metrics] == [1.0, 2.0, 3.0]
    assert sum(m["groups_kept"] for m in result.metrics) > 0, "some mixed groups reached the shaper"
    _flat_finite(result.metrics)
    for key in ("accuracy", "length/mean", "entropy", "time/sample", "time/update"):
        assert key in result.metrics[0], key
    assert all(0 <= m["accuracy"] <= 1 for m in result.metrics)
    # the run folder is complete
    run = tmp_path / method
    for name in ("config.yaml", "metrics.jsonl", "eval.json"):
        assert (run / name).is_file(), name
    if method == "lead":
        assert (run / "report.md").is_file() and (run / "lambdas.png").is_file()
    ev = json.loads((run / "eval.json").read_text())
    for part in ("base", "final"):
        assert set(ev[part]) >= {"accuracy", "mean_length", "pass_at_k"}
        assert ev[part]["pass_at_k"]["1"] == pytest.approx(ev[part]["accuracy"])  # pass@1 = avg@n
    assert ev["method"] == method and ev["steps"] == 3
    assert {"aes", "aes_constants", "wall_seconds"} <= set(ev)
    # the final checkpoint holds everything a resume needs
    last = ckpt.latest_checkpoint(run / "checkpoints")
    assert last is not None and last.name == "step_3"
    assert sorted(p.name for p in last.iterdir()) == sorted(ckpt.CHECKPOINT_FILES)
    state = ckpt.load(last, cfg_hash=ckpt.config_hash(tiny_config(method).to_dict()))
    assert set(state.state) >= {"step", "stream", "generator", "torch_rng", "shaper"}
    assert state.optimizer["state"], "optimizer moments saved"
    if method.startswith("lead"):
        assert state.state["shaper"], "LEAD's EMA state saved"
    if "lead" in method and PRESETS[method]["shaper"] == "lead" and "static" not in method:
        assert 0 < result.metrics[-1]["lead/lambda_l"] <= 0.7


# LEAD's EMA and MEDS's memory both in the state; two mini-batches (separate old-log-prob pass) and one (fused)
@pytest.mark.parametrize(("method", "mini_batches"), [("lead_meds", 2), ("lead_meds", 1)])
def test_resume_is_bit_identical(method, mini_batches, tiny_config, parity_verifier, tmp_path):
    # shortcut-heavy teacher: the tiny model learns to open with \\boxed{, so MEDS gets fingerprints
    cfg = tiny_config(
        method,
        task_kw={"direct_prob_easy": 0.9, "direct_prob_hard": 0.9, "merged_prob": 0.0, "slip_prob": 0.1},
        steps=4,
        checkpoint_every=2,
        mini_batches=mini_batches,
    )
    # killed after step 3: the last checkpoint is step 2, step 3 is redone
    full, _ = assert_resumes_bit_identically(cfg, tmp_path, parity_verifier)
    again = train(cfg, tmp_path / "full", progress=False, verifier=parity_verifier, report=False)
    assert again.resumed_from == 4 and again.eval == full.eval  # a finished run is not redone
    assert full.metrics[1]["meds/points"] > 0, "the error memory was filled before the checkpoint at step 2"
    state = ckpt.load(tmp_path / "part/checkpoints/step_2", cfg_hash=ckpt.config_hash(cfg.to_dict())).state
    assert state["shaper"], "shaper state (LEAD EMA + MEDS memory) is in the checkpoint"


def test_a_broken_newest_checkpoint_is_set_aside_and_the_one_before_resumes(tiny_config, tmp_path, caplog):
    """A torn or tampered newest checkpoint never blocks resume: it is renamed aside (kept, byte for byte) and
    the run continues from the checkpoint before it; a checkpoint of another config is still refused."""
    cfg = tiny_config("grpo", steps=3, checkpoint_every=1)
    train(cfg, tmp_path / "run", progress=False, stop_after=2)
    bad = tmp_path / "run/checkpoints/step_2/model.pt"
    bad.write_bytes(b"not a checkpoint")
    with caplog.at_level("WARNING"):
        res = train(cfg, tmp_path / "run", progress=False, report=False)
    assert res.resumed_from == 1 and [m["step"] for m in res.metrics] == [1.0, 2.0, 3.0]
    assert "corrupt" in caplog.text and "resuming from the checkpoint before it" in caplog.text
    (aside,) = (tmp_path / "run/checkpoints").glob(".broken-step_2-*")
    assert (aside / "model.pt").read_bytes() == b"not a checkpoint"
    assert ckpt.latest_checkpoint(tmp_path / "run/checkpoints").name == "step_3"
    assert (tmp_path / "run/checkpoints/step_2/model.pt").read_bytes() != b"not a checkpoint"  # written again
    (tmp_path / "run/checkpoints/step_3/meta.json").unlink()  # incomplete: set aside too
    longer = tiny_config("grpo", steps=4, checkpoint_every=1)
    assert train(longer, tmp_path / "run", progress=False, report=False).resumed_from == 2


def test_a_failing_run_closes_the_verifier_it_started(tiny_config, tmp_path, monkeypatch):
    import dynashape.rewards

    started = []

    class RecordingVerifier:
        def __init__(self, **kwargs):
            self.closed = False
            started.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.closed = True

    monkeypatch.setattr(dynashape.rewards, "MathVerifier", RecordingVerifier)
    cfg = tiny_config("grpo", steps=1, checkpoint_every=1)
    (tmp_path / "run").mkdir()
    (tmp_path / "run/config.yaml").write_text("task: {n_train: 1}\n")  # another run's folder
    with pytest.raises(ckpt.CheckpointError, match="holds another run"):
        train(cfg, tmp_path / "run", progress=False)
    assert started == [], "a folder of another run is refused before the verifier starts"

    def broken_base(*args, **kwargs):
        raise RuntimeError("the base model cannot be read")

    monkeypatch.setattr("dynashape.train.run.load_base", broken_base)
    with pytest.raises(RuntimeError, match="cannot be read"):
        train(cfg, tmp_path / "fresh", progress=False)
    assert len(started) == 1 and started[0].closed


def test_incompatible_config_is_refused(tiny_config, tmp_path):
    cfg = tiny_config("grpo", steps=1, checkpoint_every=1)
    train(cfg, tmp_path / "run", progress=False, stop_after=1)
    other = tiny_config("grpo", steps=1, checkpoint_every=1, lr=5e-4)
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    only_lr = r"holds another run \(train\.lr: [0-9.e-]+ -> 0\.0005; old -> new\)"
    with pytest.raises(ckpt.CheckpointError, match=only_lr):
        train(other, tmp_path / "run", progress=False)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    # more steps on the same trajectory is allowed
    longer = tiny_config("grpo", steps=2, checkpoint_every=1)
    res = train(longer, tmp_path / "run", progress=False, report=False)
    assert res.resumed_from == 1 and [m["step"] for m in res.metrics] == [1.0, 2.0]


def test_checkpoint_never_overwritten(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    ckpt.save(tmp_path, step=1, model=model, optimizer=opt, state={"step": 1}, cfg_hash="h")
    with pytest.raises(ckpt.CheckpointError, match="refusing"):
        ckpt.save(tmp_path, step=1, model=model, optimizer=opt, state={"step": 1}, cfg_hash="h")
    shutil.rmtree(tmp_path / "step_1")
    assert ckpt.latest_checkpoint(tmp_path) is None


def test_make_train_config_merges_and_validates():
    cfg = make_train_config("lead", shaper_kwargs={"b_max": 80})
    assert cfg.shaper_kwargs == {"b_max": 80, "l_min": regime_budget("tight") // 4}
    with pytest.raises(ValueError, match="unknown method"):
        make_train_config("nope")
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        make_train_config("lead", learning_rate=1.0)
    with pytest.raises(ValueError, match="prompts_per_step"):
        make_train_config("lead", prompts_per_step=5, mini_batches=2)
    assert RunConfig.from_dict(RunConfig().to_dict()) == RunConfig()


def test_regimes_set_every_length_parameter_from_the_saved_rules():
    from dynashape.world.chain.rules import RULES_PATH

    rules = json.loads(RULES_PATH.read_text())
    for regime in ("tight", "loose"):
        b = rules["regimes"][regime]["budget"]
        assert regime_budget(regime) == b
        lead = make_train_config("lead", regime=regime)
        assert (lead.max_new_tokens, lead.regime, lead.shaper_kwargs) == (b, regime, {"b_max": b, "l_min": b // 4})
        assert make_train_config("grpo_length", regime=regime).shaper_kwargs["threshold"] == b // 2
        assert make_train_config("gdpo", regime=regime).length_threshold == b // 2
        assert make_train_config("dapo", regime=regime).overlong.buffer == b // 6
        assert make_train_config("meds", regime=regime).fingerprint_layers == 4
    assert rules["regimes"]["tight"]["budget"] < rules["regimes"]["loose"]["budget"] < rules["eval_cap"]
    with pytest.raises(ValueError, match="regime"):
        make_train_config("lead", regime="medium")


def test_model_path_runs_any_local_causal_lm(base_cache, tiny_config, parity_verifier, tmp_path):
    """--model: a saved Hugging Face causal LM (here the cached tiny base) is loaded and trained as is."""
    import dataclasses

    from dynashape.train.warmup import base_model_key
    from dynashape.world.chain import ChainWorld

    cfg = tiny_config("grpo", steps=1)
    train(cfg, tmp_path / "a", progress=False, verifier=parity_verifier, report=False)  # makes the cache entry
    path = base_cache / f"base-{base_model_key(ChainWorld(cfg.task), cfg.model, cfg.warmup)}"
    other = dataclasses.replace(cfg, model_path=str(path))
    res = train(other, tmp_path / "b", progress=False, verifier=parity_verifier, report=False)
    assert res.eval["base_model"]["source"] == str(path)
    assert res.eval["base"] == json.loads((tmp_path / "a/eval.json").read_text())["base"]  # same weights
