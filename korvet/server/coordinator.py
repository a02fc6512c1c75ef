"""The group coordinator's adapter: feeds the pure machine, performs its effects.

One task steps ``korvet.core.coordinator.step`` for every event, in arrival order:
requests from the group APIs, timeouts from the timer, and the adapter's own
notices (a group's Redis data deleted). Each step goes through the I/O boundary of
spec/GroupCoordinatorDurable.tla (docs/spec/group-coordinator.md):

1. ``durability.ready`` sorts the step's effects and finds the groups whose durable
   snapshot changed;
2. the snapshots and committed offsets are written in one MULTI/EXEC (``Persist``);
3. only then are the replies sent. If Redis did not take the write (``PersistFails``),
   the touched groups go back to their last durable snapshot and every reply of the
   step, and every request those groups held back, is answered with
   COORDINATOR_NOT_AVAILABLE, which Kafka's clients retry.

Queries (OffsetFetch, DescribeGroups, ListGroups) answer from the durable copy
(``durable_view``), never from a state that a failed write could take back.

At start (``BrokerRestart``) the coordinator loads what Redis holds; if Redis restarted
since the last load, may have lost its last second of writes, and holds no clean-stop
mark, every group's generation is raised to a new band before anything is served, so
that no generation number is handed out twice. A clean stop leaves the mark.

With ``groups.event-log`` set, every step is appended to that file as NDJSON: the
event, the machine's effects, whether the write was taken, and the replies actually
sent; ``korvet spec validate LOG`` asks TLC whether that is a behaviour of the spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from korvet.core import coordinator as core
from korvet.core import lease
from korvet.core.coordinator import durability
from korvet.core.coordinator.eventlog import effect_to_json, event_to_json
from korvet.core.coordinator.machine import raise_generation, restarted_group
from korvet.storage.groups import GroupStore, PartitionRef
from korvet.storage.leases import LeaseStore

if TYPE_CHECKING:
    from korvet.server.ownership import Ownership

log = logging.getLogger("korvet.coordinator")


@dataclass(frozen=True, slots=True)
class _Tick:
    """Time to step whatever timeouts are due (``done``: told when they have been)."""

    done: asyncio.Future[None] | None = None


@dataclass(frozen=True, slots=True)
class _Adopt:
    """This broker was granted the group's lease (``token``): continue from its durable
    snapshot."""

    group_id: str
    snapshot: str | None
    token: int
    done: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class _Forget:
    """This broker no longer holds the group's lease: drop it from memory."""

    group_id: str
    done: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class _CleanUp:
    """A round of the periodic clean-up. The stepping task picks the groups to delete and
    steps DeleteGroups with nothing in between, so a commit that arrives meanwhile is
    either before the choice (and keeps its group) or after the deletion (and starts the
    group anew), as Kafka's expiry under the group's lock."""

    done: asyncio.Future[tuple[core.DeleteGroupsReply | None, frozenset[str]]]


_REQUESTS = (core.JoinGroup, core.SyncGroup, core.Heartbeat, core.LeaveGroup, core.OffsetCommit,
             core.OffsetDelete, core.DeleteGroups)


class CoordinatorUnavailable(Exception):
    """The coordinator is stopping or could not take the request."""


class NotCoordinator(CoordinatorUnavailable):
    """Several brokers share Redis and this one does not hold the group's lease."""


class GroupCoordinator:
    def __init__(self, store: GroupStore, config: core.Config,
                 partition_ref: Callable[[str, int], PartitionRef | None],
                 event_log: str = "", clock: Callable[[], int] | None = None,
                 on_step: Callable[[core.CoordinatorState, core.CoordinatorState, str | None],
                                   None] | None = None, clean_up_every_ms: int = 0,
                 offsets_retention_ms: int = -1) -> None:
        self.store = store
        self._clean_up_every_ms = clean_up_every_ms  # 0: empty groups are never removed
        self._offsets_retention_ms = offsets_retention_ms  # -1: offsets never expire
        # group -> the clock of the last step that wrote it or left it with members, or of
        # its load (core.expired_groups counts the offsets' retention from there)
        self.last_active: dict[str, int] = {}
        self._on_step = on_step  # (state before, state after, the event's group): metrics
        self.partition_ref = partition_ref
        self.state = core.initial_state(config)
        self._config = config
        self._queue: asyncio.Queue[
            core.Event | _Tick | _Adopt | _Forget | _CleanUp | None] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[core.Reply]] = {}
        self._waiting_group: dict[int, str] = {}
        # Several brokers on one Redis: the leases this broker holds (server/ownership.py)
        self.ownership: Ownership | None = None
        self.leases: LeaseStore | None = None
        # One broker: whether it still holds its claim on the keyspace (server/claim.py);
        # without it, it answers group requests COORDINATOR_NOT_AVAILABLE and writes nothing.
        self.may_write: Callable[[], bool] = lambda: True
        self._ids = itertools.count(1)
        # The adapter's copy of what Redis durably holds of each group (the spec's `saved`).
        self.durable: dict[str, core.Group] = {}
        self._loaded_run_id = ""
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # group -> the clean-up of its Redis data in progress (DeleteGroupData)
        self._cleanups: dict[str, asyncio.Task[None]] = {}
        self._event_log_path = event_log
        self._event_log: Any = None
        # (client id, host) -> groups with a member of that client: who is a group fetcher
        self._members_by_client: dict[tuple[str, str], frozenset[str]] = {}
        # Redis consumer groups known to exist: an in-memory set, empty after a restart
        # (docs/implementers/groups.md)
        self.redis_groups: set[tuple[str, str]] = set()
        # Commits move only these along (after a restart: once a member's fetch found them).
        # With several brokers a group's fetches go to each partition's leader, so its
        # coordinator may never see them: every commit moves them all, as before.
        store.has_redis_group = lambda group, stream: (
            self.ownership is not None or (group, stream) in self.redis_groups)

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        snapshots = await self.store.load_snapshots()
        groups = []
        for group_id, text in snapshots.items():
            try:
                groups.append(core.read_group(json.loads(text)))
            except (ValueError, core.SnapshotError) as exc:
                log.error("unreadable snapshot of group %r ignored: %s", group_id, exc)
        record = await self.store.load_record()
        run_id, fsync_always = await self.store.redis_identity()
        plan = durability.load_plan(record, run_id, fsync_always, bool(groups))
        state = core.CoordinatorState(config=self._config, groups={g.group_id: g for g in groups},
                                      generation_floor=plan.record.floor)
        now = self._clock()
        if plan.lossy:
            state = durability.raise_generations(state, plan.record.floor, now)
            log.warning("Redis restarted since the coordinator last loaded and may have lost "
                        "its last writes: %d groups move to generation %d and rebalance",
                        len(state.groups), plan.record.floor)
        self.state = state
        self.durable = {g: durability.snapshot_of(group) for g, group in state.groups.items()}
        # Kafka keeps when an Empty group became Empty; a restart counts from the load, so
        # offsets are kept at least as long as Kafka keeps them, never shorter.
        self.last_active = dict.fromkeys(state.groups, now)
        if self.ownership is not None:
            # Several brokers: a group is in memory only while this broker holds its lease,
            # and only its lease holder writes it: another broker may own it now, and a
            # raised snapshot written here, without its lease, would overwrite that owner's.
            # A group below the floor is raised when a broker adopts it (_take_or_drop).
            self.state = core.CoordinatorState(config=self._config, groups={},
                                               generation_floor=plan.record.floor)
            self.durable = {}
            self.last_active = {}
        raised = {g: _json(core.group_snapshot(group)) for g, group in self.durable.items()
                  if plan.lossy}  # (none with several brokers: their memory starts empty)
        self._loaded_run_id = run_id
        durable = await self.store.write_load(plan.record, raised, fsync_always)
        if groups:
            log.info("restored %d consumer groups from Redis", len(state.groups))
        if self._event_log_path:
            path = Path(self._event_log_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._event_log = path.open("a", buffering=1)
            self._log({"t": now, "load": {"lossy": plan.lossy, "floor": plan.record.floor,
                                          "durable": durable, "fsync_always": fsync_always,
                                          "redis_run_id": run_id},
                       "snapshot": core.to_snapshot(self.state)})
        self._index_members()
        self._tasks = [asyncio.create_task(self._run(), name="korvet-coordinator"),
                       asyncio.create_task(self._timer(), name="korvet-coordinator-timer")]
        if self._clean_up_every_ms > 0:
            self._tasks.append(asyncio.create_task(self._clean_up(),
                                                   name="korvet-coordinator-clean-up"))
        await self.submit_internal(core.Restart())

    async def close(self) -> None:
        """Stop after the step in progress and leave the clean-stop mark (spec: CleanStop)."""
        await self._queue.put(None)
        run = self._tasks[0] if self._tasks else None
        if run is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(run), 5)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # A clean-up cut short leaves the Dead snapshot: the next start (one broker) or the
        # next owner (several) finds the group Dead and cleans up again.
        for group_id in list(self._cleanups):
            self._cancel_clean_up(group_id)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CoordinatorUnavailable("the broker is stopping"))
        self._waiting.clear()
        # Several brokers: the others still write after this one stops, so its mark could
        # not vouch for their writes; none is left (a Redis restart then raises generations).
        clean = (await self._leave_clean_mark()
                 if self._tasks and self.ownership is None and self.may_write() else False)
        self._log({"t": self._clock(), "stop": "clean" if clean else "unmarked"})
        if self._event_log is not None:
            self._event_log.close()

    async def _leave_clean_mark(self) -> bool:
        try:
            run_id, _ = await self.store.redis_identity()
            if run_id != self._loaded_run_id:
                # Redis restarted while we ran and may have lost writes our replies
                # revealed: write every snapshot again first, so the mark vouches for them.
                await self.store.save_state(
                    {g: _json(core.group_snapshot(group)) for g, group in self.durable.items()},
                    [], [], self._clock())
            await self.store.mark_clean()
        except (RedisError, OSError) as exc:
            log.warning("could not leave the clean-stop mark: %s", exc)
            return False
        return True

    @property
    def durable_view(self) -> core.CoordinatorState:
        """The groups as Redis durably holds them: what queries answer from."""
        return core.CoordinatorState(config=self._config, groups=self.durable,
                                     generation_floor=self.state.generation_floor)

    # --- requests ------------------------------------------------------------------------

    def next_request_id(self) -> int:
        return next(self._ids)

    async def request(self, event: core.RequestEvent) -> core.Reply:
        """Step a request and wait for its reply (however long the machine holds it)."""
        groups = event.group_ids if isinstance(event, core.DeleteGroups) else (event.group_id,)
        if not all(self.owns(g) for g in groups):
            raise NotCoordinator(",".join(groups))
        if not self.may_write():  # one broker past its claim: still the coordinator, not now
            raise CoordinatorUnavailable("this broker's claim on its keyspace is not renewed")
        future: asyncio.Future[core.Reply] = asyncio.get_running_loop().create_future()
        self._waiting[event.request_id] = future
        self._waiting_group[event.request_id] = groups[0] if groups else ""
        await self._queue.put(event)
        try:
            return await future
        finally:
            self._waiting.pop(event.request_id, None)
            self._waiting_group.pop(event.request_id, None)

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates the group (always, with one broker)."""
        return self.ownership is None or self.ownership.believes(group_id)

    async def adopt(self, group_id: str, snapshot: str | None, token: int) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Adopt(group_id, snapshot, token, done))
        await done

    async def forget(self, group_id: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Forget(group_id, done))
        await done

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
                elif isinstance(item, _Adopt | _Forget):
                    self._take_or_drop(item)
                elif isinstance(item, _CleanUp):
                    await self._clean_up_step(item)
                else:
                    await self._apply(item)
            except Exception:
                log.exception("coordinator step failed on %r", item)
                if isinstance(item, _REQUESTS):
                    future = self._waiting.get(item.request_id)
                    if future is not None and not future.done():
                        future.set_exception(CoordinatorUnavailable("coordinator error"))
            if isinstance(item, _Tick) and item.done is not None and not item.done.done():
                item.done.set_result(None)
            if isinstance(item, _CleanUp) and not item.done.done():
                item.done.set_result((None, frozenset()))
            self._wakeup.set()

    async def run_due_timers(self) -> None:
        """Step every timeout due on the clock now, and return once that is done (the
        test clock moved: groups.test-clock, korvet/server/test_clock.py)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Tick(done))
        await done

    def _take_or_drop(self, item: _Adopt | _Forget) -> None:
        """Several brokers: the group enters memory from its snapshot (a grant) or leaves
        it (the lease lost), with the work pending for it under an older token cancelled.
        A group adopted Dead (its owner deleted it and lost the lease before its clean-up
        was done) is cleaned up by this broker, with its token (spec: CleanUp)."""
        self._cancel_clean_up(item.group_id)
        groups = dict(self.state.groups)
        groups.pop(item.group_id, None)
        self.durable.pop(item.group_id, None)
        if isinstance(item, _Adopt) and item.snapshot is not None:
            try:
                group = core.read_group(json.loads(item.snapshot))
            except (ValueError, core.SnapshotError) as exc:
                log.error("unreadable snapshot of group %r ignored: %s", item.group_id, exc)
            else:
                self.durable[item.group_id] = durability.snapshot_of(group)
                floor = self.state.generation_floor
                if group.state is not core.GroupState.DEAD and group.generation < floor:
                    # Redis may have lost writes since this group was last written (the
                    # load that opened the band was lossy): raised as a single broker raises
                    # at its load, and written, with this lease's token, by its next step.
                    log.info("group %r adopted at generation %d moves to %d (a new band)",
                             item.group_id, group.generation, floor)
                    group = raise_generation(group, floor, self._config, self._clock())
                groups[item.group_id] = restarted_group(group, self._config, self._clock())
                self.last_active[item.group_id] = self._clock()
                if group.state is core.GroupState.DEAD:
                    log.info("group %r was deleted by its last coordinator; cleaning it up",
                             item.group_id)
                    self._start_clean_up(item.group_id, item.token)
        self.state = dataclasses.replace(self.state, groups=groups)
        if item.group_id not in groups:
            self.last_active.pop(item.group_id, None)
        if isinstance(item, _Forget):
            for request_id, group_id in list(self._waiting_group.items()):
                future = self._waiting.get(request_id)
                if group_id == item.group_id and future is not None and not future.done():
                    future.set_exception(NotCoordinator(group_id))
        self._index_members()
        if not item.done.done():
            item.done.set_result(None)

    async def _apply(self, event: core.Event) -> None:
        """Step, persist, then reply (spec: Step, then Persist or PersistFails)."""
        now = self._clock()
        before = self.state
        after, effects = core.step(before, event, now)
        ready = durability.ready(before, after, effects, self.durable)
        persisted: bool | None = None
        if ready.writes:
            persisted = await self._persist(ready)
        if persisted is False:
            self.state, parked = durability.restore(after, ready.touched, self.durable, now)
            sent = [durability.unavailable(r) for r in ready.replies] + list(parked)
            self._forget_lost(ready.touched)
        else:
            self.state = after
            for group_id, snapshot in ready.snapshots.items():
                if snapshot is None:
                    self.durable.pop(group_id, None)
                else:
                    self.durable[group_id] = snapshot
            sent = list(ready.replies)
            self._note_activity(ready.touched, core.group_of(event), now)
            for cleanup in ready.cleanups:
                self._start_clean_up(cleanup.group_id, self._token(cleanup.group_id))
        if self._on_step is not None:
            self._on_step(before, self.state, core.group_of(event))
        if self._event_log is not None:  # encoding a step is a third of a big commit's cost
            self._log({"t": now, "event": event_to_json(event),
                       "effects": [effect_to_json(e) for e in effects], "persisted": persisted,
                       "sent": [effect_to_json(r) for r in sent]})
        for reply in sent:
            self._reply(reply)
        self._index_members()

    def _note_activity(self, touched: frozenset[str], group_id: str | None, now: int) -> None:
        """What the offsets' retention counts from: a step that wrote the group (a commit, a
        join, a leave, a session expiry: its snapshot or offsets) or left it with members.
        Reads (OffsetFetch, DescribeGroups) are no steps and a step that changes nothing
        durable of an Empty group does not count, as in Kafka: a tool watching a group's lag
        does not keep its offsets forever."""
        for gid in touched | ({group_id} if group_id else set()):
            group = self.state.groups.get(gid)
            if group is None or group.state is core.GroupState.DEAD:
                self.last_active.pop(gid, None)
            elif gid in touched or group.members:
                self.last_active[gid] = now

    def _log(self, entry: dict[str, Any]) -> None:
        if self._event_log is not None:
            self._event_log.write(json.dumps(entry) + "\n")

    def _reply(self, reply: core.Reply) -> None:
        future = self._waiting.get(reply.request_id)
        if future is not None and not future.done():
            future.set_result(reply)

    async def _persist(self, ready: durability.Ready) -> bool:
        """The step's snapshots and committed offsets, in one transaction. False if Redis
        did not take them (or its answer was lost: the write may have landed)."""
        changed = {g: _json(core.group_snapshot(snap)) for g, snap in ready.snapshots.items()
                   if snap is not None}
        gone = [g for g, snap in ready.snapshots.items() if snap is None]
        commits: list[tuple[str, list[tuple[PartitionRef, int, str | None, int]]]] = []
        removals: list[tuple[str, list[str]]] = []
        for deleted in ready.offset_deletes:
            removals.append((deleted.group_id, [
                ref.stream_key for tp in deleted.partitions
                if (ref := self.partition_ref(tp.topic, tp.partition)) is not None]))
        for persist in ready.offsets:
            items = []
            for tp, committed in persist.offsets:
                ref = self.partition_ref(tp.topic, tp.partition)
                if ref is not None:
                    items.append((ref, committed.offset, committed.metadata or None,
                                  committed.leader_epoch))
            commits.append((persist.group_id, items))
        if self.ownership is not None and self.leases is not None:
            return await self._persist_fenced(ready.touched, changed, gone, commits, removals)
        if not self.may_write():
            log.warning("not persisting coordinator state: this broker no longer holds its "
                        "claim on the keyspace (answering retriable errors)")
            return False
        try:
            await self.store.save_state(changed, gone, commits, self._clock(), removals)
        except (RedisError, OSError) as exc:
            log.warning("could not persist coordinator state (answering retriable errors): %s",
                        exc)
            return False
        return True

    async def _persist_fenced(self, touched: frozenset[str], changed: dict[str, str],
                              gone: list[str], commits: list[tuple[str, list[tuple[
                                  PartitionRef, int, str | None, int]]]],
                              removals: list[tuple[str, list[str]]]) -> bool:
        """Several brokers: the write, applied by Redis only if every touched group's lease
        still has the token this broker holds (spec/CoordinatorLease.tla, Apply). A stale
        token, or no answer (the write may still land), makes the broker forget those
        groups (spec: Apply refused, Lose, GiveUp)."""
        assert self.ownership is not None and self.leases is not None
        tokens = {g: self.ownership.token(g) for g in touched}
        try:
            stale = await self.leases.save_state(tokens, changed, gone, commits, self._clock(),
                                                 removals)
        except (RedisError, OSError) as exc:
            log.warning("could not persist coordinator state (dropping the groups' leases): "
                        "%s", exc)
            for group_id, token in tokens.items():
                self.ownership.after_write(group_id, token, lease.WriteOutcome.UNKNOWN)
            return False
        for group_id in stale:
            log.warning("write for group %r refused: another broker holds its lease", group_id)
            self.ownership.after_write(group_id, tokens[group_id], lease.WriteOutcome.REFUSED)
        return not stale

    def _forget_lost(self, touched: frozenset[str]) -> None:
        """After a failed write: the groups whose lease this broker lost leave memory."""
        if self.ownership is None:
            return
        lost = [g for g in touched if not self.ownership.believes(g)]
        if not lost:
            return
        groups = {g: grp for g, grp in self.state.groups.items() if g not in lost}
        self.state = dataclasses.replace(self.state, groups=groups)
        for group_id in lost:
            self._cancel_clean_up(group_id)
            self.durable.pop(group_id, None)
            for request_id, waiting_group in list(self._waiting_group.items()):
                future = self._waiting.get(request_id)
                if waiting_group == group_id and future is not None and not future.done():
                    future.set_exception(NotCoordinator(group_id))

    def _token(self, group_id: str) -> int:
        """The lease token this broker holds for the group (0: one broker, no leases)."""
        return self.ownership.token(group_id) if self.ownership is not None else 0

    def _start_clean_up(self, group_id: str, token: int) -> None:
        """DeleteGroupData: remove the group's Redis data in the background, then step
        GroupDataDeleted; with several brokers, under the lease ``token`` the deletion was
        decided (or the Dead group adopted) with."""
        self._cancel_clean_up(group_id)
        task = asyncio.create_task(self._delete_group_data(group_id, token),
                                   name=f"korvet-clean-up-{group_id}")
        self._cleanups[group_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._cleanups.get(group_id) is finished:
                del self._cleanups[group_id]

        task.add_done_callback(done)

    def _cancel_clean_up(self, group_id: str) -> None:
        """The group's lease is lost or granted anew, or the coordinator stops: its clean-up
        in progress stops (a write of it already sent is refused by its stale token)."""
        task = self._cleanups.pop(group_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _delete_group_data(self, group_id: str, token: int) -> None:
        if self.ownership is not None:
            await self._delete_group_data_fenced(group_id, token)
            return
        for attempt in range(10):
            try:
                await self.store.delete_group(group_id)
                break
            except (RedisError, OSError) as exc:
                log.warning("deleting group %s from Redis failed (%s); retrying", group_id, exc)
                await asyncio.sleep(min(5.0, 0.2 * 2**attempt))
        self._group_data_deleted(group_id)
        await self.submit_internal(core.GroupDataDeleted(group_id))

    async def _delete_group_data_fenced(self, group_id: str, token: int) -> None:
        """Several brokers: the clean-up is one write fenced by ``token`` (spec: CleanUp,
        then Apply or Refuse), sent only while this broker holds that token. Refused (a new
        owner), or without an answer (it may still land: only a new token makes it
        harmless), the broker forgets the group instead of retrying (spec: Refuse, Lose,
        GiveUp); whoever holds the group next finds it Dead and cleans up with its own token.
        The Redis consumer groups go after, while the token is still held (observability
        only: the streams are in other slots than the group's lease)."""
        assert self.ownership is not None and self.leases is not None
        try:
            committed, streams = await self.store.group_data(group_id)
            if not self.ownership.holds(group_id, token):
                return  # the lease was lost or granted anew meanwhile
            applied = await self.leases.delete_group(group_id, token, committed)
        except (RedisError, OSError) as exc:
            log.warning("deleting group %r from Redis failed (%s): dropping its lease, its "
                        "next coordinator cleans it up", group_id, exc)
            await self._drop_after_clean_up(group_id, token, lease.WriteOutcome.UNKNOWN)
            return
        if not applied:
            log.warning("clean-up of group %r refused: another broker holds its lease", group_id)
            await self._drop_after_clean_up(group_id, token, lease.WriteOutcome.REFUSED)
            return
        if self.ownership.holds(group_id, token):
            with contextlib.suppress(RedisError, OSError):
                await self.store.destroy_redis_groups(group_id, streams)
        self._group_data_deleted(group_id)
        await self.submit_internal(core.GroupDataDeleted(group_id))

    async def _drop_after_clean_up(self, group_id: str, token: int, outcome: str) -> None:
        assert self.ownership is not None
        if self._cleanups.get(group_id) is asyncio.current_task():
            del self._cleanups[group_id]  # forgetting the group must not cancel this task
        await self.ownership.lost(group_id, token, outcome)

    def _group_data_deleted(self, group_id: str) -> None:
        self.redis_groups = {(g, s) for g, s in self.redis_groups if g != group_id}

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

    async def _clean_up(self) -> None:
        """Kafka's periodic group clean-up: every ``groups.retention-check-interval-ms`` the
        groups this broker coordinates that are empty and have no committed offsets, or
        whose offsets expired (``groups.offsets-retention-ms``: empty that long), are
        deleted, by the DeleteGroups step a client's request takes (logged as such in the
        event log)."""
        while True:
            await asyncio.sleep(self._clean_up_every_ms / 1000)
            if self.ownership is not None:  # several brokers: nobody else expires orphans
                try:
                    taken = await self.ownership.adopt_orphans()
                except (RedisError, OSError) as exc:
                    log.warning("looking for groups no broker coordinates failed: %s", exc)
                else:
                    if taken:
                        log.info("took %d group(s) no broker coordinated, for the clean-up",
                                 taken)
            await self.clean_up_once()

    async def clean_up_once(self) -> None:
        """One round of the clean-up (the stepping task does it: ``_clean_up_step``)."""
        done: asyncio.Future[tuple[core.DeleteGroupsReply | None, frozenset[str]]] = \
            asyncio.get_running_loop().create_future()
        await self._queue.put(_CleanUp(done))
        reply, expired = await done
        if reply is None:
            return
        deleted = [r.group_id for r in reply.results if r.error is core.ErrorCode.NONE]
        for label, names in (
                ("empty group(s) without committed offsets",
                 [g for g in deleted if g not in expired]),
                ("empty group(s) whose committed offsets expired",
                 [g for g in deleted if g in expired])):
            if names:
                log.info("deleted %d %s: %s", len(names), label,
                         ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""))
        failed = [r for r in reply.results if r.error is not core.ErrorCode.NONE]
        if failed:
            log.info("group clean-up kept %d group(s) for now: %s", len(failed), ", ".join(
                f"{r.group_id} ({r.error.name})" for r in failed[:10]))

    async def _clean_up_step(self, item: _CleanUp) -> None:
        expired = frozenset(core.expired_groups(self.state, self.last_active, self._clock(),
                                                self._offsets_retention_ms))
        removable = tuple(sorted(g for g in {*core.removable_groups(self.state), *expired}
                                 if self.owns(g)))
        if removable:
            try:
                held = await self.store.with_open_transactions(removable)
            except (RedisError, OSError):
                held = set(removable)  # unknown: nothing is removed this round
            removable = tuple(g for g in removable if g not in held)
        if not removable:
            item.done.set_result((None, expired))
            return
        event = core.DeleteGroups(request_id=self.next_request_id(), group_ids=removable)
        future: asyncio.Future[core.Reply] = asyncio.get_running_loop().create_future()
        self._waiting[event.request_id] = future
        try:
            await self._apply(event)
        finally:
            self._waiting.pop(event.request_id, None)
        reply = future.result() if future.done() and not future.exception() else None
        item.done.set_result((reply if isinstance(reply, core.DeleteGroupsReply) else None,
                              expired))

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
                except (RedisError, OSError, AttributeError) as exc:
                    # AttributeError: redis-py's cluster client can pick a connection a
                    # failover just closed (its writer is None); the next fetch tries again.
                    log.debug("XGROUP CREATE %s %s failed: %s", ref.stream_key, group_id, exc)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
