"""Fetch (key 1), versions 4..18: driven by the client's fetch_offset, like Kafka.

Each requested partition is an XRANGE from the entry id the offset decodes to
(the first record at or after fetch_offset), all partitions in one pipeline,
re-encoded as record batches within ``partition_max_bytes`` and ``max_bytes``; a topic
that stores batches (``korvet.storage.format``) returns its stored batches whole, the one
holding the fetch offset first (server/batching.py, ``stored_batches``).
Kafka's rules (limits, which partition is readable, offset range, the KIP-74 first
record) are in korvet/core/fetch.py, fetch sessions (KIP-227) in
korvet/core/fetch_session.py; this module adapts:

0. ``sessions.on_request``: which context the request runs in (sessionless, a new
   session, an incremental one, or a session error) and which partitions it reads: an
   incremental request reads every partition of its session;
1. ``_plan``: those partitions as ``PartitionFetch`` values, each with the error the
   rules give it (topic lookup is the only I/O), and ``_deny_unreadable``: READ on each of
   them, the session's included (the check point saw only the partitions named);
2. ``_note_group_fetch``: a group member's fetch creates the group's Redis consumer
   groups on its streams, in the background (docs/implementers/groups.md);
3. ``_read`` (or the connection's read-ahead, server/read_ahead.py): Redis to batches;
4. ``_wait_for_data``: the long poll; while fewer than ``min_bytes`` are available
   the request waits, up to ``max_wait_ms``, for an append notification on one of its
   streams (storage/notifier.py), no polling loop;
5. ``sessions.on_response``: which partitions the response carries (an incremental
   response leaves out those with no news) and the session's new state; a full request
   with epoch 0 gets its new session here;
6. ``_response``: the response (protocol/fetch_response.py), its record sets the buffers
   they were read into: a ``batches`` topic's stored batches go out as Redis returned them,
   with no copy in Python (the listener writes the pieces with one ``writev``).

The session table belongs to the broker (sessions outlive connections, as in Kafka),
bounded by ``fetch.max-sessions`` (Kafka's max.incremental.fetch.session.cache.slots).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Hashable
from typing import Any

from redis.exceptions import RedisError

from korvet.core import fetch as rules
from korvet.core import fetch_session as sessions
from korvet.core.api_keys import ApiKey
from korvet.core.epochs import FIXED, Epochs
from korvet.core.errors import ErrorCode
from korvet.core.security.access import Access
from korvet.core.security.acl import Operation, ResourceType
from korvet.core.topics import TopicInfo, compacted
from korvet.protocol.decoders.fetch import decode_fetch, topic_id_of, topic_name_of
from korvet.protocol.decoders.offsets import READ_COMMITTED
from korvet.protocol.denials import Items, RefusedCount, Shape, empty, topic_answer
from korvet.protocol.fetch_response import FetchAnswer, PartitionAnswer, RecordSet, TopicAnswer
from korvet.protocol.messages import FetchRequest
from korvet.protocol.records import empty_batch
from korvet.server.api import Api, OnPart
from korvet.server.batching import entries_to_batches, stored_batches
from korvet.server.connection import Connection
from korvet.server.fetch_plan import PartitionFetch, PreparedFetch
from korvet.server.metrics import BrokerMetrics
from korvet.server.read_ahead import PREDICTION_MAX_BYTES
from korvet.server.services import Services
from korvet.storage.groups import PartitionRef
from korvet.storage.notifier import ReadTicket
from korvet.storage.redis_store import PartitionRead

log = logging.getLogger("korvet.fetch")
_EPOCHS_KEPT = 100_000  # dense partitions whose caught-up epochs are remembered

def _deny_unreadable(access: Access, wanted: list[PartitionFetch]) -> None:
    """READ is checked on every partition the fetch reads, as Kafka does: the broker's check
    point sees only the partitions a request names, and an incremental fetch also reads those
    its session carries, whose grant may have been deleted since the session opened."""
    if not access.enabled:
        return
    verdicts: dict[str, bool] = {}
    for part in wanted:
        if part.topic is None or part.error is not ErrorCode.NONE:
            continue
        name = part.topic.name
        if name not in verdicts:
            verdicts[name] = access.allowed(Operation.READ, ResourceType.TOPIC, name)
        if not verdicts[name]:
            part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class FetchHandler:
    """Fetch for one broker. Owns the per-stream entry-size estimates and the background
    tasks that create Redis consumer groups; per-connection read-ahead lives in the
    connection's state."""

    def __init__(self, services: Services) -> None:
        """One per tenant (``services.part(FetchHandler)``)."""
        self.services = services
        self.estimates = rules.SizeEstimate()
        self.session_config = sessions.SessionConfig(
            slots=services.settings.fetch.max_sessions)
        self.sessions: dict[int, sessions.Session] = {}
        # Bumped when DeleteRecords moves a log start: read-ahead prepared before is not used.
        self.log_start_moves = 0
        # A dense partition's epochs as the read that found it caught up saw them: a fetch
        # answered from that read is fenced with them (epochs change only by an append, which
        # ends the caught-up answer, or with Redis, which forgets it too).
        self._caught_up_epochs: dict[str, Epochs] = {}
        self._background: set[asyncio.Task[None]] = set()

    def _remember_epochs(self, stream: str, epochs: Epochs) -> None:
        if len(self._caught_up_epochs) >= _EPOCHS_KEPT:
            self._caught_up_epochs.clear()
        self._caught_up_epochs[stream] = epochs

    def log_start_moved(self) -> None:
        self.log_start_moves += 1

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def handle(self, ctx: Connection, request: FetchRequest) -> FetchAnswer:
        started = time.monotonic()
        call = decode_fetch(request)
        limits, asked = call.limits, call.requested
        edit, plan = sessions.on_request(self.sessions, asked, self.services.now_ms())
        sessions.apply_edit(self.sessions, edit)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("fetch session %d epoch %d: %s %s, %d partitions named, %d forgotten, "
                      "%d to read", asked.session_id, asked.epoch, plan.context.value,
                      plan.error.name, len(asked.partitions), len(asked.forgotten),
                      len(plan.partitions))
        if plan.context is sessions.Context.ERROR:
            return FetchAnswer(ctx.api_version, plan.error, 0, [])
        wanted = await self._plan(ctx.api_version, plan.partitions,
                                  committed=request.isolation_level == READ_COMMITTED)
        _deny_unreadable(ctx.access, wanted)
        self._note_group_fetch(ctx, wanted)
        try:
            wanted, used = await self._read_or_take_prepared(ctx, wanted, limits)
            used = await self._wait_for_data(wanted, used, limits, started)
        except (RedisError, OSError) as exc:
            log.warning("fetch failed: %s", exc)
            # A failover may have lost waiting marks, so appends may go unannounced.
            self.services.notifier.forget_reads()
            for part in wanted:
                if part.error is ErrorCode.NONE:
                    part.error, part.records = ErrorCode.KAFKA_STORAGE_ERROR, None
        self._count(wanted, started)
        edit, answer = sessions.on_response(
            self.sessions, self.session_config, plan,
            [sessions.PartitionResult(part.session_key, part.error, part.high_watermark,
                                      part.log_start_offset,
                                      # a divergence is always sent, as records are
                                      bool(part.records) or part.diverging is not None)
             for part in wanted],
            self.services.now_ms(), self._new_session_id())
        sessions.apply_edit(self.sessions, edit)
        if plan.context is sessions.Context.FULL:
            self._log_new_session(answer.session_id, len(plan.partitions), len(edit.remove))
        if answer.error is not ErrorCode.NONE:
            return FetchAnswer(ctx.api_version, answer.error, answer.session_id, [])
        self._read_ahead(ctx, self._next_order(answer.session_id, wanted), limits)
        carried = [part for part, keep in zip(wanted, answer.included, strict=True) if keep]
        return _response(ctx.api_version, carried, answer.session_id)

    def _count(self, answered: list[PartitionFetch], started: float) -> None:
        """Metrics: the request's latency under each of its topics, records and errors."""
        metrics = self.services.metrics
        elapsed = time.monotonic() - started
        seen: set[str] = set()
        for part in answered:
            if part.error is not ErrorCode.NONE:
                metrics.fetch_error(part.error)
            if part.topic is None:
                continue
            series = metrics.topic(part.topic.name)
            if part.taken:
                series.fetch_records.inc(part.taken)
            if part.topic.name not in seen:
                seen.add(part.topic.name)
                series.fetch_seconds.observe(elapsed)

    def _log_new_session(self, session_id: int, partitions: int, evicted: int) -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return
        if session_id:
            log.debug("fetch session %d opened (%d partitions; %d sessions held, %d evicted)",
                      session_id, partitions, len(self.sessions), evicted)
        else:
            log.debug("no fetch session slot free (%d sessions held)", len(self.sessions))

    def _new_session_id(self) -> int:
        while True:
            candidate = secrets.randbelow(sessions.MAX_EPOCH) + 1
            if candidate not in self.sessions:
                return candidate

    def _next_order(self, session_id: int, wanted: list[PartitionFetch]) -> list[PartitionFetch]:
        """The partitions in the order the next request will read them: the session's
        (partitions that returned records move to its end), or this request's."""
        session = self.sessions.get(session_id)
        if session is None:
            return wanted
        by_key = {part.session_key: part for part in wanted}
        ordered = [by_key[key] for key in session.partitions if key in by_key]
        return ordered if len(ordered) == len(wanted) else wanted

    async def _plan(self, version: int, partitions: tuple[sessions.PartitionRequest, ...], *,
                    committed: bool = False) -> list[PartitionFetch]:
        by_id = version >= 13
        topics: dict[str, TopicInfo | None] = {}
        wanted: list[PartitionFetch] = []
        for p in partitions:
            if p.topic not in topics:
                topics[p.topic] = await (self.services.topics.by_id(p.topic) if by_id
                                         else self.services.topics.get(p.topic))
            topic = topics[p.topic]
            echo: Any = uuid.UUID(p.topic) if by_id else p.topic
            # A dense topic's epoch is known once its partition is read (checked then); a time
            # topic's is 0 for ever.
            dense = topic is not None and topic.config.dense
            wanted.append(PartitionFetch(
                echo, p.key, topic, p.partition, p.fetch_offset, max(p.max_bytes, 0),
                error=rules.partition_error(topic is not None, by_id, p.partition,
                                            topic.partitions if topic is not None else 0,
                                            -1 if dense else p.leader_epoch),
                leader_epoch=p.leader_epoch if dense else -1, committed=committed,
                last_fetched_epoch=p.last_fetched_epoch))
        return wanted

    async def _read_or_take_prepared(self, ctx: Connection, wanted: list[PartitionFetch],
                                     limits: rules.FetchLimits) -> PreparedFetch:
        prepared = ctx.state.read_ahead.take(
            _signature(wanted, limits.max_bytes, self.log_start_moves))
        if prepared is not None:
            try:
                done, done_used = await prepared
            except (RedisError, OSError):
                done, done_used = [], 0
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this connection is being closed, not only the read-ahead
                done, done_used = [], 0  # the read-ahead alone was cancelled: read anew
            if done and rules.serve_prepared(await self._log_starts(done), done_used,
                                             limits.min_bytes):
                return done, done_used
        return wanted, await self._read(wanted, limits.max_bytes)

    async def _log_starts(self, prepared: list[PartitionFetch]) -> list[tuple[int, int]]:
        """The read-ahead read before this request arrived, and an append's retention may
        since have moved a log start past what it read: each partition it took records from,
        its fetch offset and its log start now (one read of each partition's bounds), for
        ``rules.serve_prepared``."""
        taken = [part for part in prepared if part.topic is not None and part.taken]
        starts = await asyncio.gather(*(self.services.store.offsets(part.topic, part.partition)
                                        for part in taken if part.topic is not None))
        return [(part.offset, start) for part, (start, _) in zip(taken, starts, strict=True)]

    async def _wait_for_data(self, wanted: list[PartitionFetch], used: int,
                             limits: rules.FetchLimits, started: float) -> int:
        notifier = self.services.notifier
        stream_keys = [self.services.store.stream_key(part.topic.name, part.partition)
                       for part in wanted if part.topic is not None and part.readable]
        any_error = _at_once(wanted)
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
            any_error = _at_once(wanted)
        return used

    async def _read(self, wanted: list[PartitionFetch], max_bytes: int) -> int:
        """Fill records and bounds of every readable partition; return the record bytes."""
        store, notifier = self.services.store, self.services.notifier
        readable: list[PartitionFetch] = []
        reads = []
        tickets = []
        for part in wanted:
            if not part.readable:
                continue
            assert part.topic is not None
            part.diverging = None
            stream = store.stream_key(part.topic.name, part.partition)
            known = notifier.caught_up(stream, part.offset)
            epochs = self._caught_up_epochs.get(stream, FIXED) if known is not None else FIXED
            if known is not None and (not part.topic.config.dense
                                      or stream in self._caught_up_epochs):
                # read before and unchanged since: nothing past the offset
                part.high_watermark, part.log_start_offset = known
                part.last_stable_offset = known[0]  # at the high watermark: nothing open past it
                part.error = _checked(part, epochs)
                part.records, part.taken, part.next_offset = None, 0, -1
                continue
            count = self.estimates.count_for(stream, min(part.max_bytes, max_bytes),
                                             part.topic.config.stores_batches)
            readable.append(part)
            tickets.append(notifier.ticket(stream))
            reads.append((part.topic, part.partition, max(part.offset, 0), count))  # past the end: nothing
        if not reads:
            return 0
        committed = readable[0].committed
        results = await store.read(reads, committed=committed)
        used = 0
        for part, result, ticket in zip(readable, results, tickets, strict=True):
            assert part.topic is not None
            part.high_watermark, part.log_start_offset = result.high_watermark, result.log_start_offset
            part.last_stable_offset = result.last_stable_offset
            if committed:
                part.aborted = tuple((pid, first) for pid, first, last in result.aborted
                                     if last >= part.offset)
            part.error = _checked(part, result.epochs)
            if part.diverging or part.error is not ErrorCode.NONE or not result.raw:
                used += await self._nothing_read(part, result, ticket)
                continue
            budget = rules.partition_budget(part.max_bytes, max_bytes, used)
            if part.topic.config.stores_batches:
                data, taken, part.next_offset, stored = stored_batches(
                    result.raw, part.topic.config.codec_bits, budget, force_first=used == 0,
                    epochs=result.epochs)
            else:
                built, taken, part.next_offset = entries_to_batches(
                    result.raw, part.topic.config.codec_bits, budget, force_first=used == 0,
                    log_append_time=part.topic.config.log_append_time, epochs=result.epochs)
                data, stored = RecordSet.of(built), taken
            if stored:  # the size estimate is per stored entry: a record, or a whole batch
                self.estimates.observe(store.stream_key(part.topic.name, part.partition), stored,
                                       data.size)
            part.records, part.taken = (data or None), taken
            used += data.size
        return used

    async def _nothing_read(self, part: PartitionFetch, result: PartitionRead,
                            ticket: ReadTicket) -> int:
        """A partition that answers no records of the read (an error, a divergence, nothing
        there): a compacted partition's removed tail (``_past_removed``), and, at the high
        watermark, the mark that the next fetch there needs no read. Its bytes."""
        part.records, part.taken = None, 0
        if part.diverging:  # answered with no records, not even a compacted tail's
            return 0
        used = await self._past_removed(part, result)
        if part.error is ErrorCode.NONE and part.offset == result.high_watermark:
            assert part.topic is not None
            self.services.notifier.note_caught_up(ticket, result.high_watermark,
                                                  result.log_start_offset)
            if part.topic.config.dense:
                self._remember_epochs(ticket.stream, result.epochs)
        return used

    async def _past_removed(self, part: PartitionFetch, result: PartitionRead) -> int:
        """A compacted partition with no record left from the fetch offset to its end (the log
        cleaner removed a tail of tombstones past their horizon): an empty batch up to the end,
        as Kafka keeps the last batch of a cleaned log, so the consumer's position reaches the
        end (spec/Compaction.tla, Fetch). Its bytes."""
        assert part.topic is not None
        read_end = result.last_stable_offset if part.committed else result.high_watermark
        if part.error is not ErrorCode.NONE or part.offset >= read_end \
                or not compacted(part.topic.config):
            return 0
        end = await self.services.store.removed_up_to(part.topic, part.partition, part.offset,
                                                      part.committed)
        if end is None:
            return 0
        batch = empty_batch(part.offset, end, result.epochs.epoch_of(part.offset))
        part.records, part.next_offset = RecordSet.of(batch), part.offset + (
            min(end - part.offset, 2**31))
        return len(batch)

    def _read_ahead(self, ctx: Connection, answered: list[PartitionFetch],
                    limits: rules.FetchLimits) -> None:
        """Start reading the response to the request that will most likely come next."""
        if _names_last_epoch(answered):
            return  # its next request names an epoch too: no prepared read would answer it
        offsets = rules.predicted_offsets([(part.offset, part.taken, part.next_offset)
                                           for part in answered])
        if offsets is None:
            return  # caught up (or nothing readable): the next fetch waits for new records
        if sum(part.records.size for part in answered if part.records) > PREDICTION_MAX_BYTES:
            return
        following = [PartitionFetch(part.topic_key, part.session_key, part.topic, part.partition,
                                    offset, part.max_bytes, committed=part.committed)
                     for part, offset in zip(answered, offsets, strict=True)]
        signature = _signature(following, limits.max_bytes, self.log_start_moves)
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
        for part in wanted:
            if part.topic is None or not part.readable:
                continue
            stream = self.services.store.stream_key(part.topic.name, part.partition)
            if all((g, stream) in coordinator.redis_groups for g in group_ids):
                continue
            partitions.append((PartitionRef(part.topic.name, part.partition, stream,
                                            part.topic.config.codec_bits), part.offset))
        if partitions:
            task = asyncio.create_task(coordinator.ensure_redis_groups(group_ids, partitions))
            self._background.add(task)
            task.add_done_callback(self._background.discard)


def _names_last_epoch(parts: list[PartitionFetch]) -> bool:
    """A fetch naming the epoch it last fetched (v12+): read-ahead does not check divergence."""
    return any(part.last_fetched_epoch >= 0 for part in parts)


def _at_once(wanted: list[PartitionFetch]) -> bool:
    """An error or a divergence is answered without waiting for data (as Kafka does)."""
    return any(part.error is not ErrorCode.NONE or part.diverging for part in wanted)


def _checked(part: PartitionFetch, epochs: Epochs) -> ErrorCode:
    """A partition's error once its bounds are read: the request's current epoch against
    the partition's (a dense topic's; a time topic's is not checked), then, for a fetch
    naming the epoch it last fetched (v12+), where the logs diverge, into ``part.diverging``
    (answered with no records; ``Epochs.diverging``), then the fetch offset's range."""
    assert part.topic is not None
    error = epochs.fence(part.leader_epoch) if part.topic.config.dense else ErrorCode.NONE
    if error is ErrorCode.NONE:
        error, part.diverging = epochs.diverging(part.last_fetched_epoch, part.offset,
                                                 part.log_start_offset, part.high_watermark)
    if error is ErrorCode.NONE and part.diverging is None:
        error = rules.offset_error(part.offset, part.log_start_offset, part.high_watermark)
    return error


def _signature(wanted: list[PartitionFetch], max_bytes: int,
               log_start_moves: int) -> Hashable | None:
    """What a request asks for, to match a prepared response (``rules.read_ahead_key``);
    None for one naming a last fetched epoch (rare: no read-ahead checks divergence)."""
    if _names_last_epoch(wanted):
        return None
    return rules.read_ahead_key(
        ((part.topic.topic_id, part.partition, part.offset, part.max_bytes, part.committed)
         if part.topic is not None and part.readable else None for part in wanted),
        max_bytes, log_start_moves)


def _response(version: int, wanted: list[PartitionFetch], session_id: int) -> FetchAnswer:
    grouped: dict[Any, list[PartitionAnswer]] = {}  # topic name or id -> partitions, in request order
    for part in wanted:
        stable = part.last_stable_offset if part.last_stable_offset >= 0 else part.high_watermark
        grouped.setdefault(part.topic_key, []).append(PartitionAnswer(
            part.partition, part.error, part.high_watermark, stable,
            part.log_start_offset, part.records or RecordSet(), part.aborted or None,
            part.diverging))
    return FetchAnswer(version, ErrorCode.NONE, session_id,
                       [TopicAnswer(key, partitions) for key, partitions in grouped.items()])



APIS = (
    Api(ApiKey.FETCH, range(4, 19), OnPart(FetchHandler, FetchHandler.handle),
        "XRANGE from the client's fetch_offset; long poll; fetch sessions (KIP-227, "
        "[fetch-sessions.md](fetch-sessions.md))",
        Shape((Items(
            "topics", "responses",
            topic_answer("FetchableTopicResponse", "partitions", "PartitionData", "partitions",
                         "partition", "partition_index", name_field="topic", high_watermark=-1,
                         last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                         preferred_read_replica=-1, records=b""),
            name_of=topic_name_of, id_of=topic_id_of,
            empty=empty(error_code=ErrorCode.NONE, session_id=0, responses=())),),
            refused_count=RefusedCount(BrokerMetrics.fetch_error, "partitions"))),
)
