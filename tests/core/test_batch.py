import math

import numpy as np
import pytest
import torch

from dynashape import RolloutBatch


def make(**over):
    fields = dict(
        group_ids=torch.tensor([0, 0, 1]),
        correct=torch.tensor([True, False, True]),
        lengths=torch.tensor([5, 6, 7]),
    )
    fields.update(over)
    return RolloutBatch(**fields)


def test_valid_batch_keeps_values_and_stores_correct_as_bool():
    b = make(correct=torch.tensor([1.0, 0.0, 1.0]))
    assert b.correct.dtype == torch.bool
    assert b.correct.tolist() == [True, False, True]
    assert len(b) == 3


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (dict(correct=torch.tensor([1.0, math.nan, 1.0])), r"correct has a non-finite value nan at index 1"),
        (dict(correct=torch.tensor([1.0, 0.5, 1.0])), r"correct must be boolean or 0/1, got 0.5 at index 1"),
        (dict(lengths=torch.tensor([5, -2, 7])), r"lengths has a negative value -2 at index 1"),
        (dict(lengths=torch.tensor([5.0, 6.0, 7.0])), r"lengths must have an integer dtype"),
        (dict(lengths=torch.tensor([5, 6])), r"lengths has 2 rows but group_ids has 3"),
        (dict(group_ids=torch.tensor([0.0, 0.0, 1.0])), r"group_ids must have an integer dtype"),
        (
            dict(rewards=torch.tensor([[1.0], [math.inf], [0.0]])),
            r"rewards has a non-finite value inf at index \[1, 0\]",
        ),
        (dict(rewards=torch.tensor([1.0, 2.0, 3.0])), r"rewards must be 2-D \[N, K\]"),
        (dict(rewards=torch.ones(2, 1)), r"rewards has 2 rows but group_ids has 3"),
        (dict(prompt_keys=["a", "b"]), r"prompt_keys has 2 entries but group_ids has 3"),
        (dict(prompt_keys=["a", 3, "c"]), r"prompt_keys\[1\] must be str"),
        (
            dict(fingerprints=torch.tensor([[1.0, math.nan], [0.0, 0.0], [1.0, 1.0]])),
            r"fingerprints has a non-finite value nan at index \[0, 1\]",
        ),
    ],
)
def test_bad_input_names_field_and_first_bad_index(over, message):
    with pytest.raises(ValueError, match=message):
        make(**over)


def test_empty_batch_is_refused():
    with pytest.raises(ValueError, match="empty batch"):
        RolloutBatch(
            group_ids=torch.tensor([], dtype=torch.long),
            correct=torch.tensor([], dtype=torch.bool),
            lengths=torch.tensor([], dtype=torch.long),
        )


def test_whole_nan_fingerprint_row_means_absent_and_is_legal():
    fp = torch.tensor([[math.nan, math.nan], [0.5, 1.0], [1.0, 1.0]])
    b = make(fingerprints=fp)
    assert torch.isnan(b.fingerprints[0]).all()


def test_numpy_inputs_are_accepted_without_changing_values():
    b = RolloutBatch(group_ids=np.array([3, 3]), correct=np.array([True, False]), lengths=np.array([1, 2]))
    assert b.group_ids.tolist() == [3, 3] and b.lengths.tolist() == [1, 2]


def test_from_uids_numbers_groups_by_sorted_uid():
    b = RolloutBatch.from_uids(
        ["u9", "u1", "u9", "u5"], correct=torch.tensor([1, 0, 0, 1]), lengths=torch.tensor([1, 2, 3, 4])
    )
    # sorted uids: u1 -> 0, u5 -> 1, u9 -> 2
    assert b.group_ids.tolist() == [2, 0, 2, 1]
    assert b.prompt_keys is None


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8, torch.uint64])
def test_every_integer_dtype_of_ids_and_lengths_is_legal_and_shapes_as_int64(dtype):
    """Narrow or unsigned ids and lengths are legal; the shaper sees int64 and gives int64's numbers."""
    from dynashape import get_shaper

    ref = RolloutBatch(group_ids=torch.tensor([5, 5, 2, 2]), correct=[1, 0, 1, 1], lengths=torch.tensor([3, 40, 5, 6]))
    b = RolloutBatch(
        group_ids=torch.tensor([5, 5, 2, 2], dtype=dtype),
        correct=[1, 0, 1, 1],
        lengths=torch.tensor([3, 40, 5, 6], dtype=dtype),
    )
    assert b.group_ids.dtype == b.lengths.dtype == torch.int64
    for name, kw in (("grpo", {}), ("lead", {"b_max": 64, "l_min": 4})):
        assert torch.equal(get_shaper(name, **kw)(b).advantages, get_shaper(name, **kw)(ref).advantages)


def test_a_uint64_id_beyond_int64_is_refused_not_wrapped():
    with pytest.raises(ValueError, match=r"group_ids has a value beyond int64 \(9223372036854775813\) at index 1"):
        RolloutBatch(group_ids=torch.tensor([0, 2**63 + 5], dtype=torch.uint64), correct=[1, 0], lengths=[1, 2])


@pytest.mark.parametrize("uids", [[1, "1"], np.array([1, "1"], dtype=object), ("a", 2)])
def test_uids_of_mixed_types_are_refused(uids):
    """numpy would read [1, "1"] as two equal strings and put two prompts into one group."""
    with pytest.raises(ValueError, match=r"uids mix types \['int', 'str'\]"):
        RolloutBatch.from_uids(uids, correct=[1, 0], lengths=[1, 2])
