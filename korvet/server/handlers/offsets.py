"""ListOffsets (key 2) and OffsetForLeaderEpoch (key 23): read, decide (core/list_offsets.py),
read what the answer needs, write the response.

Offsets are not dense (offset = ms * 2^bits + seq), so LATEST is not "earliest +
record count"; lag computed as LATEST - committed counts offsets, not records.

The timestamp search starts where ``core.list_offsets.timestamp_search_start`` says and scans
forward in chunks. A topic that stores batches keeps each batch's max timestamp beside it
(storage/entries.py): only the batches that can hold the answer are decoded, and the answer
is the same record's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from korvet.core import list_offsets as rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicInfo
from korvet.protocol.decoders.offsets import (
    READ_COMMITTED,
    decode_list_offsets,
    decode_offset_for_leader_epoch,
)
from korvet.protocol.denials import Items, Shape, empty, topic_answer
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
from korvet.server.services import Services
from korvet.storage import entries

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
            for delta, stamp in stored_timestamps(raw):
                if entry_offset + delta >= start:  # DeleteRecords may start the log mid-batch
                    yield entry_offset + delta, stamp


async def offset_by_timestamp(services: Services, topic: TopicInfo, partition: int,
                              timestamp: int) -> tuple[int, int]:
    """The first record at or after ``timestamp`` (ListOffsets by time; share groups'
    by_duration start): its offset and timestamp, or (-1, -1)."""
    first = await _search_from(services, topic, partition, timestamp)
    if first is None:
        return -1, -1
    async for offset, stamp in _stamps(services, topic, partition, first,
                                       lambda most: most >= timestamp):
        if stamp >= timestamp:
            return offset, stamp
    return -1, -1


async def _search_from(services: Services, topic: TopicInfo, partition: int,
                       timestamp: int) -> int | None:
    """Where the records to read for ``timestamp`` start: a dense topic's time index says it
    (None: no record reaches the time); a time topic's offsets say when each was appended."""
    if topic.config.dense:
        return await services.store.time_search(topic, partition, timestamp)
    start, _ = await services.store.offsets(topic, partition)
    return rules.timestamp_search_start(
        timestamp, topic.config.get_int("message.timestamp.after.max.ms"), topic.config.codec,
        start)


async def _max_timestamp(services: Services, topic: TopicInfo, partition: int) -> tuple[int, int]:
    start, _ = await services.store.offsets(topic, partition)
    best = [-1, -1]  # offset, timestamp: a batch whose max is not above it is not decoded
    async for offset, stamp in _stamps(services, topic, partition, start,
                                       lambda most: most > best[1]):
        if stamp > best[1]:
            best[:] = offset, stamp
    return best[0], best[1]


async def _read(services: Services, topic: TopicInfo, wanted: rules.ListOffsetsPartition,
                lookup: rules.Lookup, committed: bool = False) -> rules.OffsetAnswer:
    index = wanted.index
    epochs = await services.store.epochs(topic, index)  # a time topic's: 0, with no read
    fenced = epochs.fence(wanted.current_leader_epoch) if topic.config.dense else ErrorCode.NONE
    if fenced is not ErrorCode.NONE:
        return rules.OffsetAnswer(fenced)
    if lookup is rules.Lookup.LATEST and committed:  # read_committed: the last stable offset
        return rules.answer(await services.store.last_stable_offset(topic, index), epochs=epochs)
    if lookup is rules.Lookup.LATEST:
        return rules.answer((await services.store.offsets(topic, index))[1], epochs=epochs)
    if lookup is rules.Lookup.EARLIEST:
        return rules.answer((await services.store.offsets(topic, index))[0], epochs=epochs)
    if lookup is rules.Lookup.MAX_TIMESTAMP:
        return rules.answer(*await _max_timestamp(services, topic, index), epochs=epochs)
    if lookup is rules.Lookup.BY_TIMESTAMP:
        return rules.answer(*await offset_by_timestamp(services, topic, index, wanted.timestamp),
                            epochs=epochs)
    return rules.answer(rules.NO_OFFSET)


async def list_offsets(services: Services, ctx: RequestContext,
                       request: ListOffsetsRequest) -> ListOffsetsResponse:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "ListOffsetsTopicResponse")
    partition_cls = nested(response_cls, "ListOffsetsPartitionResponse")
    topics = []
    call = decode_list_offsets(request)
    committed = call.isolation_level == READ_COMMITTED
    for entry in call.topics:
        topic = await services.topics.get(entry.name)
        partitions = []
        for wanted in entry.partitions:
            verdict = rules.query(topic, wanted)
            if isinstance(verdict, ErrorCode):
                answered = rules.OffsetAnswer(verdict)
            else:
                assert topic is not None
                answered = await _read(services, topic, wanted, verdict, committed)
            partitions.append(make(partition_cls, partition_index=wanted.index,
                                   error_code=answered.error, timestamp=answered.timestamp,
                                   offset=answered.offset, old_style_offsets=(),
                                   leader_epoch=answered.leader_epoch))
        topics.append(make(topic_cls, name=entry.name, partitions=tuple(partitions)))
    return make(response_cls, throttle_time=0, topics=tuple(topics))


async def offset_for_leader_epoch(services: Services, ctx: RequestContext,
                                  request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetForLeaderTopicResult")
    partition_cls = nested(response_cls, "EpochEndOffset")
    topics = []
    for entry in decode_offset_for_leader_epoch(request):
        topic = await services.topics.get(entry.name)
        partitions = []
        for wanted in entry.partitions:
            ended = rules.epoch_query(topic, wanted)
            error, epoch, end = ended.error, ended.leader_epoch, -1
            if topic is not None and topic.config.dense and error is not \
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                epochs = await services.store.epochs(topic, wanted.index)
                start, high_watermark = await services.store.offsets(topic, wanted.index)
                error, epoch, end = rules.dense_epoch_end(wanted, epochs, start, high_watermark)
            elif ended.needs_end:
                assert topic is not None
                end = (await services.store.offsets(topic, wanted.index))[1]
            partitions.append(make(partition_cls, error_code=error, partition=wanted.index,
                                   leader_epoch=epoch, end_offset=end))
        topics.append(make(topic_cls, topic=entry.name, partitions=tuple(partitions)))
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
