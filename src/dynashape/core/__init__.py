"""The core: RolloutBatch, groups, validation, pass@k and AES. Pure tensors; imports nothing of ours."""
