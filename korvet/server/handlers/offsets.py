"""ListOffsets (key 2) and OffsetForLeaderEpoch (key 23).

ListOffsets, with Kafka's sentinels:
  -1 LATEST          the high watermark (next offset to be written)
  -2 EARLIEST        the log start offset (first offset not removed by retention)
  -3 MAX_TIMESTAMP   the offset and timestamp of the record with the largest timestamp
  -4 EARLIEST_LOCAL  as EARLIEST (there is no remote tier)
  -5 LATEST_TIERED   -1 (there is no remote tier)
  T >= 0             the first record, in offset order, whose timestamp is >= T; -1 if none

Offsets are not dense (offset = ms * 2^bits + seq), so LATEST is not "earliest +
record count"; lag computed as LATEST - committed counts offsets, not records.

The timestamp search starts at the records appended T - message.timestamp.after.max.ms
(a record's CreateTime may be ahead of its append time by at most that much, which
Produce enforces) and scans forward in chunks. A topic that stores batches keeps each
batch's max timestamp beside it (storage/entries.py): only the batches that can hold the
answer are decoded, and the answer is the same record's.

OffsetForLeaderEpoch: every partition has leader epoch 0, whose end offset is the
high watermark.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.offsets import OffsetCodec
from korvet.core.topics import TopicInfo
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from korvet.protocol.records import stored_timestamps
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.denials import Items, Shape, empty, topic_answer
from korvet.server.services import Services
from korvet.storage import entries

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
_SCAN_CHUNK = 1000
_BATCH_SCAN_CHUNK = 64  # entries of a topic that stores batches: up to 64 batches


async def _stamps(services: Services, topic: TopicInfo, partition: int, start: int,
                  wanted: Callable[[int], bool]) -> AsyncIterator[tuple[int, int]]:
    """(offset, timestamp) of the records from ``start`` to the high watermark, in chunks. A
    topic that stores batches yields only the records of batches whose max timestamp
    ``wanted`` accepts (the others are not decoded); the records format yields every one."""
    _, end = await services.store.offsets(topic, partition)
    offset = start
    batches = topic.config.stores_batches
    while offset < end:
        chunk = await services.store.scan_from(topic, partition, offset,
                                               _BATCH_SCAN_CHUNK if batches else _SCAN_CHUNK)
        if not chunk:
            return
        for entry_offset, fields in chunk:
            if not batches:
                yield entry_offset, entries.decode_fields(fields)[0]
                offset = entry_offset + 1
                continue
            stored = entries.batch_fields(fields)
            if stored is None:
                continue
            count, max_timestamp, raw = stored
            offset = entry_offset + count
            if not wanted(max_timestamp):
                continue
            for index, stamp in enumerate(stored_timestamps(raw)):
                if entry_offset + index >= start:  # DeleteRecords may start the log mid-batch
                    yield entry_offset + index, stamp


async def _by_timestamp(services: Services, topic: TopicInfo, partition: int,
                        timestamp: int) -> tuple[int, int]:
    start, _ = await services.store.offsets(topic, partition)
    codec = OffsetCodec(topic.config.sequence_bits)
    lead = topic.config.get_int("message.timestamp.after.max.ms")
    floor_ms = max(0, min(timestamp - lead, codec.max_ms))
    async for offset, stamp in _stamps(services, topic, partition,
                                       max(start, codec.encode(floor_ms, 0)),
                                       lambda most: most >= timestamp):
        if stamp >= timestamp:
            return offset, stamp
    return -1, -1


async def _max_timestamp(services: Services, topic: TopicInfo, partition: int) -> tuple[int, int]:
    start, _ = await services.store.offsets(topic, partition)
    best = [-1, -1]  # offset, timestamp: a batch whose max is not above it is not decoded
    async for offset, stamp in _stamps(services, topic, partition, start,
                                       lambda most: most > best[1]):
        if stamp > best[1]:
            best[:] = offset, stamp
    return best[0], best[1]


async def _lookup(services: Services, topic: TopicInfo, partition: int,
                  timestamp: int) -> tuple[int, int]:
    if timestamp == LATEST:
        return (await services.store.offsets(topic, partition))[1], -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return (await services.store.offsets(topic, partition))[0], -1
    if timestamp == MAX_TIMESTAMP:
        return await _max_timestamp(services, topic, partition)
    if timestamp == LATEST_TIERED:
        return -1, -1
    return await _by_timestamp(services, topic, partition, timestamp)


async def list_offsets(services: Services, ctx: RequestContext,
                       request: ListOffsetsRequest) -> ListOffsetsResponse:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "ListOffsetsTopicResponse")
    partition_cls = nested(response_cls, "ListOffsetsPartitionResponse")
    topics = []
    for entry in request.topics:
        topic = await services.topics.get(entry.name)
        partitions = []
        for wanted in entry.partitions:
            error, offset, stamp = ErrorCode.NONE, -1, -1
            if topic is None or not 0 <= wanted.partition_index < topic.partitions:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif wanted.timestamp < LATEST_TIERED:
                error = ErrorCode.INVALID_REQUEST
            else:
                offset, stamp = await _lookup(services, topic, wanted.partition_index,
                                              wanted.timestamp)
            partitions.append(make(partition_cls, partition_index=wanted.partition_index,
                                   error_code=error, timestamp=stamp, offset=offset,
                                   old_style_offsets=(), leader_epoch=0 if offset >= 0 else -1))
        topics.append(make(topic_cls, name=entry.name, partitions=tuple(partitions)))
    return make(response_cls, throttle_time=0, topics=tuple(topics))


async def offset_for_leader_epoch(services: Services, ctx: RequestContext,
                                  request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetForLeaderTopicResult")
    partition_cls = nested(response_cls, "EpochEndOffset")
    topics = []
    for entry in request.topics:
        topic = await services.topics.get(entry.topic)
        partitions = []
        for wanted in entry.partitions:
            error, epoch, end = ErrorCode.NONE, -1, -1
            if topic is None or not 0 <= wanted.partition < topic.partitions:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif getattr(wanted, "current_leader_epoch", -1) > 0:
                error = ErrorCode.UNKNOWN_LEADER_EPOCH
            elif wanted.leader_epoch <= 0:
                epoch, end = 0, (await services.store.offsets(topic, wanted.partition))[1]
            partitions.append(make(partition_cls, error_code=error, partition=wanted.partition,
                                   leader_epoch=epoch, end_offset=end))
        topics.append(make(topic_cls, topic=entry.topic, partitions=tuple(partitions)))
    return make(response_cls, throttle_time=0, topics=tuple(topics))


APIS = (
    Api(ApiKey.LIST_OFFSETS, range(1, 12), list_offsets,
        "-1 latest, -2 earliest, -3 max timestamp, -4, -5, by timestamp",
        Shape((Items("topics", "topics", topic_answer(
            "ListOffsetsTopicResponse", "partitions", "ListOffsetsPartitionResponse", "partitions",
            "partition_index", "partition_index", timestamp=-1, offset=-1, old_style_offsets=(),
            leader_epoch=-1), empty=empty(topics=())),))),
    Api(ApiKey.OFFSET_FOR_LEADER_EPOCH, range(2, 5), offset_for_leader_epoch,
        "one leader epoch (0); its end offset is the high watermark",
        Shape((Items("topics", "topics", topic_answer(
            "OffsetForLeaderTopicResult", "partitions", "EpochEndOffset", "partitions", "partition",
            "partition", name_field="topic", leader_epoch=-1, end_offset=-1),
            name_of=lambda t: t.topic, empty=empty(topics=())),))),
)
