"""verl advantage estimators backed by dynashape shapers (no verl import here: pure conversion + state).

verl 0.9.1 calls a registered estimator from ``ray_trainer.compute_advantage`` (legacy and v1 trainers alike)::

    adv_estimator_fn(token_level_rewards=[bs, T] float, response_mask=[bs, T], config=<algorithm DictConfig>,
                     index=np.ndarray[bs] of uid str  # when "uid" is in non_tensor_batch
                     [, reward_baselines=...])        # only when present in the batch
    -> (advantages [bs, T], returns [bs, T])

(``gae`` and ``grpo`` are hard-wired and never reach the registry; only ``gdpo`` gets ``non_tensor_batch``.)

Translation, one rollout per row:
    correct_i   = token_level_rewards[i].sum() > algorithm.<name>.correct_threshold   (default 0.5)
    lengths_i   = response_mask[i].sum()                  (response tokens, EOS included, as verl counts)
    group_ids   = index numbered by value                 (verl's per-step uuid of the prompt)
    advantages  = shaper(batch).advantages[:, None] * response_mask,  returns = advantages

The shaper lives in the driver process (estimators run there), so LEAD's EMA and the MEDS memory persist across
steps. Per-sample extras that verl does not pass to estimators (stable prompt keys, MEDS fingerprints, the
verifier's own verdict) are handed over by :mod:`dynashape.integrations.verl_trainer` through
:func:`provide_extras` just before it calls verl's ``compute_advantage``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dynashape.batch import RolloutBatch, group_ids_from_uids
from dynashape.integrations.verl_settings import ADAPTER_KEYS, EstimatorSettings, parse_settings
from dynashape.shapers import Shaped, config_class

__all__ = [
    "ADAPTER_KEYS",
    "ESTIMATOR_NAMES",
    "EstimatorExtras",
    "EstimatorSettings",
    "broadcast_advantages",
    "group_ids_from_index",
    "last_metrics",
    "make_estimator",
    "parse_settings",
    "provide_extras",
    "reset_sessions",
    "rollout_batch_from_verl",
    "session_for",
]

logger = logging.getLogger(__name__)

#: The estimators this plugin registers with verl (each is the dynashape shaper of the same name).
ESTIMATOR_NAMES: tuple[str, ...] = ("lead", "lead_meds", "meds", "shorterbetter", "grpo_length")
#: Shapers that need stable prompt keys and fingerprints (only the trainer subclass can provide them).
MEDS_ESTIMATORS: frozenset[str] = frozenset({"meds", "lead_meds"})

# ---------------------------------------------------------------------------------------------------------
# Conversion (pure)
# ---------------------------------------------------------------------------------------------------------


def group_ids_from_index(index: Sequence[Any] | np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """verl's per-rollout uid array -> LongTensor [N] of group ids (numbered by sorted uid)."""
    try:
        return group_ids_from_uids(index, device)
    except ValueError as err:
        raise ValueError(f"index: {err}") from None


def rollout_batch_from_verl(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | np.ndarray,
    *,
    correct_threshold: float = 0.5,
    correct: torch.Tensor | None = None,
    residual_reward: bool = False,
    prompt_keys: Sequence[str] | None = None,
    fingerprints: torch.Tensor | None = None,
) -> RolloutBatch:
    """Build a RolloutBatch from verl estimator inputs.

    Args:
        token_level_rewards: float [bs, T], the outcome score at the last valid token (summed per row).
        response_mask: [bs, T] 0/1 mask of response tokens.
        index: [bs] uid per rollout (same uid = same prompt in this step).
        correct_threshold: Row is correct when its summed reward exceeds this (ignored when `correct` given).
        correct: Optional Bool [bs], the verifier's verdict (e.g. reward_extra_info["acc"]).
        residual_reward: Add rewards [bs, 1] = summed score - correct (see EstimatorSettings).
        prompt_keys: Optional [bs] stable prompt ids (MEDS memory).
        fingerprints: Optional float [bs, D], NaN rows where absent (MEDS).
    """
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"token_level_rewards/response_mask: expected equal shapes [bs, T], got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}"
        )
    bs = token_level_rewards.shape[0]
    if len(index) != bs:
        raise ValueError(f"index: has {len(index)} uids but token_level_rewards has {bs} rows")
    score = token_level_rewards.sum(-1)
    if correct is None:
        correct = score > correct_threshold
    lengths = response_mask.sum(-1).long()
    device = lengths.device
    correct = correct.to(device=device, dtype=torch.bool)
    residual = (score.to(torch.float32) - correct.to(torch.float32))[:, None] if residual_reward else None
    return RolloutBatch(
        group_ids=group_ids_from_index(index, device),
        correct=correct,
        lengths=lengths,
        rewards=residual,
        prompt_keys=None if prompt_keys is None else [str(k) for k in prompt_keys],
        fingerprints=None if fingerprints is None else fingerprints.to(device),
    )


def broadcast_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[bs] per-rollout advantage -> [bs, T] over the response tokens (0 elsewhere), float32."""
    return advantages.to(torch.float32)[:, None] * response_mask.to(torch.float32)


# ---------------------------------------------------------------------------------------------------------
# Driver-side state: one shaper per estimator name, extras handed over by the trainer, metrics
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EstimatorExtras:
    """Per-sample extras for the next estimator call (rows in the order of verl's batch).

    Attributes:
        prompt_keys: [bs] stable prompt ids, or None.
        fingerprints: float [bs, D] with NaN rows, or None.
        correct: Bool [bs] verifier verdicts (overrides the threshold on the summed reward), or None.
    """

    prompt_keys: Sequence[str] | None = None
    fingerprints: torch.Tensor | None = None
    correct: torch.Tensor | None = None


class _Session:
    """The shaper behind one estimator name, plus its persistence in the plain (no trainer) path."""

    def __init__(self, settings: EstimatorSettings) -> None:
        self.settings = settings
        self.shaper = settings.build_shaper()
        self.managed_by_trainer = False  # the v1 trainer subclass checkpoints the state itself
        self.last_metrics: dict[str, float] = {}
        self.calls = 0
        if settings.state_dir is not None:
            path = self.state_path
            if os.path.exists(path):
                self.shaper.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))
                logger.info("dynashape: restored '%s' shaper state from %s", settings.name, path)

    @property
    def state_path(self) -> str:
        assert self.settings.state_dir is not None
        return os.path.join(self.settings.state_dir, f"dynashape_{self.settings.name}_state.pt")

    def after_call(self) -> None:
        self.calls += 1
        if self.settings.state_dir is not None:
            save_state_atomic(self.shaper.state_dict(), self.state_path)
        elif self.calls == 1 and not self.managed_by_trainer and self.shaper.state_dict():
            logger.warning(
                "dynashape: the '%s' estimator keeps its state (%s) in the driver process only; it will not "
                "survive a restart unless +algorithm.%s.state_dir=<dir> is set or trainer.v1.trainer_mode=%s "
                "saves it with each verl checkpoint",
                self.settings.name,
                ", ".join(sorted(self.shaper.state_dict())),
                self.settings.name,
                "dynashape",
            )


def save_state_atomic(state: Mapping[str, Any], path: str) -> None:
    """torch.save to a temporary file in the same directory, then os.replace (never a half-written file)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(dict(state), handle)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_SESSIONS: dict[str, _Session] = {}
_PENDING_EXTRAS: list[EstimatorExtras] = []


def session_for(name: str, config: Any) -> _Session:
    """The driver's session for estimator `name`, (re)built when algorithm.<name>.* changes."""
    settings = parse_settings(name, config)
    session = _SESSIONS.get(name)
    if session is None or session.settings != settings:
        if session is not None:
            logger.warning("dynashape: algorithm.%s changed; rebuilding the '%s' shaper from scratch", name, name)
        session = _Session(settings)
        _SESSIONS[name] = session
    return session


def reset_sessions() -> None:
    """Forget every shaper and pending extras (tests, or a new run in the same driver)."""
    _SESSIONS.clear()
    _PENDING_EXTRAS.clear()


def last_metrics(name: str) -> dict[str, float]:
    """Metrics of the last call of estimator `name` ({} before the first)."""
    session = _SESSIONS.get(name)
    return {} if session is None else dict(session.last_metrics)


@contextlib.contextmanager
def provide_extras(extras: EstimatorExtras) -> Iterator[None]:
    """Make `extras` visible to the estimator calls inside the block (the driver is single-threaded here)."""
    _PENDING_EXTRAS.append(extras)
    try:
        yield
    finally:
        _PENDING_EXTRAS.remove(extras)


def _check_extras(extras: EstimatorExtras, bs: int) -> None:
    for field, value in (("prompt_keys", extras.prompt_keys), ("fingerprints", extras.fingerprints)):
        if value is not None and len(value) != bs:
            raise ValueError(f"extras.{field}: has {len(value)} rows but the estimator got {bs}")
    if extras.correct is not None and extras.correct.shape != (bs,):
        raise ValueError(f"extras.correct: expected shape ({bs},), got {tuple(extras.correct.shape)}")


def estimate(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | np.ndarray | None,
    config: Any,
) -> tuple[torch.Tensor, Shaped]:
    """Run estimator `name` once: RolloutBatch -> shaper -> token-level advantages [bs, T] and the Shaped."""
    if index is None:
        raise ValueError(
            f"the '{name}' advantage estimator needs per-prompt uids: verl passes index=non_tensor_batch['uid']; "
            "it was missing from the batch"
        )
    session = session_for(name, config)
    extras = _PENDING_EXTRAS[-1] if _PENDING_EXTRAS else EstimatorExtras()
    _check_extras(extras, token_level_rewards.shape[0])
    if name in MEDS_ESTIMATORS and extras.prompt_keys is None:
        raise ValueError(
            f"the '{name}' advantage estimator needs stable prompt keys and fingerprints, which verl only passes "
            "through the dynashape trainer: set trainer.use_v1=true trainer.v1.trainer_mode=dynashape"
        )
    with torch.no_grad():
        batch = rollout_batch_from_verl(
            token_level_rewards,
            response_mask,
            index,
            correct_threshold=session.settings.correct_threshold,
            correct=extras.correct,
            residual_reward=session.settings.residual_reward,
            prompt_keys=extras.prompt_keys,
            fingerprints=extras.fingerprints,
        )
        shaped = session.shaper(batch)
        advantages = broadcast_advantages(shaped.advantages.to(response_mask.device), response_mask)
    session.last_metrics = dict(shaped.metrics)
    session.after_call()
    return advantages, shaped


def make_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function registered with verl's ``register_adv_est(name)``."""
    config_class(name)  # fail at registration, not mid-training, if the shaper does not exist

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        **kwargs: Any,  # verl may add keys (reward_baselines, ...) that an outcome shaper does not use
    ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, _ = estimate(name, token_level_rewards, response_mask, index, config)
        return advantages, advantages

    estimator.__name__ = f"dynashape_{name}_advantage"
    estimator.__qualname__ = estimator.__name__
    estimator.__doc__ = f"verl advantage estimator '{name}': the dynashape '{name}' shaper, broadcast over tokens."
    return estimator
