"""A dense partition's leader epochs (korvet/core/epochs.py) answer as spec/DenseLog.tla's
EpochOf and EndOffset, and as Kafka's leader epoch cache (OffsetForLeaderEpoch)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core.epochs import FIXED, NEVER_WRITTEN, Epochs
from korvet.core.errors import ErrorCode


@st.composite
def histories(draw: st.DrawFn) -> Epochs:
    count = draw(st.integers(1, 5))
    epochs = sorted(draw(st.sets(st.integers(0, 50), min_size=count, max_size=count)))
    starts = sorted(draw(st.sets(st.integers(0, 100), min_size=count, max_size=count)))
    return Epochs(tuple(zip(epochs, starts, strict=True)))


def _spec_epoch_of(epochs: Epochs, offset: int) -> int:
    """DenseLog.tla's EpochOf: the last epoch starting at or before the offset."""
    starting = [e for e, s in epochs.history if s <= offset]
    return starting[-1] if starting else epochs.history[0][0]


def _spec_cache(epochs: Epochs, log_start: int) -> tuple[tuple[int, int], ...]:
    """DenseLog.tla's Cache (Hist: the history, or epoch 0 from offset 0 when empty)."""
    history = epochs.history or ((0, 0),)
    below = [j for j, (_, start) in enumerate(history) if start <= log_start]
    if not below:
        return history
    return ((history[below[-1]][0], log_start), *history[below[-1] + 1:])


def _spec_end_offset(epochs: Epochs, epoch: int, hw: int, log_start: int) -> int:
    """DenseLog.tla's EndOffset, from Cache."""
    history = _spec_cache(epochs, log_start)
    first, current = history[0][0], history[-1][0]
    if epoch < 0 or epoch > current:
        return -1
    if epoch == current:
        return hw
    if epoch < first:
        return history[0][1]
    return min(s for e, s in history if e > epoch)


@given(histories(), st.integers(0, 120))
def test_a_record_is_in_the_last_epoch_started_at_or_before_it(epochs: Epochs, offset: int) -> None:
    assert epochs.epoch_of(offset) == _spec_epoch_of(epochs, offset)


@given(st.one_of(histories(), st.just(NEVER_WRITTEN)), st.integers(-2, 60),
       st.integers(100, 120), st.integers(0, 100))
def test_an_epoch_ends_where_the_spec_and_kafka_say(epochs: Epochs, epoch: int, hw: int,
                                                    log_start: int) -> None:
    answered_epoch, end = epochs.end_offset(epoch, hw, log_start)
    assert end == _spec_end_offset(epochs, epoch, hw, log_start)
    assert end == -1 or log_start <= end <= hw  # EndsInsideTheLog
    history = _spec_cache(epochs, log_start)
    if end < 0:
        assert answered_epoch == -1
    elif epoch < history[0][0]:  # Kafka: the epoch asked, ending where the first begins
        assert answered_epoch == epoch
    else:  # Kafka answers the largest epoch it has at or below the one asked
        assert answered_epoch == max(e for e, _ in history if e <= epoch)


def test_an_epoch_older_than_the_history_ends_where_the_first_begins() -> None:
    """A consumer that positioned at the end of a partition never written holds epoch 0;
    the first write starts epoch 90,000,000 at offset 0. Kafka's leader epoch cache answers
    (0, 0) for epoch 0 there, and the consumer's position 0 stands; (-1, -1) would send it
    to its reset policy, past the first records with `latest`."""
    assert Epochs(((90_000_000, 0),)).end_offset(0, 10, 0) == (0, 0)
    assert Epochs(((90_000_000, 4), (90_000_300, 9))).end_offset(7, 12, 0) == (7, 4)
    assert NEVER_WRITTEN.end_offset(0, 0, 0) == (0, 0)
    assert NEVER_WRITTEN.end_offset(1, 0, 0) == (-1, -1)  # newer than any: none


@pytest.mark.spec("DenseLog", "Cache", "EndOffset", "EndsInsideTheLog",
                  note="Kafka's cache trimmed at the log start")
def test_an_epoch_whose_records_were_removed_ends_at_the_log_start() -> None:
    """Kafka trims its leader epoch cache when the log start moves: an epoch wholly below
    the log start (DeleteRecords, retention) ends there, not where the next epoch began;
    a consumer sent below the log start would be OFFSET_OUT_OF_RANGE and reset (latest: a
    skip of every record since)."""
    epochs = Epochs(((90_000_000, 0), (90_000_300, 4), (90_000_600, 9)))
    assert epochs.end_offset(90_000_000, 12, 0) == (90_000_000, 4)  # nothing removed
    assert epochs.end_offset(90_000_000, 12, 6) == (90_000_000, 6)  # its records removed
    assert epochs.end_offset(90_000_300, 12, 6) == (90_000_300, 9)  # the log start within it
    assert epochs.end_offset(90_000_000, 12, 10) == (90_000_000, 10)  # both removed
    assert epochs.end_offset(90_000_300, 12, 10) == (90_000_300, 10)
    assert epochs.end_offset(90_000_600, 12, 10) == (90_000_600, 12)  # the current: the end
    assert epochs.end_offset(89_000_000, 12, 10) == (89_000_000, 10)  # older than any


@given(histories(), st.integers(-1, 60))
def test_an_older_epoch_is_fenced_and_a_newer_one_unknown(epochs: Epochs, requested: int) -> None:
    fenced = epochs.fence(requested)
    if requested < 0 or requested == epochs.current:
        assert fenced is ErrorCode.NONE
    elif requested < epochs.current:
        assert fenced is ErrorCode.FENCED_LEADER_EPOCH
    else:
        assert fenced is ErrorCode.UNKNOWN_LEADER_EPOCH


@given(histories(), st.integers(0, 110), st.integers(0, 30))
def test_a_fetch_is_cut_where_epochs_change_and_each_part_has_its_epoch(
        epochs: Epochs, first: int, length: int) -> None:
    last = first + length
    cuts = epochs.boundaries(first, last)
    assert cuts[0][0] == first
    assert [s for s, _ in cuts] == sorted({s for s, _ in cuts})
    for start, epoch in cuts:
        assert epochs.epoch_of(start) == epoch
    for offset in range(first, last + 1):
        part = max((s, e) for s, e in cuts if s <= offset)
        assert part[1] == epochs.epoch_of(offset)


def test_the_history_is_read_from_the_meta_hash_and_a_time_topic_has_epoch_zero() -> None:
    epochs = Epochs.parse(b"90000000:0 90000412:57")
    assert epochs.history == ((90000000, 0), (90000412, 57))
    assert epochs.current == 90000412
    assert Epochs.parse(None) is NEVER_WRITTEN and NEVER_WRITTEN.current == 0
    assert FIXED.epoch_of(10**12) == 0 and FIXED.end_offset(0, 7, 0) == (0, 7)


@given(st.one_of(histories(), st.just(NEVER_WRITTEN)), st.integers(-1, 60), st.integers(0, 130),
       st.integers(0, 10), st.integers(100, 120))
def test_a_fetch_naming_its_last_epoch_diverges_where_kafkas_leader_says(
        epochs: Epochs, last_fetched: int, offset: int, log_start: int, hw: int) -> None:
    """Kafka's Partition.readRecords: the end of the epoch last fetched (OffsetForLeaderEpoch's
    answer) below the fetch offset, or an earlier epoch answered, is the divergence; no end,
    or an offset below the log start, is OFFSET_OUT_OF_RANGE; -1 names no epoch."""
    error, diverging = epochs.diverging(last_fetched, offset, log_start, hw)
    if last_fetched < 0:
        assert (error, diverging) == (ErrorCode.NONE, None)
        return
    epoch, end = epochs.end_offset(last_fetched, hw, log_start)
    if end < 0 or offset < log_start:
        assert (error, diverging) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    elif end < offset or epoch < last_fetched:
        assert (error, diverging) == (ErrorCode.NONE, (epoch, end))
    else:
        assert (error, diverging) == (ErrorCode.NONE, None)


def test_divergence_at_the_partitions_epochs() -> None:
    epochs = Epochs(((90_000_000, 0), (90_000_300, 9)))
    assert epochs.diverging(90_000_300, 12, 0, 12) == (ErrorCode.NONE, None)  # at the end
    assert epochs.diverging(90_000_300, 14, 0, 12) == (ErrorCode.NONE, (90_000_300, 12))
    # read up to 11 in the first epoch: that epoch ended at 9 here
    assert epochs.diverging(90_000_000, 11, 0, 12) == (ErrorCode.NONE, (90_000_000, 9))
    # an epoch between the two (lost with its records): the one before it, ending at 9
    assert epochs.diverging(90_000_100, 9, 0, 12) == (ErrorCode.NONE, (90_000_000, 9))
    assert epochs.diverging(90_000_400, 5, 0, 12) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert epochs.diverging(90_000_300, 2, 3, 12) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
