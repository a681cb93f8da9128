"""ShapedGRPOTrainer against the real TRL (CPU): training steps, advantages = core shaper's, checkpoint resume,
and a contract test on the private TRL methods we override.

Run in the TRL test environment (requirements/trl.txt, ci/integration.sh trl); skipped elsewhere.
"""

from __future__ import annotations

import inspect

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.trl import STATE_FILE, ShapedGRPOTrainer, check_trl_version  # noqa: E402
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

GROUP = 4
LEAD = {"b_max": 8, "l_min": 2, "whiten": "sequence"}


def tiny_model(tokenizer):
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config)


class Recorder:
    """A reward function (verdict: first completion token id is even) that records what TRL passed it."""

    __name__ = "parity_reward"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        verdicts = [float(len(ids) > 0 and ids[0] % 2 == 0) for ids in completion_ids]
        self.calls.append({"lengths": [len(ids) for ids in completion_ids], "correct": verdicts})
        return verdicts


class RecordingTrainer(ShapedGRPOTrainer):
    """Keeps the advantages that the loss will use (the local slice returned to TRL)."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.used_advantages = [*getattr(self, "used_advantages", []), output["advantages"].detach().clone()]
        return output


def make_trainer(tmp_path, reward, max_steps, shaper=None, **extra):
    tokenizer = build_char_tokenizer()
    prompts = [f"{a}+{b}=" for a in range(4) for b in range(4)]
    dataset = datasets.Dataset.from_dict({"prompt": prompts})
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=8,
        max_steps=max_steps,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,  # float32 on CPU: fingerprints are compared with a float32 reference
        seed=0,
        beta=0.0,
        temperature=1.0,
    )
    return RecordingTrainer(
        shaper=shaper or get_shaper("lead", **LEAD),
        model=tiny_model(tokenizer),
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **extra,
    )


def reference_advantages(calls, shaper):
    out = []
    for call in calls:
        n = len(call["lengths"])
        batch = RolloutBatch(
            group_ids=torch.arange(n) // GROUP,
            correct=torch.tensor(call["correct"]) > 0.5,
            lengths=torch.tensor(call["lengths"]),
        )
        out.append(shaper(batch).advantages)
    return out


def assert_same_state(got, expected, where="state"):
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), where
        for key, value in expected.items():
            assert_same_state(got[key], value, f"{where}.{key}")
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(torch.as_tensor(got), expected), where
    else:
        assert got == expected, where


@pytest.mark.slow
def test_two_steps_use_the_core_shaper_advantages_and_resume_from_checkpoint(tmp_path):
    reward = Recorder()
    trainer = make_trainer(tmp_path, reward, max_steps=2)
    trainer.train()
    assert len(reward.calls) == 2 and len(trainer.used_advantages) == 2
    reference = get_shaper("lead", **LEAD)
    for used, expected in zip(trainer.used_advantages, reference_advantages(reward.calls, reference), strict=True):
        torch.testing.assert_close(used, expected, rtol=0, atol=0)
    # Our metrics reached TRL's logs under their own names.
    logged = [entry for entry in trainer.state.log_history if "lead/lambda_c" in entry]
    assert len(logged) == 2
    assert logged[-1]["lead/lambda_c"] == pytest.approx(1 - logged[-1]["lead/lambda_l"], abs=1e-6)
    # The checkpoint holds the state after both steps.
    saved = torch.load(tmp_path / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert (saved["global_step"], saved["run"]["output_dir"]) == (2, str(tmp_path))  # what a resume checks
    assert_same_state(saved["shaper"], reference.state_dict())

    # Resume: step 3 must continue the same shaper trajectory (EMA restored, not restarted at 0.5).
    reward_resumed = Recorder()
    resumed = make_trainer(tmp_path, reward_resumed, max_steps=3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert len(reward_resumed.calls) == 1
    (expected,) = reference_advantages(reward_resumed.calls, reference)
    torch.testing.assert_close(resumed.used_advantages[0], expected, rtol=0, atol=0)
    assert_same_state(resumed.shaper.state_dict(), reference.state_dict())


def test_contract_of_the_overridden_trl_methods():
    """Fails loudly when a TRL release changes what ShapedGRPOTrainer relies on."""
    check_trl_version(trl.__version__)
    params = lambda fn: list(inspect.signature(fn).parameters)  # noqa: E731
    assert params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert params(GRPOTrainer._calculate_rewards) == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert params(GRPOTrainer._get_per_token_logps_and_entropies)[:6] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ]
    assert params(GRPOTrainer._load_optimizer_and_scheduler) == ["self", "checkpoint"]
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for needle in (
        "self._calculate_rewards(inputs, prompts, completions, completion_ids_list)",
        '"advantages": advantages',
        '"completion_ids": completion_ids',
        '"prompt_ids": prompt_ids',
        "self.accelerator.process_index * len(prompts)",
        'self._logs["advantages"].extend(all_process_advantages.tolist())',
        "old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(",
    ):
        assert needle in source, f"TRL changed _generate_and_score_completions: {needle!r} is gone"


def test_unsupported_trl_version_is_refused(monkeypatch):
    monkeypatch.delenv("DYNASHAPE_TRL_UNCHECKED", raising=False)
    with pytest.raises(ImportError, match=r"supports trl>=1\.16\.0,<1\.17\.0"):
        check_trl_version("1.17.0")
    with pytest.raises(ImportError):
        check_trl_version("0.27.0")
    check_trl_version("1.16.3")


def test_bad_reward_selection_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="correctness_reward: no reward function named 'nope'"):
        make_trainer(tmp_path, Recorder(), max_steps=1, correctness_reward="nope")


def test_fingerprints_and_prompt_keys_follow_the_shaper_declaration(tmp_path):
    """A shaper of any name that declares fingerprints gets them (and prompt keys); one that declares nothing does
    not; a shaper that declares prompt keys alone gets the keys."""
    from dynashape import Shaper, ShaperNeeds
    from dynashape.methods.grpo import GrpoConfig

    def toy(needs):
        class Toy(Shaper):
            config_cls = GrpoConfig

            def shape(self, batch):  # pragma: no cover - never called here
                raise AssertionError

        Toy.needs = needs
        return Toy()

    declared = make_trainer(tmp_path / "a", Recorder(), max_steps=1, shaper=toy(ShaperNeeds(fingerprints=True)))
    assert declared.fingerprints and declared.prompt_keys
    keys_only = make_trainer(tmp_path / "b", Recorder(), max_steps=1, shaper=toy(ShaperNeeds(prompt_keys=True)))
    assert not keys_only.fingerprints and keys_only.prompt_keys
    plain = make_trainer(tmp_path / "c", Recorder(), max_steps=1)
    assert not plain.fingerprints and not plain.prompt_keys
    forced = make_trainer(tmp_path / "d", Recorder(), max_steps=1, fingerprints=True)
    assert forced.fingerprints and forced.prompt_keys


def test_fingerprints_are_read_during_the_log_prob_forward(tmp_path):
    trainer = make_trainer(tmp_path, Recorder(), max_steps=1, shaper=get_shaper("meds"), fingerprint_layers=2)
    tok = trainer.processing_class
    prompts = ["1+1=", "22+2=", "3*3="]
    completions = ["so \\boxed{2}", "none", "x\\boxed{9}!"]
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    width_p = max(len(enc(p)) for p in prompts)
    width_c = max(len(enc(c)) for c in completions)
    rows, masks = [], []
    for p, c in zip(prompts, completions, strict=True):
        pi, ci = enc(p), enc(c)
        pad_p, pad_c = width_p - len(pi), width_c - len(ci)
        rows.append([tok.pad_token_id] * pad_p + pi + ci + [tok.pad_token_id] * pad_c)
        masks.append([0] * pad_p + [1] * (len(pi) + len(ci)) + [0] * pad_c)
    ids, mask = torch.tensor(rows), torch.tensor(masks)
    model = trainer.model.eval()
    with torch.no_grad():
        plain, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, width_c, batch_size=2)
        trainer._ds_capture, trainer._ds_fingerprints = True, None
        captured, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, width_c, batch_size=2)
    trainer._ds_capture = False
    torch.testing.assert_close(captured, plain, rtol=0, atol=0)  # the hooks never change the forward
    prints = trainer._ds_fingerprints
    assert prints.shape == (3, 2) and torch.isnan(prints[1]).all()
    weight = trainer.accelerator.unwrap_model(model).lm_head.weight
    for i in (0, 2):  # definition: <hidden_states[n][p], W_U[y*]>, last 2 layers, on the unpadded sequence
        seq = enc(prompts[i]) + enc(completions[i])
        p = len(enc(prompts[i])) + completions[i].rindex("{")
        with torch.no_grad():
            hidden = model(torch.tensor([seq]), output_hidden_states=True).hidden_states[1:]
        expected = torch.stack([h[0, p] @ weight[seq[p + 1]] for h in hidden])[-2:]
        torch.testing.assert_close(prints[i], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_meds_training_step_feeds_memory(tmp_path):
    reward = Recorder()
    trainer = make_trainer(tmp_path, reward, max_steps=1, shaper=get_shaper("meds"), fingerprint_layers=2)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "meds/banks" in entry]
    assert len(logged) == 1
    assert trainer.last_shaped is not None and trainer.last_shaped.advantages.shape == (
        len(reward.calls[0]["lengths"]),
    )
