"""Int64 durations in requests (OffsetCommit v2-v4's retention_time) decode for every int64.

Kafka takes any int64 there; kio reads the field as a timedelta, which holds about +-292,000
years of milliseconds. A value beyond that once made the broker close the connection (found by
the differential mode against Apache Kafka); korvet/protocol/framing.py now reads it as the
longest duration a timedelta holds.
"""

from __future__ import annotations

import datetime
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.protocol.framing import (
    DURATION_MAX_MS,
    DURATION_MIN_MS,
    encode_request,
    parse_request,
    request_class,
    saturate_duration_ms,
)
from tests.support.examples import examples

_MS = datetime.timedelta(milliseconds=1)
_MARK = 0x0123_4567_89AB_CDEF  # a retention no field before it can hold by accident


def _commit_frame(version: int, group: str, member: str, retention_ms: int) -> bytes:
    """An OffsetCommit frame (without its size prefix) whose retention_time is ``retention_ms``."""
    cls = request_class(8, version)
    request = cls(group_id=group, generation_id_or_member_epoch=-1, member_id=member,
                  retention_time=datetime.timedelta(milliseconds=1), topics=())
    frame = bytearray(encode_request(request, 11)[4:])
    # The last int64 1: the retention (only the topic count, four zero bytes, follows it).
    at = bytes(frame).rindex(struct.pack(">q", 1))
    struct.pack_into(">q", frame, at, retention_ms)
    return bytes(frame)


@settings(max_examples=examples(2))
@given(version=st.sampled_from([2, 3, 4]), group=st.text(max_size=20), member=st.text(max_size=20),
       retention=st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_any_int64_retention_decodes(version: int, group: str, member: str, retention: int) -> None:
    request = parse_request(_commit_frame(version, group, member, retention))
    assert request.body.group_id == group and request.body.member_id == member
    assert request.trailing == 0
    decoded = request.body.retention_time // _MS
    assert decoded == saturate_duration_ms(retention)
    if DURATION_MIN_MS <= retention <= DURATION_MAX_MS:
        assert decoded == retention, "a retention a timedelta holds is read as sent"
    else:
        assert decoded == (DURATION_MAX_MS if retention > 0 else DURATION_MIN_MS)


def test_the_broker_default_and_the_extremes() -> None:
    for sent, read in [(-1, -1), (0, 0), (2**63 - 1, DURATION_MAX_MS), (-(2**63), DURATION_MIN_MS),
                       (_MARK, DURATION_MAX_MS)]:
        assert parse_request(_commit_frame(2, "g", "m", sent)).body.retention_time // _MS == read
