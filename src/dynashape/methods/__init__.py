"""The field's length-control methods as pure functions (layer 1) and small stateful parts (layer 2).

One module per method: L1 (`l1`), ThinkPrune (`thinkprune`), LASER and LASER-D (`laser`), DLER (`dler`),
ALP (`alp`), A-DLP (`adlp`), AALC (`aalc`), SAW (`saw`), GFPO (`gfpo`). Each module's docstring names the
paper, the official code (repository, path, commit read) and where code and paper differ. These are building
blocks: the registered shapers compose them. Imports only the core (`dynashape.core.groups`, `dynashape.core.checks`).
"""

from dynashape.methods.aalc import AalcConfig, AalcSchedule, aalc_grpo_float32, aalc_reward
from dynashape.methods.adlp import AdlpConfig, AdlpController, AdlpStep, adlp_lambda_update, adlp_reward
from dynashape.methods.alp import AlpConfig, alp_reward
from dynashape.methods.dler import DlerConfig, dler_advantages, dler_boost, dler_reward
from dynashape.methods.gfpo import AdaptiveKeep, GfpoConfig, GfpoResult, gfpo_advantages, gfpo_keep_mask
from dynashape.methods.l1 import L1ExactConfig, L1MaxConfig, l1_exact_reward, l1_max_reward
from dynashape.methods.laser import (
    LaserConfig,
    LaserDConfig,
    LaserDTargets,
    choose_bucket_targets,
    difficulty_buckets,
    laser_base_score,
    laser_d_reward,
    laser_reward,
    monitor_coverage,
)
from dynashape.methods.saw import SawConfig, SawResult, saw_advantages, saw_weights
from dynashape.methods.thinkprune import CapSchedule, ThinkPruneConfig, thinkprune_reward

__all__ = [
    "AalcConfig",
    "AalcSchedule",
    "AdaptiveKeep",
    "AdlpConfig",
    "AdlpController",
    "AdlpStep",
    "AlpConfig",
    "CapSchedule",
    "DlerConfig",
    "GfpoConfig",
    "GfpoResult",
    "L1ExactConfig",
    "L1MaxConfig",
    "LaserConfig",
    "LaserDConfig",
    "LaserDTargets",
    "SawConfig",
    "SawResult",
    "ThinkPruneConfig",
    "aalc_grpo_float32",
    "aalc_reward",
    "adlp_lambda_update",
    "adlp_reward",
    "alp_reward",
    "choose_bucket_targets",
    "difficulty_buckets",
    "dler_advantages",
    "dler_boost",
    "dler_reward",
    "gfpo_advantages",
    "gfpo_keep_mask",
    "l1_exact_reward",
    "l1_max_reward",
    "laser_base_score",
    "laser_d_reward",
    "laser_reward",
    "monitor_coverage",
    "saw_advantages",
    "saw_weights",
    "thinkprune_reward",
]
