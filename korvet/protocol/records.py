"""Kafka RecordBatch (magic 2) decoding for Produce and encoding for Fetch.

The codec is aiokafka's compiled (Cython) one: measured here at about
0.5 µs/record to validate and decode and 0.4 µs/record to build, against
15-18 µs for kio's pure-Python records module, which also truncates
timestamps to seconds and cannot read compressed batches (see
docs/implementers/records.md). kio still decodes the request and response
envelopes; the ``records`` field is just bytes to it.

Decoding is strict, because a bad batch must be refused whole: CRC (CORRUPT_MESSAGE),
magic other than 2, a truncated batch, a record count that disagrees with the
header, or offset deltas that are not 0..n-1 (INVALID_RECORD). Compressed batches
(gzip, snappy, lz4, zstd) are decompressed; records are stored uncompressed.

A batch whose records hold more than ``max_bytes`` once decompressed (the broker passes
socket.request.max.bytes: no uncompressed request could carry them) is MESSAGE_TOO_LARGE, an
error clients do not retry: a few hundred kilobytes of gzip can hold a gigabyte of zeros. A
gzip or zstd batch is measured before it is decompressed (its decompressed records
section), in bounded memory; for lz4 and snappy, whose ratios are far smaller, the records'
keys and values are counted as they are walked, once the codec has decompressed the batch
(which the compiled codec does whole).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

Header = tuple[str, bytes | None]

# RecordBatch header layout (bytes): baseOffset 0-8, batchLength 8-12, leaderEpoch 12-16,
# magic 16, crc 17-21, attributes 21-23, lastOffsetDelta 23-27, firstTimestamp 27-35,
# maxTimestamp 35-43, producerId 43-51, producerEpoch 51-53, baseSequence 53-57,
# recordCount 57-61.
BATCH_OVERHEAD = 61
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_INT32_MAX = 2**31 - 1

TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class RecordBatchError(ValueError):
    """A produced batch that must be refused. ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10  # what Kafka answers for a batch over max.message.bytes
INVALID_RECORD = 87
MAX_DECOMPRESSED = 100 * 1024 * 1024  # socket.request.max.bytes' default
_GZIP = 1
_CHUNK = 1 << 20
_DEFLATE_RATIO = 1032  # deflate's largest ratio of output to input bytes
_ZSTD = 4
_ZSTD_RATIO = 1 << 16  # above zstd's ratio on a run of zeros (about 32,000)
UNSUPPORTED_COMPRESSION_TYPE = 76


class Record(NamedTuple):
    """A record as produced or stored. Decoding yields plain tuples of the same shape,
    which are cheaper to create; both index as (timestamp, key, value, headers)."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


RecordTuple = tuple[int, bytes | None, bytes | None, list[Header]]


@dataclass(frozen=True, slots=True)
class Batch:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    transactional: bool
    control: bool
    log_append_time: bool
    max_timestamp: int
    size: int  # bytes on the wire
    compression: int
    records: list[RecordTuple]

    @property
    def last_sequence(self) -> int:
        return _last_sequence(self.base_sequence, len(self.records))

    @property
    def keyless(self) -> tuple[int, ...]:
        """The indexes of the records without a key (a compacted topic refuses them)."""
        return tuple(i for i, record in enumerate(self.records) if record[1] is None)

    @property
    def timestamps(self) -> list[int]:
        return [record[0] for record in self.records]


def _last_sequence(base_sequence: int, count: int) -> int:
    if base_sequence < 0:
        return -1
    # Kafka's sequence numbers wrap from 2^31-1 to 0.
    return (base_sequence + count - 1) % (_INT32_MAX + 1)


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A produced batch validated for the ``batches`` storage format: its bytes are stored as
    they came (a compressed batch stays compressed), with the facts the rules and the stored
    entry need beside them."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    control: bool
    log_append_time: bool
    first_timestamp: int
    max_timestamp: int  # of the records themselves (not the header's claim)
    compression: int
    timestamps: list[int]
    raw: bytes
    keyless: tuple[int, ...] = ()  # the indexes of the records without a key

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def last_sequence(self) -> int:
        return _last_sequence(self.base_sequence, self.count)


def decode_batches(data: bytes | memoryview | None,
                   max_bytes: int = MAX_DECOMPRESSED) -> list[Batch]:
    """Split and validate every batch of a produce request's records field."""
    return [_decode_one(raw, max_bytes) for raw in split_batches(data)]


def scan_batches(data: bytes | memoryview | None,
                 max_bytes: int = MAX_DECOMPRESSED) -> list[StoredBatch]:
    """``decode_batches`` for the ``batches`` storage format: the same checks (a batch one
    refuses the other refuses too), keeping each batch's bytes and its records' timestamps
    instead of the records. The CRC is checked once, here; the records are walked once (the
    compiled codec decompresses them) to check their offsets and count and to read their
    timestamps, and are not kept."""
    return [_scan_one(raw, max_bytes) for raw in split_batches(data)]


def split_batches(data: bytes | memoryview | None) -> list[bytes]:
    """The record batches of a produce request's records field, each as its own bytes (framing
    checked: lengths, truncation, magic 2)."""
    if not data:
        raise RecordBatchError(INVALID_RECORD, "produce request with no records")
    view = memoryview(data)
    batches: list[bytes] = []
    position = 0
    while position < len(view):
        if len(view) - position < BATCH_OVERHEAD:
            raise RecordBatchError(CORRUPT_MESSAGE, "truncated record batch header")
        (length,) = _LENGTH.unpack_from(view, position + 8)
        size = 12 + length
        if length < BATCH_OVERHEAD - 12 or position + size > len(view):
            raise RecordBatchError(CORRUPT_MESSAGE, f"record batch of {size} bytes is truncated")
        magic = view[position + 16]
        if magic != 2:
            raise RecordBatchError(
                INVALID_RECORD, f"record batch magic {magic} is not supported (only magic 2)"
            )
        whole = position == 0 and size == len(view) and isinstance(data, bytes)
        batches.append(data if whole else bytes(view[position:position + size]))  # type: ignore[arg-type]
        position += size
    return batches


def _too_large(max_bytes: int) -> RecordBatchError:
    return RecordBatchError(
        MESSAGE_TOO_LARGE, f"the record batch decompresses to more than {max_bytes} bytes "
        "(socket.request.max.bytes): no request could carry these records uncompressed")


def _check_size_first(raw: bytes, max_bytes: int) -> None:
    """Refuse a gzip or zstd batch whose records would decompress to more than
    ``max_bytes``, decompressing it a megabyte at a time and keeping nothing (the codec then
    decompresses it whole). Both can hide gigabytes in a small request (deflate about
    1,032 bytes a byte, zstd tens of thousands); lz4 (255) and snappy are left to the walk."""
    codec = raw[22] & 0x07
    payload = memoryview(raw)[BATCH_OVERHEAD:]
    if codec == _GZIP and len(payload) * _DEFLATE_RATIO > max_bytes:
        _measure_gzip(payload, max_bytes)
    elif codec == _ZSTD and len(payload) * _ZSTD_RATIO > max_bytes:
        _measure_zstd(payload, max_bytes)


def _measure_gzip(data: memoryview, max_bytes: int) -> None:
    total = 0
    rest: bytes | memoryview = data
    try:
        while rest:  # every member, as the codec's GzipFile reads them all
            inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
            while rest and not inflate.eof:
                total += len(inflate.decompress(rest, _CHUNK))
                if total > max_bytes:
                    raise _too_large(max_bytes)
                rest = inflate.unconsumed_tail
            if not inflate.eof:
                return  # truncated: the codec refuses it
            rest = inflate.unused_data
    except zlib.error:
        return  # not gzip after all: the codec refuses it (CORRUPT_MESSAGE)


def _measure_zstd(data: memoryview, max_bytes: int) -> None:
    import zstandard

    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(
                data, read_across_frames=True) as reader:  # every frame, as the codec does
            while chunk := reader.read(_CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise _too_large(max_bytes)
    except zstandard.ZstdError:
        return  # not zstd after all: the codec refuses it (CORRUPT_MESSAGE)


def _walk(batch: DefaultRecordBatch, stamps: bool, max_bytes: int = MAX_DECOMPRESSED
          ) -> tuple[list[RecordTuple], list[int], list[int]]:
    """The records (or only their timestamps and the indexes of the keyless ones), checking
    that offset deltas are 0..n-1 and that the records' keys and values fit in ``max_bytes``."""
    records: list[RecordTuple] = []
    timestamps: list[int] = []
    keyless: list[int] = []
    held = 0
    bounded = batch.compression_type != 0  # uncompressed records fit in their request
    try:
        for index, record in enumerate(batch):
            if record.offset != index:  # base offset is 0 on produce; deltas must be 0..n-1
                raise RecordBatchError(
                    INVALID_RECORD, f"record {index} has offset delta {record.offset}"
                )
            if bounded:  # a compressed batch: its records may outgrow the request
                key, value = record.key, record.value
                held += (len(key) if key else 0) + (len(value) if value else 0)
                if held > max_bytes:
                    raise _too_large(max_bytes)
            if stamps:
                timestamps.append(record.timestamp)
                if record.key is None:
                    keyless.append(index)
            else:
                records.append((record.timestamp, record.key, record.value, record.headers))
    except RecordBatchError:
        raise
    except UnsupportedCodecError as exc:
        raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, str(exc)) from exc
    except (CorruptRecordException, ValueError, IndexError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch does not decode: {exc}") from exc
    except Exception as exc:  # compression libraries raise their own error types
        raise RecordBatchError(CORRUPT_MESSAGE, f"record batch does not decode: {exc}") from exc
    return records, timestamps, keyless


def _check_count(raw: bytes, batch: DefaultRecordBatch, count: int) -> None:
    (declared,) = _LENGTH.unpack_from(raw, 57)
    if count != declared or not count:
        raise RecordBatchError(
            INVALID_RECORD, f"record batch declares {declared} records but holds {count}"
        )
    if batch.last_offset_delta != count - 1:
        raise RecordBatchError(
            INVALID_RECORD,
            f"lastOffsetDelta {batch.last_offset_delta} does not match {count} records",
        )


def _check_crc(raw: bytes) -> None:
    """The CRC-32C of a v2 batch covers everything from its attributes (byte 21) to its end
    (the crc32c package: several times faster than the codec's own check)."""
    (crc,) = _CRC.unpack_from(raw, 17)
    if crc32c(memoryview(raw)[21:]) != crc:
        raise RecordBatchError(CORRUPT_MESSAGE, "record batch CRC does not match its content")


def _scan_one(raw: bytes, max_bytes: int = MAX_DECOMPRESSED) -> StoredBatch:
    _check_crc(raw)
    _check_size_first(raw, max_bytes)
    batch = DefaultRecordBatch(raw)
    _, stamps, keyless = _walk(batch, True, max_bytes)
    _check_count(raw, batch, len(stamps))
    attributes = batch.attributes
    return StoredBatch(
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        count=len(stamps),
        transactional=bool(attributes & TRANSACTIONAL_FLAG),
        control=bool(attributes & CONTROL_FLAG),
        log_append_time=batch.timestamp_type == 1,
        first_timestamp=stamps[0],
        max_timestamp=max(stamps),
        compression=batch.compression_type,
        timestamps=stamps,
        raw=raw,
        keyless=tuple(keyless),
    )


def _decode_one(raw: bytes, max_bytes: int = MAX_DECOMPRESSED) -> Batch:
    _check_crc(raw)
    _check_size_first(raw, max_bytes)
    batch = DefaultRecordBatch(raw)
    records, _, _ = _walk(batch, False, max_bytes)
    _check_count(raw, batch, len(records))
    attributes = batch.attributes
    return Batch(
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        last_offset_delta=batch.last_offset_delta,
        transactional=bool(attributes & TRANSACTIONAL_FLAG),
        control=bool(attributes & CONTROL_FLAG),
        log_append_time=batch.timestamp_type == 1,
        max_timestamp=batch.max_timestamp,
        size=len(raw),
        compression=batch.compression_type,
        records=records,
    )


# --- encoding ---------------------------------------------------------------------
# Fetch responses are built by korvet/server/batching.py straight from Redis' replies.


def build_batch(records: Sequence[RecordTuple], *, compression: int = 0, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A produce-side batch (base offset 0): used by tests and the benchmark."""
    builder = DefaultRecordBatchBuilder(2, compression, 0, producer_id, producer_epoch,
                                        base_sequence, _INT32_MAX)
    for delta, (timestamp, key, value, headers) in enumerate(records):
        builder.append(delta, timestamp, key, value, headers)
    return bytes(builder.build())


_MAX_TIMESTAMP = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
LOG_APPEND_TIME_FLAG = 0x08


def stamp_log_append_time(raw: bytes, now_ms: int) -> bytes:
    """A batch of a LogAppendTime topic as Kafka stores it: the timestamp type in its
    attributes says LogAppendTime and its max timestamp is the broker's clock (clients then
    report that as every record's timestamp); the CRC is computed again (it covers both)."""
    batch = bytearray(raw)
    (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
    _ATTRIBUTES.pack_into(batch, 21, attributes | LOG_APPEND_TIME_FLAG)
    _MAX_TIMESTAMP.pack_into(batch, 35, now_ms)
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def stored_timestamps(raw: bytes) -> list[tuple[int, int]]:
    """(offset delta, timestamp) of each record of a stored batch, as a client reads them:
    with LogAppendTime, the batch's max timestamp for every record. A batch the log cleaner
    rewrote has gaps in its deltas."""
    batch = DefaultRecordBatch(raw)
    if batch.timestamp_type == 1:
        return [(record.offset, batch.max_timestamp) for record in batch]
    return [(record.offset, record.timestamp) for record in batch]


# --- the log cleaner's rewrite (batches format) ------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredRecords:
    """A stored batch as the log cleaner reads it: its producer, whether it is a transaction's
    data or a marker, and each record's offset delta, key and whether it has a value."""

    producer_id: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes | None, bool]]  # (offset delta, key, has a value)


def stored_records(raw: bytes) -> StoredRecords:
    """The records of a stored batch (decompressed when it is compressed)."""
    batch = DefaultRecordBatch(raw)
    attributes = batch.attributes
    return StoredRecords(batch.producer_id, bool(attributes & TRANSACTIONAL_FLAG),
                         bool(attributes & CONTROL_FLAG),
                         [(record.offset, record.key, record.value is not None)
                          for record in batch])


def rewrite_batch(raw: bytes, keep: frozenset[int]) -> tuple[bytes, int, int]:
    """The stored batch with only the records at the offset deltas ``keep``, as Kafka's cleaner
    rewrites one: the same base offset (0 as stored), each record at its own delta (so the
    deltas have gaps), the same producer id, epoch, base sequence, transactional flag and
    compression, the CRC computed anew. With LogAppendTime the batch keeps its max timestamp
    (its records' timestamp). Returns the batch, its span (last offset delta + 1: the
    ``records`` field of its entry) and its max timestamp."""
    batch = DefaultRecordBatch(raw)
    transactional = 1 if batch.attributes & TRANSACTIONAL_FLAG else 0
    builder = DefaultRecordBatchBuilder(2, batch.compression_type, transactional,
                                        batch.producer_id, batch.producer_epoch,
                                        batch.base_sequence, _INT32_MAX)
    last, most = -1, -1
    for record in batch:
        if record.offset in keep:
            builder.append(record.offset, record.timestamp, record.key, record.value,
                           record.headers)
            last, most = record.offset, max(most, record.timestamp)
    built = bytes(builder.build())
    if batch.timestamp_type == 1:
        return stamp_log_append_time(built, batch.max_timestamp), last + 1, batch.max_timestamp
    return built, last + 1, most


# --- transaction markers -------------------------------------------------------------
CONTROL_FLAG = 0x20
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type: 0 ABORT, 1 COMMIT
_CONTROL_VALUE = struct.Struct(">hi")  # EndTxnMarker version 0, coordinator epoch
# base offset, length, leader epoch, magic, crc, attributes, last offset delta, base and max
# timestamp, producer id, producer epoch, base sequence, record count
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int, base_offset: int = 0, leader_epoch: int = 0) -> bytes:
    """A transaction marker as Kafka writes it: a batch of one control record (attributes
    transactional and control, base sequence -1) whose key says COMMIT or ABORT and whose
    value carries the coordinator epoch."""
    key = _CONTROL_KEY.pack(0, 1 if commit else 0)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    body = (b"\x00" + _varint(0) + _varint(0) + _varint(len(key)) + key + _varint(len(value))
            + value + _varint(0))
    record = _varint(len(body)) + body
    attributes = TRANSACTIONAL_FLAG | CONTROL_FLAG
    header = bytearray(_BATCH_HEADER.pack(base_offset, 0, leader_epoch, 2, 0, attributes, 0,
                                          timestamp, timestamp, producer_id, producer_epoch, -1, 1))
    batch = header + record
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


_INT32_MAX_DELTA = 2**31 - 1


def empty_batch(base_offset: int, end_offset: int, leader_epoch: int = 0) -> bytes:
    """A batch of no records covering the offsets ``base_offset`` .. ``end_offset`` - 1 (at
    most 2^31 of them), as Kafka's cleaner keeps the last batch of a cleaned log empty: a
    consumer takes its position past it. Korvet answers one when the records up to the end
    were removed by the log cleaner, so that a reader from the start still reaches the end
    (spec/Compaction.tla, Fetch)."""
    delta = min(end_offset - 1 - base_offset, _INT32_MAX_DELTA)
    header = bytearray(_BATCH_HEADER.pack(base_offset, 0, leader_epoch, 2, 0, 0, delta,
                                          -1, -1, -1, -1, -1, 0))
    struct.pack_into(">i", header, 8, len(header) - 12)
    _CRC.pack_into(header, 17, crc32c(memoryview(header)[21:]))
    return bytes(header)
