"""Fetch (key 1), versions 4..18: driven by the client's fetch_offset, like Kafka.

Each requested partition is an XRANGE from the entry id the offset decodes to
(the first record at or after fetch_offset), all partitions in one pipeline,
re-encoded as record batches within ``partition_max_bytes`` and ``max_bytes``.
Kafka's rules (limits, sessions, which partition is readable, offset range, the
KIP-74 first record) are in korvet/core/fetch.py; this module adapts:

1. ``_plan``: the request's partitions as ``PartitionFetch`` values, each with the
   error the rules give it (topic lookup is the only I/O);
2. ``_note_group_fetch``: a group member's fetch creates the group's Redis consumer
   groups on its streams, in the background (docs/implementers/groups.md);
3. ``_read`` (or the connection's read-ahead, server/read_ahead.py): Redis to batches;
4. ``_wait_for_data``: the long poll; while fewer than ``min_bytes`` are available
   the request waits, up to ``max_wait_ms``, for an append notification on one of its
   streams (storage/notifier.py), no polling loop;
5. ``_response``: the version's kio response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from korvet.core import fetch as rules
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicInfo
from korvet.protocol.kbuild import make, millis, nested, response_type
from korvet.protocol.messages import (
    FetchRequest,
    FetchResponse,
)
from korvet.server.batching import entries_to_batches
from korvet.server.connection import Connection
from korvet.server.read_ahead import PREDICTION_MAX_BYTES
from korvet.server.services import Services
from korvet.storage.groups import PartitionRef

log = logging.getLogger("korvet.fetch")

API_KEY = 1
VERSIONS = range(4, 19)


@dataclass(slots=True)
class PartitionFetch:
    """One requested partition: what was asked, and what the response will say."""

    topic_key: Any  # the request's topic name or id, echoed in the response
    topic: TopicInfo | None
    partition: int
    offset: int
    max_bytes: int
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    taken: int = 0
    next_offset: int = -1  # after the last record returned; -1 when none

    @property
    def readable(self) -> bool:
        return self.topic is not None and self.error is ErrorCode.NONE


PreparedFetch = tuple[list[PartitionFetch], int]  # partitions filled in, record bytes


class FetchHandler:
    """Fetch for one broker. Owns the per-stream entry-size estimates and the background
    tasks that create Redis consumer groups; per-connection read-ahead lives in the
    connection's state."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.estimates = rules.SizeEstimate()
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def handle(self, ctx: Connection, request: FetchRequest) -> FetchResponse:
        response_cls = response_type(type(request))
        started = time.monotonic()
        limits = rules.FetchLimits.of(millis(request.max_wait), request.min_bytes,
                                      getattr(request, "max_bytes", None))
        session = rules.session_error(getattr(request, "session_id", 0),
                                      getattr(request, "session_epoch", -1))
        if session is not None:
            return make(response_cls, throttle_time=0, error_code=session, session_id=0,
                        responses=())
        wanted = await self._plan(ctx.api_version, request)
        self._note_group_fetch(ctx, wanted)
        try:
            wanted, used = await self._read_or_take_prepared(ctx, wanted, limits)
            used = await self._wait_for_data(wanted, used, limits, started)
            self._read_ahead(ctx, wanted, limits)
        except (RedisError, OSError) as exc:
            log.warning("fetch failed: %s", exc)
            for w in wanted:
                if w.error is ErrorCode.NONE:
                    w.error, w.records = ErrorCode.KAFKA_STORAGE_ERROR, None
        self._count(wanted, started)
        return _response(response_cls, ctx.api_version, wanted)

    def _count(self, answered: list[PartitionFetch], started: float) -> None:
        """Metrics: the request's latency under each of its topics, records and errors."""
        metrics = self.services.metrics
        elapsed = time.monotonic() - started
        seen: set[str] = set()
        for w in answered:
            if w.error is not ErrorCode.NONE:
                metrics.fetch_error(w.error)
            if w.topic is None:
                continue
            series = metrics.topic(w.topic.name)
            if w.taken:
                series.fetch_records.inc(w.taken)
            if w.topic.name not in seen:
                seen.add(w.topic.name)
                series.fetch_seconds.observe(elapsed)

    async def _plan(self, version: int, request: FetchRequest) -> list[PartitionFetch]:
        wanted: list[PartitionFetch] = []
        for topic_entry in request.topics:
            topic_id = getattr(topic_entry, "topic_id", None)
            by_id = version >= 13 and topic_id is not None
            if by_id:
                topic = await self.services.topics.by_id(str(topic_id))
                echo: Any = topic_id
            else:
                name = getattr(topic_entry, "topic", None)
                topic = await self.services.topics.get(name) if name else None
                echo = name
            for partition in topic_entry.partitions:
                wanted.append(PartitionFetch(
                    echo, topic, partition.partition, partition.fetch_offset,
                    max(partition.partition_max_bytes, 0),
                    error=rules.partition_error(
                        topic is not None, by_id, partition.partition,
                        topic.partitions if topic is not None else 0,
                        getattr(partition, "current_leader_epoch", -1))))
        return wanted

    async def _read_or_take_prepared(self, ctx: Connection, wanted: list[PartitionFetch],
                                     limits: rules.FetchLimits) -> PreparedFetch:
        prepared = ctx.state.read_ahead.take(_signature(wanted, limits.max_bytes))
        if prepared is not None:
            try:
                done, done_used = await prepared
            except (RedisError, OSError, asyncio.CancelledError):
                done, done_used = [], 0
            if done and not await self._still_above_log_start(done):
                done = []
            if done and done_used >= limits.min_bytes:
                return done, done_used
        return wanted, await self._read(wanted, limits.max_bytes)

    async def _still_above_log_start(self, prepared: list[PartitionFetch]) -> bool:
        """The read-ahead read before this request arrived, and an append's retention may
        since have moved a log start past what it read: records deleted before the request
        came must not be served (spec/PartitionLog.tla: UsePrepared with ReadAheadChecked;
        without the check TLC finds FetchWithinBounds violated). One read of each
        partition's bounds tells."""
        taken = [w for w in prepared if w.topic is not None and w.taken]
        starts = await asyncio.gather(*(self.services.store.offsets(w.topic, w.partition)
                                        for w in taken if w.topic is not None))
        return all(w.offset >= start for w, (start, _) in zip(taken, starts, strict=True))

    async def _wait_for_data(self, wanted: list[PartitionFetch], used: int,
                             limits: rules.FetchLimits, started: float) -> int:
        notifier = self.services.notifier
        stream_keys = [self.services.store.stream_key(w.topic.name, w.partition)
                       for w in wanted if w.topic is not None and w.readable]
        any_error = any(w.error is not ErrorCode.NONE for w in wanted)
        while stream_keys and not rules.answered(used, limits, any_error):
            remaining = limits.max_wait_ms / 1000 - (time.monotonic() - started)
            if remaining <= 0:
                break
            if await notifier.arm(stream_keys):
                used = await self._read(wanted, limits.max_bytes)
                if used >= limits.min_bytes:
                    break
            if not await notifier.wait(stream_keys, remaining):
                break
            used = await self._read(wanted, limits.max_bytes)
            any_error = any(w.error is not ErrorCode.NONE for w in wanted)
        return used

    async def _read(self, wanted: list[PartitionFetch], max_bytes: int) -> int:
        """Fill records and bounds of every readable partition; return the record bytes."""
        store = self.services.store
        readable = [w for w in wanted if w.readable]
        reads = []
        for w in readable:
            assert w.topic is not None
            stream = store.stream_key(w.topic.name, w.partition)
            count = self.estimates.count_for(stream, min(w.max_bytes, max_bytes))
            reads.append((w.topic, w.partition, max(w.offset, 0), count))  # past the end: nothing
        if not reads:
            return 0
        results = await store.read(reads)
        used = 0
        for w, result in zip(readable, results, strict=True):
            assert w.topic is not None
            w.high_watermark, w.log_start_offset = result.high_watermark, result.log_start_offset
            w.error = rules.offset_error(w.offset, result.log_start_offset, result.high_watermark)
            if w.error is not ErrorCode.NONE or not result.raw:
                w.records, w.taken = None, 0
                continue
            data, taken, w.next_offset = entries_to_batches(
                result.raw, w.topic.config.sequence_bits,
                rules.partition_budget(w.max_bytes, max_bytes, used), force_first=used == 0,
                log_append_time=w.topic.config.log_append_time)
            if taken:
                self.estimates.observe(store.stream_key(w.topic.name, w.partition), taken,
                                       len(data))
            w.records, w.taken = (data or None), taken
            used += len(data)
        return used

    def _read_ahead(self, ctx: Connection, answered: list[PartitionFetch],
                    limits: rules.FetchLimits) -> None:
        """Start reading the response to the request that will most likely come next."""
        if not any(w.taken for w in answered):
            return  # caught up (or nothing readable): the next fetch waits for new records
        if sum(len(w.records or b"") for w in answered) > PREDICTION_MAX_BYTES:
            return
        following = [PartitionFetch(w.topic_key, w.topic, w.partition,
                                    w.next_offset if w.next_offset >= 0 else w.offset,
                                    w.max_bytes)
                     for w in answered]
        signature = _signature(following, limits.max_bytes)
        if signature is None:
            return

        async def prepare() -> PreparedFetch:
            return following, await self._read(following, limits.max_bytes)

        ctx.state.read_ahead.prepare(signature, prepare())

    def _note_group_fetch(self, ctx: Connection, wanted: list[PartitionFetch]) -> None:
        """A fetch by a group member creates the group's Redis consumer groups on these
        streams, lazily at the fetch offset, in the background: fetching itself never reads
        through Redis groups (docs/implementers/groups.md)."""
        coordinator = self.services.coordinator
        if coordinator is None:
            return
        group_ids = coordinator.groups_of_client(ctx.client_id, ctx.client_host)
        if not group_ids:
            return
        partitions = []
        for w in wanted:
            if w.topic is None or not w.readable:
                continue
            stream = self.services.store.stream_key(w.topic.name, w.partition)
            if all((g, stream) in coordinator.redis_groups for g in group_ids):
                continue
            partitions.append((PartitionRef(w.topic.name, w.partition, stream,
                                            w.topic.config.sequence_bits), w.offset))
        if partitions:
            task = asyncio.create_task(coordinator.ensure_redis_groups(group_ids, partitions))
            self._background.add(task)
            task.add_done_callback(self._background.discard)


def _signature(wanted: list[PartitionFetch], max_bytes: int) -> Hashable | None:
    """What a request asks for, to match a prepared response (None: not preparable)."""
    parts = []
    for w in wanted:
        if w.topic is None or not w.readable:
            return None
        parts.append((w.topic.topic_id, w.partition, w.offset, w.max_bytes))
    return max_bytes, tuple(parts)


def _response(response_cls: type[Any], version: int, wanted: list[PartitionFetch]) -> Any:
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
    return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE, session_id=0,
                responses=tuple(topics))
