"""ShareFetch (key 78) and ShareAcknowledge (key 79), v1 and v2: share groups' partitions.

A share consumer owns no position: the broker hands each fetch records it acquires for the
member under a lock, and the member acknowledges them (ACCEPT, RELEASE, REJECT, RENEW) in
its next ShareFetch or in a ShareAcknowledge. Each share partition is a Redis consumer group
on the partition's stream, driven by three Lua scripts (korvet/storage/shares.py); the rules
they follow are korvet/core/share_partition.py's and the share sessions' are
korvet/core/share_session.py's (docs/spec/share-groups.md, docs/implementers/share-groups.md).

One request:

1. the session step (``on_fetch``/``on_acknowledge``): a session error answers the whole
   request; epoch -1 closes the session after its acknowledgements;
2. each partition named is looked up (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
   TOPIC_AUTHORIZATION_FAILED without READ on the topic, INVALID_REQUEST for a topic that
   stores batches, which share groups do not read yet);
3. acknowledgements, per partition all or none (INVALID_RECORD_STATE when one is not the
   member's under a live lock);
4. ShareFetch acquires up to MaxRecords over the session's partitions, in order, each
   partition within its even share of MaxBytes (its first record always: records that would
   not fit are not acquired, so they stay available to the group); when it acquired nothing
   it long-polls: it waits for an append to one of the streams (the fetch
   wake-ups, storage/notifier.py) and tries again, up to MaxWaitMs. Records become available
   without an append too (a lock runs out, another member releases), so a wait lasts at most
   ``_RECHECK_S`` before the next try;
5. the response: the acquired records as record batches, AcquiredRecords as runs of
   consecutive offsets with one delivery count, AcquisitionLockTimeoutMs.

Sessions are this broker's, keyed by (group, member), and tied to the connection that last
used them: when it closes, the member's records on the session's partitions are released
(``share_release.lua``). The member id is not checked against the share group's membership
here (the group coordinator's part).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from korvet.core import group_configs as group_rules
from korvet.core import share_session as sessions
from korvet.core.api_keys import ApiKey
from korvet.core.epochs import FIXED, Epochs
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, ResourceType
from korvet.core.share_offsets import entry_before
from korvet.core.share_partition import (
    AckBatch,
    ShareLimits,
    acquired_runs,
    expand_acks,
)
from korvet.core.topics import TopicInfo
from korvet.protocol.denials import Shape, Whole, group_id, whole_error
from korvet.protocol.kbuild import make, millis, nested, response_type
from korvet.protocol.messages import ShareAcknowledgeRequest, ShareFetchRequest
from korvet.server.api import Api, OnPart
from korvet.server.batching import entries_to_batches
from korvet.server.connection import Connection
from korvet.server.group_configs import GroupConfigs
from korvet.server.handlers.offsets import offset_by_timestamp
from korvet.server.services import Services
from korvet.server.share_groups import share_store

log = logging.getLogger("korvet.share")

_RECHECK_S = 0.25  # a long poll's longest wait between two tries (lock expiry wakes nothing)
_BATCHES_MESSAGE = ("share groups read topics in the records storage format only: this topic "
                    "stores batches (korvet.storage.format=batches)")
_RECORD_STATE_MESSAGE = "offset {} is not acquired by this member under a live lock"


@dataclass(frozen=True, slots=True)
class _GroupSettings:
    """What a share group's fetches follow: its limits, where it starts on a partition it
    never read (share.auto.offset.reset) and whether it reads committed records only."""

    limits: ShareLimits
    reset: str
    committed: bool


@dataclass(slots=True)
class _Part:
    """One partition of a request, and what became of it."""

    topic_id: uuid.UUID
    index: int
    topic: TopicInfo | None
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    acks: list[AckBatch] = field(default_factory=list)
    ack_error: ErrorCode = ErrorCode.NONE
    ack_message: str | None = None
    raw: list[Any] = field(default_factory=list)
    counts: list[tuple[int, int]] = field(default_factory=list)
    epoch: int = 0
    epochs: Epochs = FIXED
    bits: int = 0
    log_append_time: bool = False

    @property
    def key(self) -> sessions.SharePartitionKey:
        return str(self.topic_id), self.index

    @property
    def usable(self) -> bool:
        return self.topic is not None and self.error is ErrorCode.NONE


def _renews_but_fetches(request: ShareFetchRequest) -> bool:
    """A v2 request that only renews locks (IsRenewAck) fetches nothing, so it must ask for
    nothing: Kafka 4.3.1 answers INVALID_REQUEST otherwise, before it looks at the session
    (conformance check share.fetch.renew_only_asks_for_nothing)."""
    if not getattr(request, "is_renew_ack", False):
        return False
    return bool(millis(request.max_wait) or request.min_bytes or request.max_bytes
                or request.max_records or request.batch_size)


class ShareHandler:
    """The broker's share sessions and the share partitions' scripts (one per tenant)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        settings = services.settings.share
        self.limits = ShareLimits(settings.record_lock_duration_ms,
                                  settings.delivery_count_limit,
                                  settings.partition_max_record_locks)
        self.reset = settings.auto_offset_reset  # a group's share.auto.offset.reset overrides it
        self.slots = settings.max_sessions
        self.store = services.part(share_store)
        self.sessions: dict[sessions.SessionKey, sessions.ShareSession] = {}
        self._hooked: set[str] = set()  # connections whose close releases their sessions
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # --- ShareFetch ------------------------------------------------------------------------

    async def fetch(self, ctx: Connection, request: ShareFetchRequest) -> Any:
        started = time.monotonic()
        cls = response_type(type(request))
        key = (str(request.group_id or ""), str(request.member_id or ""))
        if not key[0] or not key[1]:
            return self._whole(cls, ErrorCode.INVALID_REQUEST, "a group id and a member id")
        if _renews_but_fetches(request):
            return self._whole(cls, ErrorCode.INVALID_REQUEST,
                               "max wait, min bytes, max bytes, max records and batch size "
                               "of 0 with IsRenewAck")
        group = await self._settings(key[0])
        limits = group.limits
        named = [(t.topic_id, p) for t in request.topics for p in t.partitions]
        forgotten = [(str(t.topic_id), p) for t in request.forgotten_topics_data
                     for p in t.partitions]
        acknowledging = any(p.acknowledgement_batches for _, p in named)
        verdict = sessions.on_fetch(
            self.sessions, key, int(request.share_session_epoch),
            [(str(tid), p.partition_index) for tid, p in named], forgotten,
            acknowledging=acknowledging, connection_id=ctx.connection_id, slots=self.slots)
        if not verdict.ok:
            return self._whole(cls, verdict.error, None)
        parts: dict[sessions.SharePartitionKey, _Part] = {}
        for tid, p in named:
            part = await self._part(ctx, tid, p.partition_index, parts)
            part.acks.extend(AckBatch(int(b.first_offset), int(b.last_offset),
                                      tuple(int(t) for t in b.acknowledge_types))
                             for b in p.acknowledgement_batches)
        renew = bool(getattr(request, "is_renew_ack", False))
        try:
            await self._acknowledge_all(key, list(parts.values()), renew, limits)
            self._apply(ctx, verdict)
            if verdict.closing:
                await self._release_session(verdict.drop)
                return self._fetch_response(cls, list(parts.values()), limits)
            if renew:  # renews locks only: nothing acquired, the named partitions answered
                return self._fetch_response(cls, list(parts.values()), limits)
            for pkey in verdict.fetch:
                if pkey not in parts:
                    await self._part(ctx, uuid.UUID(pkey[0]), pkey[1], parts)
            wanted = [parts[p] for p in verdict.fetch]
            await self._acquire_polling(key, wanted, request, started, group)
        except (RedisError, OSError) as exc:
            log.warning("share fetch failed: %s", exc)
            for part in parts.values():
                if part.usable:
                    part.error, part.raw, part.counts = ErrorCode.KAFKA_STORAGE_ERROR, [], []
        return self._fetch_response(cls, list(parts.values()), limits, int(request.batch_size))

    async def _settings(self, group: str) -> _GroupSettings:
        """The group's limits, where it starts and what it reads: its own configs
        (IncrementalAlterConfigs on the group: share.record.lock.duration.ms,
        share.delivery.count.limit, share.partition.max.record.locks,
        share.auto.offset.reset, share.isolation.level) over the broker's settings; the
        broker's alone while Redis cannot be read."""
        configs = self.services.part(GroupConfigs)
        try:
            own = await configs.own(group)
        except (RedisError, OSError) as exc:
            log.warning("reading the configs of share group %r: %s", group, exc)
            # the broker's, but read_committed, which can only hold records back: a group set
            # to it must not be given an aborted transaction's records for a Redis hiccup
            return _GroupSettings(self.limits, self.reset, committed=True)
        values = group_rules.effective(own, configs.broker())
        limits = ShareLimits(int(values["share.record.lock.duration.ms"]),
                             int(values["share.delivery.count.limit"]),
                             int(values["share.partition.max.record.locks"]))
        return _GroupSettings(limits, values["share.auto.offset.reset"],
                              values["share.isolation.level"] == "read_committed")

    async def _start(self, part: _Part, reset: str) -> str:
        """Where a group starts on a partition it has never read (XGROUP CREATE's id, which
        the fetch script ignores once the group is there): the first record (earliest), the
        end (latest), or the first record at or after now less the duration (by_duration, as
        ListOffsets finds the first record at a time: a look-up at every fetch of such a
        group, bounded by the time index)."""
        if reset == "earliest":
            return "0"
        if not reset.startswith("by_duration:") or part.topic is None:
            return "$"
        since = self.services.now_ms() - (group_rules.duration_ms(reset.split(":", 1)[1]) or 0)
        first, _ = await offset_by_timestamp(self.services, part.topic, part.index, since)
        if first < 0:
            return "$"  # no record that recent: from the end
        return entry_before(part.topic.config.codec, first)

    async def _acquire_polling(self, key: sessions.SessionKey, wanted: list[_Part],
                               request: ShareFetchRequest, started: float,
                               group: _GroupSettings) -> None:
        max_wait = millis(request.max_wait) / 1000
        streams = [self.services.store.stream_key(p.topic.name, p.index)
                   for p in wanted if p.usable and p.topic is not None]
        notifier = self.services.notifier
        # MaxBytes shared out evenly over the partitions fetched, each answering at least its
        # first record (as Kafka 4.3.1 does: share.fetch.max_bytes_limits_acquisition)
        usable = sum(1 for p in wanted if p.usable)
        part_bytes = max(int(request.max_bytes), 0) // max(usable, 1)
        while True:
            if await self._acquire(key, wanted, max(int(request.max_records), 1), part_bytes,
                                   group) > 0:
                return
            remaining = max_wait - (time.monotonic() - started)
            if not streams or remaining <= 0 or int(request.min_bytes) <= 0:
                return
            if await notifier.arm(streams):
                continue  # an append between the try and the mark went unannounced: try again
            await notifier.wait(streams, min(remaining, _RECHECK_S))

    async def _acquire(self, key: sessions.SessionKey, wanted: list[_Part], budget: int,
                       part_bytes: int, group: _GroupSettings) -> int:
        taken = 0
        for part in wanted:
            if taken >= budget:
                break
            if not part.usable or part.topic is None:
                continue
            start = await self._start(part, group.reset)
            got = await self.store.acquire(part.topic, part.index, key[0], key[1], group.limits,
                                           budget - taken, start=start, committed=group.committed,
                                           max_bytes=part_bytes)
            part.raw, part.counts = part.raw + got.raw, part.counts + got.counts
            part.epochs = got.epochs
            part.epoch = got.epochs.current if part.topic.config.dense else 0
            if got.archived:
                log.debug("share group %s archived %d records of %s-%d", key[0], got.archived,
                          part.topic.name, part.index)
            taken += len(got.raw)
        return taken

    def _fetch_response(self, cls: type[Any], parts: list[_Part], limits: ShareLimits,
                        batch_size: int = 0) -> Any:
        topic_cls = nested(cls, "ShareFetchableTopicResponse")
        partition_cls = nested(cls, "PartitionData")
        leader_cls = nested(cls, "LeaderIdAndEpoch")
        acquired_cls = nested(cls, "AcquiredRecords")
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for part in parts:
            records = b""
            if part.raw:
                records, _, _ = entries_to_batches(
                    part.raw, part.bits, 1 << 62, force_first=True,
                    log_append_time=part.log_append_time, epochs=part.epochs)
            runs = tuple(make(acquired_cls, first_offset=first, last_offset=last,
                              delivery_count=count)
                         for first, last, count in acquired_runs(part.counts, batch_size))
            by_topic.setdefault(part.topic_id, []).append(make(
                partition_cls, partition_index=part.index, error_code=part.error,
                error_message=part.message, acknowledge_error_code=int(part.ack_error),
                acknowledge_error_message=part.ack_message,
                current_leader=make(leader_cls, leader_id=self.services.node_id,
                                    leader_epoch=part.epoch),
                records=records, acquired_records=runs))
        return make(cls, throttle_time=0, error_code=ErrorCode.NONE, error_message=None,
                    acquisition_lock_timeout=limits.lock_ms,
                    responses=tuple(make(topic_cls, topic_id=tid, partitions=tuple(ps))
                                    for tid, ps in by_topic.items()),
                    node_endpoints=())

    # --- ShareAcknowledge ------------------------------------------------------------------

    async def acknowledge(self, ctx: Connection, request: ShareAcknowledgeRequest) -> Any:
        cls = response_type(type(request))
        key = (str(request.group_id or ""), str(request.member_id or ""))
        if not key[0] or not key[1]:
            return self._whole(cls, ErrorCode.INVALID_REQUEST, "a group id and a member id")
        limits = (await self._settings(key[0])).limits
        verdict = sessions.on_acknowledge(self.sessions, key, int(request.share_session_epoch))
        if not verdict.ok:
            return self._whole(cls, verdict.error, None)
        parts: dict[sessions.SharePartitionKey, _Part] = {}
        for t in request.topics:
            for p in t.partitions:
                part = await self._part(ctx, t.topic_id, p.partition_index, parts)
                part.acks.extend(AckBatch(int(b.first_offset), int(b.last_offset),
                                          tuple(int(x) for x in b.acknowledge_types))
                                 for b in p.acknowledgement_batches)
        try:
            await self._acknowledge_all(key, list(parts.values()),
                                        bool(getattr(request, "is_renew_ack", False)), limits)
            self._apply(ctx, verdict)
            if verdict.closing:
                await self._release_session(verdict.drop)
        except (RedisError, OSError) as exc:
            log.warning("share acknowledge failed: %s", exc)
            for part in parts.values():
                if part.usable:
                    part.ack_error = ErrorCode.KAFKA_STORAGE_ERROR
        topic_cls = nested(cls, "ShareAcknowledgeTopicResponse")
        partition_cls = nested(cls, "PartitionData")
        leader_cls = nested(cls, "LeaderIdAndEpoch")
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for part in parts.values():
            error = part.error if part.error is not ErrorCode.NONE else part.ack_error
            message = part.message if part.error is not ErrorCode.NONE else part.ack_message
            by_topic.setdefault(part.topic_id, []).append(make(
                partition_cls, partition_index=part.index, error_code=error, error_message=message,
                current_leader=make(leader_cls, leader_id=self.services.node_id,
                                    leader_epoch=part.epoch)))
        return make(cls, throttle_time=0, error_code=ErrorCode.NONE, error_message=None,
                    acquisition_lock_timeout=limits.lock_ms,
                    responses=tuple(make(topic_cls, topic_id=tid, partitions=tuple(ps))
                                    for tid, ps in by_topic.items()),
                    node_endpoints=())

    # --- shared steps ----------------------------------------------------------------------

    def _whole(self, cls: type[Any], code: ErrorCode, needs: str | None) -> Any:
        """The request refused as a whole: no lock duration (0, as Kafka answers it)."""
        message = f"the request needs {needs}" if needs else None
        return make(cls, throttle_time=0, error_code=code, error_message=message,
                    acquisition_lock_timeout=0, responses=(), node_endpoints=())

    async def _part(self, ctx: Connection, topic_id: uuid.UUID | None, index: int,
                    parts: dict[sessions.SharePartitionKey, _Part]) -> _Part:
        """The request's partition (once per request), looked up and authorized."""
        tid = topic_id or uuid.UUID(int=0)
        found = parts.get((str(tid), index))
        if found is not None:
            return found
        topic = await self.services.topics.by_id(str(tid))
        part = _Part(tid, index, topic)
        if topic is None:
            part.error = ErrorCode.UNKNOWN_TOPIC_ID
        elif not 0 <= index < topic.partitions:
            part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif ctx.access.enabled and not ctx.access.allowed(Operation.READ, ResourceType.TOPIC,
                                                            topic.name):
            part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic.config.stores_batches:
            part.error, part.message = ErrorCode.INVALID_REQUEST, _BATCHES_MESSAGE
        if topic is not None:
            part.bits, part.log_append_time = topic.config.codec_bits, topic.config.log_append_time
        parts[part.key] = part
        return part

    async def _acknowledge_all(self, key: sessions.SessionKey, parts: list[_Part],
                               renew: bool, limits: ShareLimits) -> None:
        for part in parts:
            if not part.acks:
                continue
            if not part.usable or part.topic is None:
                part.ack_error, part.ack_message = part.error, part.message
                continue
            expanded = expand_acks(part.acks, renew_allowed=renew,
                                   max_offsets=limits.max_locks)
            if expanded.error is not ErrorCode.NONE:
                part.ack_error, part.ack_message = expanded.error, expanded.message
                continue
            outcome = await self.store.acknowledge(part.topic, part.index, key[0], key[1],
                                                   limits, expanded.acks)
            if outcome.refused is not None:
                part.ack_error = ErrorCode.INVALID_RECORD_STATE
                part.ack_message = _RECORD_STATE_MESSAGE.format(outcome.refused)

    def _apply(self, ctx: Connection, verdict: sessions.Verdict) -> None:
        """The session step's edit of the table; a connection's first session hooks its
        close, which releases what the member acquired through it."""
        if verdict.drop is not None and verdict.store is None:
            self.sessions.pop(verdict.drop.key, None)
        if verdict.store is not None:
            self.sessions[verdict.store.key] = verdict.store
            if ctx.connection_id not in self._hooked:
                self._hooked.add(ctx.connection_id)
                ctx.state.on_close.append(lambda: self._connection_closed(ctx.connection_id))

    def _connection_closed(self, connection_id: str) -> None:
        self._hooked.discard(connection_id)
        for session in sessions.of_connection(self.sessions, connection_id):
            del self.sessions[session.key]
            task = asyncio.create_task(self._release_logged(session))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _release_logged(self, session: sessions.ShareSession) -> None:
        try:
            await self._release_session(session)
        except (RedisError, OSError) as exc:  # the locks still run out on Redis' clock
            log.warning("releasing share session %s failed: %s", session.key, exc)

    async def _release_session(self, session: sessions.ShareSession | None) -> None:
        if session is None:
            return
        group, member = session.key
        limits = (await self._settings(group)).limits
        for topic_id, index in session.partitions:
            topic = await self.services.topics.by_id(topic_id)
            if topic is None or topic.config.stores_batches or index >= topic.partitions:
                continue
            released, archived = await self.store.release(topic, index, group, member, limits)
            if released or archived:
                log.debug("share session %s closed: %d records of %s-%d released, %d archived",
                          session.key, released, topic.name, index, archived)


_WHOLE = whole_error(error_message=None, acquisition_lock_timeout=0, responses=(),
                     node_endpoints=())

APIS = (
    Api(ApiKey.SHARE_FETCH, range(1, 3), OnPart(ShareHandler, ShareHandler.fetch),
        "share groups (KIP-932): acquire records on the partition's Redis consumer group "
        "(XAUTOCLAIM-style claims, XREADGROUP); acknowledgements; long poll "
        "([share-groups.md](share-groups.md))",
        Shape((Whole(group_id, _WHOLE),))),
    Api(ApiKey.SHARE_ACKNOWLEDGE, range(1, 3), OnPart(ShareHandler, ShareHandler.acknowledge),
        "share groups: ACCEPT/REJECT (XACK), RELEASE (park), RENEW, owner and lock checked in "
        "Lua ([share-groups.md](share-groups.md))",
        Shape((Whole(group_id, _WHOLE),))),
)
