"""The loss registry: the registered losses compute exactly what the core functions do, names are refused twice,
TrainConfig.loss reads the registry, and the loop calls whatever loss the config names."""

from __future__ import annotations

import pytest
import torch

from dynashape.losses import entropy_advantage, policy_loss
from dynashape.losses import registry as objectives
from dynashape.losses.drpo import drpo_loss
from dynashape.losses.registry import LossInputs, LossOutput, available_losses, get_loss, register_loss
from dynashape.train.config import TrainConfig


def _batch(**changes) -> LossInputs:
    """Two groups of two rollouts, T = 3; lengths 2, 1, 3, 2; log-probs equal to the old ones (ratio 1)."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    logprobs = torch.tensor(
        [[-0.5, -1.0, 0.0], [-0.2, 0.0, 0.0], [-1.5, -0.1, -0.3], [-0.7, -0.4, 0.0]], requires_grad=True
    )
    values = {
        "logprobs": logprobs,
        "old_logprobs": logprobs.detach().clone(),
        "response_mask": mask,
        "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5]),
        "group_ids": torch.tensor([0, 0, 1, 1]),
        "correct": torch.tensor([True, False, True, False]),
        "lengths": torch.tensor([2, 1, 3, 2]),
        "ref_logprobs": None,
        "entropy": torch.ones(4, 3),
    }
    return LossInputs(**{**values, **changes})


def test_builtin_losses_are_registered():
    assert available_losses() == ["clip", "drpo"]


def test_clip_by_hand():
    """Ratio 1, token-mean: pg_loss = -sum_i A_i l_i / sum_i l_i = -(2 - 1 + 1.5 - 1) / 8."""
    out = get_loss("clip")(_batch(), TrainConfig())
    assert isinstance(out, LossOutput)
    assert list(out.diagnostics) == ["loss", "pg_loss", "kl", "clip_frac", "approx_kl"]
    assert out.loss.item() == pytest.approx(-0.1875)
    assert out.diagnostics["pg_loss"].item() == pytest.approx(-0.1875)
    assert out.diagnostics["kl"].item() == 0.0 and out.diagnostics["clip_frac"].item() == 0.0


def test_clip_with_the_entropy_advantage_by_hand():
    """H = 1, alpha 0.4, kappa 2: A + min(0.4, |A| / 2) = 1.4, -0.6, 0.75, -0.25 -> -(2.8 - 0.6 + 2.25 - 0.5) / 8."""
    cfg = TrainConfig(entropy_advantage={"enabled": True})
    assert get_loss("clip")(_batch(), cfg).loss.item() == pytest.approx(-0.49375)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"entropy_advantage": {"enabled": True, "alpha": 0.3, "kappa": 1.5}, "entropy_coef": 0.01},
        {"kl_coef": 0.05, "kl_estimator": "k3", "dual_clip": 3.0, "loss_agg": "seq-mean-token-sum"},
    ],
)
def test_clip_is_policy_loss_bit_for_bit(changes):
    torch.manual_seed(0)
    inputs = _batch(
        old_logprobs=_batch().old_logprobs + 0.3 * torch.randn(4, 3),
        ref_logprobs=torch.randn(4, 3),
        entropy=torch.rand(4, 3, requires_grad=True),
    )
    cfg = TrainConfig(**changes)
    got = get_loss("clip")(inputs, cfg)
    adv = inputs.advantages
    if cfg.entropy_advantage.enabled:
        adv = entropy_advantage(
            adv, inputs.entropy, alpha=cfg.entropy_advantage.alpha, kappa=cfg.entropy_advantage.kappa
        ).advantages
    want = policy_loss(
        inputs.logprobs,
        inputs.old_logprobs,
        adv,
        inputs.response_mask,
        eps_low=cfg.eps_low,
        eps_high=cfg.eps_high,
        dual_clip=cfg.dual_clip,
        agg=cfg.loss_agg,
        ref_log_prob=inputs.ref_logprobs,
        kl_coef=cfg.kl_coef,
        kl_estimator=cfg.kl_estimator,
        entropy=inputs.entropy if cfg.entropy_coef > 0 else None,
        entropy_coef=cfg.entropy_coef,
    )
    expected = {
        "loss": want.loss,
        "pg_loss": want.pg_loss,
        "kl": want.kl,
        "clip_frac": want.surrogate.clip_frac,
        "approx_kl": want.surrogate.approx_kl,
    }
    assert got.diagnostics.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got.diagnostics[key], value), key
    assert torch.equal(got.loss, want.loss)
    (g1,) = torch.autograd.grad(got.loss, inputs.logprobs, retain_graph=True)
    (g2,) = torch.autograd.grad(want.loss, inputs.logprobs)
    assert torch.equal(g1, g2)


def test_drpo_is_drpo_loss_bit_for_bit_with_the_config_section():
    torch.manual_seed(1)
    lengths = torch.tensor([4, 2, 3, 1, 4, 2])
    mask = (torch.arange(4)[None, :] < lengths[:, None]).float()
    logprobs = (-torch.rand(6, 4) * mask).requires_grad_()
    inputs = LossInputs(  # two groups of three, two right and one wrong, then one right and two wrong
        logprobs=logprobs,
        old_logprobs=logprobs.detach() + 0.05 * torch.randn(6, 4) * mask,
        response_mask=mask,
        advantages=torch.zeros(6),
        group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
        correct=torch.tensor([True, True, False, True, False, False]),
        lengths=lengths,
        ref_logprobs=None,
        entropy=None,
    )
    cfg = TrainConfig(
        loss="drpo", max_new_tokens=8, overlong={"buffer": 4}, drpo={"tau": 5.0, "lam": 0.2, "beta": 10.0, "delta": 0.0}
    )
    got = get_loss("drpo")(inputs, cfg)
    want = drpo_loss(
        inputs.logprobs,
        inputs.old_logprobs,
        inputs.response_mask,
        group_ids=inputs.group_ids,
        correct=inputs.correct,
        max_length=8,
        lengths=inputs.lengths,
        tau=5.0,
        lam=0.2,
        beta=10.0,
        delta=0.0,
    )
    assert list(got.diagnostics) == ["loss", "kl", "drpo/objective"]
    assert torch.equal(got.loss, want.loss) and torch.equal(got.diagnostics["kl"], want.kl)
    assert torch.equal(got.diagnostics["drpo/objective"], want.objective)
    # the section's values are the ones used: the defaults give another loss
    default = get_loss("drpo")(inputs, TrainConfig(loss="drpo", max_new_tokens=8, overlong={"buffer": 4}))
    assert not torch.equal(default.loss, got.loss)


def test_a_taken_loss_name_is_refused(monkeypatch):
    monkeypatch.setattr(objectives, "_REGISTRY", dict(objectives._REGISTRY))
    with pytest.raises(ValueError, match="loss name 'clip' is already registered to clip_loss"):
        register_loss("clip")(lambda inputs, cfg: LossOutput(inputs.logprobs.sum(), {}))
    register_loss("clip")(objectives.clip_loss)  # the same function again (a module reload) is fine
    with pytest.raises(ValueError, match="non-empty str"):
        register_loss("")
    with pytest.raises(ValueError, match=r"unknown loss 'ppo'; available: clip, drpo"):
        get_loss("ppo")


def test_unknown_loss_in_train_config_names_field_and_value():
    with pytest.raises(ValueError, match=r"loss must be one of \('clip', 'drpo'\), got 'ppo'"):
        TrainConfig(loss="ppo")


def test_the_loop_calls_the_configured_loss(monkeypatch):
    """A registered loss is a valid TrainConfig.loss and the loop runs it, with its diagnostics logged."""
    from dynashape.rewards import Reason, Verdict
    from dynashape.runtime.policy import ModelConfig, build_policy
    from dynashape.train.loop import Trainer
    from dynashape.train.presets import make_train_config
    from dynashape.world.chain import ChainTaskConfig, world_splits
    from dynashape.world.chain.tokenizer import build_char_tokenizer

    monkeypatch.setattr(objectives, "_REGISTRY", dict(objectives._REGISTRY))
    seen: list[LossInputs] = []

    @register_loss("probe")
    def probe(inputs: LossInputs, cfg: TrainConfig) -> LossOutput:
        seen.append(inputs)
        loss = (inputs.logprobs * inputs.response_mask).sum() * 0.0
        return LossOutput(loss, {"loss": loss, "probe/rows": torch.tensor(float(len(inputs.lengths)))})

    class Alternate:
        def verify(self, golds, responses):
            return [Verdict(i % 2 == 0, None, Reason.MISMATCH) for i in range(len(golds))]

    tok = build_char_tokenizer()
    model = build_policy(
        ModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32), tok
    )
    problems = world_splits(ChainTaskConfig(n_train=8, n_test_per_difficulty=1)).train
    cfg = make_train_config("grpo", loss="probe", prompts_per_step=2, group_size=2, max_new_tokens=12, mini_batches=2)
    metrics = Trainer(model, tok, problems, cfg, Alternate()).step().metrics
    assert len(seen) == 2 and [len(s.lengths) for s in seen] == [2, 2]  # one call per mini-batch of one group
    assert metrics["probe/rows"] == 2.0 and "pg_loss" not in metrics
