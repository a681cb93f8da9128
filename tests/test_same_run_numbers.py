"""scripts/same_run_numbers.py: the check that two runs hold the same numbers, timings and places aside."""

from __future__ import annotations


def test_timings_are_left_out_whatever_their_namespace(load_script):
    differences = load_script("same_run_numbers").differences
    # The MEDS shaper logs its wall time as "meds/seconds": two identical runs differ there and nowhere else.
    a = [{"loss": 0.5, "meds/seconds": 0.012, "time/step": 3.0, "eval_seconds": 9.0, "wall_seconds": 1.0}]
    b = [{"loss": 0.5, "meds/seconds": 0.031, "time/step": 4.0, "eval_seconds": 7.0, "wall_seconds": 2.0}]
    assert differences(a, b, "metrics") == []


def test_a_number_that_differs_is_named_with_its_place_even_beside_a_timing(load_script):
    differences = load_script("same_run_numbers").differences
    a = [{"loss": 0.5, "meds/seconds": 0.01}, {"loss": 0.25, "meds/penalty": 0.1}]
    b = [{"loss": 0.5, "meds/seconds": 0.02}, {"loss": 0.25, "meds/penalty": 0.2}]
    assert differences(a, b, "metrics") == ["metrics[1]/meds/penalty: 0.1 != 0.2"]
    # "seconds" only as the last segment: a key that merely contains it is a number like any other.
    assert differences({"seconds_per_token/x": 1}, {"seconds_per_token/x": 2}) == ["/seconds_per_token/x: 1 != 2"]


def test_additions_are_listed_apart_only_when_asked(load_script):
    """A new metric in the second run: a difference by default; with ``added`` a list, an addition there. A key only
    the first run has, or a changed value, stays a difference either way."""
    differences = load_script("same_run_numbers").differences
    a = [{"loss": 0.5}, {"loss": 0.25, "gone": 1}]
    b = [{"loss": 0.5, "tokens/response": 10.0}, {"loss": 0.3, "tokens/response": 12.0}]
    assert differences(a, b, "metrics") == [
        "metrics[0]/tokens/response: only in second",
        "metrics[1]/gone: only in first",
        "metrics[1]/loss: 0.25 != 0.3",
        "metrics[1]/tokens/response: only in second",
    ]
    added = []
    assert differences(a, b, "metrics", added) == ["metrics[1]/gone: only in first", "metrics[1]/loss: 0.25 != 0.3"]
    assert added == ["metrics[0]/tokens/response", "metrics[1]/tokens/response"]
