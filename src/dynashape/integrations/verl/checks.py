"""Start-up validation of a verl 0.9.x configuration that uses one of our estimators.

verl reports most misconfigurations of a plugin late: after a full rollout (a missing TransferQueue field, an
unknown estimator) or inside a worker at step 1. :func:`check_config` runs when verl builds its trainer
(:mod:`dynashape.integrations.verl.hooks` wraps the trainers' ``__init__``; the ``dynashape`` trainer mode calls it
first thing), before any worker, rollout server or GPU is set up, and raises one :class:`VerlConfigError` that
lists every setting to change.

What is checked when ``algorithm.adv_estimator`` is one of ours:

* ``algorithm.<name>.*``: the shaper's own config class and our adapter keys (typos, ranges).
* The verdict: ``sum(token_level_rewards) > correct_threshold`` is wrong with ``algorithm.use_kl_in_reward=true``
  and with an overlong penalty (``reward.reward_kwargs.overlong_buffer_cfg.enable=true``, DAPO's reward manager);
  those need the reward function's ``acc`` (dynashape's ``compute_score``, or ``+algorithm.<name>.verdict=acc``
  for a function of yours that returns it), which reaches the estimator through the ``dynashape`` trainer mode
  or verl's legacy trainer only.
* Multi-turn rollouts (``actor_rollout_ref.rollout.multi_turn.enable``) are refused for every estimator of ours.
* The field's signals, each from the shaper's declaration (``Shaper.needs``): budgets (L1) need the ``dynashape``
  trainer mode or verl's legacy trainer; the validation accuracy (AALC) needs ``trainer.test_freq > 0``; the
  monitor set (LASER-D) is verl's validation, so it needs the ``dynashape`` trainer mode, ``trainer.test_freq``
  equal to ``refresh_every``, ``trainer.val_before_train=true`` and validation sampling as in training
  (``val_kwargs.do_sample=true``, ``val_kwargs.n`` = ``rollout.n`` = the shaper's ``n_rollout``, the same
  temperature); dropped rows (GFPO) need the ``dynashape`` trainer mode, which masks them out of the loss, and
  ``actor_rollout_ref.actor.loss_agg_mode`` token-mean or token-sum (``ROW_DROPPING_LOSS_AGG_MODES``: verl's
  sequence means divide by a row count that includes the dropped rows).
* Fingerprints, for every shaper that declares it reads them (``Shaper.needs``: ``meds``, ``lead_meds``), are
  taken inside verl's FSDP actor during the old-log-prob forward.
  They need: the ``dynashape`` trainer mode on verl's v1 trainer; ``actor_rollout_ref.actor.strategy`` ``fsdp``
  or ``fsdp2`` (not megatron, veomni, torchtitan, automodel, fsdp_turbo); no Ulysses sequence parallelism;
  ``actor_rollout_ref.model.use_remove_padding=true``; ``use_fused_kernels=false`` (the fused head skips the
  ``lm_head`` module whose forward the fingerprints need); an actor old-log-prob forward, i.e. not
  ``algorithm.rollout_correction.bypass_mode=true``; and the FSDP patch not disabled (``DYNASHAPE_VERL_PATCH_FSDP``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dynashape.integrations.verl.estimators import estimator_names, trainer_extras
from dynashape.integrations.verl.settings import EstimatorSettings, parse_settings
from dynashape.shapers import config_class, shaper_needs

__all__ = ["MEDS_STRATEGIES", "ROW_DROPPING_LOSS_AGG_MODES", "VerlConfigError", "check_config", "config_problems"]

#: Engine strategies whose actor forward carries the fingerprint hooks (verl's FSDPEngineWithLMHead).
MEDS_STRATEGIES: tuple[str, ...] = ("fsdp", "fsdp2")
#: verl's loss aggregations that stay exact when a filter drops rows (GFPO) by masking them: token-mean divides by
#: the kept tokens (verl's batch_num_tokens is the sum of the masked loss_mask), token-sum has no normaliser. The
#: sequence means (seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm) divide by global_batch_size,
#: a row count fixed at ppo_mini_batch_size x rollout.n (verl 0.9.1 ``trainer_base.py`` ``_update_actor``),
#: which counts the dropped rows; verl offers no per-mini-batch hook to change it, so they are refused.
ROW_DROPPING_LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "token-sum")
#: The module path of our reward function, as verl's custom_reward_function.path accepts it.
OUR_REWARD_PATHS: frozenset[str] = frozenset(
    {"pkg://dynashape.integrations.verl", "pkg://dynashape.rewards.scoring", "pkg://dynashape.rewards"}
)
PATCH_ENV = "DYNASHAPE_VERL_PATCH_FSDP"


class VerlConfigError(ValueError):
    """A verl configuration our estimators cannot run; the message lists every setting to change."""


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b.c`` through DictConfig / dataclass / dict layers; `default` where any layer is missing.

    Defaults passed by the callers are verl 0.9.1's own defaults (``verl/trainer/config/ppo_trainer.yaml``).

    Raises:
        VerlConfigError: a present setting that cannot be read (an interpolation that does not resolve, a
            missing ``???`` value): taking the default instead would validate a config verl cannot run.
    """
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        if isinstance(node, Mapping) or (hasattr(node, "get") and not isinstance(node, (str, bytes))):
            try:
                node = node.get(part, None)
            except Exception as err:  # omegaconf's errors share no base class with a plain mapping's
                first = str(err).splitlines()[0] if str(err) else ""
                raise VerlConfigError(f"{dotted}: cannot be read ({type(err).__name__}: {first})") from None
        else:
            node = getattr(node, part, None)
    return default if node is None else node


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def config_problems(config: Any) -> list[str]:
    """Every reason this verl config cannot run our estimator, each as ``setting: why; what to set``.

    Args:
        config: verl's full trainer config (``algorithm``, ``trainer``, ``actor_rollout_ref``, ``reward``).

    Returns:
        [] when ``algorithm.adv_estimator`` is not ours or nothing is wrong.
    """
    name = str(_get(config, "algorithm.adv_estimator", ""))
    if name not in estimator_names():
        return []
    problems: list[str] = []
    settings = None
    try:
        settings = parse_settings(name, _get(config, "algorithm"))
    except ValueError as err:
        problems.append(str(err))

    use_v1 = _truthy(_get(config, "trainer.use_v1", True))
    trainer_mode = str(_get(config, "trainer.v1.trainer_mode", "sync"))
    dynashape_mode = use_v1 and trainer_mode == "dynashape"
    acc_reaches_estimator = dynashape_mode or not use_v1
    reward_path = str(_get(config, "reward.custom_reward_function.path", "") or "")
    reward_name = str(_get(config, "reward.custom_reward_function.name", "") or "")
    ours_reward = reward_path in OUR_REWARD_PATHS and reward_name == "compute_score"

    problems += _verdict_problems(
        config, name, settings, acc_reaches_estimator=acc_reaches_estimator, ours_reward=ours_reward
    )

    # --- multi-turn rollouts ------------------------------------------------------------------------------
    if _truthy(_get(config, "actor_rollout_ref.rollout.multi_turn.enable", False)):
        problems.append(
            "actor_rollout_ref.rollout.multi_turn.enable=true: multi-turn responses interleave tool output that the "
            f"response mask leaves out, so '{name}' would read neither the response length nor the answer as its "
            "paper defines them (untested); set actor_rollout_ref.rollout.multi_turn.enable=false"
        )

    # --- what only the dynashape trainer mode provides (the shaper's declaration, Shaper.needs) --------------
    extras = trainer_extras(name)
    if extras and not dynashape_mode:
        problems.append(
            f"trainer.use_v1={str(use_v1).lower()} trainer.v1.trainer_mode={trainer_mode}: '{name}' needs {extras}, "
            "which only the dynashape trainer mode provides; set trainer.use_v1=true trainer.v1.trainer_mode=dynashape"
        )

    # --- the field's signals: budgets, the validation accuracy, the monitor, dropped rows ---------------------
    problems += _signal_problems(config, name, settings, use_v1=use_v1, dynashape_mode=dynashape_mode)

    # --- the fingerprints (MEDS) -----------------------------------------------------------------------------
    if shaper_needs(name).fingerprints:
        problems += _fingerprint_problems(config)
    return problems


def _verdict_problems(
    config: Any, name: str, settings: EstimatorSettings | None, *, acc_reaches_estimator: bool, ours_reward: bool
) -> list[str]:
    """Whether the estimator can tell right from wrong: the summed reward above ``correct_threshold`` is wrong
    once a KL term or an overlong penalty changes it, and the reward function's ``acc`` reaches the estimator
    only through the ``dynashape`` trainer mode (or verl's legacy trainer)."""
    problems: list[str] = []
    verdict = settings.verdict if settings is not None else "auto"
    changed_by = []
    if _truthy(_get(config, "algorithm.use_kl_in_reward", False)):
        changed_by.append("algorithm.use_kl_in_reward=true")
    if _truthy(_get(config, "reward.reward_kwargs.overlong_buffer_cfg.enable", False)):
        changed_by.append("reward.reward_kwargs.overlong_buffer_cfg.enable=true")
    how_acc = "trainer.use_v1=true trainer.v1.trainer_mode=dynashape" if not acc_reaches_estimator else "(already set)"
    if verdict == "acc" and not acc_reaches_estimator:
        problems.append(
            f"algorithm.{name}.verdict=acc: the reward function's acc reaches the estimator only through the "
            f"dynashape trainer mode; set {how_acc}"
        )
    if changed_by:
        why = (
            f"{' and '.join(changed_by)} {'change' if len(changed_by) > 1 else 'changes'} the summed reward, so "
            f"algorithm.{name}.correct_threshold cannot tell right from wrong"
        )
        if verdict == "threshold":
            problems.append(f"algorithm.{name}.verdict=threshold: {why}; use verdict=acc or auto")
        elif not acc_reaches_estimator:
            problems.append(
                f"{why}; the reward function's acc verdict is needed and reaches the estimator only through "
                f"the dynashape trainer mode: set {how_acc}"
            )
        elif verdict == "auto" and not ours_reward:
            problems.append(
                f"{why}; use reward.custom_reward_function.path=pkg://dynashape.integrations.verl "
                f"reward.custom_reward_function.name=compute_score (it returns acc), or, if your reward function "
                f"returns {{'score': ..., 'acc': ...}}, say so with +algorithm.{name}.verdict=acc"
            )
    return problems


def _fingerprint_problems(config: Any) -> list[str]:
    """What MEDS's fingerprints need from verl: they are taken by the patched FSDP actor in the old-log-prob
    forward, on the packed (remove-padding) sequence, at the ``lm_head`` module."""
    problems: list[str] = []
    strategy = str(_get(config, "actor_rollout_ref.actor.strategy", "fsdp"))
    if strategy not in MEDS_STRATEGIES:
        problems.append(
            f"actor_rollout_ref.actor.strategy={strategy}: MEDS fingerprints are taken in verl's FSDP engine "
            f"only; set actor_rollout_ref.actor.strategy=fsdp or fsdp2"
        )
    ulysses = max(
        int(_get(config, "actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1)),
        int(_get(config, "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", 1)),
    )
    if ulysses > 1:
        problems.append(
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={ulysses}: with Ulysses sequence "
            "parallelism each rank holds a slice of the packed sequence and the answer position may be on "
            "another rank; set it to 1"
        )
    if not _truthy(_get(config, "actor_rollout_ref.model.use_remove_padding", True)):  # verl's default: true
        problems.append(
            "actor_rollout_ref.model.use_remove_padding=false: the fingerprint hooks locate answers in verl's "
            "packed (remove-padding) forward; set actor_rollout_ref.model.use_remove_padding=true"
        )
    if _truthy(_get(config, "actor_rollout_ref.model.use_fused_kernels", False)):
        problems.append(
            "actor_rollout_ref.model.use_fused_kernels=true: the fused head computes log-probs without running "
            "the lm_head module, where the fingerprints read the head; set "
            "actor_rollout_ref.model.use_fused_kernels=false"
        )
    if _truthy(_get(config, "algorithm.rollout_correction.bypass_mode", False)):
        problems.append(
            "algorithm.rollout_correction.bypass_mode=true: bypass mode uses the rollout's log-probs and skips "
            "the actor's old-log-prob forward, which takes the fingerprints; set "
            "algorithm.rollout_correction.bypass_mode=false"
        )
    if os.environ.get(PATCH_ENV, "1") == "0":
        problems.append(
            f"environment {PATCH_ENV}=0: the FSDP actor is left unpatched, so no fingerprints are taken; unset it"
        )
    return problems


def _signal_problems(
    config: Any, name: str, settings: EstimatorSettings | None, *, use_v1: bool, dynashape_mode: bool
) -> list[str]:
    """What a shaper that reads budgets, the validation accuracy or a monitor set, or drops rows, needs from verl
    (its declaration, ``Shaper.needs``)."""
    needs = shaper_needs(name)
    problems: list[str] = []
    trainer_mode = _get(config, "trainer.v1.trainer_mode", "sync")
    mode = f"trainer.use_v1={str(use_v1).lower()} trainer.v1.trainer_mode={trainer_mode}"
    set_mode = "set trainer.use_v1=true trainer.v1.trainer_mode=dynashape"
    if needs.budgets and use_v1 and not dynashape_mode:
        problems.append(
            f"{mode}: '{name}' reads each prompt's token budget from the dataset, which verl hands over only in "
            f"the dynashape trainer mode (or its legacy trainer, trainer.use_v1=false); {set_mode}"
        )
    if needs.drops_rows and not dynashape_mode:
        problems.append(
            f"{mode}: '{name}' drops rows from the loss (Shaped.keep), which only the dynashape trainer mode does "
            f"(a zero advantage would still count their tokens in the token mean); {set_mode}"
        )
    agg = str(_get(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    if needs.drops_rows and agg not in ROW_DROPPING_LOSS_AGG_MODES:
        problems.append(
            f"actor_rollout_ref.actor.loss_agg_mode={agg}: verl's agg_loss divides the sequence sum by "
            f"global_batch_size = ppo_mini_batch_size x rollout.n rows, the rows '{name}' drops included, so the "
            "loss would shrink by the kept fraction; set actor_rollout_ref.actor.loss_agg_mode=token-mean (or "
            "token-sum)"
        )
    test_freq = int(_get(config, "trainer.test_freq", -1))
    if needs.validation_accuracy and test_freq <= 0:
        problems.append(
            f"trainer.test_freq={test_freq}: '{name}' reads the validation accuracy after each verl validation, "
            "and verl validates only with trainer.test_freq > 0 (AALC's code: 10); set trainer.test_freq=10"
        )
    if needs.monitor_rollouts:
        if not dynashape_mode:
            problems.append(
                f"{mode}: '{name}' reads the monitor set's rollouts, which the dynashape trainer mode takes from "
                f"verl's validation generations; {set_mode}"
            )
        refresh = n_rollout = None
        if settings is not None:
            shaper_config = config_class(name)(**dict(settings.shaper_params))
            refresh, n_rollout = int(shaper_config.refresh_every), int(shaper_config.n_rollout)
        if refresh is not None and test_freq != refresh:
            problems.append(
                f"trainer.test_freq={test_freq}: '{name}' refreshes its targets from verl's validation every "
                f"algorithm.{name}.refresh_every={refresh} steps; set trainer.test_freq={refresh}"
            )
        if not _truthy(_get(config, "trainer.val_before_train", True)):
            problems.append(
                f"trainer.val_before_train=false: '{name}' sets its first targets from the validation before "
                "training (step 0); set trainer.val_before_train=true"
            )
        val = "actor_rollout_ref.rollout.val_kwargs"
        if not _truthy(_get(config, f"{val}.do_sample", False)):
            problems.append(
                f"{val}.do_sample=false: '{name}' measures coverage on sampled monitor rollouts, as in training; "
                f"set {val}.do_sample=true"
            )
        n_train, n_val = int(_get(config, "actor_rollout_ref.rollout.n", 1)), int(_get(config, f"{val}.n", 1))
        if n_val != n_train:
            problems.append(
                f"{val}.n={n_val}: '{name}' sizes its buckets by the training group size "
                f"(actor_rollout_ref.rollout.n={n_train}); set {val}.n={n_train}"
            )
        if n_rollout is not None and n_val != n_rollout:
            problems.append(
                f"{val}.n={n_val}: '{name}' counts coverage in buckets sized by algorithm.{name}.n_rollout="
                f"{n_rollout} rollouts per monitor prompt; set {val}.n={n_rollout} (or n_rollout={n_val})"
            )
        t_train = float(_get(config, "actor_rollout_ref.rollout.temperature", 1.0))
        t_val = float(_get(config, f"{val}.temperature", 0))
        if t_val != t_train:
            problems.append(
                f"{val}.temperature={t_val:g}: '{name}' reads the monitor at the training temperature "
                f"(actor_rollout_ref.rollout.temperature={t_train:g}); set {val}.temperature={t_train:g}"
            )
    return problems


def check_config(config: Any) -> None:
    """Raise one :class:`VerlConfigError` listing every problem :func:`config_problems` finds."""
    problems = config_problems(config)
    if problems:
        name = _get(config, "algorithm.adv_estimator", "")
        lines = "\n".join(f"  - {p}" for p in problems)
        raise VerlConfigError(
            f"dynashape: this verl configuration cannot run algorithm.adv_estimator={name}; change:\n{lines}"
        )
