#!/usr/bin/env bash
# LEAD with verl 0.9.x: DeepSeek-R1-Distill-Qwen-1.5B on MATH levels 3-5, the paper's settings (spec lead.md):
# 128 prompts x G=8 per step, PPO mini-batch 16 prompts, 1 PPO epoch, AdamW lr 1e-6, weight decay 0.01,
# clip 0.2 / 0.28, KL loss (mse, 5e-4), max response 4000 tokens, temperature 1.0, 7 epochs, LEAD b_max 4000,
# l_min 1000. The paper's checkpoint is step 450 (saved every 50 steps here).
#
#   pip install 'dynashape[verl]'        # registers the estimators through verl's plugin entry point
#   python examples/prepare_math_data.py --input math_train.jsonl --output-dir ~/data/math_l35 --levels 3 4 5 \
#       --test-input math500.jsonl
#   bash examples/verl_lead_r1_distill_1.5b.sh [extra hydra overrides...]
#
# trainer.v1.trainer_mode=dynashape uses the verifier's verdict (reward_extra_info["acc"]) and logs lead/* metrics.
# LEAD's EMA is saved with every verl checkpoint (global_step_N/dynashape_lead_state.pt) and restored from the step
# verl resumes from, in either mode. Check each node image first: python -m dynashape.integrations.verl --check
set -euo pipefail

DATA=${DATA:-$HOME/data/math_l35}
MODEL=${MODEL:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}
NGPUS=${NGPUS:-8}
OUT=${OUT:-$HOME/checkpoints/lead_r1_1.5b}

python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=lead \
  +algorithm.lead.b_max=4000 \
  +algorithm.lead.l_min=1000 \
  algorithm.use_kl_in_reward=false \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.train_batch_size=128 \
  data.max_prompt_length=1024 \
  data.max_response_length=4000 \
  data.filter_overlong_prompts=true \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.model.use_remove_padding=true \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.optim.weight_decay=0.01 \
  actor_rollout_ref.actor.ppo_mini_batch_size=16 \
  actor_rollout_ref.actor.ppo_epochs=1 \
  actor_rollout_ref.actor.use_dynamic_bsz=true \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.use_kl_loss=true \
  actor_rollout_ref.actor.kl_loss_type=mse \
  actor_rollout_ref.actor.kl_loss_coef=0.0005 \
  actor_rollout_ref.actor.entropy_coeff=0 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  reward.custom_reward_function.path=pkg://dynashape.integrations.verl \
  reward.custom_reward_function.name=compute_score \
  trainer.use_v1=true \
  trainer.v1.trainer_mode=dynashape \
  trainer.total_epochs=7 \
  trainer.save_freq=50 \
  trainer.test_freq=50 \
  trainer.n_gpus_per_node="$NGPUS" \
  trainer.nnodes=1 \
  trainer.default_local_dir="$OUT" \
  trainer.project_name=dynashape \
  trainer.experiment_name=lead_r1_distill_1.5b_math_l35 \
  trainer.logger='["console"]' \
  "$@"
