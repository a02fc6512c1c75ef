"""A share group's start offset and lag read off its Redis consumer group
(korvet/core/share_offsets.py), in both offset schemes."""

from __future__ import annotations

from korvet.core.offsets import DENSE, EntryId, OffsetCodec
from korvet.core.share_offsets import entry_before, lag, start_offset

TIME = OffsetCodec(10)


def test_the_start_is_the_lowest_record_in_flight_else_the_one_after_the_last_delivered() -> None:
    assert start_offset(DENSE, EntryId(9, 1), EntryId(4, 1), log_start=0) == 4
    assert start_offset(DENSE, EntryId(9, 1), None, log_start=0) == 10
    assert start_offset(DENSE, EntryId(0, 0), None, log_start=3) == 3  # nothing delivered
    assert start_offset(DENSE, EntryId(9, 1), EntryId(4, 1), log_start=6) == 6  # trimmed: archived
    assert start_offset(DENSE, EntryId(7, 0), None, log_start=0) == 7  # set below offset 7
    assert start_offset(TIME, EntryId(5, 3), None, log_start=0) == (5 << 10 | 3) + 1


def test_a_group_set_before_an_offset_starts_at_it() -> None:
    for codec, offset in ((DENSE, 0), (DENSE, 12), (TIME, 0), (TIME, 7 << 10), (TIME, 7 << 10 | 2)):
        after = entry_before(codec, offset)
        last = EntryId(0, 0) if after == "0" else EntryId.parse(after)
        assert start_offset(codec, last, None, log_start=0) == offset, (codec, offset, after)


def test_lag_counts_what_is_in_flight_and_what_was_never_delivered() -> None:
    assert lag(start=4, end=20, pending=3, undelivered=10, dense=True) == 13
    assert lag(start=4, end=20, pending=3, undelivered=-1, dense=True) == 16  # Redis cannot say
    assert lag(start=20, end=20, pending=0, undelivered=0, dense=True) == 0
    assert lag(start=4 << 10, end=9 << 10, pending=3, undelivered=-1, dense=False) == -1
