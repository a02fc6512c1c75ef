"""Consumer groups in Redis: committed offsets, Redis consumer groups, coordinator snapshots.

Every key of one group shares the Redis Cluster hash slot of ``{group:<groupId>}``, so one
group's snapshot and offsets are written in one MULTI/EXEC on a cluster too:

    {ks}:{group:G}:snapshot             string: the coordinator's snapshot of group G (JSON)
    {ks}:{group:G}:commit:{topic}:{p}   hash: offset, metadata, leader-epoch, committed
                                        (the committed offset of one partition for G)
    {ks}:{group:G}:commits              set of the stream keys G has offsets for
    {ks}:{group:G}:redis-groups         set of the stream keys G has a Redis consumer group on
    {ks}:group-ids                      set of the group ids that have a snapshot
    {ks}:coordinator                    hash: bands, floor, redis-run-id, clean: what the
                                        coordinator keeps about its loads (durability.py)
    {ks}:{group:G}:lease                hash: owner, token, expires: the broker coordinating
                                        G when several share Redis (leases.py), in G's slot

On one Redis every write of a step is one transaction, as before. On Redis Cluster each
group's writes are one transaction in that group's slot (groups are independent: no rule of
the coordinator spans two groups); a new group is added to ``group-ids`` before its
transaction and a deleted one leaves it after, so a load never misses a stored snapshot.

The committed offset is the Kafka offset a consumer resumes from (the next record to
read). Redis consumer groups are kept for observability only: created lazily at the
group's first fetch of a partition, at the fetch offset (docs/spec/stream-group.md), and moved to the
committed position at each commit (XGROUP SETID), so ``XINFO GROUPS`` shows each
group's progress. Fetching never reads through them: the client's fetch_offset decides
what it gets (docs/spec/stream-group.md explains why XREADGROUP ``>`` would skip records).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from korvet.core.coordinator.durability import CoordinatorRecord
from korvet.core.offsets import codec_for

log = logging.getLogger("korvet.groups")

# A group's keys' suffixes after {ks}:{group:G}: (the module docstring has the layout)
INDEX = "commits"
REDIS_GROUPS = "redis-groups"
TXN_OFFSETS = "txn"  # the offsets of open transactions (storage/transactions.py TxnOffsetStore)


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """A topic partition as the group store needs it: the name and the stream key."""

    topic: str
    partition: int
    stream_key: str
    bits: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GroupStore:
    def __init__(self, client: aioredis.Redis, keyspace: str = "korvet") -> None:
        self.redis = client
        self.ks = keyspace
        self.cluster = isinstance(client, RedisCluster)
        self.group_ids_key = f"{keyspace}:group-ids"
        self.record_key = f"{keyspace}:coordinator"
        # Whether a (group, stream) has a Redis consumer group for commits to move along:
        # the coordinator answers from what it created (every pair, until it says).
        self.has_redis_group: Callable[[str, str], bool] = lambda group, stream: True

    def group_key(self, group: str, suffix: str) -> str:
        """A key in ``group``'s hash slot. A group id with a ``}`` in it ends the tag early,
        but at the same place in every key of that group, so they still share a slot."""
        return f"{self.ks}:{{group:{group}}}:{suffix}"

    def snapshot_key(self, group: str) -> str:
        return self.group_key(group, "snapshot")

    def commit_key(self, stream_key: str, group: str) -> str:
        return self.group_key(group, f"commit:{partition_of(stream_key)}")

    def index_key(self, group: str) -> str:
        return self.group_key(group, INDEX)

    def redis_groups_key(self, group: str) -> str:
        """The streams the group's Redis consumer group was created on: deleting the group
        destroys those, not every stream's (a SCAN of the whole keyspace per group)."""
        return self.group_key(group, REDIS_GROUPS)

    def lease_key(self, group: str) -> str:
        """The group's coordinator lease (korvet/storage/leases.py), in the group's slot, so
        one script reads it and writes the group's other keys on a cluster too."""
        return self.group_key(group, "lease")

    # --- committed offsets ---------------------------------------------------------------

    async def save_state(self, snapshots: dict[str, str], deleted: Sequence[str],
                         commits: Sequence[tuple[str, Sequence[tuple[PartitionRef, int,
                                                                       str | None, int]]]],
                         now_ms: int,
                         removals: Sequence[tuple[str, Sequence[str]]] = ()) -> None:
        """Durably store coordinator snapshots and committed offsets, and remove deleted
        offsets (``removals``: group, stream keys), in one MULTI/EXEC; then move the Redis
        consumer groups along.

        The transaction holds the snapshots, the committed offsets and each group's index
        of committed partitions; the XGROUP SETID calls after it are observability only,
        so their failures (no stream yet, no Redis group yet) are ignored.
        """
        touched = touched_groups(snapshots, deleted, commits, removals)
        ops = self.group_ops(snapshots, deleted, commits, now_ms, removals)

        def queue(pipe: Any, group: str) -> None:
            for command, key, args in ops.get(group, ()):
                pipe.execute_command(command, key, *args)

        await self._per_group(touched, queue, added=list(snapshots), gone=list(deleted))
        await self.move_redis_groups(commits)

    def group_ops(self, snapshots: dict[str, str], deleted: Sequence[str],
                  commits: Sequence[tuple[str, Sequence[tuple[PartitionRef, int,
                                                                str | None, int]]]],
                  now_ms: int, removals: Sequence[tuple[str, Sequence[str]]] = ()
                  ) -> dict[str, list[tuple[str, str, list[str]]]]:
        """The writes of ``save_state`` as (command, key, arguments), all text, per group
        (every key of one group's list is in that group's slot). ``group-ids`` is not
        among them: the caller grows it before and shrinks it after (``_per_group``)."""
        ops: dict[str, list[tuple[str, str, list[str]]]] = {}
        for group, text in snapshots.items():
            ops.setdefault(group, []).append(("SET", self.snapshot_key(group), [text]))
        for group in deleted:
            ops.setdefault(group, []).append(("UNLINK", self.snapshot_key(group), []))
        for group, offsets in commits:
            mine = ops.setdefault(group, [])
            indexed = []
            for ref, offset, metadata, epoch in offsets:
                key = self.commit_key(ref.stream_key, group)
                fields = ["offset", str(offset), "leader-epoch", str(epoch),
                          "committed", str(now_ms)]
                if metadata is None:
                    mine.append(("HDEL", key, ["metadata"]))
                else:
                    fields += ["metadata", metadata]
                mine.append(("HSET", key, fields))
                indexed.append(ref.stream_key)
            if indexed:  # one SADD for the commit's partitions, not one each
                mine.append(("SADD", self.index_key(group), indexed))
        for group, stream_keys in removals:
            mine = ops.setdefault(group, [])
            for stream_key in stream_keys:
                mine.append(("UNLINK", self.commit_key(stream_key, group), []))
            if stream_keys:
                mine.append(("SREM", self.index_key(group), list(stream_keys)))
        return ops

    async def move_redis_groups(self, commits: Sequence[tuple[str, Sequence[tuple[
            PartitionRef, int, str | None, int]]]]) -> None:
        """After committed offsets are stored: move the Redis consumer groups along
        (observability only; failures are ignored), on the streams where the group has one
        (``has_redis_group``): a tool committing 10,000 offsets for a group that never
        fetched as a group sends no 10,000 XGROUP SETID that all fail."""
        moves = [(ref.stream_key, group, _id_before(ref.bits, offset))
                 for group, offsets in commits for ref, offset, _metadata, _epoch in offsets
                 if self.has_redis_group(group, ref.stream_key)]
        if not moves:
            return
        progress = self.redis.pipeline(transaction=False)
        for stream_key, group, position in moves:
            progress.execute_command("XGROUP", "SETID", stream_key, group, position)
        await progress.execute(raise_on_error=False)

    async def _per_group(self, groups: Sequence[str], queue: Callable[[Any, str], None], *,
                         added: Sequence[str] = (), gone: Sequence[str] = (),
                         extra: Callable[[Any], None] | None = None) -> None:
        """Run ``queue``'s commands for every group transactionally: one MULTI for all on
        one Redis, one MULTI per group (its slot) on a cluster, with ``group-ids`` grown
        before and shrunk after. ``extra`` queues commands outside any group (the cluster
        runs them last, in their own transaction). Keys are removed with
        ``execute_command("UNLINK", ...)``: a cluster pipeline's ``unlink`` is a coroutine
        of its own (split by slot), not a queued command."""
        if not self.cluster:
            pipe = self.redis.pipeline(transaction=True)
            if added:
                pipe.sadd(self.group_ids_key, *added)
            for group in groups:
                queue(pipe, group)
            if gone:
                pipe.srem(self.group_ids_key, *gone)
            if extra is not None:
                extra(pipe)
            await pipe.execute()
            return
        if added:
            await self.redis.sadd(self.group_ids_key, *added)

        async def one(group: str) -> None:
            pipe = self.redis.pipeline(transaction=True)
            queue(pipe, group)
            await pipe.execute()

        await asyncio.gather(*(one(g) for g in groups))
        if gone:
            await self.redis.srem(self.group_ids_key, *gone)
        if extra is not None:
            pipe = self.redis.pipeline(transaction=True)
            extra(pipe)
            await pipe.execute()

    # --- Redis consumer groups ----------------------------------------------------------------

    async def ensure_redis_group(self, stream_key: str, group: str, bits: int,
                                 fetch_offset: int) -> bool:
        """XGROUP CREATE at the position before ``fetch_offset``, lazily at the first group
        fetch (docs/spec/stream-group.md). An existing group (BUSYGROUP, e.g. after a broker restart)
        keeps its position. A partition without a stream yet is left for a later fetch.
        Returns True when the Redis group exists afterwards."""
        # Noted first, so a Redis group never exists unnoted (a noted stream without one is
        # harmless: its XGROUP DESTROY answers 0).
        await self.redis.sadd(self.redis_groups_key(group), stream_key)
        try:
            await self.redis.execute_command(  # type: ignore[no-untyped-call]
                "XGROUP", "CREATE", stream_key, group, _id_before(bits, fetch_offset))
        except ResponseError as exc:
            text = str(exc)
            if "BUSYGROUP" in text:
                return True
            if "requires the key to exist" in text:
                return False
            raise
        return True

    async def destroy_redis_groups(self, group: str, streams: Sequence[str]) -> int:
        """XGROUP DESTROY the group on these streams (pipelined, 200 at a time)."""
        destroyed = 0
        for start in range(0, len(streams), 200):
            pipe = self.redis.pipeline(transaction=False)
            for stream_key in streams[start:start + 200]:
                pipe.execute_command("XGROUP", "DESTROY", stream_key, group)
            results = await pipe.execute(raise_on_error=False)
            destroyed += sum(1 for r in results if r == 1)
        return destroyed

    async def with_open_transactions(self, groups: Sequence[str]) -> set[str]:
        """Those of ``groups`` holding offsets of open transactions: the periodic clean-up
        keeps them, as Kafka's keeps a group with pending transactional offsets."""
        found = set()
        for group in groups:
            if await self.redis.exists(self.group_key(group, TXN_OFFSETS)):
                found.add(group)
        return found

    async def group_data(self, group: str) -> tuple[list[str], list[str]]:
        """What Redis keeps for a group besides its snapshot: the stream keys it has committed
        offsets on, and those it has a Redis consumer group on (committed or fetched from as
        a group), each sorted."""
        keys = sorted(_text(k) for k in await self.redis.smembers(self.index_key(group)))
        noted = {_text(k) for k in await self.redis.smembers(self.redis_groups_key(group))}
        return keys, sorted(noted | set(keys))

    def delete_group_ops(self, group: str, committed: Sequence[str]
                         ) -> list[tuple[str, str, list[str]]]:
        """The writes that remove a group's keys (its offsets on ``committed``, its indexes,
        its snapshot) as (command, key, arguments), every key in the group's slot; not
        ``group-ids``, which the caller shrinks."""
        ops: list[tuple[str, str, list[str]]] = [
            ("UNLINK", self.commit_key(key, group), []) for key in committed]
        # The offsets of open transactions go with the group, as in Kafka (a pending
        # transactional offset is deleted with the group's committed ones): the
        # transaction's commit marker then finds none to apply and cannot bring back
        # offsets of a group that was deleted.
        ops.extend(("UNLINK", key, []) for key in (
            self.index_key(group), self.snapshot_key(group), self.redis_groups_key(group),
            self.group_key(group, TXN_OFFSETS)))
        return ops

    async def delete_group(self, group: str) -> None:
        """Everything Redis keeps for a group: offsets, index, snapshot, and its Redis
        consumer groups on the streams it committed on or fetched from as a group (one
        broker; with several, ``LeaseStore.delete_group`` fences it by the group's lease)."""
        committed, streams = await self.group_data(group)
        ops = self.delete_group_ops(group, committed)

        def queue(pipe: Any, group: str) -> None:
            for command, key, args in ops:
                pipe.execute_command(command, key, *args)

        await self._per_group([group], queue, gone=[group])
        await self.destroy_redis_groups(group, streams)

    # --- coordinator snapshots and the load record -------------------------------------------

    async def load_snapshots(self) -> dict[str, str]:
        groups = sorted(_text(g) for g in await self.redis.smembers(self.group_ids_key))
        if not groups:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            pipe.get(self.snapshot_key(group))
        texts = await pipe.execute()
        return {g: _text(t) for g, t in zip(groups, texts, strict=True) if t is not None}

    async def load_record(self) -> CoordinatorRecord | None:
        raw: dict[Any, Any] = await self.redis.hgetall(self.record_key)
        fields = {_text(k): _text(v) for k, v in raw.items()}
        fields.pop(_FSYNC_RESTORE, None)  # a barrier's note, not part of the record
        if not fields:
            return None
        try:
            return CoordinatorRecord(bands=int(fields.get("bands", "0")),
                                     floor=int(fields.get("floor", "0")),
                                     redis_run_id=fields.get("redis-run-id", ""),
                                     clean=fields.get("clean", "0") == "1")
        except ValueError:
            log.error("unreadable coordinator record %s; treating it as missing", fields)
            return None

    async def redis_identity(self) -> tuple[str, bool]:
        """Redis' run id (new at every Redis start) and whether it fsyncs every write it
        acknowledges (appendonly yes, appendfsync always). A Redis that will not say is
        taken not to. First, an ``appendfsync always`` that a broker stopped in the middle
        of its fsync barrier left behind is set back (``undo_fsync_barrier``)."""
        await self.undo_fsync_barrier()
        if self.cluster:
            return await self._cluster_identity()
        info: dict[str, Any] = await self.redis.info("server")
        run_id = str(info.get("run_id", ""))
        try:
            config: dict[Any, Any] = await self.redis.config_get("append*")
        except Exception:  # CONFIG may be renamed or refused by an ACL
            return run_id, False
        values = {_text(k): _text(v) for k, v in config.items()}
        return run_id, values.get("appendonly") == "yes" and values.get("appendfsync") == "always"

    async def _cluster_identity(self) -> tuple[str, bool]:
        """A cluster's identity is its masters' run ids together: a failover (a replica
        promoted, with a run id of its own) counts as a restart that may have lost the last
        writes, as a crash failover can; the coordinator then raises generations (safe)."""
        infos: dict[str, Any] = await self.redis.info(
            "server", target_nodes=RedisCluster.PRIMARIES)
        run_id = ",".join(sorted(str(i.get("run_id", "")) for i in infos.values()))
        try:
            configs: dict[Any, Any] = await self.redis.config_get(
                "append*", target_nodes=RedisCluster.PRIMARIES)
        except Exception:  # CONFIG may be renamed or refused by an ACL
            return run_id, False
        always = all(_text(c.get("appendonly", "")) == "yes"
                     and _text(c.get("appendfsync", "")) == "always" for c in configs.values())
        return run_id, always

    async def write_load(self, record: CoordinatorRecord, snapshots: dict[str, str],
                         fsync_always: bool) -> bool:
        """The load's record (and, after a raise, the raised snapshots) in one transaction,
        made durable before the coordinator serves (spec: BrokerRestart writes it with an
        fsync barrier). Returns False when no barrier was available: the write stands, but
        a Redis crash within the next second could undo it."""
        def queue(pipe: Any, group: str) -> None:
            pipe.set(self.snapshot_key(group), snapshots[group])

        def the_record(pipe: Any) -> None:
            pipe.hset(self.record_key, mapping={
                "bands": record.bands, "floor": record.floor,
                "redis-run-id": record.redis_run_id, "clean": "1" if record.clean else "0"})

        async def write() -> None:
            # On a cluster the raised snapshots are written before the record: a load that
            # sees the record finds them raised (raising again is harmless).
            await self._per_group(list(snapshots), queue, added=list(snapshots),
                                  extra=the_record)

        if fsync_always:
            await write()
            return True
        return await self._with_fsync_barrier(write)

    async def undo_fsync_barrier(self) -> None:
        """A broker killed between its barrier's ``CONFIG SET appendfsync always`` and the
        set back left Redis fsyncing every write, and the next start would have taken that
        for the operator's choice. The barrier notes the value it replaces in the record
        (``fsync-restore``) first: set it back if Redis still says ``always``."""
        try:
            note = await self.redis.hget(self.record_key, _FSYNC_RESTORE)
            if note is None:
                return
            left, since = _read_note(_text(note))
            if time.time() * 1000 - since < _BARRIER_SECONDS * 1000:
                return  # another broker starting now may be inside its barrier
            config: dict[Any, Any] = await self.redis.config_get("appendfsync")
            if _text(next(iter(config.values()))) == "always":
                await self.redis.config_set("appendfsync", left)
                log.warning("appendfsync was left at 'always' by a broker stopped during its "
                            "start-up write; set back to %r", left)
            await self.redis.hdel(self.record_key, _FSYNC_RESTORE)
        except ResponseError as exc:  # no CONFIG (renamed, ACL): nothing was changed either
            log.debug("appendfsync not checked: %s", exc)

    async def _with_fsync_barrier(self, write: Callable[[], Awaitable[None]]) -> bool:
        """Redis 7.0 has no per-write fsync (WAITAOF is 7.2): with ``appendfsync always``
        set for the moment of the write, Redis fsyncs its file before it answers. The value
        it replaces is noted in the record first, so a broker stopped in between has it set
        back at the next start (``undo_fsync_barrier``)."""
        try:
            config: dict[Any, Any] = await self.redis.config_get("appendfsync")
            previous = _text(next(iter(config.values())))  # on a cluster: one node's (all alike)
            # Brokers starting together: the first note stands, and a barrier that finds one
            # puts back the policy it names, not the 'always' another barrier set.
            if not await self.redis.hsetnx(self.record_key, _FSYNC_RESTORE,
                                           f"{previous} {int(time.time() * 1000)}"):
                noted = await self.redis.hget(self.record_key, _FSYNC_RESTORE)
                if noted is not None:
                    previous = _read_note(_text(noted))[0]
            await self.redis.config_set("appendfsync", "always")
        except Exception as exc:  # no CONFIG (renamed, ACL): the write is made plainly
            log.warning("cannot make the coordinator's load record durable (CONFIG SET "
                        "appendfsync refused: %s); a Redis crash within a second of this "
                        "start could let a generation be handed out twice", exc)
            await write()
            return False
        try:
            await write()
        finally:
            await self.redis.config_set("appendfsync", previous)
            await self.redis.hdel(self.record_key, _FSYNC_RESTORE)
        return True

    async def mark_clean(self) -> None:
        """The clean-stop mark, written after the coordinator's last write."""
        await self.redis.hset(self.record_key, "clean", "1")


_FSYNC_RESTORE = "fsync-restore"  # the record's field: "<appendfsync to set back> <ms>"
_BARRIER_SECONDS = 30  # a younger note may belong to a barrier still in progress


def _read_note(note: str) -> tuple[str, int]:
    policy, _, stamp = note.partition(" ")
    return policy, int(stamp) if stamp.isdigit() else 0


def _id_before(bits: int, offset: int) -> str:
    """The entry id just before ``offset``: a Redis group created or set there delivers the
    record at ``offset`` next (Redis groups deliver ids greater than their position)."""
    if offset <= 0:
        return "0-0"
    return str(codec_for(bits).decode(offset - 1))


def partition_of(stream_key: str) -> str:
    """``topic:partition`` from a stream key ``{ks}:{topic:partition}:stream``."""
    return stream_key[stream_key.rfind("{") + 1:stream_key.rfind("}")]


def id_before(bits: int, offset: int) -> str:
    """The Redis group position that delivers ``offset`` next (public for the metrics)."""
    return _id_before(bits, offset)


def touched_groups(snapshots: dict[str, str], deleted: Sequence[str],
                   commits: Sequence[tuple[str, Sequence[Any]]],
                   removals: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """The groups a step writes, each once, in a stable order."""
    return list(dict.fromkeys([*snapshots, *deleted, *(g for g, _ in commits),
                               *(g for g, _ in removals)]))
