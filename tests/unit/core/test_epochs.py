"""A dense partition's leader epochs (korvet/core/epochs.py) answer as spec/DenseLog.tla's
EpochOf and EndOffset, and as Kafka's leader epoch cache (OffsetForLeaderEpoch)."""

from __future__ import annotations

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


def _spec_end_offset(epochs: Epochs, epoch: int, hw: int) -> int:
    """DenseLog.tla's EndOffset."""
    first, current = epochs.history[0][0], epochs.history[-1][0]
    if epoch < first or epoch > current:
        return -1
    if epoch == current:
        return hw
    return min(s for e, s in epochs.history if e > epoch)


@given(histories(), st.integers(0, 120))
def test_a_record_is_in_the_last_epoch_started_at_or_before_it(epochs: Epochs, offset: int) -> None:
    assert epochs.epoch_of(offset) == _spec_epoch_of(epochs, offset)


@given(histories(), st.integers(-2, 60), st.integers(100, 120))
def test_an_epoch_ends_where_the_spec_and_kafka_say(epochs: Epochs, epoch: int, hw: int) -> None:
    answered_epoch, end = epochs.end_offset(epoch, hw)
    assert end == _spec_end_offset(epochs, epoch, hw)
    if end >= 0:  # Kafka answers the largest epoch it has at or below the one asked
        assert answered_epoch == max(e for e, _ in epochs.history if e <= epoch)
    else:
        assert answered_epoch == -1


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
    assert FIXED.epoch_of(10**12) == 0 and FIXED.end_offset(0, 7) == (0, 7)
