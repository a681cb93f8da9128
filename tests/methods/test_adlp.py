"""A-DLP: the reward and the lambda update by hand, the controller across steps and restored."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynashape.methods.adlp import AdlpConfig, AdlpController, adlp_lambda_update, adlp_reward


def test_reward_hand_worked():
    r = adlp_reward(torch.tensor([1, 0, 1]), torch.tensor([100, 200, 0]), lam=1e-3)
    torch.testing.assert_close(r, torch.tensor([0.9, -0.2, 1.0], dtype=torch.float64))  # 1 - .1, 0 - .2, 1 - 0


def test_update_hand_worked():
    assert adlp_lambda_update(1e-3, 0.75, eta=1e-3, acc_ref=0.62) == pytest.approx(1e-3 + 1e-3 * 0.13)
    # 1e-3 + 1e-3 * (0 - 0.62) = 3.8e-4 stays; 1e-3 + 1e-2 * (0 - 0.62) = -5.2e-3 < 0 -> clipped at 0
    assert adlp_lambda_update(1e-3, 0.0, eta=1e-3, acc_ref=0.62) == pytest.approx(3.8e-4)
    assert adlp_lambda_update(1e-3, 0.0, eta=1e-2, acc_ref=0.62) == 0.0


def _batches():
    # accuracies 3/4, 1/4, 1/2 on four rollouts of 100 tokens each
    for c in ([1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]):
        yield torch.tensor(c), torch.full((4,), 100)


def test_controller_uses_lambda_t_then_updates_from_the_same_batch():
    ctl = AdlpController(AdlpConfig(lambda0=1e-3, eta=1e-2, acc_ref=0.5))
    steps = [ctl.step(c, n) for c, n in _batches()]
    # step 0: lambda 1e-3 -> rewards 1 - .1 = .9 / -.1; next = 1e-3 + 1e-2 * (.75 - .5) = 3.5e-3
    # step 1: lambda 3.5e-3 -> .65 / -.35; next = 3.5e-3 + 1e-2 * (.25 - .5) = 1e-3
    # step 2: lambda 1e-3; next = 1e-3 + 0 = 1e-3
    assert [s.lam for s in steps] == pytest.approx([1e-3, 3.5e-3, 1e-3])
    assert [s.next_lam for s in steps] == pytest.approx([3.5e-3, 1e-3, 1e-3])
    torch.testing.assert_close(steps[1].rewards, torch.tensor([0.65, -0.35, -0.35, -0.35], dtype=torch.float64))
    assert steps[0].metrics == {"adlp/lambda": 1e-3, "adlp/lambda_next": steps[0].next_lam, "adlp/accuracy": 0.75}
    assert ctl.n_updates_ == 3


def test_restored_equals_uninterrupted():
    cfg = AdlpConfig(lambda0=1e-3, eta=1e-2, acc_ref=0.5)
    straight = AdlpController(cfg)
    want = [straight.step(c, n) for c, n in _batches()]
    first = AdlpController(cfg)
    batches = list(_batches())
    got = [first.step(*batches[0])]
    resumed = AdlpController(cfg)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.step(*b) for b in batches[1:]]
    for a, b in zip(want, got):
        assert a.lam == b.lam and a.next_lam == b.next_lam
        assert torch.equal(a.rewards, b.rewards)
    assert resumed.state_dict() == straight.state_dict()
    resumed.reset()
    assert resumed.lambda_ == 1e-3 and resumed.n_updates_ == 0


def test_validation():
    with pytest.raises(ValueError, match="acc_ref"):
        AdlpConfig(acc_ref=1.5)
    with pytest.raises(ValueError, match="eta"):
        AdlpConfig(eta=-1.0)
    with pytest.raises(ValueError, match="A-DLP state"):
        AdlpController().load_state_dict({"lambda": -1.0, "n_updates": 0})
    with pytest.raises(ValueError, match="A-DLP state"):
        AdlpController().load_state_dict({})
    with pytest.raises(ValueError, match="lam"):
        adlp_reward(torch.ones(1), torch.ones(1), lam=-1.0)


@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=8), min_size=1, max_size=20), st.floats(0, 0.1))
def test_lambda_never_negative(batches, eta):
    ctl = AdlpController(AdlpConfig(lambda0=0.0, eta=eta, acc_ref=0.62))
    for c in batches:
        step = ctl.step(torch.tensor(c), torch.full((len(c),), 10))
        assert step.next_lam >= 0.0 and ctl.lambda_ >= 0.0
