"""Kafka's ListOffsets and OffsetForLeaderEpoch rules as the pure core states them
(korvet/core/list_offsets.py), checked without a broker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from korvet.core import list_offsets as rules
from korvet.core.errors import ErrorCode
from korvet.core.offsets import OffsetCodec
from korvet.core.topics import TopicConfig, TopicInfo

TOPIC = TopicInfo("t", "00000000-0000-0000-0000-000000000001", 3, TopicConfig({}))


@given(known=st.booleans(), index=st.integers(-2, 4), stamp=st.integers(-8, 2**41))
def test_a_partition_is_refused_in_kafkas_order_or_told_what_to_read(
        known: bool, index: int, stamp: int) -> None:
    verdict = rules.query(TOPIC if known else None, rules.ListOffsetsPartition(index, stamp, -1))
    if not known or not 0 <= index < 3:
        assert verdict is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    elif stamp < -5:
        assert verdict is ErrorCode.INVALID_REQUEST
    elif stamp >= 0:
        assert verdict is rules.Lookup.BY_TIMESTAMP
    else:
        assert verdict is {-1: rules.Lookup.LATEST, -2: rules.Lookup.EARLIEST,
                           -3: rules.Lookup.MAX_TIMESTAMP, -4: rules.Lookup.EARLIEST,
                           -5: rules.Lookup.NOTHING}[stamp]


@given(appended_ms=st.integers(0, 2**40), lead=st.integers(0, 10**7), ahead=st.integers(0, 10**7),
       log_start_ms=st.integers(0, 2**40), seq=st.integers(0, 1023))
def test_the_search_by_time_never_starts_after_a_record_that_can_answer(
        appended_ms: int, lead: int, ahead: int, log_start_ms: int, seq: int) -> None:
    """A record appended at ``appended_ms`` carries a timestamp at most ``lead`` ahead of it
    (Produce enforces message.timestamp.after.max.ms): a search for any time it could carry
    starts at or before it, and never before the log start."""
    codec = OffsetCodec(10)
    record = codec.encode(appended_ms, seq)
    log_start = codec.encode(log_start_ms, 0)
    stamp = appended_ms + min(ahead, lead)
    start = rules.timestamp_search_start(stamp, lead, codec, log_start)
    assert start >= log_start
    if record >= log_start:
        assert start <= record


def test_an_answer_names_its_leader_epoch_only_when_it_found_an_offset() -> None:
    assert rules.answer(42, 7).leader_epoch == rules.LEADER_EPOCH
    assert rules.answer(rules.NO_OFFSET).leader_epoch == -1
    assert rules.OffsetAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION).leader_epoch == -1


@given(known=st.booleans(), index=st.integers(-1, 3), current=st.integers(-1, 2),
       asked=st.integers(-1, 3))
def test_the_one_leader_epoch_ends_at_the_high_watermark(
        known: bool, index: int, current: int, asked: int) -> None:
    ended = rules.epoch_query(TOPIC if known else None, rules.EpochPartition(index, current, asked))
    if not known or not 0 <= index < 3:
        assert (ended.error, ended.needs_end) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False)
    elif current > 0:
        assert ended.error is ErrorCode.UNKNOWN_LEADER_EPOCH and not ended.needs_end
    elif asked <= 0:
        assert (ended.error, ended.leader_epoch, ended.needs_end) == (ErrorCode.NONE, 0, True)
    else:
        assert (ended.error, ended.leader_epoch, ended.needs_end) == (ErrorCode.NONE, -1, False)
