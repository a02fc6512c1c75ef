"""Fetch (key 1), versions 4..18: driven by the client's fetch_offset, like Kafka.

Each requested partition is an XRANGE from the entry id the offset decodes to
(the first record at or after fetch_offset), all partitions in one pipeline,
re-encoded as record batches within ``partition_max_bytes`` and ``max_bytes``.
At least one record is returned for the first partition that has data even if it
alone exceeds the limits (KIP-74), so a consumer can always make progress.

A fetch_offset below the log start offset or above the high watermark answers
OFFSET_OUT_OF_RANGE. Long polling: while fewer than ``min_bytes`` are available
the request waits, up to ``max_wait_ms``, for an append notification on one of
its streams (storage/notifier.py) — no polling loop.

Fetch sessions (KIP-227) are not kept: every response carries session id 0,
which tells clients to send full fetch requests (a valid Kafka behaviour).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from redis.exceptions import RedisError

from korvet.core.topics import TopicInfo
from korvet.protocol.kbuild import make, millis, nested, response_type
from korvet.protocol.registry import RequestContext
from korvet.server.batching import entries_to_batches
from korvet.server.services import Services
from korvet.storage.groups import PartitionRef

log = logging.getLogger("korvet.fetch")

API_KEY = 1
VERSIONS = range(4, 19)

_MAX_ENTRIES_PER_READ = 10_000
LEADER_EPOCH = 0  # every partition keeps leader epoch 0 (one leader, never replaced)
_INITIAL_ENTRY_BYTES = 256


@dataclass(slots=True)
class Wanted:
    topic_key: Any  # the request's topic name or id, echoed in the response
    topic: TopicInfo | None
    partition: int
    offset: int
    max_bytes: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    taken: int = 0
    next_offset: int = -1  # after the last record returned; -1 when none


@dataclass
class _SizeEstimate:
    """Average stored bytes per entry, per stream: sizes XRANGE's COUNT."""

    averages: dict[str, float] = field(default_factory=dict)

    def count_for(self, key: str, budget: int) -> int:
        average = self.averages.get(key, _INITIAL_ENTRY_BYTES)
        return max(1, min(_MAX_ENTRIES_PER_READ, int(budget / average) + 1))

    def observe(self, key: str, entries_read: int, total_bytes: int) -> None:
        if entries_read:
            sample = max(16.0, total_bytes / entries_read)
            previous = self.averages.get(key)
            self.averages[key] = sample if previous is None else 0.7 * previous + 0.3 * sample


_estimates = _SizeEstimate()


# --- read-ahead ---------------------------------------------------------------------------
# A consumer fetches a partition strictly in sequence: its next Fetch on the connection asks
# for the same partitions at the offsets just past what it received. After a response that
# carried data, the broker reads and encodes that predicted next response while the client
# is busy with this one; if the next request is exactly the predicted one, it is answered
# from it. The log is immutable below the high watermark, so a response prepared a moment
# early holds the same records; only its high watermark may be a little older, which Kafka
# clients accept (it only bounds what they may read next).

Signature = tuple[int, tuple[tuple[str, int, int, int], ...]]


@dataclass
class _Prediction:
    signature: Signature
    task: asyncio.Task[tuple[list[Wanted], int]]
    created: float


_PREDICTION_TTL = 5.0
_PREDICTION_MAX_BYTES = 16 * 1024 * 1024  # larger fetches are not read ahead (memory)
_predictions: dict[str, _Prediction] = {}


def forget(connection: str) -> None:
    """The connection closed: drop what was read ahead for it."""
    prediction = _predictions.pop(connection, None)
    if prediction is not None:
        prediction.task.cancel()


def _signature(wanted: list[Wanted], max_bytes: int) -> Signature | None:
    parts = []
    for w in wanted:
        if w.topic is None or w.error is not ErrorCode.none:
            return None
        parts.append((w.topic.topic_id, w.partition, w.offset, w.max_bytes))
    return max_bytes, tuple(parts)


def _take_prediction(connection: str, wanted: list[Wanted],
                     max_bytes: int) -> asyncio.Task[tuple[list[Wanted], int]] | None:
    prediction = _predictions.pop(connection, None)
    if prediction is None:
        return None
    if prediction.signature != _signature(wanted, max_bytes) or (
            time.monotonic() - prediction.created > _PREDICTION_TTL):
        prediction.task.cancel()
        return None
    return prediction.task


def _predict(services: Services, connection: str, answered: list[Wanted], max_bytes: int) -> None:
    """Start reading the response to the request that will most likely come next."""
    if not any(w.taken for w in answered):
        return  # caught up (or nothing readable): the next fetch will wait for new records
    if sum(len(w.records or b"") for w in answered) > _PREDICTION_MAX_BYTES:
        return
    following = [Wanted(w.topic_key, w.topic, w.partition,
                        w.next_offset if w.next_offset >= 0 else w.offset, w.max_bytes)
                 for w in answered]
    signature = _signature(following, max_bytes)
    if signature is None:
        return

    async def prepare() -> tuple[list[Wanted], int]:
        used = await _read(services, following, max_bytes)
        return following, used

    now = time.monotonic()
    for key, old in list(_predictions.items()):
        if now - old.created > _PREDICTION_TTL:
            old.task.cancel()
            del _predictions[key]
    _predictions[connection] = _Prediction(signature, asyncio.create_task(prepare()), now)


async def _still_above_log_start(services: Services, prepared: list[Wanted]) -> bool:
    """The read-ahead read before this request arrived, and an append's retention may since
    have moved a log start past what it read: records deleted before the request came must not
    be served (spec/PartitionLog.tla: UsePrepared with ReadAheadChecked; without the check TLC
    finds FetchWithinBounds violated). One read of each partition's bounds tells."""
    taken = [w for w in prepared if w.topic is not None and w.taken]
    starts = await asyncio.gather(*(services.store.offsets(w.topic, w.partition)
                                    for w in taken if w.topic is not None))
    return all(w.offset >= start for w, (start, _) in zip(taken, starts, strict=True))


async def _read(services: Services, wanted: list[Wanted], max_bytes: int) -> int:
    """Fill records/bounds of every partition; return the number of record bytes."""
    reads = []
    readable = [w for w in wanted if w.topic is not None and w.error is ErrorCode.none]
    for w in readable:
        assert w.topic is not None
        stream = services.store.stream_key(w.topic.name, w.partition)
        count = _estimates.count_for(stream, min(w.max_bytes, max_bytes))
        offset = max(w.offset, 0)  # past MAX_OFFSET: store.read reads nothing
        reads.append((w.topic, w.partition, offset, count))
    if not reads:
        return 0
    results = await services.store.read(reads)
    used = 0
    for w, result in zip(readable, results, strict=True):
        assert w.topic is not None
        w.high_watermark, w.log_start_offset = result.high_watermark, result.log_start_offset
        if w.offset < result.log_start_offset or w.offset > result.high_watermark:
            w.error = ErrorCode.offset_out_of_range
            w.records = None
            continue
        if not result.raw:
            w.records, w.taken = None, 0
            continue
        budget = min(w.max_bytes, max_bytes - used)
        data, taken, w.next_offset = entries_to_batches(
            result.raw, w.topic.config.sequence_bits, budget, force_first=used == 0,
            log_append_time=w.topic.config.log_append_time)
        if taken:
            _estimates.observe(services.store.stream_key(w.topic.name, w.partition), taken,
                               len(data))
        w.records, w.taken = (data or None), taken
        used += len(data)
    return used


async def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    response_cls = response_type(type(request))
    started = time.monotonic()
    max_wait = max(0, millis(request.max_wait)) / 1000
    max_bytes = request.max_bytes if getattr(request, "max_bytes", None) is not None else 2**31 - 1
    if max_bytes <= 0:
        max_bytes = 2**31 - 1
    session_id = getattr(request, "session_id", 0)
    session_epoch = getattr(request, "session_epoch", -1)
    if session_id != 0:
        return _top_level_error(response_cls, ErrorCode.fetch_session_id_not_found)
    if session_epoch > 0:
        return _top_level_error(response_cls, ErrorCode.invalid_fetch_session_epoch)

    wanted: list[Wanted] = []
    for topic_entry in request.topics:
        topic_id = getattr(topic_entry, "topic_id", None)
        name = getattr(topic_entry, "topic", None)
        if version >= 13 and topic_id is not None:
            topic = await services.topics.by_id(str(topic_id))
            unknown = ErrorCode.unknown_topic_id
            echo: Any = topic_id
        else:
            topic = await services.topics.get(name) if name else None
            unknown = ErrorCode.unknown_topic_or_partition
            echo = name
        for partition in topic_entry.partitions:
            w = Wanted(echo, topic, partition.partition, partition.fetch_offset,
                       partition.partition_max_bytes)
            if topic is None:
                w.error = unknown
            elif not 0 <= partition.partition < topic.partitions:
                w.error = ErrorCode.unknown_topic_or_partition
            elif getattr(partition, "current_leader_epoch", -1) > LEADER_EPOCH:
                w.error = ErrorCode.unknown_leader_epoch  # the client knows a newer leader
            elif w.max_bytes <= 0:
                w.max_bytes = 0
            wanted.append(w)

    _note_group_fetch(services, ctx, wanted)
    try:
        predicted = _take_prediction(ctx.connection_id, wanted, max_bytes)
        used = -1
        if predicted is not None:
            try:
                prepared, prepared_used = await predicted
            except (RedisError, OSError, asyncio.CancelledError):
                prepared, prepared_used = [], 0
            if prepared and not await _still_above_log_start(services, prepared):
                prepared = []
            if prepared and prepared_used >= request.min_bytes:
                wanted, used = prepared, prepared_used
        if used < 0:
            used = await _read(services, wanted, max_bytes)
        stream_keys = [services.store.stream_key(w.topic.name, w.partition)
                       for w in wanted if w.topic is not None and w.error is ErrorCode.none]
        while used < request.min_bytes and stream_keys and not any(
                w.error is not ErrorCode.none for w in wanted):
            remaining = max_wait - (time.monotonic() - started)
            if remaining <= 0:
                break
            if await services.notifier.arm(stream_keys):
                used = await _read(services, wanted, max_bytes)
                if used >= request.min_bytes:
                    break
            woken = await services.notifier.wait(stream_keys, remaining)
            if not woken:
                break
            used = await _read(services, wanted, max_bytes)
        _predict(services, ctx.connection_id, wanted, max_bytes)
    except (RedisError, OSError) as exc:
        log.warning("fetch failed: %s", exc)
        for w in wanted:
            if w.error is ErrorCode.none:
                w.error, w.records = ErrorCode.kafka_storage_error, None
    return _response(response_cls, version, wanted)


def _note_group_fetch(services: Services, ctx: RequestContext, wanted: list[Wanted]) -> None:
    """A fetch by a group member creates the group's Redis consumer groups on these streams
    (seed 000: lazily, at the fetch offset), in the background: fetching itself never reads
    through Redis groups."""
    coordinator = services.coordinator
    if coordinator is None:
        return
    group_ids = coordinator.groups_of_client(ctx.client_id, ctx.client_host)
    if not group_ids:
        return
    partitions = []
    for w in wanted:
        if w.topic is None or w.error is not ErrorCode.none:
            continue
        stream = services.store.stream_key(w.topic.name, w.partition)
        if all((g, stream) in coordinator.redis_groups for g in group_ids):
            continue
        partitions.append((PartitionRef(w.topic.name, w.partition, stream,
                                        w.topic.config.sequence_bits), w.offset))
    if partitions:
        task = asyncio.create_task(coordinator.ensure_redis_groups(group_ids, partitions))
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()


def _top_level_error(response_cls: type[Any], error: ErrorCode) -> Any:
    return make(response_cls, throttle_time=0, error_code=error, session_id=0, responses=())


def _response(response_cls: type[Any], version: int, wanted: list[Wanted]) -> Any:
    topic_cls = nested(response_cls, "FetchableTopicResponse")
    partition_cls = nested(response_cls, "PartitionData")
    grouped: dict[Any, list[Any]] = {}  # topic name or id -> partitions, in request order
    for w in wanted:
        grouped.setdefault(w.topic_key, []).append(make(
            partition_cls, partition_index=w.partition, error_code=w.error,
            high_watermark=w.high_watermark, last_stable_offset=w.high_watermark,
            log_start_offset=w.log_start_offset, aborted_transactions=None,
            preferred_read_replica=-1, records=w.records or b"",
        ))
    key_field = "topic_id" if version >= 13 else "topic"
    topics = [make(topic_cls, **{key_field: key}, partitions=tuple(partitions))
              for key, partitions in grouped.items()]
    return make(response_cls, throttle_time=0, error_code=ErrorCode.none, session_id=0,
                responses=tuple(topics))
