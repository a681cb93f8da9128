"""The reference trainer: toy task, tiny Qwen2 policy, the RL loop, presets, checkpoints.

Entry points: ``dynashape.train.run.train(RunConfig, run_dir)`` and the ``dynashape train`` command.
Submodules import transformers lazily; importing this package is cheap.
"""
