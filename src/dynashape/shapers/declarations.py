"""What each method declares about itself beside its chain (``shapers/recipes.py`` passes them to ``recipe``):
the controller state it logs every step (``Trajectory``: what a study plots over training) and its main knob
(``Strength``: what a frontier study sweeps, ``study.strength_rule``). Kept apart so that recipes.py stays the one
page of chains."""

from __future__ import annotations

from dynashape.shapers.base import Strength, Trajectory

# The controllers' state each logs every step (Shaper.trajectory), what a study plots over training.
LEAD_WEIGHT = Trajectory(keys=("lead/lambda_l",), title="efficiency weight lambda_l")  # lambda_c = 1 - lambda_l
THINKPRUNE_CAP = Trajectory(keys=("thinkprune/max_length",), title="length cap")  # ScheduledCap: the cap in force
LASER_D_TARGETS = Trajectory(  # the grid lengths per difficulty (or the longest); low: groups below 1/3 accuracy
    keys=("laser_d/target_low", "laser_d/target_medium", "laser_d/target_high"),
    title="targets; low = hardest groups",
    zero_means="the batch's longest response (no grid length keeps enough correct answers)",
)
ADLP_WEIGHT = Trajectory(keys=("adlp/lambda",), title="length weight lambda")  # DualAscent: the weight used that step
AALC_ALPHA = Trajectory(keys=("aalc/alpha",), title="alpha_t")  # logged once a validation accuracy is known

# The main knob of each length-control method (Shaper.strength)
L1_EXACT_STRENGTH = Strength(
    key="shaper_kwargs.alpha", kind="penalty", what="alpha, the weight of the budget deviation"
)
L1_MAX_STRENGTH = Strength(key="shaper_kwargs.alpha", kind="penalty", what="alpha, the weight of the budget excess")
THINKPRUNE_STRENGTH = Strength(
    key="shaper_kwargs.schedule", kind="final_cap", what="the final cap (its rounds: B, the midpoint, the cap)"
)
LASER_STRENGTH = Strength(key="shaper_kwargs.target_length", kind="length", what="the target length L_T")
LASER_D_STRENGTH = Strength(key="shaper_kwargs.grid", kind="grid", what="the grid of targets, scaled")
DLER_STRENGTH = Strength(key="shaper_kwargs.max_length", kind="length", what="the truncation cap L")
ALP_STRENGTH = Strength(key="shaper_kwargs.beta", kind="penalty", what="beta, the per-token penalty")
ADLP_STRENGTH = Strength(key="shaper_kwargs.eta", kind="penalty", what="eta, the step of the multiplier lambda")
AALC_STRENGTH = Strength(key="shaper_kwargs.c", kind="penalty", what="c, the weight of the length reward")
SAW_STRENGTH = Strength(key="length_threshold", kind="length", what="the length channel's threshold T")
GFPO_STRENGTH = Strength(key="shaper_kwargs.keep", kind="kept", what="k, the shortest rollouts kept of the group")
