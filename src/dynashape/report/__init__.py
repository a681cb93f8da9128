"""Evaluation, tables and plots of training runs (imports matplotlib only when a report is written)."""
