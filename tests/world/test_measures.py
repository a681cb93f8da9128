"""The audit's metrics, worked by hand on tiny fixtures."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest

from dynashape.world.chain.audit import slip_repairs
from dynashape.world.measures import (
    budget_rules,
    cluster_mode_ari,
    mean_by,
    mode_entropy,
    top_answer_share,
    truncation_at,
    wrong_eigen_ratio,
)


def test_truncation_at_budget():
    # 3 of 5 responses are longer than 20 tokens; one of exactly 20 ended within the budget
    assert truncation_at([10, 20, 21, 30, 40], 20) == pytest.approx(3 / 5)
    assert truncation_at([10, 20], 100) == 0.0
    with pytest.raises(ValueError, match="budget"):
        truncation_at([1], 0)


def test_mean_by_key():
    assert mean_by([1, 0, 1, 1], [2, 2, 10, 10]) == {"2": 0.5, "10": 1.0}


def test_mode_entropy_by_hand():
    # prompt a: carry, carry, borrow (and a right answer, skipped); prompt b: parenthesis only; c: all right
    ids = ["a", "a", "a", "a", "b", "b", "c"]
    modes = ["carry", "carry", "borrow", "", "parenthesis", "parenthesis", ""]
    h_a = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert mode_entropy(ids, modes) == pytest.approx((h_a + 0.0) / 2)
    assert math.isnan(mode_entropy(["a"], [""]))


def test_top_answer_share_by_hand():
    # prompt a: wrong answers 42, 42, 62 -> 2/3; prompt b: wrong None -> 1; prompt c: only right
    ids = ["a", "a", "a", "a", "b", "c"]
    answers = ["42", "42", "62", "52", None, "7"]
    correct = [False, False, False, True, False, True]
    assert top_answer_share(ids, answers, correct) == pytest.approx((2 / 3 + 1) / 2)


def _ari_by_hand(clusters, modes):
    """Hubert-Arabie ARI from the contingency table, as a plain loop."""
    n = len(clusters)
    pairs = {}
    for c, m in zip(clusters, modes, strict=True):
        pairs[(c, m)] = pairs.get((c, m), 0) + 1
    index = sum(comb(v, 2) for v in pairs.values())
    a = sum(comb(clusters.count(c), 2) for c in set(clusters))
    b = sum(comb(modes.count(m), 2) for m in set(modes))
    expected = a * b / comb(n, 2)
    return (index - expected) / ((a + b) / 2 - expected)


def test_cluster_mode_ari_by_hand():
    # two tight bundles of directions: HDBSCAN finds {0, 1, 2} and {3, 4, 5}; the true modes differ on row 5
    x = np.array([[1, 0.01, 0, 0], [1, 0.02, 0, 0], [1, 0, 0.01, 0], [0, 1, 0.01, 0], [0.01, 1, 0, 0], [0, 1, 0, 0.02]])
    modes = ["carry", "carry", "carry", "borrow", "borrow", "carry"]
    expected = _ari_by_hand([0, 0, 0, 1, 1, 1], modes)
    assert expected == pytest.approx(1.2 / 3.7)  # index 4, expected index 2.8, max 6.5
    out = cluster_mode_ari(x, modes, ["p"] * 6)
    assert out["pooled"] == pytest.approx(expected)
    assert out["per_prompt"] == pytest.approx(expected) and out["prompts"] == 1
    # the clusters agree with the modes exactly: ARI 1; a prompt with fewer than 3 rows does not count
    perfect = cluster_mode_ari(x, ["c", "c", "c", "b", "b", "b"], ["p", "p", "p", "p", "p", "p"])
    assert perfect["pooled"] == pytest.approx(1.0)
    few = cluster_mode_ari(x, modes, ["p", "p", "q", "q", "r", "r"])
    assert math.isnan(few["per_prompt"]) and few["prompts"] == 0
    with pytest.raises(ValueError, match="equal lengths"):
        cluster_mode_ari(x, modes[:5])


def test_wrong_eigen_ratio_by_hand():
    # four unit rows in a cross: isotropic covariance, the first direction holds half the variance
    assert wrong_eigen_ratio(np.array([[1.0, 0], [0, 1], [-1, 0], [0, -1]])) == pytest.approx(0.5)
    # after L2 normalisation the rows are (1,0), (1,0), (0,1): centred they all lie on (1,-1): ratio 1
    assert wrong_eigen_ratio(np.array([[2.0, 0], [1, 0], [0, 3]])) == pytest.approx(1.0)
    assert math.isnan(wrong_eigen_ratio(np.zeros((1, 4))))


def test_budget_rules_by_hand():
    lengths = [10, 20, 30, 40, 50, 60, 70, 80]
    diffs = [1, 1, 1, 1, 2, 2, 2, 2]
    # tight: median at difficulty 2 = (60 + 70) / 2 = 65; loose at q = 0.75: 2 of 8 may lie above -> 60
    assert budget_rules(lengths, diffs, loose_quantile=0.75) == {"tight": 65, "loose": 60, "hardest": 2}
    # q = 0.97 of 8: none may lie above -> the maximum
    assert budget_rules(lengths, diffs)["loose"] == 80
    assert budget_rules([1, 2, 3], [5, 5, 5])["tight"] == 2


def test_slip_repairs_by_hand():
    assert slip_repairs("47+8=55\ncheck 55-8=47\n55-3=52\n\\boxed{52}") == (0, 0, 0)
    assert slip_repairs("47+8=45\ncheck 45-8=37\nfix 47+8=55\n55-3=52\n\\boxed{52}") == (1, 1, 1)
    assert slip_repairs("47+8=45\nso 45\n45-3=42\n\\boxed{42}") == (1, 0, 0)
    assert slip_repairs("47+8=45\ncheck 45-8=37\n45-3=42\n\\boxed{42}") == (1, 1, 0)  # checked, not repaired
    assert slip_repairs("47+8=45\ncheck 45-8=37\nfix 47+8=54\n\\boxed{54}") == (1, 1, 0)  # a wrong fix
