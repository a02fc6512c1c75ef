"""The pure parts of the ``batches`` storage format (korvet.storage.format=batches).

- ``scan_batches`` refuses exactly what ``decode_batches`` refuses and keeps each batch's
  bytes, count, sequence and timestamps;
- a stored batch entry (``pack_batch``/``batch_fields``) read back by ``stored_batches`` is
  the producer's batch, whole, at its entry's offset, readable by an independent decoder
  (kafka-python's pure-Python codec) with a valid CRC, within the byte budget (KIP-74: the
  first batch always goes);
- ``batches_that_fit``/``batch_holds`` (core/fetch.py) and ``trim_policy`` with one entry
  per batch;
- ``stamp_log_append_time`` keeps the CRC valid and makes every record read as the broker's
  time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as PyBatch

from korvet.core.fetch import batch_holds, batches_that_fit
from korvet.core.offsets import OffsetCodec
from korvet.core.topics import TopicConfig, trim_policy
from korvet.protocol.records import (
    RecordBatchError,
    build_batch,
    decode_batches,
    rewrite_batch,
    scan_batches,
    stamp_log_append_time,
    stored_timestamps,
)
from korvet.server.batching import stored_batches
from korvet.storage import entries
from tests.support.examples import examples

records: st.SearchStrategy[list[Any]] = st.lists(
    st.tuples(st.integers(0, 2**41), st.one_of(st.none(), st.binary(max_size=20)),
              st.one_of(st.none(), st.binary(max_size=120)), st.just([])),
    min_size=1, max_size=12)
compressions = st.sampled_from([0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd


@given(st.lists(st.tuples(records, compressions), min_size=1, max_size=4),
       st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(0, 255))))
@settings(max_examples=examples(1))
def test_scan_agrees_with_decode(batches: list[tuple[list[Any], int]],
                                 flip: tuple[int, int] | None) -> None:
    data = bytearray(b"".join(build_batch(r, compression=c, producer_id=7, producer_epoch=1,
                                          base_sequence=3) for r, c in batches))
    if flip is not None:
        data[min(len(data) - 1, 21 + flip[0] * 11)] ^= flip[1] or 1
    payload = bytes(data)
    try:
        decoded = decode_batches(payload)
    except RecordBatchError as exc:
        with pytest.raises(RecordBatchError) as caught:
            scan_batches(payload)
        assert caught.value.code == exc.code
        return
    scanned = scan_batches(payload)
    assert len(scanned) == len(decoded)
    position = 0
    for stored, full in zip(scanned, decoded, strict=True):
        assert stored.count == len(full.records)
        assert stored.timestamps == [r[0] for r in full.records]
        assert stored.max_timestamp == max(stored.timestamps)
        assert stored.last_sequence == full.last_sequence
        assert (stored.producer_id, stored.producer_epoch) == (7, 1)
        assert stored.raw == payload[position:position + stored.size]
        position += stored.size


def _entry(bits: int, offset: int, raw: bytes, count: int, max_ts: int) -> list[Any]:
    """A raw XRANGE reply entry for one stored batch, as Redis sends it."""
    packed = entries.pack_batch(count, max_ts, raw)
    assert packed.size == len(raw)
    fields = [entries.BATCH_COUNT, b"%d" % count, entries.BATCH_MAX_TIMESTAMP, b"%d" % max_ts,
              entries.BATCH, raw]
    return [str(OffsetCodec(bits).decode(offset)).encode(), fields]


@given(st.lists(st.tuples(records, compressions, st.integers(0, 3)), min_size=1, max_size=5),
       st.integers(4, 16), st.integers(1, 3000), st.booleans())
@settings(max_examples=examples(1))
def test_stored_batches_come_back_whole_at_their_offsets(
        batches: list[tuple[list[Any], int, int]], bits: int, max_bytes: int,
        force_first: bool) -> None:
    offset = 1000
    raw_entries = []
    expected = []
    for recs, compression, gap in batches:
        raw = build_batch(recs, compression=compression)
        offset += gap
        raw_entries.append(_entry(bits, offset, raw, len(recs), max(r[0] for r in recs)))
        expected.append((offset, recs, len(raw)))
        offset += len(recs)
    pieces, count, next_offset, taken = stored_batches(raw_entries, bits, max_bytes,
                                                       force_first=force_first)
    data = pieces.tobytes()
    assert len(pieces) == len(data)
    # no copy of a stored batch: its bytes after the rewritten 16-byte head are a view of them
    assert all(isinstance(piece, memoryview) for piece in pieces.pieces[1::2])
    assert taken == batches_that_fit([size for *_, size in expected], max_bytes, force_first)
    assert len(data) == sum(size for *_, size in expected[:taken])
    assert len(data) <= max_bytes or (force_first and taken == 1)
    assert count == sum(len(recs) for _, recs, _ in expected[:taken])
    assert next_offset == (expected[taken - 1][0] + len(expected[taken - 1][1]) if taken else -1)
    position = 0
    for base, recs, size in expected[:taken]:
        batch = PyBatch(data[position:position + size])
        assert batch.validate_crc()
        assert batch.base_offset == base
        got = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
        assert got == [(base + i, ts, k, v) for i, (ts, k, v, _) in enumerate(recs)]
        position += size


@given(st.lists(st.integers(1, 500), max_size=20), st.integers(0, 3000), st.booleans())
@settings(max_examples=examples(3))
def test_batches_that_fit_takes_a_prefix_within_the_budget(sizes: list[int], budget: int,
                                                           force_first: bool) -> None:
    taken = batches_that_fit(sizes, budget, force_first)
    used = sum(sizes[:taken])
    assert used <= budget or (force_first and taken == 1)
    if taken < len(sizes):  # it stopped because the next one did not fit
        assert used + sizes[taken] > budget
    if force_first and sizes:
        assert taken >= 1


@given(st.integers(0, 10**6), st.integers(1, 1000), st.integers(0, 10**6))
@settings(max_examples=examples(3))
def test_batch_holds_exactly_its_offsets(first: int, count: int, offset: int) -> None:
    assert batch_holds(first, count, offset) == (offset in range(first, first + count))


@given(st.integers(1, 10_000), st.integers(1, 1000), st.integers(1, 10**6),
       st.integers(0, 10**7))
@settings(max_examples=examples(2))
def test_trim_keeps_enough_whole_batches(limit: int, per_batch: int, batch_bytes: int,
                                         byte_limit: int) -> None:
    config = TopicConfig({"korvet.retention.records": str(limit)})
    policy = trim_policy(config, 10_000, batch_bytes, per_batch, entries=1)
    assert policy.max_len * per_batch >= limit  # never fewer records than asked to keep
    assert (policy.max_len - 1) * per_batch < limit  # and not a whole batch more
    sized = TopicConfig({"retention.bytes": str(byte_limit)})
    by_bytes = trim_policy(sized, 10_000, batch_bytes, per_batch, entries=1)
    assert by_bytes.max_len == max(1, byte_limit // batch_bytes)


@given(records, compressions, st.integers(0, 2**41))
@settings(max_examples=examples(1))
def test_log_append_time_stamp_keeps_the_crc(recs: list[Any], compression: int, now: int) -> None:
    stamped = stamp_log_append_time(build_batch(recs, compression=compression), now)
    batch = PyBatch(stamped)
    assert batch.validate_crc()
    assert batch.timestamp_type == 1
    assert stored_timestamps(stamped) == [(i, now) for i in range(len(recs))]
    assert scan_batches(stamped)[0].count == len(recs)


@given(records.filter(bool), compressions, st.data())
@settings(max_examples=examples(1))
def test_a_rewritten_batch_keeps_each_survivor_at_its_offset(recs: list[Any], compression: int,
                                                             data: st.DataObject) -> None:
    """The log cleaner's rewrite (batches format): the records kept, each at its own offset
    delta (gaps where records went), the producer and compression kept, a valid CRC, read so
    by an independent decoder (kafka-python's)."""
    raw = build_batch(recs, compression=compression, producer_id=9, producer_epoch=2,
                      base_sequence=40)
    keep = frozenset(data.draw(st.sets(st.integers(0, len(recs) - 1), min_size=1)))
    new, span, most = rewrite_batch(raw, keep)
    batch = PyBatch(new)
    assert batch.validate_crc()
    got = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (i, recs[i][0], recs[i][1], recs[i][2]) for i in sorted(keep)]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.compression_type) == (9, 2, 40, compression)
    assert span == max(keep) + 1 == batch.last_offset_delta + 1
    assert most == max(recs[i][0] for i in keep)
