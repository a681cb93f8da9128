#!/usr/bin/env bash
# DAPO + MEDS with verl 0.9.x: Qwen2.5-Math-7B on DAPO-Math-17K + MATH levels 3-5 (spec meds.md section 5):
# clip 0.2 / 0.28, dual-clip c = 10, token-mean loss, no KL, no entropy bonus, dynamic sampling (groups whose
# accuracy is all 0 or all 1 are dropped before the memory sees them), overlong buffer 512 with factor 1.0,
# 512 prompts x 16 rollouts, mini-batch 16 prompts, lr 1e-6 with 10 warm-up steps, weight decay 0.1, grad clip
# 1.0, temperature 1.0; MEDS alpha 0.1, beta 0.2, fingerprint = last 14 layer logits.
# Qwen2.5-Math-7B has a 4096-token context: prompts <= 1024, responses <= 3072 (our choice; the buffer is 512).
#
#   pip install 'dynashape[verl]'
#   python examples/prepare_math_data.py --input dapo_math_17k.jsonl --input math_train.jsonl --levels 3 4 5 \
#       --output-dir ~/data/dapo_meds --test-input math500.jsonl
#   bash examples/verl_dapo_meds_qwen2.5_math_7b.sh [extra hydra overrides...]
#
# MEDS needs the dynashape trainer mode: it passes stable prompt keys to the error memory and takes the
# fingerprints from the actor's old-log-prob forward (patched FSDP forward; needs use_remove_padding=true and
# no Ulysses sequence parallelism). residual_reward=true hands DAPO's overlong term to MEDS as a reward channel.
set -euo pipefail

DATA=${DATA:-$HOME/data/dapo_meds}
MODEL=${MODEL:-Qwen/Qwen2.5-Math-7B}
NGPUS=${NGPUS:-8}
OUT=${OUT:-$HOME/checkpoints/dapo_meds_qwen2.5_math_7b}
MAX_RESPONSE=3072

python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=meds \
  +algorithm.meds.alpha=0.1 \
  +algorithm.meds.beta=0.2 \
  +algorithm.meds.residual_reward=true \
  +algorithm.meds.fingerprint_layers=14 \
  algorithm.use_kl_in_reward=false \
  algorithm.filter_groups.enable=true \
  algorithm.filter_groups.metric=acc \
  algorithm.filter_groups.max_num_gen_batches=10 \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.train_batch_size=512 \
  data.max_prompt_length=1024 \
  data.max_response_length=$MAX_RESPONSE \
  data.filter_overlong_prompts=true \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.model.use_remove_padding=true \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.optim.lr_warmup_steps=10 \
  actor_rollout_ref.actor.optim.weight_decay=0.1 \
  actor_rollout_ref.actor.grad_clip=1.0 \
  actor_rollout_ref.actor.ppo_mini_batch_size=16 \
  actor_rollout_ref.actor.use_dynamic_bsz=true \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.clip_ratio_c=10.0 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.use_kl_loss=false \
  actor_rollout_ref.actor.entropy_coeff=0 \
  actor_rollout_ref.actor.ulysses_sequence_parallel_size=1 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=16 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  reward.reward_manager.name=dapo \
  +reward.reward_kwargs.max_resp_len=$MAX_RESPONSE \
  +reward.reward_kwargs.overlong_buffer_cfg.enable=true \
  +reward.reward_kwargs.overlong_buffer_cfg.len=512 \
  +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0 \
  +reward.reward_kwargs.overlong_buffer_cfg.log=false \
  reward.custom_reward_function.path=pkg://dynashape.integrations.verl \
  reward.custom_reward_function.name=compute_score \
  trainer.use_v1=true \
  trainer.v1.trainer_mode=dynashape \
  trainer.total_epochs=10 \
  trainer.save_freq=50 \
  trainer.test_freq=25 \
  trainer.n_gpus_per_node="$NGPUS" \
  trainer.nnodes=1 \
  trainer.default_local_dir="$OUT" \
  trainer.project_name=dynashape \
  trainer.experiment_name=dapo_meds_qwen2.5_math_7b \
  trainer.logger='["console"]' \
  "$@"
