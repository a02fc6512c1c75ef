"""Kafka's ListOffsets and OffsetForLeaderEpoch rules, as pure functions over version-free
requests (korvet/protocol/decoders/offsets.py decodes them).

ListOffsets, with Kafka's sentinels (``ListOffsetsRequest``):

  -1 LATEST          the high watermark (the next offset to be written)
  -2 EARLIEST        the log start offset (the first not removed by retention)
  -3 MAX_TIMESTAMP   the offset and timestamp of the record with the largest timestamp
  -4 EARLIEST_LOCAL  as EARLIEST (there is no remote tier)
  -5 LATEST_TIERED   -1 (there is no remote tier)
  T >= 0             the first record, in offset order, whose timestamp is >= T; -1 if none

``query`` says, per requested partition, which error it answers or what must be read;
``timestamp_search_start`` where a search by time may start; ``answer`` the partition's reply
from what was read. The reading itself (Redis) is the handler's
(korvet/server/handlers/offsets.py).

OffsetForLeaderEpoch: every partition has one leader epoch, 0, whose end offset is the high
watermark (``epoch_query``).

Tests: tests/unit/core/test_list_offsets.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from korvet.core.epochs import FIXED, Epochs
from korvet.core.errors import ErrorCode
from korvet.core.offsets import Codec, DenseCodec
from korvet.core.topics import TopicInfo

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
LEADER_EPOCH = 0  # one leader per partition, never replaced
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    index: int
    timestamp: int  # a sentinel above, or a time in ms
    current_leader_epoch: int  # -1: not given (v0-3)


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsCall:
    """A ListOffsets request, whatever its version."""

    isolation_level: int  # 0 read_uncommitted (v0-1 have none), 1 read_committed
    topics: tuple[ListOffsetsTopic, ...]


class Lookup(Enum):
    """What a readable partition's answer needs from Redis."""

    LATEST = "latest"  # the high watermark
    EARLIEST = "earliest"  # the log start offset
    MAX_TIMESTAMP = "max-timestamp"  # a scan for the largest timestamp
    BY_TIMESTAMP = "by-timestamp"  # a scan for the first timestamp >= the one asked
    NOTHING = "nothing"  # answered -1 without reading (LATEST_TIERED)


def query(topic: TopicInfo | None, partition: ListOffsetsPartition) -> ErrorCode | Lookup:
    """The partition's error, or what its answer needs read; in Kafka's order: an unknown
    topic or partition, then a timestamp that is neither a sentinel nor a time."""
    if topic is None or not 0 <= partition.index < topic.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    stamp = partition.timestamp
    if stamp < LATEST_TIERED:
        return ErrorCode.INVALID_REQUEST
    if stamp >= 0:
        return Lookup.BY_TIMESTAMP
    return {LATEST: Lookup.LATEST, EARLIEST: Lookup.EARLIEST, EARLIEST_LOCAL: Lookup.EARLIEST,
            MAX_TIMESTAMP: Lookup.MAX_TIMESTAMP, LATEST_TIERED: Lookup.NOTHING}[stamp]


def timestamp_search_start(timestamp: int, lead_ms: int, codec: Codec, log_start: int) -> int:
    """The first offset a search for ``timestamp`` must look at: a record's CreateTime may be
    ahead of its append time by at most ``message.timestamp.after.max.ms`` (``lead_ms``, which
    Produce enforces), so no record appended before ``timestamp - lead_ms`` can carry it. A
    dense topic's offsets say nothing of time: from the log start."""
    if isinstance(codec, DenseCodec):
        return log_start
    floor_ms = max(0, min(timestamp - lead_ms, codec.max_ms))
    return max(log_start, codec.encode(floor_ms, 0))


@dataclass(frozen=True, slots=True)
class OffsetAnswer:
    error: ErrorCode
    offset: int = NO_OFFSET
    timestamp: int = -1
    epoch: int = LEADER_EPOCH  # the epoch the answered offset was written in

    @property
    def leader_epoch(self) -> int:
        """The epoch of the leader that wrote the offset answered; -1 when there is none."""
        return self.epoch if self.offset >= 0 else -1


def answer(offset: int, timestamp: int = -1, epochs: Epochs = FIXED) -> OffsetAnswer:
    """A readable partition's reply from what was read (offset -1: no such record), with the
    epoch of the offset (a dense topic's history; 0 for a time topic)."""
    return OffsetAnswer(ErrorCode.NONE, offset, timestamp,
                        epochs.epoch_of(offset) if offset >= 0 else LEADER_EPOCH)


@dataclass(frozen=True, slots=True)
class EpochPartition:
    index: int
    current_leader_epoch: int
    leader_epoch: int  # the epoch whose end offset the client asks


@dataclass(frozen=True, slots=True)
class EpochTopic:
    name: str
    partitions: tuple[EpochPartition, ...]


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """OffsetForLeaderEpoch's answer for one partition; ``needs_end`` means the end offset is
    the high watermark, still to be read."""

    error: ErrorCode
    leader_epoch: int = -1
    needs_end: bool = False


def dense_epoch_end(partition: EpochPartition, epochs: Epochs, log_start: int,
                    high_watermark: int) -> tuple[ErrorCode, int, int]:
    """A dense topic's partition: (error, epoch, end offset) as Kafka answers
    OffsetForLeaderEpoch, from the partition's epoch history (korvet/core/epochs.py): the
    request's current epoch fenced first, then the end of the epoch asked."""
    fenced = epochs.fence(partition.current_leader_epoch)
    if fenced is not ErrorCode.NONE:
        return fenced, -1, -1
    epoch, end = epochs.end_offset(partition.leader_epoch, high_watermark, log_start)
    return ErrorCode.NONE, epoch, end


def epoch_query(topic: TopicInfo | None, partition: EpochPartition) -> EpochEnd:
    """An unknown topic or partition; a client that knows a newer leader than ours
    (UNKNOWN_LEADER_EPOCH); epoch 0 or older: our one epoch, ending at the high watermark; a
    newer epoch than any we had: no answer (-1, -1), as Kafka answers an epoch it never saw."""
    if topic is None or not 0 <= partition.index < topic.partitions:
        return EpochEnd(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if partition.current_leader_epoch > LEADER_EPOCH:
        return EpochEnd(ErrorCode.UNKNOWN_LEADER_EPOCH)
    if partition.leader_epoch <= LEADER_EPOCH:
        return EpochEnd(ErrorCode.NONE, LEADER_EPOCH, needs_end=True)
    return EpochEnd(ErrorCode.NONE)
