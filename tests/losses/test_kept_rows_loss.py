"""Rows a filter drops (Shaped.keep = False, GFPO) leave the loss entirely: no loss term, and the loss's
normaliser counts only kept tokens. Worked by hand; a zero advantage is shown NOT to be the same."""

import pytest
import torch

from dynashape.losses import kept_mask, policy_loss
from dynashape.losses.registry import LossInputs, get_loss
from dynashape.train.config import TrainConfig

# Two rollouts, T = 3: row 0 has 3 tokens, row 1 has 2. Log-probs equal the old ones, so ratio = 1 and the
# per-token surrogate is -A.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float32)
LOGP = torch.zeros(2, 3)
ADV = torch.tensor([1.0, -2.0])
KEEP = torch.tensor([True, False])
# the reference differs from the policy on row 1 only: k2 = 0.5 * 1^2 = 0.5 on its two tokens
REF = torch.tensor([[0.0, 0.0, 0.0], [-1.0, -1.0, 0.0]])


def test_dropped_row_leaves_the_token_mean_numerator_and_denominator():
    kept = policy_loss(LOGP, LOGP, ADV, MASK, keep=KEEP)
    # row 0 alone: -(1 + 1 + 1) / 3 tokens
    assert kept.pg_loss.item() == pytest.approx(-1.0)
    # without the filter: (-3 + 2 * 2) / 5 tokens
    assert policy_loss(LOGP, LOGP, ADV, MASK).pg_loss.item() == pytest.approx(0.2)
    # a zero advantage on row 1 is not the same: its 2 tokens stay in the denominator, -3 / 5
    assert policy_loss(LOGP, LOGP, torch.tensor([1.0, 0.0]), MASK).pg_loss.item() == pytest.approx(-0.6)


def test_dropped_row_carries_no_kl_term():
    kept = policy_loss(LOGP, LOGP, ADV, MASK, keep=KEEP, ref_log_prob=REF, kl_coef=0.1, kl_estimator="k2")
    assert kept.kl.item() == 0.0
    assert kept.loss.item() == pytest.approx(-1.0)
    # kept: (0.5 + 0.5) / 5 tokens of KL
    full = policy_loss(LOGP, LOGP, ADV, MASK, ref_log_prob=REF, kl_coef=0.1, kl_estimator="k2")
    assert full.kl.item() == pytest.approx(0.2)


def test_seq_mean_modes_skip_the_dropped_row():
    out = policy_loss(LOGP, LOGP, ADV, MASK, keep=KEEP, agg="seq-mean-token-mean")
    assert out.pg_loss.item() == pytest.approx(-1.0)  # one sequence left, its token mean -1
    out = policy_loss(LOGP, LOGP, ADV, MASK, keep=KEEP, agg="seq-mean-token-sum")
    assert out.pg_loss.item() == pytest.approx(-3.0)


def test_a_dropped_row_gets_no_gradient():
    logp = torch.zeros(2, 3, requires_grad=True)
    policy_loss(logp, logp.detach(), ADV, MASK, keep=KEEP).loss.backward()
    assert logp.grad[1].abs().sum().item() == 0.0
    assert logp.grad[0].tolist() == pytest.approx([-1 / 3, -1 / 3, -1 / 3])


def test_the_trainer_loss_drops_the_rows_and_drpo_refuses_them():
    inputs = LossInputs(logprobs=LOGP, old_logprobs=LOGP, response_mask=MASK, advantages=ADV,
                        group_ids=torch.tensor([0, 0]), correct=torch.tensor([True, False]),
                        lengths=torch.tensor([3, 2]), ref_logprobs=None, entropy=None, keep=KEEP)  # fmt: skip
    assert get_loss("clip")(inputs, TrainConfig()).loss.item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match=r"'drpo' .* cannot drop rows"):
        get_loss("drpo")(inputs, TrainConfig(loss="drpo"))


def test_kept_mask_checks_its_input():
    assert kept_mask(MASK, None) is MASK
    with pytest.raises(ValueError, match=r"keep must be a BoolTensor \[2\]"):
        kept_mask(MASK, torch.tensor([1, 0]))
