"""Record batches (magic 2) for Produce requests and Fetch responses.

Batches are built and read with aiokafka's compiled record codec (a dependency of
Korvet already); this module only adds the framing the checks need: splitting a
fetched ``records`` field into batches, keeping each batch's header facts
(compression, control, timestamp type, producer id), and tolerating the partial
batch Kafka may leave at the end of a size-limited fetch.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CREATE_TIME, LOG_APPEND_TIME = 0, 1

Header = tuple[str, bytes | None]

_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length
_CRC_OFFSET = 17


@dataclass(frozen=True, slots=True)
class Rec:
    """A record to produce; ``timestamp`` None means now."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Fetched:
    """A record as a Fetch response returned it."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class BatchInfo:
    base_offset: int
    last_offset: int
    record_count: int
    compression: int
    control: bool
    transactional: bool
    timestamp_type: int
    producer_id: int
    base_sequence: int
    size: int


def now_ms() -> int:
    return int(time.time() * 1000)


def build_batch(
    records: list[Rec],
    *,
    compression: int = NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One record batch with offset deltas 0..n-1, as a producer sends it."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=int(transactional),
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=2**30,
    )
    stamp = now_ms()
    for index, rec in enumerate(records):
        metadata = builder.append(
            index, rec.timestamp if rec.timestamp is not None else stamp, rec.key, rec.value,
            list(rec.headers),
        )
        if metadata is None:
            raise ValueError("record batch is full")
    return bytes(builder.build())


def corrupt_crc(batch: bytes) -> bytes:
    """The batch with one bit of its CRC flipped."""
    data = bytearray(batch)
    data[_CRC_OFFSET] ^= 0x01
    return bytes(data)


def split_batches(data: bytes | None) -> tuple[list[bytes], int]:
    """Complete batches in a records field, and how many trailing bytes were a partial batch."""
    if not data:
        return [], 0
    view = memoryview(data)
    batches: list[bytes] = []
    position = 0
    while len(view) - position >= _BATCH_PREFIX.size:
        _, length = _BATCH_PREFIX.unpack_from(view, position)
        size = 12 + length
        if length <= 0 or position + size > len(view):
            break
        batches.append(bytes(view[position:position + size]))
        position += size
    return batches, len(view) - position


def decode_records(data: bytes | None) -> tuple[list[BatchInfo], list[Fetched], int]:
    """(batches, data records, partial trailing bytes) of a fetched records field.

    Control batches (transaction markers) are listed in the batches but their
    records are not returned as data, as a consumer would not see them.
    """
    raw_batches, partial = split_batches(data)
    infos: list[BatchInfo] = []
    fetched: list[Fetched] = []
    for raw in raw_batches:
        magic = raw[16]
        if magic != 2:
            raise ValueError(f"fetched a record batch with magic {magic} (expected 2)")
        batch = DefaultRecordBatch(raw)
        if not batch.validate_crc():
            raise ValueError(f"fetched batch at offset {batch.base_offset} fails its CRC")
        records = list(batch)
        infos.append(BatchInfo(
            base_offset=batch.base_offset,
            last_offset=batch.base_offset + batch.last_offset_delta,
            record_count=len(records),
            compression=batch.compression_type,
            control=batch.is_control_batch,
            transactional=batch.is_transactional,
            timestamp_type=batch.timestamp_type,
            producer_id=batch.producer_id,
            base_sequence=batch.base_sequence,
            size=len(raw),
        ))
        if batch.is_control_batch:
            continue
        for record in records:
            fetched.append(Fetched(
                offset=record.offset, timestamp=record.timestamp,
                timestamp_type=record.timestamp_type, key=record.key, value=record.value,
                headers=tuple(record.headers),
            ))
    return infos, fetched, partial
