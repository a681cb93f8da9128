"""verl advantage estimators backed by dynashape shapers (no verl import here: pure conversion + state).

verl 0.9.1 calls a registered estimator from ``ray_trainer.compute_advantage`` (legacy and v1 trainers alike)::

    adv_estimator_fn(token_level_rewards=[bs, T] float, response_mask=[bs, T], config=<algorithm DictConfig>,
                     index=np.ndarray[bs] of uid str  # when "uid" is in non_tensor_batch
                     [, reward_baselines=...])        # only when present in the batch
    -> (advantages [bs, T], returns [bs, T])

(``gae`` and ``grpo`` are hard-wired and never reach the registry; only ``gdpo`` gets ``non_tensor_batch``.)

Translation, one rollout per row:
    correct_i   = the reward function's verdict ``acc`` (``reward_extra_info["acc"]``, handed over by the trainer
                  mode or, in verl's legacy trainer, read from ``non_tensor_batch["acc"]``) when every row has it;
                  else token_level_rewards[i].sum() > algorithm.<name>.correct_threshold (default 0.5), which is
                  refused with ``algorithm.use_kl_in_reward=true`` (the sum then includes the KL penalty)
    lengths_i   = response_mask[i].sum()                  (response tokens, EOS included, as verl counts)
    group_ids   = index numbered by value                 (verl's per-step uuid of the prompt)
    advantages  = shaper(batch).advantages[:, None] * response_mask,  returns = advantages

Rows that are not rollouts never reach the shaper: verl's synthetic padding rows (``is_padding`` tags of
``upsample_batch_to_divisible_size``, handed over by the trainer mode) and any row whose response mask is empty.
They get advantage 0 and leave no trace in the shaper's state or metrics.

For the field's methods: a shaper that reads budgets (L1) gets them as ``EstimatorExtras.budgets`` (read from the
dataset by the trainer mode or the legacy trainer's hook; without them the call fails), and one that drops rows
(GFPO, ``Shaped.keep``) runs only when the caller masks them out of the loss (``EstimatorExtras.drops_rows``,
reading :func:`dropped_rows` after the call).

The shaper lives in the driver process (estimators run there), so LEAD's EMA and the MEDS memory persist across
steps; :mod:`dynashape.integrations.verl.hooks` writes it with every verl checkpoint and restores it on resume.
Per-sample extras that verl does not pass to estimators (stable prompt keys, MEDS fingerprints, the verifier's
own verdict, padding flags) are handed over through :func:`provide_extras` just before verl's
``compute_advantage`` runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dynashape.integrations.convert import (
    batch_from_rows,
    broadcast_advantages,
    check_shapes,
    content_order,
    group_ids_from_index,
    reordered,
)
from dynashape.integrations.verl.convert import correct_from_acc, rollout_batch_from_verl
from dynashape.integrations.verl.settings import ADAPTER_KEYS, EstimatorSettings, parse_settings
from dynashape.integrations.verl.state import save_state_atomic
from dynashape.shapers import Shaped, available_shapers, config_class, shaper_needs

__all__ = [
    "ADAPTER_KEYS",
    "VERL_OWN_ESTIMATORS",
    "EstimatorExtras",
    "EstimatorSettings",
    "batch_from_rows",
    "broadcast_advantages",
    "content_order",
    "correct_from_acc",
    "dropped_rows",
    "estimator_names",
    "group_ids_from_index",
    "last_metrics",
    "make_estimator",
    "parse_settings",
    "pending_extras",
    "provide_extras",
    "reordered",
    "reset_sessions",
    "rollout_batch_from_verl",
    "save_state_atomic",
    "session_for",
    "trainer_extras",
]

logger = logging.getLogger(__name__)

#: verl's own estimators that share a name with one of our shapers: verl hard-wires ``grpo`` in
#: ``compute_advantage`` and registers ``gdpo`` itself, so the plugin leaves those names to verl.
VERL_OWN_ESTIMATORS: frozenset[str] = frozenset({"grpo", "gdpo"})


def estimator_names() -> tuple[str, ...]:
    """The estimators this plugin registers with verl: every registered shaper (each under its own name) but
    VERL_OWN_ESTIMATORS. Read from the shaper registry on every call, so a shaper registered after the plugin
    loaded counts too (``register()`` again to add it to verl). ``ESTIMATOR_NAMES`` reads the same."""
    return tuple(name for name in available_shapers() if name not in VERL_OWN_ESTIMATORS)


def trainer_extras(name: str) -> str:
    """What estimator ``name`` reads that only the dynashape trainer mode hands over, in words ('' for nothing):
    the stable prompt keys and fingerprints its shaper declares (``Shaper.needs``)."""
    needs = shaper_needs(name)
    wanted = (("stable prompt keys", needs.prompt_keys), ("fingerprints", needs.fingerprints))
    return " and ".join(what for what, needed in wanted if needed)


def __getattr__(name: str) -> Any:
    if name == "ESTIMATOR_NAMES":  # estimator_names() as a module attribute, read from the registry each time
        return estimator_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# Driver-side state: one shaper per estimator name, extras handed over by the trainer, metrics
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False)  # identity equality: fields hold tensors
class EstimatorExtras:
    """Per-sample extras for the next estimator call (rows in the order of verl's batch).

    Attributes:
        prompt_keys: [bs] stable prompt ids, or None.
        fingerprints: float [bs, D] with NaN rows, or None.
        correct: Bool [bs] verifier verdicts (overrides the threshold on the summed reward), or None.
        padding: Bool [bs], True for verl's synthetic padding rows (``is_padding`` tags), or None.
        budgets: Long [bs], each row's token budget read from the dataset (L1), or None.
        truncated: Bool [bs], the rows verl cut at max_response_length (DLER, ``stop_properly``), or None.
        formatted: Bool [bs], the rows whose answer is in the asked format (``reward_extra_info["formatted"]``,
            LASER's official score), or None.
        drops_rows: True when the caller leaves the rows a filter drops (``Shaped.keep``, GFPO) out of the loss,
            reading them from ``dropped_rows(name)`` after the call (the dynashape trainer mode does).
    """

    prompt_keys: Sequence[str] | None = None
    fingerprints: torch.Tensor | None = None
    correct: torch.Tensor | None = None
    padding: torch.Tensor | None = None
    budgets: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    formatted: torch.Tensor | None = None
    drops_rows: bool = False


class _Session:
    """The shaper behind one estimator name (its state is saved with verl's checkpoints by verl_hooks)."""

    def __init__(self, settings: EstimatorSettings) -> None:
        self.settings = settings
        self.shaper = settings.build_shaper()
        self.last_metrics: dict[str, float] = {}
        self.last_dropped: torch.Tensor | None = None
        self.calls = 0
        # Validation signals (AALC, LASER-D) against verl's order "save, then validate" at one step:
        self.saved_step: int | None = None  # the step whose state file this process wrote last
        self.observed_step: int | None = None  # the step of the last validation handed to the shaper
        self.restored_validated_step: int | None = None  # resumed from a state holding that step's validation


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


def dropped_rows(name: str) -> torch.Tensor | None:
    """Bool [bs] of the rows the last call of estimator `name` dropped (``Shaped.keep`` False; rows never given
    to the shaper, such as padding, are not counted), in verl's row order; None when it dropped none."""
    session = _SESSIONS.get(name)
    return None if session is None else session.last_dropped


def pending_extras() -> EstimatorExtras | None:
    """The extras the next estimator call will see (None when nothing was handed over)."""
    return _PENDING_EXTRAS[-1] if _PENDING_EXTRAS else None


@contextlib.contextmanager
def provide_extras(extras: EstimatorExtras) -> Iterator[None]:
    """Make `extras` visible to the estimator calls inside the block (the driver is single-threaded here)."""
    _PENDING_EXTRAS.append(extras)
    try:
        yield
    finally:
        # by identity: the blocks nest, so this one's extras are the last whose identity matches
        at = max(i for i, pending in enumerate(_PENDING_EXTRAS) if pending is extras)
        del _PENDING_EXTRAS[at]


def _check_extras(extras: EstimatorExtras, bs: int) -> None:
    for field, value in (("prompt_keys", extras.prompt_keys), ("fingerprints", extras.fingerprints)):
        if value is not None and len(value) != bs:
            raise ValueError(f"extras.{field}: has {len(value)} rows but the estimator got {bs}")
    vectors = (
        ("correct", extras.correct),
        ("padding", extras.padding),
        ("budgets", extras.budgets),
        ("truncated", extras.truncated),
        ("formatted", extras.formatted),
    )
    for field, value in vectors:
        if value is not None and tuple(value.shape) != (bs,):
            raise ValueError(f"extras.{field}: expected shape ({bs},), got {tuple(value.shape)}")


def _kl_in_reward(config: Any) -> bool:
    if config is None:
        return False
    value = config.get("use_kl_in_reward", False) if hasattr(config, "get") else getattr(config, "use_kl_in_reward", 0)
    return bool(value)


def _verdict(name: str, settings: EstimatorSettings, extras: EstimatorExtras, config: Any) -> torch.Tensor | None:
    """The verifier verdicts to use, or None for the threshold on the summed reward (validated here)."""
    if settings.verdict == "threshold":
        correct = None
    else:
        correct = extras.correct
        if correct is None and settings.verdict == "acc":
            raise ValueError(
                f"algorithm.{name}.verdict=acc, but no 'acc' verdict reached the estimator: the reward function must "
                "return {'score': ..., 'acc': ...} for every sample, and acc reaches the estimator only through "
                "trainer.v1.trainer_mode=dynashape (or verl's legacy trainer, trainer.use_v1=false)"
            )
    if correct is None and _kl_in_reward(config):
        raise ValueError(
            f"algorithm.use_kl_in_reward=true: the summed token_level_rewards include the KL penalty, so the "
            f"'{name}' estimator cannot take correctness from them (algorithm.{name}.correct_threshold). Return "
            "{'score': ..., 'acc': ...} from the reward function (dynashape's compute_score does) and use "
            "trainer.v1.trainer_mode=dynashape, or move the KL into the loss (actor_rollout_ref.actor.use_kl_loss)"
        )
    return correct


def _check_needs(name: str, settings: EstimatorSettings, extras: EstimatorExtras) -> None:
    """Refuse a call without what the shaper declares it reads (``Shaper.needs``), naming it and the fix."""
    if trainer_extras(name) and extras.prompt_keys is None:
        raise ValueError(
            f"the '{name}' advantage estimator needs {trainer_extras(name)}, which verl only passes "
            "through the dynashape trainer: set trainer.use_v1=true trainer.v1.trainer_mode=dynashape"
        )
    needs = shaper_needs(name)
    if needs.budgets and extras.budgets is None:
        raise ValueError(
            f"the '{name}' advantage estimator reads each prompt's token budget "
            f"(algorithm.{name}.budget_key={settings.budget_key}), which verl passes only through the "
            "dynashape trainer (trainer.use_v1=true trainer.v1.trainer_mode=dynashape) or its legacy trainer"
        )
    for field, needed, where in (
        ("truncated", needs.truncated, "its max_response_length"),
        ("formatted", needs.formatted, "the reward function's 'formatted', which dynashape's compute_score returns"),
    ):
        if needed and getattr(extras, field) is None:
            raise ValueError(
                f"the '{name}' advantage estimator reads {field} [bs] ({where}), which verl passes only through "
                "the dynashape trainer (trainer.use_v1=true trainer.v1.trainer_mode=dynashape) or its legacy trainer"
            )
    if needs.drops_rows and not extras.drops_rows:
        raise ValueError(
            f"the '{name}' advantage estimator drops rows from the loss, which only the dynashape trainer does "
            "(a zero advantage would still count their tokens): set trainer.use_v1=true "
            "trainer.v1.trainer_mode=dynashape"
        )


def estimate(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | np.ndarray | None,
    config: Any,
) -> tuple[torch.Tensor, Shaped | None]:
    """Run estimator `name` once: RolloutBatch -> shaper -> token-level advantages [bs, T] and the Shaped.

    The Shaped covers the kept rows only (None when every row was padding or empty).
    """
    if index is None:
        raise ValueError(
            f"the '{name}' advantage estimator needs per-prompt uids: verl passes index=non_tensor_batch['uid']; "
            "it was missing from the batch"
        )
    check_shapes(token_level_rewards, response_mask)
    session = session_for(name, config)
    extras = _PENDING_EXTRAS[-1] if _PENDING_EXTRAS else EstimatorExtras()
    bs = token_level_rewards.shape[0]
    _check_extras(extras, bs)
    _check_needs(name, session.settings, extras)
    if len(index) != bs:
        raise ValueError(f"index: has {len(index)} uids but token_level_rewards has {bs} rows")
    correct = _verdict(name, session.settings, extras, config)
    device = response_mask.device
    # Reduce [bs, T] to per-row vectors once; every selection below works on [bs] vectors.
    lengths = response_mask.sum(-1)
    # Rollouts only: verl's synthetic padding rows and rows without a response token never reach the shaper.
    keep = lengths > 0
    if extras.padding is not None:
        keep = keep & ~extras.padding.to(device=device, dtype=torch.bool)
    kept = int(keep.sum())
    advantages = torch.zeros(bs, dtype=torch.float32, device=device)
    session.last_dropped = None
    if kept == 0:
        session.last_metrics = {"dynashape/excluded_rows": float(bs)}
        session.calls += 1
        return broadcast_advantages(advantages, response_mask), None
    rows = None if kept == bs else keep.nonzero().squeeze(-1)
    with torch.no_grad():
        batch = batch_from_rows(
            token_level_rewards.sum(-1),
            lengths,
            index,
            rows=rows,
            correct_threshold=session.settings.correct_threshold,
            correct=correct,
            residual_reward=session.settings.residual_reward,
            prompt_keys=extras.prompt_keys,
            fingerprints=extras.fingerprints,
            budgets=extras.budgets if shaper_needs(name).budgets else None,
            truncated=extras.truncated,
            formatted=extras.formatted,
        )
        if batch.prompt_keys is not None and shaper_needs(name).prompt_keys:
            # A memory keyed by prompt (MEDS) stores rows in the order it is given them, and that order decides
            # its kNN ties and which points the per-bank cap drops. verl's order is the order rollouts finished
            # in, so a resumed run would store the same rows differently: hand them over in content order.
            order = torch.from_numpy(content_order(batch)).to(device)
            batch = reordered(batch, order)
            rows = order if rows is None else rows[order]
        shaped = session.shaper(batch)
        values = shaped.advantages.to(device=device, dtype=torch.float32)
        if rows is None:
            advantages = values
        else:
            advantages[rows] = values
        if shaped.keep is not None and not bool(shaped.keep.all()):
            dropped = torch.zeros(bs, dtype=torch.bool, device=device)
            dropped[torch.arange(bs, device=device) if rows is None else rows] = ~shaped.keep.to(device)
            session.last_dropped = dropped
    session.last_metrics = {**shaped.metrics, "dynashape/excluded_rows": float(bs - kept)}
    session.calls += 1
    return broadcast_advantages(advantages, response_mask), shaped


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
