"""SkyRL advantage estimators backed by dynashape shapers (no skyrl import here: conversion and the shapers).

SkyRL 0.4.0 calls a registered estimator from ``ppo_utils.compute_advantages_and_returns``
(``RayPPOTrainer.compute_advantages_and_returns``, skyrl/train/trainer.py)::

    estimator(token_level_rewards=[bs, T] float, response_mask=[bs, T] int, index=list[str] of uids,
              values=..., grpo_norm_by_std=..., gamma=..., lambd=..., config=<AlgorithmConfig>)
    -> (advantages [bs, T], returns [bs, T])

Translation, one rollout per row (the vocabulary of docs/engines.md):
    correct_i   = token_level_rewards[i].sum() > trainer.algorithm.<name>.correct_threshold (default 0.5): SkyRL's
                  environment reward is one float per response, placed on its last token
    lengths_i   = response_mask[i].sum()                 (response tokens, as SkyRL counts them)
    group_ids   = index numbered by value                (SkyRL's uid of the prompt: same uid, same group)
    truncated_i = lengths_i >= generator.sampling_params.max_generate_length, when the run's entrypoint told
                  the adapter that length (:func:`configure_run`); SkyRL keeps no stop reason in its batch
    advantages  = shaper(batch).advantages[:, None] * response_mask,  returns = advantages

Rows that are not rollouts never reach the shaper: SkyRL's padding rows (``pad_training_input_batch`` appends
copies of row 0 under the uids ``pad0, pad1, ...`` at the end of the batch) and rows without a response token.
They get advantage 0 and leave no trace in the shaper's state or metrics.

The shaper lives in the process that runs SkyRL's trainer (its ``skyrl_entrypoint`` Ray task), so its state
persists across steps; :mod:`dynashape.integrations.skyrl.callbacks` writes it with every SkyRL checkpoint.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from dynashape.integrations.convert import batch_from_rows, broadcast_advantages, check_shapes
from dynashape.integrations.skyrl.settings import EstimatorSettings, parse_settings
from dynashape.shapers import Shaped, available_shapers, config_class, shaper_needs

__all__ = [
    "SKYRL_OWN_ESTIMATORS",
    "configure_run",
    "estimator_names",
    "last_metrics",
    "make_estimator",
    "padding_rows",
    "reset_sessions",
    "session_for",
    "skyrl_estimator",
]

logger = logging.getLogger(__name__)

#: SkyRL's own estimators that share a name with one of our shapers: left to SkyRL.
SKYRL_OWN_ESTIMATORS: frozenset[str] = frozenset({"grpo"})


def estimator_names() -> tuple[str, ...]:
    """Every registered shaper but SKYRL_OWN_ESTIMATORS (read from the shaper registry on each call)."""
    return tuple(name for name in available_shapers() if name not in SKYRL_OWN_ESTIMATORS)


class _Session:
    """The shaper behind one estimator name, in the process running SkyRL's trainer."""

    def __init__(self, settings: EstimatorSettings) -> None:
        self.settings = settings
        self.shaper = settings.build_shaper()
        self.last_metrics: dict[str, float] = {}
        self.calls = 0


_SESSIONS: dict[str, _Session] = {}
_RUN: dict[str, Any] = {"max_response_length": None}


def configure_run(*, max_response_length: int | None) -> None:
    """What the run's entrypoint knows that SkyRL does not hand an estimator: the response cap
    (``generator.sampling_params.max_generate_length``), from which ``truncated`` is read."""
    if max_response_length is not None and (isinstance(max_response_length, bool) or max_response_length < 1):
        raise ValueError(f"generator.sampling_params.max_generate_length must be >= 1, got {max_response_length!r}")
    _RUN["max_response_length"] = max_response_length


def session_for(name: str, config: Any) -> _Session:
    """This process's session for estimator `name`, (re)built when trainer.algorithm.<name>.* changes."""
    settings = parse_settings(name, config)
    session = _SESSIONS.get(name)
    if session is None or session.settings != settings:
        if session is not None:
            logger.warning("dynashape: trainer.algorithm.%s changed; rebuilding the '%s' shaper", name, name)
        session = _Session(settings)
        _SESSIONS[name] = session
    return session


def sessions() -> dict[str, _Session]:
    """The live sessions by estimator name (read by the checkpoint callback)."""
    return _SESSIONS


def reset_sessions() -> None:
    """Forget every shaper and the run's settings (tests, or a new run in the same process)."""
    _SESSIONS.clear()
    _RUN["max_response_length"] = None


def last_metrics(name: str) -> dict[str, float]:
    """The metrics of estimator `name`'s last call ({} before the first)."""
    session = _SESSIONS.get(name)
    return {} if session is None else dict(session.last_metrics)


def padding_rows(index: Sequence[Any]) -> int:
    """How many rows at the end of the batch are SkyRL's padding: the trailing uids ``pad0 .. pad{k-1}``."""
    uids = [str(u) for u in index]
    k = 0
    while k < len(uids) and uids[-1 - k].startswith("pad"):
        k += 1
    # SkyRL names them pad0 .. pad{k-1} in order: a trailing run of other "pad..." uids is not its padding
    while k and uids[len(uids) - k :] != [f"pad{i}" for i in range(k)]:
        k -= 1
    return k


def estimate(
    name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any], config: Any
) -> tuple[torch.Tensor, Shaped | None]:
    """Run estimator `name` once: RolloutBatch -> shaper -> token-level advantages [bs, T] and the Shaped."""
    check_shapes(token_level_rewards, response_mask)
    session = session_for(name, config)
    bs = token_level_rewards.shape[0]
    if index is None or len(index) != bs:
        got = None if index is None else len(index)
        raise ValueError(f"index: SkyRL's uids must give one per row ({bs} rows), got {got}")
    cap = _RUN["max_response_length"]
    if shaper_needs(name).truncated and cap is None:
        raise ValueError(
            f"the '{name}' advantage estimator reads truncated [bs], which needs the response cap: launch SkyRL "
            "through `python -m dynashape.integrations.skyrl` (it passes generator.sampling_params.max_generate_length)"
        )
    device = response_mask.device
    lengths = response_mask.sum(-1)
    keep = lengths > 0
    pad = padding_rows(index)
    if pad:
        keep[bs - pad :] = False
    kept = int(keep.sum())
    advantages = torch.zeros(bs, dtype=torch.float32, device=device)
    session.calls += 1
    if kept == 0:
        session.last_metrics = {"dynashape/excluded_rows": float(bs)}
        return broadcast_advantages(advantages, response_mask), None
    rows = None if kept == bs else keep.nonzero().squeeze(-1)
    with torch.no_grad():
        batch = batch_from_rows(
            token_level_rewards.sum(-1),
            lengths,
            [str(u) for u in index],
            rows=rows,
            correct_threshold=session.settings.correct_threshold,
            residual_reward=session.settings.residual_reward,
            truncated=None if cap is None else lengths.long() >= cap,
        )
        shaped = session.shaper(batch)
        values = shaped.advantages.to(device=device, dtype=torch.float32)
        if rows is None:
            advantages = values
        else:
            advantages[rows] = values
    session.last_metrics = {**shaped.metrics, "dynashape/excluded_rows": float(bs - kept)}
    return broadcast_advantages(advantages, response_mask), shaped


def skyrl_estimator(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None = None,
    config: Any = None,
    **kwargs: Any,  # values, gamma, lambd, grpo_norm_by_std: SkyRL's keywords an outcome shaper does not use
) -> tuple[torch.Tensor, torch.Tensor]:
    """SkyRL advantage estimator `name`: the dynashape shaper of that name, broadcast over response tokens."""
    advantages, _ = estimate(name, token_level_rewards, response_mask, index, config)
    return advantages, advantages


def make_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function registered with SkyRL's ``AdvantageEstimatorRegistry`` under `name`.

    A ``functools.partial`` of the module-level :func:`skyrl_estimator`: SkyRL syncs its registry through a Ray
    actor with cloudpickle, which pickles a module-level function by reference, so every process that gets it
    from the actor calls this module (and its sessions), never a copy of a closure.
    """
    config_class(name)  # fail at registration, not mid-training, if the shaper does not exist
    return functools.partial(skyrl_estimator, name)
