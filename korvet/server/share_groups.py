"""Share-group membership's adapter: feeds korvet/core/share_group.py, keeps its state.

One ``ShareGroups`` per tenant (``Services.part``). Every heartbeat, expiry round and
deletion runs under one lock, so the machine sees them one at a time. The group is
coordinated by the broker holding its coordinator lease, as a classic group of that id
would be (``GroupCoordinator.owns``; always this broker when it is alone): FindCoordinator
names that broker, the others answer NOT_COORDINATOR.

Membership is kept in memory; Redis keeps what must outlive the broker
(korvet/storage/share_groups.py): that the group exists, as a share group, and its epoch.
Each step that raises the epoch writes it before the reply goes out; a write Redis refuses
leaves the group as it was and answers COORDINATOR_NOT_AVAILABLE, which clients retry. A
group is loaded from its record at its first request after a start or after its lease came
back (the lease's token changed): members are gone then, and those that heartbeat are told
UNKNOWN_MEMBER_ID and join again above the stored epoch.

Sessions: a task expires the members whose ``group.share.session.timeout.ms`` ran out
(``groups.share-session-timeout-ms``), a few times a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from korvet.core import share_group as core
from korvet.core.errors import ErrorCode
from korvet.server.group_configs import GroupConfigs
from korvet.storage.share_groups import ShareGroupStore
from korvet.storage.shares import ShareStore

if TYPE_CHECKING:
    from korvet.server.services import Services

log = logging.getLogger("korvet.share-groups")

MAX_TICK_MS = 1_000  # expiry rounds at least this often (sessions are seconds long)


@dataclass(frozen=True, slots=True)
class Listed:
    group_id: str
    state: str


def share_store(services: Services) -> ShareStore:
    """The share partitions' scripts on the tenant's Redis, one per tenant
    (``services.part(share_store)``): the fetch and acknowledge handlers, the offsets APIs
    and a group's deletion use the same."""
    store = services.store
    return ShareStore(store.redis, store.stream_key, store.meta_key)


class ShareGroups:
    def __init__(self, services: Services) -> None:
        self._services = services
        settings = services.settings.groups
        self.config = core.ShareConfig(
            session_timeout_ms=settings.share_session_timeout_ms,
            heartbeat_interval_ms=settings.share_heartbeat_interval_ms,
            max_size=settings.share_max_size)
        coordinator = services.groups
        self.store = ShareGroupStore(coordinator.store.redis, coordinator.store.ks)
        # group -> (its state, the lease token it was loaded under; 0: one broker)
        self._groups: dict[str, tuple[core.ShareGroup, int]] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # --- ownership ----------------------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        return self._services.groups.owns(group_id)

    def _token(self, group_id: str) -> int:
        ownership = self._services.groups.ownership
        return 0 if ownership is None else ownership.token(group_id)

    def is_classic(self, group_id: str) -> bool:
        """Whether the id is taken by a classic group (Kafka keeps one group per id)."""
        return group_id in self._services.groups.durable_view.groups

    async def is_share(self, group_id: str) -> bool:
        """Whether the id is a share group's (in memory, else its record in Redis)."""
        if group_id in self._groups:
            return True
        return await self.store.epoch(group_id) is not None

    async def _load(self, group_id: str) -> core.ShareGroup | None:
        """The group as this broker coordinates it now; loaded from Redis when it was not
        held, or held under an earlier lease token (membership does not survive a move)."""
        token = self._token(group_id)
        held = self._groups.get(group_id)
        if held is not None and held[1] == token:
            return held[0]
        self._groups.pop(group_id, None)
        epoch = await self.store.epoch(group_id)
        if epoch is None:
            return None
        group = core.restored(group_id, epoch)
        self._groups[group_id] = (group, token)
        return group

    def known(self) -> list[str]:
        """The share groups loaded in memory (those asked about since the start)."""
        return sorted(self._groups)

    def subscribed(self, group_id: str) -> frozenset[str]:
        """The topics the group's members subscribe to, as far as this broker knows."""
        held = self._groups.get(group_id)
        return frozenset() if held is None else held[0].subscribed_topics()

    # --- requests -----------------------------------------------------------------------

    async def heartbeat(self, request: core.Heartbeat, topics: Mapping[str, int]
                        ) -> core.HeartbeatReply:
        self._start()
        if not self.owns(request.group_id):
            return core.HeartbeatReply(ErrorCode.NOT_COORDINATOR)
        config = await self._config_of(request.group_id)
        async with self._lock:
            try:
                before = await self._load(request.group_id)
            except (RedisError, OSError) as exc:
                log.warning("loading share group %r: %s", request.group_id, exc)
                return core.HeartbeatReply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            after, reply = core.heartbeat(
                before, request, topics, self._services.now_ms(), config,
                other_type=before is None and self.is_classic(request.group_id))
            if after is None:
                return reply
            if not await self._persist(before, after):
                return core.HeartbeatReply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return reply

    async def _config_of(self, group_id: str) -> core.ShareConfig:
        """The broker's share-group settings with the group's own configs over them
        (share.session.timeout.ms, share.heartbeat.interval.ms: IncrementalAlterConfigs on
        the group); the broker's alone while Redis cannot be read."""
        try:
            values = await self._services.part(GroupConfigs).values(group_id)
        except (RedisError, OSError) as exc:
            log.warning("reading the configs of share group %r: %s", group_id, exc)
            return self.config
        return replace(self.config,
                       session_timeout_ms=int(values["share.session.timeout.ms"]),
                       heartbeat_interval_ms=int(values["share.heartbeat.interval.ms"]))

    async def _persist(self, before: core.ShareGroup | None, after: core.ShareGroup) -> bool:
        """Keep ``after``, its epoch written first when it changed (or the group is new)."""
        if before is None or before.group_epoch != after.group_epoch:
            try:
                await self.store.save_epoch(after.group_id, after.group_epoch)
            except (RedisError, OSError) as exc:
                log.warning("storing share group %r: %s", after.group_id, exc)
                return False
        self._groups[after.group_id] = (after, self._token(after.group_id))
        return True

    async def describe(self, group_id: str) -> core.ShareGroup | ErrorCode | None:
        """The group (None: no share group of that id), or why it cannot be answered."""
        if not self.owns(group_id):
            return ErrorCode.NOT_COORDINATOR
        async with self._lock:
            try:
                return await self._load(group_id)
            except (RedisError, OSError) as exc:
                log.warning("loading share group %r: %s", group_id, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def ensure(self, group_id: str) -> ErrorCode:
        """AlterShareGroupOffsets of an id no group has: Kafka creates the share group
        (empty, epoch 0) and sets its offsets. A classic group's id: GROUP_ID_NOT_FOUND."""
        if not self.owns(group_id):
            return ErrorCode.NOT_COORDINATOR
        if self.is_classic(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        async with self._lock:
            try:
                if await self._load(group_id) is None:
                    await self.store.save_epoch(group_id, 0)
            except (RedisError, OSError) as exc:
                log.warning("creating share group %r: %s", group_id, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: refused while it has members."""
        if not self.owns(group_id):
            return ErrorCode.NOT_COORDINATOR
        async with self._lock:
            try:
                group = await self._load(group_id)
                if group is None:
                    return ErrorCode.GROUP_ID_NOT_FOUND
                if group.members:
                    return ErrorCode.NON_EMPTY_GROUP
                await self._drop_partition_state(group_id)
                await self.store.delete(group_id)
            except (RedisError, OSError) as exc:
                log.warning("deleting share group %r: %s", group_id, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            self._groups.pop(group_id, None)
            return ErrorCode.NONE

    async def _drop_partition_state(self, group_id: str) -> None:
        """A deleted group's state on every partition (its Redis consumer groups) goes with
        it, as Kafka deletes a share group's state: a new group of that id starts afresh."""
        shares = self._services.part(share_store)
        for topic in await self._services.topics.all():
            for index in range(topic.partitions):
                await shares.delete(topic, index, group_id)

    async def listed(self, group_ids: list[str]) -> list[Listed]:
        """The state of each of ``group_ids`` as this broker knows it: the members it
        keeps, or Empty for a group it does not hold in memory (no member has come back
        to it since it started or took the lease)."""
        out = []
        for group_id in group_ids:
            held = self._groups.get(group_id)
            fresh = held is not None and held[1] == self._token(group_id) and self.owns(group_id)
            out.append(Listed(group_id, held[0].state if fresh and held is not None
                              else core.EMPTY))
        return out

    # --- sessions -----------------------------------------------------------------------

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._expiry(), name="korvet-share-sessions")

    async def _expiry(self) -> None:
        tick_ms = max(10, min(MAX_TICK_MS, self.config.session_timeout_ms // 4))
        while True:
            await asyncio.sleep(tick_ms / 1000)
            try:
                await self.expire_once()
            except Exception:  # the task must outlive one bad round
                log.exception("share-group session expiry")

    async def expire_once(self) -> None:
        """One round: every member whose session ran out leaves its group."""
        now = self._services.now_ms()
        async with self._lock:
            for group_id, (group, _token) in list(self._groups.items()):
                deadline = core.next_deadline(group)
                if deadline is None or deadline > now or not self.owns(group_id):
                    continue
                after, gone = core.expire(group, now, group.topics)
                if await self._persist(group, after):
                    log.info("share group %r: session of %s expired", group_id, ", ".join(gone))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
