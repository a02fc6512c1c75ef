"""Kafka's Fetch rules as the pure core states them (korvet/core/fetch.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from korvet.core import fetch as rules
from korvet.core.errors import ErrorCode

ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@given(st.none() | ints, st.integers(min_value=-5, max_value=10**6), ints)
def test_max_bytes_of_zero_or_less_or_absent_means_no_limit(max_bytes: int | None, wait: int,
                                                           min_bytes: int) -> None:
    limits = rules.FetchLimits.of(wait, min_bytes, max_bytes)
    assert limits.max_wait_ms == max(0, wait)
    if max_bytes is None or max_bytes <= 0:
        assert limits.max_bytes == rules.NO_LIMIT
    else:
        assert limits.max_bytes == max_bytes


@given(st.booleans(), st.booleans(), st.integers(min_value=-3, max_value=12),
       st.integers(min_value=1, max_value=10), st.integers(min_value=-1, max_value=3))
def test_which_partitions_are_readable(known: bool, by_id: bool, partition: int, partitions: int,
                                       leader_epoch: int) -> None:
    error = rules.partition_error(known, by_id, partition, partitions, leader_epoch)
    if not known:
        assert error is (ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    elif not 0 <= partition < partitions:
        assert error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    elif leader_epoch > rules.LEADER_EPOCH:
        assert error is ErrorCode.UNKNOWN_LEADER_EPOCH
    else:
        assert error is ErrorCode.NONE


@given(st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=100),
       st.integers(min_value=0, max_value=100))
def test_offsets_from_log_start_to_high_watermark_are_in_range(offset: int, start: int,
                                                               length: int) -> None:
    high_watermark = start + length
    error = rules.offset_error(offset, start, high_watermark)
    assert (error is ErrorCode.NONE) == (start <= offset <= high_watermark)
    if error is not ErrorCode.NONE:
        assert error is ErrorCode.OFFSET_OUT_OF_RANGE


@given(st.lists(st.integers(min_value=-10, max_value=5000), min_size=1, max_size=6),
       st.integers(min_value=1, max_value=10_000))
def test_partitions_share_the_response_budget_in_request_order(sizes: list[int],
                                                              max_bytes: int) -> None:
    used = 0
    for partition_max in sizes:
        budget = rules.partition_budget(partition_max, max_bytes, used)
        assert budget <= max(partition_max, 0)
        assert used + budget <= max_bytes
        used += max(budget, 0)
    assert used <= max_bytes


@given(st.lists(st.tuples(st.integers(min_value=1, max_value=500),
                          st.integers(min_value=0, max_value=10**6)), max_size=20),
       st.integers(min_value=0, max_value=10**8))
def test_entry_count_estimates_stay_within_one_and_the_read_cap(samples: list[tuple[int, int]],
                                                                budget: int) -> None:
    estimate = rules.SizeEstimate()
    for count, size in samples:
        estimate.observe("s", count, size)
        assert 1 <= estimate.count_for("s", budget) <= rules.MAX_ENTRIES_PER_READ
    estimate.forget("s")
    assert estimate.count_for("s", 0) == 1


@given(st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=100),
       st.booleans())
def test_a_response_waits_only_while_it_has_less_than_min_bytes_and_no_error(
        used: int, min_bytes: int, error: bool) -> None:
    limits = rules.FetchLimits.of(100, min_bytes, None)
    assert rules.answered(used, limits, error) == (error or used >= min_bytes)


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=100),
                          st.integers(min_value=0, max_value=3),
                          st.integers(min_value=-1, max_value=200)), min_size=1, max_size=4))
def test_the_read_ahead_predicts_the_offsets_after_the_records_taken(
        parts: list[tuple[int, int, int]]) -> None:
    predicted = rules.predicted_offsets(parts)
    if not any(taken for _, taken, _ in parts):
        assert predicted is None  # caught up: the next fetch waits instead
    else:
        assert predicted == [following if following >= 0 else offset
                             for offset, _, following in parts]


def test_a_prepared_response_is_taken_only_by_a_request_for_the_same_offsets() -> None:
    key = rules.read_ahead_key([("t", 0, 5, 100, False)], 1000, 0)
    assert key == rules.read_ahead_key([("t", 0, 5, 100, False)], 1000, 0)
    assert key != rules.read_ahead_key([("t", 0, 4, 100, False)], 1000, 0)  # a seek back
    assert key != rules.read_ahead_key([("t", 0, 5, 100, False)], 1000, 1)  # a DeleteRecords since
    # read_committed ends at the last stable offset: a read_uncommitted read is not its answer
    assert key != rules.read_ahead_key([("t", 0, 5, 100, True)], 1000, 0)
    assert rules.read_ahead_key([("t", 0, 5, 100, False), None], 1000, 0) is None


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=9),
                          st.integers(min_value=0, max_value=9)), max_size=3),
       st.integers(min_value=0, max_value=5), st.integers(min_value=1, max_value=5))
def test_a_prepared_response_is_served_with_enough_records_and_no_log_start_past_it(
        starts: list[tuple[int, int]], used: int, min_bytes: int) -> None:
    served = rules.serve_prepared(starts, used, min_bytes)
    assert served == (used >= min_bytes and all(offset >= start for offset, start in starts))
