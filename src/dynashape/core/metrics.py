"""Evaluation metrics: unbiased pass@k, AES (accuracy-efficiency score), top-1 eigen ratio.

Layer 1: pure functions, no I/O. ``pass_at_k`` works per problem on integer counts; ``aes`` returns its
constants with the value so that every report states them; ``top1_eigen_ratio`` measures how much of the
variance of a set of vectors one direction explains (MEDS: diversity of stored error fingerprints).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

__all__ = ["AES", "PassAtKCurve", "aes", "pass_at_k", "pass_at_k_curve", "top1_eigen_ratio"]

ArrayLike = int | Sequence[int] | npt.NDArray[np.integer] | Tensor


# ----------------------------------------------------------------------------------------------------------
# pass@k
# ----------------------------------------------------------------------------------------------------------
def _as_int_array(value: ArrayLike, name: str) -> npt.NDArray[np.int64]:
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
        if bad.size:
            raise ValueError(f"{name} must hold integers, got {arr.flat[bad[0]]} at index {int(bad[0])}")
    return arr.astype(np.int64)


def _first_bad(mask: npt.NDArray[np.bool_]) -> int | None:
    flat = np.flatnonzero(mask)
    return int(flat[0]) if flat.size else None


def pass_at_k(n: ArrayLike, c: ArrayLike, k: int) -> float | npt.NDArray[np.float64]:
    """Unbiased pass@k of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", Eq. 1).

    Per problem with n samples of which c are correct: pass@k = 1 - C(n - c, k) / C(n, k), the probability
    that k samples drawn without replacement contain a correct one. Computed stably (no huge binomials) as
    1 - prod_{i=n-c+1}^{n} (1 - k / i), and 1 when n - c < k. Here the product is evaluated as
    exp(sum log1p(-k / i)) with shared prefix sums over i, so arrays of problems cost O(max n + #problems).
    pass@1 = c / n exactly (up to rounding), i.e. avg@n.

    Args:
        n: samples per problem, int or integer array [P] (>= k).
        c: correct samples per problem, int or integer array [P] (0 <= c <= n); broadcast with n.
        k: the k of pass@k, 1 <= k <= n.

    Returns:
        float when n and c are scalars, else float64 array of the broadcast shape (one value per problem;
        average it yourself, or use :func:`pass_at_k_curve`).

    Raises:
        ValueError naming the field (n, c or k), the bad value and its index.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an int, got {k!r}")
    k = int(k)
    n_arr = _as_int_array(n, "n")
    c_arr = _as_int_array(c, "c")
    scalar = n_arr.ndim == 0 and c_arr.ndim == 0
    try:
        n_arr, c_arr = np.broadcast_arrays(n_arr, c_arr)
    except ValueError as err:
        raise ValueError(f"n and c must broadcast, got shapes {n_arr.shape} and {c_arr.shape}") from err
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    at = "" if scalar else " at index {}"
    checks = (
        (n_arr < 1, "n must be >= 1, got {n}" + at),
        (c_arr < 0, "c must be >= 0, got {c}" + at),
        (c_arr > n_arr, "c must be <= n, got c={c} > n={n}" + at),
        (n_arr < k, "k must be <= n, got k={k} > n={n}" + at),
    )
    for bad, message in checks:
        i = _first_bad(bad)
        if i is not None:
            raise ValueError(message.format(i, n=n_arr.flat[i], c=c_arr.flat[i], k=k))

    # prefix[m] = sum_{i=k+1}^{m} log(1 - k / i) for m >= k (0 for m <= k). Only i > n - c >= k are ever
    # used, so every term is the log of a number in (0, 1).
    max_n = int(n_arr.max()) if n_arr.size else k
    i = np.arange(k + 1, max_n + 1, dtype=np.float64)
    prefix = np.zeros(max_n + 1, dtype=np.float64)
    prefix[k + 1 :] = np.cumsum(np.log1p(-k / i))
    all_fail = n_arr - c_arr
    certain = all_fail < k
    lo = np.where(certain, k, all_fail)  # any index >= k keeps the gather in range; masked below
    log_prod = prefix[n_arr] - prefix[lo]
    # -expm1(x) = 1 - exp(x), accurate when the product is close to 1 (pass@k close to 0); + 0.0 turns the
    # -0.0 of c = 0 into 0.0.
    values = np.where(certain, 1.0, -np.expm1(log_prod)) + 0.0
    return float(values) if scalar else values


class PassAtKCurve(NamedTuple):
    """Result of :func:`pass_at_k_curve`."""

    ks: npt.NDArray[np.int64]
    """[K] the k values."""
    values: npt.NDArray[np.float64]
    """[K] pass@k averaged over problems (unweighted mean)."""


def pass_at_k_curve(n: ArrayLike, c: ArrayLike, *, ks: Sequence[int] | None = None) -> PassAtKCurve:
    """Mean unbiased pass@k over problems for several k.

    Args:
        n: samples per problem, int or integer array [P].
        c: correct samples per problem, integer array [P] (broadcast with n).
        ks: the k values; default 1, 2, 4, ... up to the smallest n, plus that n itself when it is not a power
            of two (the curve must stop where every problem has k samples).

    Returns:
        :class:`PassAtKCurve`.
    """
    n_arr = _as_int_array(n, "n")
    if ks is None:
        if n_arr.size == 0:
            raise ValueError("n must not be empty")
        min_n = int(n_arr.min())
        if min_n < 1:
            raise ValueError(f"n must be >= 1, got {min_n}")
        ks = [2**j for j in range(min_n.bit_length()) if 2**j <= min_n]
        if ks[-1] != min_n:
            ks.append(min_n)
    if len(ks) == 0:
        raise ValueError("ks must not be empty")
    values = [float(np.mean(pass_at_k(n, c, k))) for k in ks]  # a loop over k values, not over problems
    return PassAtKCurve(ks=np.asarray(ks, dtype=np.int64), values=np.asarray(values, dtype=np.float64))


# ----------------------------------------------------------------------------------------------------------
# AES
# ----------------------------------------------------------------------------------------------------------
class AES(NamedTuple):
    """Result of :func:`aes`; the constants travel with the value so every report can state them."""

    value: float
    """The accuracy-efficiency score (higher is better)."""
    delta_length: float
    """dL = (L_base - L) / L_base (positive = shorter than the base)."""
    delta_acc: float
    """dA = (A - A_base) / A_base (positive = more accurate than the base)."""
    alpha: float
    beta: float
    gamma: float


def aes(
    acc: float,
    length: float,
    base_acc: float,
    base_length: float,
    *,
    alpha: float = 1.0,
    beta: float = 3.0,
    gamma: float = 5.0,
) -> AES:
    """Accuracy-Efficiency Score (O1-Pruner, Luo et al. 2025, arXiv 2501.12570).

    dL = (L_base - L) / L_base,  dA = (A - A_base) / A_base,
    AES = alpha dL + beta dA if dA >= 0 else alpha dL - gamma |dA|.
    Accuracy losses cost gamma / beta = 5/3 times what equal gains earn. Accuracy and length may be in any unit
    (fraction or percent, tokens) as long as the model and the base use the same one. Compute it on averaged
    accuracy/length, or per benchmark and then average the values; say which in the report.

    Args:
        acc: accuracy of the model, finite, >= 0.
        length: mean response length of the model, finite, >= 0.
        base_acc: accuracy of the base model, > 0.
        base_length: mean response length of the base model, > 0.
        alpha, beta, gamma: weights of dL, of accuracy gains and of accuracy losses; finite, >= 0.

    Returns:
        :class:`AES`.
    """
    for name, value, strict in (
        ("acc", acc, False),
        ("length", length, False),
        ("base_acc", base_acc, True),
        ("base_length", base_length, True),
        ("alpha", alpha, False),
        ("beta", beta, False),
        ("gamma", gamma, False),
    ):
        if not math.isfinite(value) or value < 0 or (strict and value == 0):
            raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} 0, got {value}")
    d_len = (base_length - length) / base_length
    d_acc = (acc - base_acc) / base_acc
    value = alpha * d_len + (beta * d_acc if d_acc >= 0 else -gamma * abs(d_acc))
    return AES(
        value=float(value),
        delta_length=float(d_len),
        delta_acc=float(d_acc),
        alpha=float(alpha),
        beta=float(beta),
        gamma=float(gamma),
    )


# ----------------------------------------------------------------------------------------------------------
# top-1 eigen ratio
# ----------------------------------------------------------------------------------------------------------
def top1_eigen_ratio(features: Tensor | npt.ArrayLike) -> float:
    """Share of the total variance along the first principal direction: lambda_1 / sum_j lambda_j.

    lambda_j are the eigenvalues of the covariance of the rows of ``features`` (MEDS, arXiv 2604.11297,
    diversity measure; lower = the vectors spread over more directions). Computed in float64 from the
    singular values s_j of the column-centred matrix: lambda_j is proportional to s_j^2, and the ratio does not
    depend on the 1/(M-1) factor, so it is s_1^2 / sum_j s_j^2 (no D x D matrix is formed).

    Args:
        features: float Tensor or array [M, D], one vector per row; all values finite.

    Returns:
        A float in [1 / min(M - 1, D), 1]; NaN when it is undefined: fewer than 2 rows, or a (numerically)
        zero total variance (all rows equal). NaN rather than an error because it is logged every step and
        an early memory bank holds a single point.

    Raises:
        ValueError if ``features`` is not 2-D or holds a non-finite value (naming its row).
    """
    # Not torch.as_tensor(features): under a default device (torch.set_default_device) it would move a CPU
    # tensor there first.
    if isinstance(features, Tensor):
        x = features.detach().to(device="cpu", dtype=torch.float64)
    else:
        x = torch.as_tensor(np.asarray(features, dtype=np.float64), device="cpu")
    if x.dim() != 2:
        raise ValueError(f"features must be 2-D [M, D], got shape {tuple(x.shape)}")
    bad = (~torch.isfinite(x)).any(dim=1).nonzero()
    if bad.numel():
        raise ValueError(f"features must be finite, got a non-finite value in row {int(bad[0])}")
    m, d = x.shape
    if m < 2 or d == 0:
        return math.nan
    centred = x - x.mean(dim=0, keepdim=True)
    sq = torch.linalg.svdvals(centred).square()
    total = float(sq.sum())
    # Rows that are equal up to rounding leave residue of order eps * |x| after centring; treat as zero.
    scale = float(x.abs().max())
    if total <= m * d * (64.0 * np.finfo(np.float64).eps * scale) ** 2:
        return math.nan
    return float(sq[0]) / total
