"""Slow, obviously correct reference implementations, for equivalence tests and benchmarks.

Plain Python loops over groups and rollouts on Python floats, written from the spec pages line by line. Never
use them on a hot path: they exist to check the vectorised code and to measure it against.
"""
