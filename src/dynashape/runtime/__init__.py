"""What training and evaluation share at run time: policy loading, the sampler and its KV cache, prompts,
model folders."""
