"""Weight controller parts: each sets the flow's channel weights [K] (float64).

`StaticWeights` and `CVWeights` (SAW) are stateless; `PSIWeights` (LEAD) keeps its EMA as plain values:
``{"ema": [K floats], "n_updates": int}``, the very dict `PSIController.state_dict` writes, so LEAD's
checkpoints read the same; `DualAscent` (A-DLP) keeps lambda.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.groups import total_variance_stats
from dynashape.methods.adlp import AdlpConfig, AdlpController, adlp_lambda_update
from dynashape.methods.lead.psi import PSIController
from dynashape.methods.saw import saw_weights
from dynashape.shapers._common import F64, metrics_dict
from dynashape.shapers.parts.flow import Flow, Holds, Stateless

__all__ = ["CVWeights", "DualAscent", "PSIWeights", "StaticWeights"]


@dataclass(frozen=True)
class StaticWeights(Stateless):
    """Fixed weights w_k, one per channel; None: 1.0 for each channel. `namespace` names the mismatch error."""

    weights: tuple[float, ...] | None = None
    namespace: str = "gdpo"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        k = flow.require("channels", "StaticWeights").shape[1]
        weights = self.weights or (1.0,) * k
        if len(weights) != k:
            raise ValueError(f"{self.namespace} weights has {len(weights)} entries but rewards has {k} columns")
        return flow.but(weights=torch.tensor(weights, dtype=F64, device=flow.batch.device)), None


@dataclass(frozen=True)
class PSIWeights(Holds):
    """LEAD's Potential-Scaled-Instability controller (arXiv 2605.09806; docs/algorithms.md "LEAD") as a part.

    Reads the raw channels and their statistics masks: mu_k, sigma_k by the law of total variance, then
    PSI target weights, the EMA with factor beta from 1/K, the floor lambda_min on channel 0 (never written
    back), or ``static_lambda_0`` every step. Logs lambda_c, lambda_l, target_lambda_c, cv, potential, psi and
    mu of the first two channels (and lambda_r{j} of each extra channel) under `namespace`.
    """

    alpha: float = 1.0
    beta: float = 0.95
    lambda_min: float = 0.3
    eps: float = 1e-8
    static_lambda_0: float | None = None
    channels: int = 2
    namespace: str = "lead"
    state_key: str | None = "controller"

    def _controller(self, ranges: tuple[tuple[float, float], ...] | None = None) -> PSIController:
        return PSIController(
            ranges or ((0.0, 1.0),) * self.channels,  # the ranges do not enter the state
            alpha=self.alpha,
            beta=self.beta,
            lambda_min=self.lambda_min,
            eps=self.eps,
            static_lambda_0=self.static_lambda_0,
        )

    def fresh(self) -> PSIController:
        return self._controller()

    def update(self, flow: Flow, state: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        channels = flow.require("channels", "PSIWeights")
        ctl = self._controller(flow.ranges)
        ctl.load_state_dict(dict(state))
        mu, sigma = total_variance_stats(channels, flow.groups, flow.stats_mask)
        step = ctl.update(mu, sigma)
        w, t = step.weights, step.targets
        names = ["lambda_c", "lambda_l", "target_lambda_c", "cv_c", "cv_l", "potential_c", "potential_l",
                 "psi_c", "psi_l", "mu_c", "mu_l"]  # fmt: skip
        values = [w[0], w[1], t.target[0], t.cv[0], t.cv[1], t.potential[0], t.potential[1], t.psi[0], t.psi[1],
                  mu[0], mu[1]]  # fmt: skip
        for j in range(2, w.numel()):
            names.append(f"lambda_r{j - 2}")
            values.append(w[j])
        flow = flow.but(
            weights=w.to(channels.device),
            values={"controller_step": step, "mu": mu, "sigma": sigma},
            metrics=metrics_dict(self.namespace, names, values),
        )
        return flow, ctl.state_dict()


@dataclass(frozen=True)
class DualAscent(Holds):
    """A-DLP's dual ascent on the weight of a length channel (arXiv 2505.18298, Eq. 6), channels (c, -l):
    weights (1, lambda_t) this step, then lambda_{t+1} = max(0, lambda_t + eta (acc_t - acc_ref)) from the
    batch's accuracy (`dynashape.methods.adlp_lambda_update`). State: ``{"lambda": float, "n_updates": int}``.
    Logs lambda (the one used), lambda_next and accuracy under `namespace`."""

    lambda0: float = 1e-3
    eta: float = 1e-3
    acc_ref: float = 0.62
    namespace: str = "adlp"
    state_key: str | None = "controller"

    def fresh(self) -> AdlpController:
        return AdlpController(AdlpConfig(lambda0=self.lambda0, eta=self.eta, acc_ref=self.acc_ref))

    def update(self, flow: Flow, state: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        channels = flow.require("channels", "DualAscent")
        if channels.shape[1] != 2:
            raise ValueError(f"DualAscent weighs two channels (correctness, -length), got {channels.shape[1]}")
        lam = float(state["lambda"])
        accuracy = float(flow.batch.correct.to(F64).mean())
        next_lam = adlp_lambda_update(lam, accuracy, eta=self.eta, acc_ref=self.acc_ref)
        weights = torch.tensor([1.0, lam], dtype=F64, device=channels.device)
        metrics = {f"{self.namespace}/lambda": lam, f"{self.namespace}/lambda_next": next_lam,
                   f"{self.namespace}/accuracy": accuracy}  # fmt: skip
        return flow.but(weights=weights, metrics=metrics), {
            "lambda": next_lam,
            "n_updates": int(state["n_updates"]) + 1,
        }


@dataclass(frozen=True)
class CVWeights(Stateless):
    """SAW's coefficient-of-variation weights (arXiv 2606.07705): w_k = K CV_k / (sum_j CV_j + eps) over the
    batch, CV_k = std(r_k) / (|mean(r_k)| + eps), channel 0 shifted by `correctness_offset` for its CV
    (`dynashape.methods.saw_weights`). Recomputed every batch (no state). Logs weight_k and cv_k."""

    eps: float = 1e-8
    correctness_offset: float = 3.0
    namespace: str = "saw"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        channels = flow.require("channels", "CVWeights")
        weights, cv = saw_weights(channels, eps=self.eps, correctness_offset=self.correctness_offset)
        k = channels.shape[1]
        names = [f"weight_{j}" for j in range(k)] + [f"cv_{j}" for j in range(k)]
        metrics = metrics_dict(self.namespace, names, [*weights.unbind(), *cv.unbind()])
        return flow.but(weights=weights, metrics=metrics), None
