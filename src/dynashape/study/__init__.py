"""The study: presets, the pre-registered comparison (plan, scheduler, tuning), claims and their statistics, the
results pages, and the audit command. Above the trainer (``dynashape.train``); nothing below imports it."""
