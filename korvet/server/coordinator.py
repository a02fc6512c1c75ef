"""The group coordinator's adapter: feeds the pure machine, performs its effects.

One task steps ``korvet.core.coordinator.step`` for every event, in arrival order:
requests from the group APIs, timeouts from the timer, and the adapter's own
notices (a group's Redis data deleted). After each step it makes durable what
changed — the snapshot of every group whose snapshot changed, and the committed
offsets of a ``PersistOffsets`` — in one MULTI/EXEC, and only then releases the
replies, so a client is never told of a commit or a generation that a broker
restart could forget. Replies are matched to the waiting request handlers by
request id; replies the machine holds back (JoinGroup during a rebalance,
SyncGroup until the leader's assignment) are released by a later step.

The timer sleeps until ``next_deadline(state)`` and then steps ``due_timeouts``.
Snapshots live in ``{ks}:groups`` (one JSON value per group); a restart loads them
and steps ``Restart``.

With ``groups.event-log`` set, every input and output is appended to that file as
NDJSON; ``korvet spec replay LOG`` re-runs it through the machine and checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from korvet.core import coordinator as core
from korvet.core.coordinator.eventlog import effect_to_json, event_to_json
from korvet.storage.groups import GroupStore, PartitionRef

log = logging.getLogger("korvet.coordinator")


@dataclass(frozen=True, slots=True)
class _Tick:
    """Time to step whatever timeouts are due."""


_REQUESTS = (core.JoinGroup, core.SyncGroup, core.Heartbeat, core.LeaveGroup, core.OffsetCommit,
             core.OffsetDelete, core.DeleteGroups)


class CoordinatorUnavailable(Exception):
    """The coordinator is stopping or could not take the request."""


class GroupCoordinator:
    def __init__(self, store: GroupStore, config: core.Config,
                 partition_ref: Callable[[str, int], PartitionRef | None],
                 event_log: str = "", clock: Callable[[], int] | None = None,
                 on_step: Callable[[core.CoordinatorState, core.CoordinatorState, str | None],
                                   None] | None = None) -> None:
        self.store = store
        self._on_step = on_step  # (state before, state after, the event's group): metrics
        self.partition_ref = partition_ref
        self.state = core.initial_state(config)
        self._config = config
        self._queue: asyncio.Queue[core.Event | _Tick | None] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[core.Reply]] = {}
        self._ids = itertools.count(1)
        self._saved: dict[str, str] = {}
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._cleanups: set[asyncio.Task[None]] = set()
        self._event_log_path = event_log
        self._event_log: Any = None
        # (client id, host) -> groups with a member of that client: who is a group fetcher
        self._members_by_client: dict[tuple[str, str], frozenset[str]] = {}
        # Redis consumer groups known to exist (seed 000's in-memory set; empty after a restart)
        self.redis_groups: set[tuple[str, str]] = set()

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        snapshots = await self.store.load_snapshots()
        groups = []
        for group_id, text in snapshots.items():
            try:
                groups.append(json.loads(text))
            except ValueError:
                log.error("unreadable snapshot of group %r ignored", group_id)
        if groups:
            document = dict(core.to_snapshot(core.initial_state(self._config)))
            document["groups"] = groups
            self.state = replace(core.from_snapshot(document), config=self._config)
            self._saved = {g.group_id: _json(core.group_snapshot(g))
                           for g in self.state.groups.values()}
            log.info("restored %d consumer groups from Redis", len(self.state.groups))
        if self._event_log_path:
            path = Path(self._event_log_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._event_log = path.open("a", buffering=1)
            self._event_log.write(json.dumps({"snapshot": core.to_snapshot(self.state)}) + "\n")
        self._index_members()
        self._tasks = [asyncio.create_task(self._run(), name="korvet-coordinator"),
                       asyncio.create_task(self._timer(), name="korvet-coordinator-timer")]
        await self.submit_internal(core.Restart())

    async def close(self) -> None:
        await self._queue.put(None)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CoordinatorUnavailable("the broker is stopping"))
        self._waiting.clear()
        if self._event_log is not None:
            self._event_log.close()

    # --- requests ------------------------------------------------------------------------

    def next_request_id(self) -> int:
        return next(self._ids)

    async def request(self, event: core.RequestEvent) -> core.Reply:
        """Step a request and wait for its reply (however long the machine holds it)."""
        future: asyncio.Future[core.Reply] = asyncio.get_running_loop().create_future()
        self._waiting[event.request_id] = future
        await self._queue.put(event)
        try:
            return await future
        finally:
            self._waiting.pop(event.request_id, None)

    async def submit_internal(self, event: core.Event) -> None:
        await self._queue.put(event)

    # --- the stepping task -------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                if isinstance(item, _Tick):
                    for timeout in core.due_timeouts(self.state, self._clock()):
                        await self._apply(timeout)
                else:
                    await self._apply(item)
            except Exception:
                log.exception("coordinator step failed on %r", item)
                if isinstance(item, _REQUESTS):
                    future = self._waiting.get(item.request_id)
                    if future is not None and not future.done():
                        future.set_exception(CoordinatorUnavailable("coordinator error"))
            self._wakeup.set()

    async def _apply(self, event: core.Event) -> None:
        now = self._clock()
        before = self.state
        self.state, effects = core.step(self.state, event, now)
        if self._on_step is not None:
            self._on_step(before, self.state, getattr(event, "group_id", None))
        if self._event_log is not None:
            self._event_log.write(json.dumps({"t": now, "event": event_to_json(event),
                                              "effects": [effect_to_json(e) for e in effects]})
                                  + "\n")
        durable = await self._persist(effects)
        for effect in effects:
            if isinstance(effect, core.DeleteGroupData):
                task = asyncio.create_task(self._delete_group_data(effect.group_id))
                self._cleanups.add(task)
                task.add_done_callback(self._cleanups.discard)
            elif isinstance(effect, core.OffsetCommitReply | core.OffsetDeleteReply) and not durable:
                self._reply(replace(effect, partitions=tuple(
                    replace(p, error=core.ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    for p in effect.partitions)))
            elif not isinstance(effect, core.PersistOffsets | core.DeleteOffsets):
                self._reply(effect)
        self._index_members()

    def _reply(self, reply: core.Reply) -> None:
        future = self._waiting.get(reply.request_id)
        if future is not None and not future.done():
            future.set_result(reply)

    async def _persist(self, effects: tuple[core.Effect, ...]) -> bool:
        """Snapshots of changed groups and committed offsets, in one transaction.
        False if Redis did not take them (commits are then answered retriable errors)."""
        changed: dict[str, str] = {}
        for group_id, group in self.state.groups.items():
            text = _json(core.group_snapshot(group))
            if self._saved.get(group_id) != text:
                changed[group_id] = text
        gone = [g for g in self._saved if g not in self.state.groups]
        commits: list[tuple[str, list[tuple[PartitionRef, int, str | None, int]]]] = []
        removals: list[tuple[str, list[str]]] = []
        for effect in effects:
            if isinstance(effect, core.DeleteOffsets):
                removals.append((effect.group_id, [
                    ref.stream_key for tp in effect.partitions
                    if (ref := self.partition_ref(tp.topic, tp.partition)) is not None]))
            if isinstance(effect, core.PersistOffsets):
                items = []
                for tp, committed in effect.offsets:
                    ref = self.partition_ref(tp.topic, tp.partition)
                    if ref is not None:
                        items.append((ref, committed.offset, committed.metadata or None,
                                      committed.leader_epoch))
                commits.append((effect.group_id, items))
        if not changed and not gone and not commits and not removals:
            return True
        try:
            await self.store.save_state(changed, gone, commits, self._clock(), removals)
        except (RedisError, OSError) as exc:
            log.warning("could not persist coordinator state: %s", exc)
            return False
        self._saved.update(changed)
        for group_id in gone:
            self._saved.pop(group_id, None)
        return True

    async def _delete_group_data(self, group_id: str) -> None:
        for attempt in range(10):
            try:
                await self.store.delete_group(group_id)
                break
            except (RedisError, OSError) as exc:
                log.warning("deleting group %s from Redis failed (%s); retrying", group_id, exc)
                await asyncio.sleep(min(5.0, 0.2 * 2**attempt))
        self.redis_groups = {(g, s) for g, s in self.redis_groups if g != group_id}
        await self.submit_internal(core.GroupDataDeleted(group_id))

    # --- timers -------------------------------------------------------------------------

    async def _timer(self) -> None:
        while True:
            deadline = core.next_deadline(self.state)
            delay = None if deadline is None else max(0.0, (deadline - self._clock()) / 1000)
            self._wakeup.clear()
            if delay is not None and delay <= 0:
                await self._queue.put(_Tick())
                await self._wakeup.wait()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), delay)
                continue
            await self._queue.put(_Tick())
            await self._wakeup.wait()

    # --- who fetches for a group ------------------------------------------------------------

    def _index_members(self) -> None:
        index: dict[tuple[str, str], set[str]] = {}
        for group_id, group in self.state.groups.items():
            for member in group.members.values():
                index.setdefault((member.client_id, member.client_host), set()).add(group_id)
        self._members_by_client = {k: frozenset(v) for k, v in index.items()}

    def groups_of_client(self, client_id: str | None, host: str) -> frozenset[str]:
        return self._members_by_client.get((client_id or "", host), frozenset())

    async def ensure_redis_groups(self, group_ids: frozenset[str],
                                  partitions: list[tuple[PartitionRef, int]]) -> None:
        """Seed 000: a group's Redis consumer group on a stream is created at its first fetch,
        at the fetch offset; the in-memory set avoids asking Redis again."""
        for group_id in group_ids:
            for ref, fetch_offset in partitions:
                if (group_id, ref.stream_key) in self.redis_groups:
                    continue
                try:
                    if await self.store.ensure_redis_group(ref.stream_key, group_id, ref.bits,
                                                           fetch_offset):
                        self.redis_groups.add((group_id, ref.stream_key))
                except (RedisError, OSError) as exc:
                    log.debug("XGROUP CREATE %s %s failed: %s", ref.stream_key, group_id, exc)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
