"""ShapedGRPOTrainer at scale, one process (issue 14, risk 5): where the state is written, how it is read back,
the TRL options we do not honour, and PEFT fingerprints from the adapter-enabled policy.

Run in the TRL environment (ci/integration.sh trl). The 2-process runs are in test_trl_multiprocess.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from trl import GRPOConfig  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.trl import (  # noqa: E402
    STATE_FILE,
    ShapedGRPOTrainer,
    ShaperStateCallback,
    load_shaper_state,
)
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import trl_worker  # noqa: E402

GROUP = 4


def config(tmp_path, **overrides) -> GRPOConfig:
    values = {
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 2 * GROUP,
        "num_generations": GROUP,
        "max_completion_length": 16,
        "max_steps": 1,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "beta": 0.0,
        "shuffle_dataset": False,
    }
    values.update(overrides)
    return GRPOConfig(**values)


def make_trainer(tmp_path, *, cls=ShapedGRPOTrainer, shaper=None, boxed=False, **overrides):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = build_char_tokenizer()
    peft_config = overrides.pop("peft_config", None)
    extra = {"peft_config": peft_config} if peft_config is not None else {}
    fingerprint_layers = overrides.pop("fingerprint_layers", 2)
    return cls(
        shaper=shaper or get_shaper("lead", b_max=8, l_min=2, whiten="sequence"),
        model=trl_worker.tiny_model(tokenizer),
        reward_funcs=[trl_worker.parity_reward],
        args=config(tmp_path, **overrides),
        train_dataset=datasets.Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]}),
        processing_class=tokenizer,
        rollout_func=trl_worker.make_rollout_func(tokenizer, boxed=boxed),
        fingerprint_layers=fingerprint_layers,
        **extra,
    )


# ---------------------------------------------------------------------------------------------------------
# TRL options that only shape TRL's own advantages: refused when not at their defaults
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("scale_rewards", "batch"),
        ("scale_rewards", "none"),
        ("multi_objective_aggregation", "normalize_then_sum"),
        ("reward_weights", [2.0]),
    ],
)
def test_unhonoured_trl_options_are_refused(tmp_path, option, value):
    with pytest.raises(ValueError, match=rf"{option}={value!r}".replace("[", r"\[").replace("]", r"\]")):
        make_trainer(tmp_path, **{option: value})


def test_default_valued_trl_options_are_accepted(tmp_path):
    trainer = make_trainer(tmp_path, scale_rewards="group", reward_weights=[1.0])
    assert trainer.args.scale_rewards == "group"


# ---------------------------------------------------------------------------------------------------------
# Where the state is written: where TRL writes the checkpoint (args.should_save)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("process_index", "local_process_index", "save_on_each_node", "writes"),
    [
        (0, 0, False, True),  # world process 0
        (1, 0, False, False),  # node 1's main process, shared filesystem assumed
        (1, 0, True, True),  # node 1's main process, node-local disks: must write its own copy
        (3, 1, True, False),  # not a node's main process
    ],
)
def test_state_is_written_where_trl_writes_the_checkpoint(
    tmp_path, monkeypatch, process_index, local_process_index, save_on_each_node, writes
):
    args = config(tmp_path, save_on_each_node=save_on_each_node)
    monkeypatch.setattr(type(args), "process_index", property(lambda self: process_index))
    monkeypatch.setattr(type(args), "local_process_index", property(lambda self: local_process_index))
    assert args.should_save is writes  # TRL's own rule for the rest of the checkpoint
    shaper = get_shaper("lead", b_max=8, l_min=2)
    ShaperStateCallback(shaper).on_save(args, SimpleNamespace(global_step=7), None)
    path = tmp_path / "checkpoint-7" / STATE_FILE
    assert path.exists() is writes
    if writes:
        assert load_shaper_state(str(path)) == shaper.state_dict()


# ---------------------------------------------------------------------------------------------------------
# How it is read back: weights_only, a pickle that would run code is refused
# ---------------------------------------------------------------------------------------------------------


def _touch(path: str) -> None:
    Path(path).write_text("code ran")


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (_touch, (self.marker,))


def test_state_file_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "marker"
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    path = checkpoint / STATE_FILE
    torch.save({"version": 1, "controller": _Exploit(str(marker))}, path)
    trainer = make_trainer(tmp_path / "run")
    with pytest.raises(ValueError, match=f"{path}: not a dynashape shaper state"):
        trainer._load_optimizer_and_scheduler(str(checkpoint))
    assert not marker.exists()
    # the same file read without weights_only really would run the code: the test's exploit is live
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_state_round_trips_through_a_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path, save_strategy="steps", save_steps=1)
    trainer.train()
    saved = load_shaper_state(str(tmp_path / "checkpoint-1" / STATE_FILE))
    assert saved == trainer.shaper.state_dict() and saved["controller"]["n_updates"] == 1
    only_state = tmp_path / "only-state"  # no optimizer file: a trainer that has not started has no optimizer
    only_state.mkdir()
    (only_state / STATE_FILE).write_bytes((tmp_path / "checkpoint-1" / STATE_FILE).read_bytes())
    fresh = make_trainer(tmp_path / "other")
    fresh._load_optimizer_and_scheduler(str(only_state))
    assert fresh.shaper.state_dict() == saved
    # the file records its step: a state of step 1 found in checkpoint-5 (a copied or mixed-up folder) is refused
    wrong = tmp_path / "checkpoint-5"
    wrong.mkdir()
    (wrong / STATE_FILE).write_bytes((tmp_path / "checkpoint-1" / STATE_FILE).read_bytes())
    with pytest.raises(ValueError, match=r"written at global step 1, but TRL resumes from step 5"):
        make_trainer(tmp_path / "third")._load_optimizer_and_scheduler(str(wrong))


# ---------------------------------------------------------------------------------------------------------
# PEFT with beta != 0: TRL's first forward is the adapter-disabled reference; fingerprints come from the policy
# ---------------------------------------------------------------------------------------------------------


class _KeepBatch(ShapedGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.kept = {k: output[k].detach().clone() for k in ("prompt_ids", "prompt_mask", "completion_ids")}
        self.kept["completion_mask"] = output["completion_mask"].detach().clone()
        self.kept["fingerprints"] = self._ds_fingerprints.detach().clone()
        return output


def _layer_logits(model, kept, tokenizer, layers: int) -> torch.Tensor:
    """<hidden_states[n][p], W_U[y*]> of the last `layers` layers, p = the "{" of the last "\\boxed{"."""
    ids = torch.cat([kept["prompt_ids"], kept["completion_ids"]], dim=1)
    mask = torch.cat([kept["prompt_mask"], kept["completion_mask"]], dim=1)
    width = kept["prompt_ids"].shape[1]
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1:]
    weight = model.get_output_embeddings().weight
    brace = tokenizer.convert_tokens_to_ids("{")
    rows = []
    for i in range(ids.shape[0]):
        completion = kept["completion_ids"][i].tolist()
        p = max(j for j, t in enumerate(completion) if t == brace)  # one box per completion here
        y = completion[p + 1]
        rows.append(torch.stack([h[i, width + p] @ weight[y] for h in hidden])[-layers:])
    return torch.stack(rows)


def test_peft_fingerprints_come_from_the_adapter_enabled_policy(tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False)
    trainer = make_trainer(
        tmp_path, cls=_KeepBatch, shaper=get_shaper("meds"), boxed=True, beta=0.1, peft_config=lora, learning_rate=0.0
    )
    # No old-log-prob pass in this configuration: TRL's first policy-module forward is the reference one.
    assert trainer.args.gradient_accumulation_steps % (trainer.args.steps_per_generation * trainer.num_iterations) == 0
    trainer.train()
    kept, model = trainer.kept, trainer.accelerator.unwrap_model(trainer.model)
    model.eval()
    enabled = _layer_logits(model, kept, trainer.processing_class, 2)
    with model.disable_adapter():
        disabled = _layer_logits(model, kept, trainer.processing_class, 2)
    got = kept["fingerprints"]
    assert got.shape == enabled.shape and not torch.isnan(got).any()
    torch.testing.assert_close(got, enabled, rtol=1e-4, atol=1e-5)
    assert (got - disabled).abs().max() > 1e-3  # the adapter matters, so the check above can fail


def test_resume_where_only_some_processes_have_the_state_is_refused(tmp_path, monkeypatch):
    """Nodes without a shared folder and without save_on_each_node: process 1 would start a fresh shaper and
    slice a different advantage vector than process 0; refused before any state is loaded."""
    import accelerate.utils

    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    trainer = make_trainer(tmp_path / "run")
    shaper = get_shaper("lead", b_max=8, l_min=2)
    shaper(
        RolloutBatch(group_ids=torch.tensor([0, 0]), correct=torch.tensor([True, False]), lengths=torch.tensor([3, 5]))
    )
    torch.save(shaper.state_dict(), checkpoint / STATE_FILE)  # an advanced state, unlike the trainer's fresh one
    before = trainer.shaper.state_dict()
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda values: [True, False])  # process 1 lacks it
    with pytest.raises(RuntimeError, match=r"exists on some processes but not on processes \[1\].*save_on_each_node"):
        trainer._load_optimizer_and_scheduler(str(checkpoint))
    assert trainer.shaper.state_dict() == before != shaper.state_dict()
