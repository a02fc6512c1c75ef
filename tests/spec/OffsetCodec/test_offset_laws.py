"""Laws of the offset codec: one Hypothesis law per invariant of spec/OffsetCodec.tla.

The test names carry the TLA+ invariant names (spec/README.md has the table).
Codec laws range over the whole production domain: sequence bits 1..22,
milliseconds 0..max_ms, offsets 0..2^63-1. Log laws drive ``reserve`` the way
the append script does, with several producers whose batches interleave and a
clock that advances, stands still, steps back and passes max_ms, and check the
invariants over the whole resulting log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core.offsets import (
    DEFAULT_SEQUENCE_BITS,
    MAX_OFFSET,
    MAX_SEQUENCE_BITS,
    MIN_SEQUENCE_BITS,
    EntryId,
    OffsetCodec,
    OffsetError,
    SequenceBitsError,
)
from tests.support.examples import examples

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
NOW_2026 = 1_790_000_000_000  # a realistic wall clock in ms (needs 41 bits)

bits_strategy = st.integers(MIN_SEQUENCE_BITS, MAX_SEQUENCE_BITS)
codecs = st.builds(OffsetCodec, bits_strategy)


@st.composite
def valid_ids(draw: st.DrawFn, codec: OffsetCodec) -> EntryId:
    return EntryId(draw(st.integers(0, codec.max_ms)), draw(st.integers(0, codec.seq_limit - 1)))


offsets = st.integers(0, INT64_MAX)


# --- TypeOK ---------------------------------------------------------------------------

@pytest.mark.spec("OffsetCodec", "TypeOK")
@given(codec=codecs, data=st.data())
def test_TypeOK(codec: OffsetCodec, data: st.DataObject) -> None:
    """decode maps every offset into the valid domain, encode every valid id into 0..2^63-1."""
    entry = codec.decode(data.draw(offsets))
    assert 0 <= entry.ms <= codec.max_ms
    assert 0 <= entry.seq < codec.seq_limit
    offset = codec.encode_id(data.draw(valid_ids(codec)))
    assert 0 <= offset <= INT64_MAX


# --- RoundTrip ------------------------------------------------------------------------

@pytest.mark.spec("OffsetCodec", "RoundTrip", "Encode", "EncodeId", "Decode")
@given(codec=codecs, data=st.data())
def test_RoundTrip(codec: OffsetCodec, data: st.DataObject) -> None:
    entry = data.draw(valid_ids(codec))
    assert codec.decode(codec.encode_id(entry)) == entry
    offset = data.draw(offsets)
    assert codec.encode_id(codec.decode(offset)) == offset
    # The id's text form (what XADD receives and XRANGE returns) round-trips too.
    assert EntryId.parse(str(codec.decode(offset)).encode()) == codec.decode(offset)


@pytest.mark.spec("OffsetCodec", "RoundTrip", "SeqLimit", "Decode")
@given(codec=codecs, data=st.data())
def test_RoundTrip_carry(codec: OffsetCodec, data: st.DataObject) -> None:
    """CodecCarry: the offset after a millisecond's last one is the next millisecond's first."""
    ms = data.draw(st.integers(0, codec.max_ms - 1))
    assert codec.decode(codec.encode(ms, codec.seq_limit - 1) + 1) == EntryId(ms + 1, 0)


@pytest.mark.spec("OffsetCodec", "RoundTrip")
def test_RoundTrip_examples() -> None:
    codec = OffsetCodec(DEFAULT_SEQUENCE_BITS)
    assert codec.encode(NOW_2026, 0) == NOW_2026 * 1024
    assert codec.encode(NOW_2026, 1023) + 1 == codec.encode(NOW_2026 + 1, 0)
    assert str(codec.decode(NOW_2026 * 1024 + 5)) == f"{NOW_2026}-5"


# --- OrderPreserved -------------------------------------------------------------------

@pytest.mark.spec("OffsetCodec", "OrderPreserved", "IdLess")
@given(codec=codecs, data=st.data())
def test_OrderPreserved(codec: OffsetCodec, data: st.DataObject) -> None:
    """Offsets compare as the ids they encode (Redis' ms-then-seq order), both ways."""
    a, b = data.draw(valid_ids(codec)), data.draw(valid_ids(codec))
    assert ((a.ms, a.seq) < (b.ms, b.seq)) == (codec.encode_id(a) < codec.encode_id(b))
    assert (a == b) == (codec.encode_id(a) == codec.encode_id(b))
    o1, o2 = data.draw(offsets), data.draw(offsets)
    d1, d2 = codec.decode(o1), codec.decode(o2)
    assert (o1 < o2) == ((d1.ms, d1.seq) < (d2.ms, d2.seq))


# --- FitsInt64 at the end of the range --------------------------------------------------

@pytest.mark.spec("OffsetCodec", "FitsInt64", "MaxOffset", "MaxMs", "RejectBatch")
@given(codec=codecs)
def test_FitsInt64(codec: OffsetCodec) -> None:
    """The last valid id encodes to exactly 2^63-1; nothing beyond it has an offset."""
    assert codec.encode(codec.max_ms, codec.seq_limit - 1) == INT64_MAX
    with pytest.raises(OffsetError):
        codec.decode(INT64_MAX + 1)
    with pytest.raises(OffsetError):
        codec.encode(codec.max_ms + 1, 0)
    # A clock past max_ms is clamped: the batch still lands at the end of the range...
    assert list(codec.reserve(0, codec.max_ms + 10**6, 1)) == [codec.encode(codec.max_ms, 0)]
    # ...and a batch that would pass 2^63-1 is refused rather than wrapped.
    assert list(codec.reserve(INT64_MAX - 1, 0, 1)) == [INT64_MAX]
    with pytest.raises(OffsetError):
        codec.reserve(INT64_MAX - 1, 0, 2)
    with pytest.raises(OffsetError):
        codec.reserve(INT64_MAX, NOW_2026, 1)


@pytest.mark.spec("OffsetCodec", "FitsInt64", "MaxMs")
def test_FitsInt64_bits_bound() -> None:
    """22 bits is the widest sequence that still leaves today's clock (41 bits) an offset."""
    assert OffsetCodec(22).max_ms >= NOW_2026
    assert OffsetCodec(22).max_ms < 2**41
    assert OffsetCodec(10).max_ms >= 2**52


# --- the error cases --------------------------------------------------------------------

@given(codec=codecs, offset=st.integers(max_value=-1))
def test_negative_offsets_are_rejected(codec: OffsetCodec, offset: int) -> None:
    with pytest.raises(OffsetError):
        codec.decode(offset)
    with pytest.raises(OffsetError):
        codec.reserve(offset, NOW_2026, 1)


@pytest.mark.spec("RedisStarIds", "SeedClaim_SeqFitsBits")
@given(codec=codecs, data=st.data())
def test_sequence_wider_than_bits_is_rejected(codec: OffsetCodec, data: st.DataObject) -> None:
    ms = data.draw(st.integers(0, codec.max_ms))
    seq = data.draw(st.one_of(st.integers(codec.seq_limit, UINT64_MAX), st.integers(max_value=-1)))
    with pytest.raises(OffsetError):
        codec.encode(ms, seq)
    with pytest.raises(OffsetError):
        codec.encode_id(EntryId(ms, seq))


@given(codec=codecs, data=st.data())
def test_millisecond_out_of_range_is_rejected(codec: OffsetCodec, data: st.DataObject) -> None:
    ms = data.draw(st.one_of(st.integers(codec.max_ms + 1, UINT64_MAX), st.integers(max_value=-1)))
    with pytest.raises(OffsetError):
        codec.encode(ms, 0)
    if ms > codec.max_ms:
        with pytest.raises(OffsetError):
            codec.last_offset_of(EntryId(ms, 0))


@pytest.mark.spec("OffsetCodec", "Bits")
@given(bits=st.one_of(st.integers(max_value=MIN_SEQUENCE_BITS - 1),
                      st.integers(min_value=MAX_SEQUENCE_BITS + 1)))
def test_bits_out_of_range_are_rejected(bits: int) -> None:
    with pytest.raises(SequenceBitsError):
        OffsetCodec(bits)


@pytest.mark.spec("OffsetCodec", "OffsetBits")
@given(bits=bits_strategy, offset_bits=st.one_of(st.integers(max_value=0), st.integers(min_value=64)))
def test_offset_width_out_of_range_is_rejected(bits: int, offset_bits: int) -> None:
    with pytest.raises(SequenceBitsError):
        OffsetCodec(bits, offset_bits=offset_bits)
    with pytest.raises(SequenceBitsError):
        OffsetCodec(bits, offset_bits=bits)  # no room left for a millisecond


@pytest.mark.spec("OffsetCodec", "Bits")
def test_bits_of_the_wrong_type_are_rejected() -> None:
    for bad in (True, 10.0, "10"):
        with pytest.raises(SequenceBitsError):
            OffsetCodec(bad)  # type: ignore[arg-type]


def test_errors_are_typed() -> None:
    """The protocol layer maps OffsetError to OFFSET_OUT_OF_RANGE; both are ValueErrors."""
    assert issubclass(OffsetError, ValueError)
    assert issubclass(SequenceBitsError, ValueError)
    assert not issubclass(OffsetError, SequenceBitsError)
    with pytest.raises(OffsetError):
        EntryId.parse("12-x")
    with pytest.raises(ValueError):
        OffsetCodec(10).reserve(0, NOW_2026, 0)


# --- the append rule --------------------------------------------------------------------

@pytest.mark.spec("OffsetCodec", "Floor", "FirstOffset", "Fits")
@given(codec=codecs, data=st.data())
def test_reserve_starts_at_the_smallest_allowed_offset(codec: OffsetCodec,
                                                       data: st.DataObject) -> None:
    """FirstOffset: the batch starts after the last offset and not before the clock's
    millisecond, and at the smallest offset that satisfies both."""
    last = data.draw(st.integers(0, INT64_MAX))
    now = data.draw(st.integers(0, 2**63))
    count = data.draw(st.integers(1, 5000))
    floor = codec.encode(min(now, codec.max_ms), 0)
    try:
        reserved = codec.reserve(last, now, count)
    except OffsetError:
        assert max(last + 1, floor) + count - 1 > INT64_MAX
        return
    assert len(reserved) == count and reserved.step == 1
    assert reserved[0] > last and reserved[0] >= floor
    assert reserved[0] in (last + 1, floor)
    assert reserved[-1] <= INT64_MAX


@pytest.mark.spec("OffsetCodec", "XAddAccepted", "LastOffset")
@pytest.mark.spec("RedisStarIds", "SeedClaim_SeqFitsBits")
@given(codec=codecs, data=st.data())
def test_XAddAccepted_after_ids_the_broker_did_not_write(codec: OffsetCodec,
                                                         data: st.DataObject) -> None:
    """A stream whose last id came from `XADD *` (sequence up to 2^64-1, wider than bits)
    has no offset, yet the next batch's ids are all above it, so Redis accepts them."""
    seq = data.draw(st.one_of(st.integers(0, UINT64_MAX),
                              st.integers(codec.seq_limit - 2, codec.seq_limit + 2).filter(
                                  lambda s: s >= 0)))
    foreign = EntryId(data.draw(st.integers(0, codec.max_ms)), seq)
    now = data.draw(st.integers(0, codec.max_ms + 1))
    count = data.draw(st.integers(1, 3000))
    last = codec.last_offset_of(foreign)
    assert last == codec.encode(foreign.ms, min(foreign.seq, codec.seq_limit - 1))
    try:
        reserved = codec.reserve(last, now, count)
    except OffsetError:
        # Only a batch that would pass 2^63-1 is refused.
        assert max(last + 1, codec.encode(min(now, codec.max_ms), 0)) + count - 1 > INT64_MAX
        return
    first = codec.decode(reserved[0])
    assert (first.ms, first.seq) > (foreign.ms, foreign.seq)


@pytest.mark.spec("OffsetCodec", "LastOffset")
def test_a_new_stream_never_gets_offset_zero() -> None:
    """Redis refuses the id 0-0 (an empty stream's last-generated id), even at clock 0."""
    codec = OffsetCodec(DEFAULT_SEQUENCE_BITS)
    assert codec.last_offset_of(None) == 0
    assert codec.last_offset_of(EntryId(0, 0)) == 0
    assert list(codec.reserve(codec.last_offset_of(None), 0, 2)) == [1, 2]
    assert codec.reserve(codec.last_offset_of(None), NOW_2026, 1)[0] == codec.encode(NOW_2026, 0)


# --- the log laws: several producers, a clock that jumps around ----------------------------

@dataclass
class Partition:
    """One partition appended to the way the storage script does: read the stream's
    last-generated id, reserve, XADD each record under decode(offset), with Redis' rule
    that an explicit id must be above the last-generated one."""

    codec: OffsetCodec
    last_id: EntryId = field(default_factory=lambda: EntryId(0, 0))
    ids: list[EntryId] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # what the producers were told
    batch_of: list[int] = field(default_factory=list)
    acks: list[tuple[str, int, int]] = field(default_factory=list)  # producer, base, count
    rejected: int = 0

    def append_batch(self, producer: str, count: int, now_ms: int) -> None:
        last = self.codec.last_offset_of(self.last_id)
        try:
            reserved = self.codec.reserve(last, now_ms, count)
        except OffsetError:
            # RejectBatch: only when the batch cannot fit below 2^63-1.
            assert (max(last + 1, self.codec.encode(min(now_ms, self.codec.max_ms), 0)) + count - 1
                    > self.codec.max_offset)
            self.rejected += 1
            return
        for offset in reserved:
            entry = self.codec.decode(offset)
            if (entry.ms, entry.seq) <= (self.last_id.ms, self.last_id.seq):
                raise AssertionError(f"Redis refuses XADD {entry}: not above {self.last_id}")
            self.last_id = entry
            self.ids.append(entry)
            self.offsets.append(offset)
            self.batch_of.append(len(self.acks))
        self.acks.append((producer, reserved[0], count))


@dataclass(frozen=True)
class Send:
    producer: int
    count: int


@dataclass(frozen=True)
class Deliver:
    """The broker runs the append script for one of the in-flight batches."""

    pick: int


@dataclass(frozen=True)
class Tick:
    delta_ms: int


Event = Send | Deliver | Tick


@st.composite
def runs(draw: st.DrawFn) -> Partition:
    bits = draw(st.one_of(st.integers(1, 4), bits_strategy))
    codec = OffsetCodec(bits)
    start = draw(st.one_of(st.integers(0, 5), st.just(min(NOW_2026, codec.max_ms)),
                           st.integers(max(0, codec.max_ms - 3), codec.max_ms + 3)))
    producers = draw(st.integers(2, 4))
    widest = min(3 * codec.seq_limit + 2, 64)  # several carries when bits are small
    events: list[Event] = draw(st.lists(st.one_of(
        st.builds(Send, st.integers(0, producers - 1), st.integers(1, widest)),
        st.builds(Deliver, st.integers(0, 3)),
        st.builds(Tick, st.one_of(st.integers(-3, 3), st.integers(-10**6, 10**6))),
    ), max_size=60))
    partition = Partition(codec)
    clock = start
    inflight: list[tuple[str, int]] = []
    for event in events:
        if isinstance(event, Send):
            inflight.append((f"p{event.producer}", event.count))
        elif isinstance(event, Deliver) and inflight:
            producer, count = inflight.pop(event.pick % len(inflight))
            partition.append_batch(producer, count, clock)
        elif isinstance(event, Tick):
            clock = max(0, clock + event.delta_ms)
    return partition


LOG_SETTINGS = settings(max_examples=examples(3), deadline=None)


@pytest.mark.spec("OffsetCodec", "UniqueEntryIds", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_UniqueEntryIds(run: Partition) -> None:
    assert len(set(run.ids)) == len(run.ids)
    assert len(set(run.offsets)) == len(run.offsets)


@pytest.mark.spec("OffsetCodec", "BatchConsecutive", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_BatchConsecutive(run: Partition) -> None:
    assert run.batch_of == sorted(run.batch_of)  # batches never interleave
    for k, (_producer, base, count) in enumerate(run.acks):
        assert [o for o, b in zip(run.offsets, run.batch_of, strict=True) if b == k] == list(
            range(base, base + count))


@pytest.mark.spec("OffsetCodec", "StrictlyIncreasing", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_StrictlyIncreasing(run: Partition) -> None:
    assert all(a < b for a, b in zip(run.offsets, run.offsets[1:], strict=False))


@pytest.mark.spec("OffsetCodec", "XAddAccepted", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_XAddAccepted(run: Partition) -> None:
    previous = (0, 0)
    for entry in run.ids:
        assert (entry.ms, entry.seq) > previous
        previous = (entry.ms, entry.seq)
    assert run.last_id == (run.ids[-1] if run.ids else EntryId(0, 0))


@pytest.mark.spec("OffsetCodec", "FitsInt64", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_FitsInt64_over_the_log(run: Partition) -> None:
    assert all(0 < o <= INT64_MAX for o in run.offsets)
    assert all(0 <= e.ms <= run.codec.max_ms and 0 <= e.seq < run.codec.seq_limit for e in run.ids)


@pytest.mark.spec("OffsetCodec", "RoundTrip", "OrderPreserved", "AppendBatch")
@LOG_SETTINGS
@given(run=runs())
def test_all_log_invariants_with_concurrent_producers(run: Partition) -> None:
    """RoundTrip and OrderPreserved over the log too: the offset a producer was told is
    the one a consumer computes from the stored id, and log order is offset order."""
    codec = run.codec
    for entry, offset in zip(run.ids, run.offsets, strict=True):
        assert codec.encode_id(entry) == offset and codec.decode(offset) == entry
    assert sorted(run.offsets) == run.offsets
    assert sorted(run.ids, key=lambda e: (e.ms, e.seq)) == run.ids
    assert sum(count for _p, _b, count in run.acks) == len(run.ids)


def test_the_log_laws_see_carries_steps_back_and_rejections() -> None:
    """The run generator reaches what the laws are about (else they would pass vacuously)."""
    seen = {"carry": False, "reject": False, "floor_wins": False, "last_wins": False}

    # Derandomized: a fixed set of runs, so this check cannot flake.
    @settings(max_examples=examples(5), deadline=None, database=None, derandomize=True)
    @given(run=runs())
    def observe(run: Partition) -> None:
        for k, (_p, base, count) in enumerate(run.acks):
            first, last = run.codec.decode(base), run.codec.decode(base + count - 1)
            seen["carry"] |= last.ms > first.ms
            if k > 0:
                previous_end = run.acks[k - 1][1] + run.acks[k - 1][2] - 1
                seen["last_wins"] |= base == previous_end + 1
                seen["floor_wins"] |= base > previous_end + 1
        seen["reject"] |= run.rejected > 0

    observe()
    assert all(seen.values()), seen


@pytest.mark.spec("OffsetCodec", "OffsetBits", "MaxOffset")
def test_max_offset_is_int64() -> None:
    assert MAX_OFFSET == INT64_MAX
    assert OffsetCodec().max_offset == INT64_MAX
