"""The fused fetch loop turns stored entries into batches that independent decoders read back.

kafka-python's pure-Python codec (not the one the broker builds with) must see exactly
the stored records, at exactly the offsets the entry ids encode, for any mix of
offsets, gaps, header layouts, null keys and values, and size limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as PyBatch

from korvet.core.offsets import OffsetCodec
from korvet.protocol.records import BATCH_OVERHEAD, build_batch, decode_batches
from korvet.server.batching import entries_to_batches
from korvet.storage import entries
from tests.support.examples import examples

headers = st.lists(st.tuples(st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=5),
                             st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
records = st.tuples(st.integers(0, 2**41), st.one_of(st.none(), st.binary(max_size=20)),
                    st.one_of(st.none(), st.binary(max_size=200)), headers)


def _stored(bits: int, items: Sequence[tuple[int, tuple[int, bytes | None, bytes | None, Any]]]
            ) -> list[list[Any]]:
    """Raw XRANGE replies as Redis sends them for these (offset, record) pairs."""
    codec = OffsetCodec(bits)
    raw = []
    for offset, record in items:
        entry_id = codec.decode(offset)
        raw.append([str(entry_id).encode(), entries.entry_fields(record)])
    return raw


def _read_back(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    got = []
    position = 0
    while position < len(data):
        length = int.from_bytes(data[position + 8:position + 12], "big")
        batch = PyBatch(data[position:position + 12 + length])
        assert batch.validate_crc()
        for record in batch:
            got.append((record.offset, record.timestamp, record.key, record.value,
                        [(k, v) for k, v in record.headers]))
        position += 12 + length
    return got


@settings(max_examples=examples(2), deadline=None)
@given(bits=st.integers(1, 22), start_ms=st.integers(1, 2**40),
       gaps=st.lists(st.integers(1, 3 * 2**31), min_size=1, max_size=30),
       items=st.lists(records, min_size=30, max_size=30))
def test_fused_fetch_encoding_reads_back_exactly(bits: int, start_ms: int, gaps: list[int],
                                                 items: list[Any]) -> None:
    codec = OffsetCodec(bits)
    offset = codec.encode(start_ms, 0)
    placed = []
    for gap, record in zip(gaps, items, strict=False):
        offset += gap
        if offset > codec.max_offset:
            break
        placed.append((offset, record))
    data, taken, next_offset = entries_to_batches(_stored(bits, placed), bits, 1 << 30,
                                                  force_first=True)
    assert taken == len(placed)
    assert next_offset == (placed[-1][0] + 1 if placed else -1)
    expected = [(o, ts, k, v, list(h)) for o, (ts, k, v, h) in placed]
    assert _read_back(data) == expected


@given(items=st.lists(records, min_size=1, max_size=40), limit=st.integers(0, 3000))
def test_size_limit_is_kept_but_the_first_record_always_comes(items: list[Any], limit: int) -> None:
    codec = OffsetCodec(10)
    base = codec.encode(1_800_000_000_000, 0)
    placed = [(base + i, record) for i, record in enumerate(items)]
    data, taken, next_offset = entries_to_batches(_stored(10, placed), 10, limit, force_first=True)
    assert taken >= 1
    assert next_offset == placed[taken - 1][0] + 1
    if len(data) > limit:
        assert taken == 1, "more than one record beyond the limit"
    got = _read_back(data)
    assert [g[0] for g in got] == [o for o, _ in placed[:taken]]
    without_force, count, _ = entries_to_batches(_stored(10, placed), 10, limit, force_first=False)
    assert len(without_force) <= max(limit, 0)
    assert count == 0 or len(without_force) > BATCH_OVERHEAD


def test_entries_not_written_by_the_broker_are_skipped() -> None:
    raw = _stored(2, [(OffsetCodec(2).encode(5, 1), (1, None, b"mine", []))])
    raw.insert(0, [b"5-9", [b"value", b"foreign"]])  # seq 9 is wider than 2 bits
    data, taken, _ = entries_to_batches(raw, 2, 1 << 20, force_first=True)
    assert taken == 1 and _read_back(data)[0][3] == b"mine"


def test_produced_batch_round_trip_through_the_entry_layout() -> None:
    """What decode_batches gives entry_fields is what the fetch loop gives back."""
    sent = [(1_700_000_000_000 + i, b"k%d" % i if i % 3 else None, b"v" * i,
             [("h", b"x"), ("h", None)] if i % 2 else []) for i in range(20)]
    (batch,) = decode_batches(build_batch(sent))
    codec = OffsetCodec(10)
    base = codec.encode(1_800_000_000_000, 5)
    raw = []
    for i, record in enumerate(batch.records):
        raw.append([str(codec.decode(base + i)).encode(), entries.entry_fields(record)])
    data, taken, _ = entries_to_batches(raw, 10, 1 << 20, force_first=True)
    assert taken == 20
    assert [(ts, k, v, h) for _, ts, k, v, h in _read_back(data)] == [
        (ts, k, v, list(h)) for ts, k, v, h in sent]


@settings(max_examples=examples(1), deadline=None)
@given(stamps=st.lists(st.integers(1_600_000_000_000, 1_600_000_000_003), min_size=1, max_size=40))
def test_log_append_time_batches_say_so_and_hold_one_append_time(stamps: list[int]) -> None:
    """On LogAppendTime topics each fetched batch has one timestamp, marked as LogAppendTime,
    with a CRC that still matches: clients report the broker's time and type."""
    from aiokafka.record._crecords import DefaultRecordBatch

    codec = OffsetCodec(10)
    base = codec.encode(1_800_000_000_000, 0)
    placed: list[tuple[int, tuple[int, bytes | None, bytes | None, list[Any]]]] = [
        (base + i, (stamp, None, b"v%d" % i, [])) for i, stamp in enumerate(stamps)]
    data, taken, _ = entries_to_batches(_stored(10, placed), 10, 1 << 20, force_first=True,
                                        log_append_time=True)
    assert taken == len(stamps)
    position, seen = 0, list[int]()
    while position < len(data):
        length = int.from_bytes(data[position + 8:position + 12], "big")
        batch = DefaultRecordBatch(data[position:position + 12 + length])
        assert batch.validate_crc()
        assert batch.timestamp_type == 1
        records = list(batch)
        assert {r.timestamp for r in records} == {batch.max_timestamp}
        seen.extend(r.timestamp for r in records)
        position += 12 + length
    assert seen == stamps


def test_a_transactions_records_and_its_marker_come_back_as_kafka_writes_them() -> None:
    """A dense partition holding a plain record, two records of producer 7's transaction
    (epoch 3), its COMMIT marker and a plain record again: four batches, the transaction's
    marked transactional with its producer id and epoch (a read_committed consumer drops an
    aborted one's by them), the marker a control batch of one control record saying COMMIT
    with its coordinator epoch."""
    producer = b"7 3"
    raw = [
        [b"0-1", entries.entry_fields((10, None, b"plain-0", []))],
        [b"1-1", entries.entry_fields((11, b"k", b"txn-1", []), producer=producer)],
        [b"2-1", entries.entry_fields((12, b"k", b"txn-2", [("h", b"v")]), producer=producer)],
        [b"3-1", entries.marker_fields(True, 7, 3, 5, 13)],
        [b"4-1", entries.entry_fields((14, None, b"plain-4", []))],
    ]
    data, taken, next_offset = entries_to_batches(raw, 0, 10**6, force_first=True)
    assert (taken, next_offset) == (5, 5)
    batches = []
    while data:
        length = int.from_bytes(data[8:12], "big")
        batches.append(PyBatch(data[:12 + length]))
        data = data[12 + length:]
    assert [(b.base_offset, b.is_transactional, b.is_control_batch, b.producer_id,
             b.producer_epoch) for b in batches] == [
        (0, False, False, -1, -1), (1, True, False, 7, 3), (3, True, True, 7, 3),
        (4, False, False, -1, -1)]
    assert [(r.offset, r.value) for r in batches[1]] == [(1, b"txn-1"), (2, b"txn-2")]
    (control,) = list(batches[2])
    assert control.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert control.value == b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5
    assert [(r.offset, r.value) for r in batches[3]] == [(4, b"plain-4")]
