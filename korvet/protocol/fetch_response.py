"""Fetch responses written as a list of buffers, the record sets left where they are.

A Fetch response is mostly its record sets: up to ``max_bytes`` (50 MiB by default, 1 MiB per
partition) of record batches that the broker already holds as bytes (a ``batches`` topic's
stored batches, straight from Redis' reply). Encoding the response with kio's generic writer
copies all of them into one buffer, and a joined frame is copied again on its way to the
socket; here the fields around the record sets are written as small byte strings and each
record set stays the list of buffers it was (``RecordSet``), so the frame goes to the socket
as a scatter write (server/listener.py) with no copy of the records in Python.

``FetchAnswer`` holds exactly what the Fetch handler answers (server/handlers/fetch.py): the
aborted transactions of a read_committed fetch (null otherwise), no preferred read replica
(-1), no tagged fields, throttle time 0. Versions 4 to 18, the ones served;
tests/unit/protocol/test_fetch_response.py holds ``b"".join(frame(...))`` equal to kio's
bytes for the same response in every one of them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.protocol.kbuild import make, nested

Buffer = bytes | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# partition_index, error_code, high_watermark, last_stable_offset (v4+)
_PARTITION_V4 = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_HEADER_FLEXIBLE = 12  # the first flexible version (response header v1, compact types)


@dataclass(slots=True)
class RecordSet:
    """A partition's record batches as the buffers they are held in, and their total size."""

    pieces: list[Buffer] = field(default_factory=list)
    size: int = 0

    def add(self, piece: Buffer) -> None:
        self.pieces.append(piece)
        self.size += len(piece)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def tobytes(self) -> bytes:
        return b"".join(self.pieces)

    @classmethod
    def of(cls, data: bytes) -> RecordSet:
        return cls([data], len(data)) if data else cls()


@dataclass(slots=True)
class PartitionAnswer:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: RecordSet
    # read_committed: the aborted transactions the records may hold, (producer id, first offset)
    aborted: tuple[tuple[int, int], ...] | None = None
    # v12+: (epoch, end offset) where the fetcher's log diverges (a tagged field; None: absent)
    diverging: tuple[int, int] | None = None


@dataclass(slots=True)
class TopicAnswer:
    key: str | uuid.UUID  # the topic's name (versions < 13) or id, as the request named it
    partitions: list[PartitionAnswer]


@dataclass(slots=True)
class FetchAnswer:
    """A Fetch response of ``version`` (4..18) as the handler answers it."""

    version: int
    error_code: int
    session_id: int
    topics: list[TopicAnswer]

    @property
    def records_size(self) -> int:
        return sum(p.records.size for t in self.topics for p in t.partitions)

    def frame(self, correlation_id: int) -> list[Buffer]:
        """The size-prefixed response frame: small byte strings for the fields, the record
        sets' own buffers between them."""
        return _frame(self, correlation_id)

    def to_kio(self, response_cls: type[Any]) -> Any:
        """The same response as kio's dataclass of this version (record sets joined)."""
        topic_cls = nested(response_cls, "FetchableTopicResponse")
        partition_cls = nested(response_cls, "PartitionData")
        aborted_cls = nested(response_cls, "AbortedTransaction")
        key_field = "topic_id" if self.version >= 13 else "topic"
        topics = tuple(
            make(topic_cls, **{key_field: topic.key}, partitions=tuple(
                make(partition_cls, partition_index=p.index, error_code=p.error_code,
                     high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                     log_start_offset=p.log_start_offset,
                     aborted_transactions=None if p.aborted is None else tuple(
                         make(aborted_cls, producer_id=pid, first_offset=first)
                         for pid, first in p.aborted),
                     preferred_read_replica=-1, records=p.records.tobytes(),
                     **_diverging_kio(partition_cls, p.diverging))
                for p in topic.partitions))
            for topic in self.topics)
        return make(response_cls, throttle_time=0, error_code=self.error_code,
                    session_id=self.session_id, responses=topics)


def _diverging_kio(partition_cls: type[Any], diverging: tuple[int, int] | None) -> dict[str, Any]:
    if diverging is None:
        return {}
    return {"diverging_epoch": make(nested(partition_cls, "EpochEndOffset"), epoch=diverging[0],
                                    end_offset=diverging[1])}


def _tagged(diverging: tuple[int, int] | None) -> bytes:
    """A partition's tagged fields (v12+): none, or diverging_epoch (tag 0: epoch, end
    offset and the struct's own empty tagged fields, 13 bytes)."""
    if diverging is None:
        return b"\x00"
    return b"\x01\x00\x0d" + _I32.pack(diverging[0]) + _I64.pack(diverging[1]) + b"\x00"


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _I32.pack(count)


def _topic_key(key: str | uuid.UUID, version: int) -> bytes:
    if version >= 13:
        assert isinstance(key, uuid.UUID)
        return key.bytes
    text = str(key).encode()
    if version >= _HEADER_FLEXIBLE:
        return _uvarint(len(text) + 1) + text
    return _I16.pack(len(text)) + text


def _aborted(aborted: tuple[tuple[int, int], ...] | None, flexible: bool) -> bytes:
    """The aborted_transactions array (null when None)."""
    if aborted is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    tags = b"\x00" if flexible else b""  # each aborted transaction's tagged fields
    return _array_length(len(aborted), flexible) + b"".join(
        _I64.pack(pid) + _I64.pack(first) + tags for pid, first in aborted)


def _frame(answer: FetchAnswer, correlation_id: int) -> list[Buffer]:
    version = answer.version
    flexible = version >= _HEADER_FLEXIBLE
    out: list[Buffer] = []
    head = bytearray(_I32.pack(0))  # the size, written last
    head += _I32.pack(correlation_id)
    if flexible:
        head.append(0)  # the header's tagged fields
    head += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        head += _I16.pack(answer.error_code)
        head += _I32.pack(answer.session_id)
    head += _array_length(len(answer.topics), flexible)
    size = 0
    for topic in answer.topics:
        head += _topic_key(topic.key, version)
        head += _array_length(len(topic.partitions), flexible)
        for p in topic.partitions:
            head += _PARTITION_V4.pack(p.index, p.error_code, p.high_watermark,
                                       p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            head += _aborted(p.aborted, flexible)
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred_read_replica: -1
            records = p.records
            head += _uvarint(records.size + 1) if flexible else _I32.pack(records.size)
            if records.size:
                out.append(bytes(head))
                size += len(head)
                out.extend(records.pieces)
                size += records.size
                head = bytearray()
            if flexible:
                head += _tagged(p.diverging)  # the partition's tagged fields
        if flexible:
            head.append(0)  # the topic's tagged fields
    if flexible:
        head.append(0)  # the response's tagged fields
    out.append(bytes(head))
    size += len(head)
    first = bytearray(out[0])
    _I32.pack_into(first, 0, size - 4)
    out[0] = bytes(first)
    return out


def join(pieces: Sequence[Buffer]) -> bytes:
    return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces)
