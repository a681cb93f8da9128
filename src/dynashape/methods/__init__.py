"""The methods' maths as pure functions (layer 1) and small stateful parts (layer 2), with their configs.

One module per method: L1 (`l1`), ThinkPrune (`thinkprune`), LASER and LASER-D (`laser`), DLER (`dler`),
ALP (`alp`), A-DLP (`adlp`), AALC (`aalc`), SAW (`saw`), GFPO (`gfpo`); LEAD (`lead/`); the length rewards
engines ship: cosine (`cosine`), Kimi k1.5 (`kimi`), prime-rl's pass-rate penalty (`pass_rate`), GRPO-LEAD
(`length_zscore`); the GRPO family's configs (`grpo`, `shorterbetter`). Each module's docstring names the
paper, the official code (repository, path, commit read) and where code and paper differ. These are building
blocks: the registered shapers compose them. Imports only the core (`dynashape.core.groups`, `dynashape.core.checks`).
"""

from dynashape.methods.aalc import AalcConfig, AalcSchedule, aalc_grpo_float32, aalc_reward
from dynashape.methods.adlp import AdlpConfig, AdlpController, AdlpStep, adlp_lambda_update, adlp_reward
from dynashape.methods.alp import AlpConfig, alp_reward
from dynashape.methods.cosine import CosineConfig, cosine_length_reward
from dynashape.methods.dler import DlerConfig, dler_advantages, dler_boost, dler_reward
from dynashape.methods.gfpo import AdaptiveKeep, GfpoConfig, GfpoResult, gfpo_advantages, gfpo_keep_mask
from dynashape.methods.grpo import GdpoConfig, GrpoConfig, GrpoLengthConfig
from dynashape.methods.kimi import KimiLengthConfig, kimi_length_reward
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
from dynashape.methods.lead.config import LeadConfig
from dynashape.methods.length_zscore import LengthZscoreConfig, length_zscore_reward
from dynashape.methods.pass_rate import PassRateLinearConfig, pass_rate_linear_penalty
from dynashape.methods.saw import SawConfig, SawResult, saw_advantages, saw_weights
from dynashape.methods.shorterbetter import ShorterBetterConfig
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
    "CosineConfig",
    "DlerConfig",
    "GdpoConfig",
    "GfpoConfig",
    "GfpoResult",
    "GrpoConfig",
    "GrpoLengthConfig",
    "KimiLengthConfig",
    "L1ExactConfig",
    "L1MaxConfig",
    "LaserConfig",
    "LaserDConfig",
    "LaserDTargets",
    "LeadConfig",
    "LengthZscoreConfig",
    "PassRateLinearConfig",
    "SawConfig",
    "SawResult",
    "ShorterBetterConfig",
    "ThinkPruneConfig",
    "aalc_grpo_float32",
    "aalc_reward",
    "adlp_lambda_update",
    "adlp_reward",
    "alp_reward",
    "choose_bucket_targets",
    "cosine_length_reward",
    "difficulty_buckets",
    "dler_advantages",
    "dler_boost",
    "dler_reward",
    "gfpo_advantages",
    "gfpo_keep_mask",
    "kimi_length_reward",
    "l1_exact_reward",
    "l1_max_reward",
    "laser_base_score",
    "laser_d_reward",
    "laser_reward",
    "length_zscore_reward",
    "monitor_coverage",
    "pass_rate_linear_penalty",
    "saw_advantages",
    "saw_weights",
    "thinkprune_reward",
]
