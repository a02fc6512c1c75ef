"""The Redis adapter: topics, partition streams, appends, reads, producer ids.

Key layout (docs/users/storage.md; ``ks`` is the keyspace, default ``korvet``). Every key a
script or transaction touches shares one Redis Cluster hash slot: the part in braces.

    {ks}:{topic:partition}:stream     stream, one entry per record (storage/entries.py)
    {ks}:{topic:partition}:partition  hash: last (last offset's id), start (log start id),
                                      id and partitions (the topic this partition belongs to,
                                      stamped at creation: the scripts check it, not the
                                      topic hash, which lives in another slot),
                                      p:<producer id> (idempotent producer state),
                                      t:<producer id> (its transaction here), lso (the
                                      oldest open transaction's first id)
    {ks}:{topic:partition}:open       sorted set: producer ids with an open transaction
    {ks}:{topic:partition}:aborted    sorted set: the aborted index (append.lua)
    {ks}:{topic:partition}:waiting    present while a fetch waits for the stream (notifier)
    {ks}:{topic:partition}:clean…     the log cleaner's pass, map, new key and lease
                                      (storage/cleaner.py, clean.lua)
    {ks}:{topics}:topic:{name}        hash: id, name, partitions, created, config.<name>
    {ks}:{topics}:names               set of topic names
    {ks}:{topics}:ids                 hash: topic id -> name
    {ks}:producer-ids                 counter for InitProducerId
    (groups: storage/groups.py)

Every write that must be atomic (append, a topic's registration) is one server-side Lua
script on one slot; a topic's partitions are stamped and dropped one script each, after
(creation) or before (deletion) the registration changes. Reads that touch several
partitions are one pipeline (redis-py's cluster pipeline splits it by node).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from importlib import resources
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from korvet.core.epochs import FIXED, Epochs
from korvet.core.offsets import Codec, EntryId
from korvet.core.produce import AppendStatus
from korvet.core.topics import TopicConfig, TopicInfo, TrimPolicy
from korvet.storage.cluster_pipe import ClusterPipes
from korvet.storage.entries import PackedRecords
from korvet.storage.groups import INDEX, REDIS_GROUPS
from korvet.storage.pipe import LARGE_REPLIES, Life, RedisPipe


def _lua(name: str) -> str:
    return (resources.files("korvet.storage") / "lua" / name).read_text()


def cleaner_keys(stream_key: str) -> tuple[str, str, str, str]:
    """The log cleaner's keys of a partition (clean.lua): its pass, its map, the new key it
    copies into and its lease, all in the stream's hash slot."""
    base = stream_key.removesuffix(":stream")
    return f"{base}:clean", f"{base}:clean:map", f"{base}:clean:new", f"{base}:clean:lease"


@dataclass(frozen=True, slots=True)
class AppendResult:
    status: AppendStatus
    base_offset: int = -1
    last_offset: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    transactional: bool = False  # a batch of a transaction (append.lua's transactional append)
    marker: bytes = b""  # a transaction marker: "<COMMIT|ABORT> <coordinator epoch> <version>"

    @staticmethod
    def of_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  tv2: bool) -> ProducerBatch:
        text = b"%s %d %d" % (b"COMMIT" if commit else b"ABORT", coordinator_epoch,
                              2 if tv2 else 1)
        return ProducerBatch(producer_id, producer_epoch, MARKER_SEQUENCE, -1, True, text)


MARKER_SEQUENCE = -2  # append.lua's ARGV 10 for a marker


@dataclass(frozen=True, slots=True)
class PartitionRead:
    raw: list[Any]  # XRANGE's reply as Redis sent it: [entry id, [f1, v1, ...]] per entry
    log_start_offset: int
    high_watermark: int
    epochs: Epochs = FIXED  # a dense topic's leader epochs (a time topic's: 0 throughout)
    last_stable_offset: int = -1  # the first offset of the oldest open transaction, else the HW
    aborted: tuple[tuple[int, int, int], ...] = ()  # read_committed: (pid, first, last) aborted

    def entries(self, bits: int) -> list[tuple[int, list[bytes]]]:
        """(offset, fields) per entry; ids wider than ``bits`` (not the broker's) skipped.
        ``bits`` 0 is a dense topic: offset o is the id o-1."""
        limit = 1 << bits
        bias = 1 if bits == 0 else 0
        found = []
        for entry_id, fields in self.raw:
            ms, _, seq_text = entry_id.partition(b"-")
            seq = int(seq_text) - bias
            if 0 <= seq < limit:
                found.append(((int(ms) << bits) | seq, fields))
        return found


class OldLayoutError(Exception):
    """Redis holds data under the key names used before the hash-tagged layout."""


class CreateOutcome(Enum):
    CREATED = "created"
    VALID = "valid"  # validate_only: would be created
    EXISTS = "exists"
    COLLIDES = "collides"


__all__ = ["AppendResult", "AppendStatus", "CreateOutcome", "OldLayoutError", "PartitionRead",
           "ProducerBatch", "RedisStore"]


class RedisStore:
    def __init__(self, client: aioredis.Redis, keyspace: str = "korvet", *,
                 wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self.redis = client
        # acks=all appends are answered once this many replicas have them (WAIT; 0: once
        # the master has them, Redis' asynchronous replication)
        self.wait_replicas = wait_replicas
        self._wait = (hiredis.pack_command(("WAIT", wait_replicas, wait_timeout_ms))  # type: ignore[arg-type]
                      if wait_replicas > 0 else None)
        self.ks = keyspace
        # Raw [id, [f1, v1, ...]] replies: redis-py's default turns fields into a dict, which
        # would lose repeated header names (and costs a third of the read time).
        client.set_response_callback("XRANGE", _raw_entries)
        client.set_response_callback("XREVRANGE", _raw_entries)
        self._append: AsyncScript = client.register_script(_lua("append.lua"))
        self._create_topic: AsyncScript = client.register_script(_lua("create_topic.lua"))
        self._delete_topic: AsyncScript = client.register_script(_lua("delete_topic.lua"))
        self._bounds: AsyncScript = client.register_script(_lua("bounds.lua"))
        self._time_search: AsyncScript = client.register_script(_lua("time_search.lua"))
        self._batch_holder: AsyncScript = client.register_script(_lua("batch_holder.lua"))
        # Per (topic, partition, topic id): the fixed parts of its append command.
        self._append_heads: dict[tuple[str, int, str, int, str, bool], _AppendHead] = {}
        self._stamp_script = _lua("stamp_partition.lua")
        self._drop_script = _lua("drop_partition.lua")
        # Appends go down one connection per master, in order (storage/pipe.py); on Redis
        # Cluster, the connection to the master of the partition's slot (cluster_pipe.py).
        self.cluster: ClusterPipes | None = None
        self.pipe: RedisPipe | None = None
        # Fetches read through a pipe of their own on one Redis (its replies parsed straight
        # from the socket's buffer: storage/pipe.py), not behind the appends.
        self.reads: RedisPipe | None = None
        if isinstance(client, RedisCluster):
            self.cluster = ClusterPipes(client, scripts=(_lua("append.lua"),))
        else:
            self.pipe = RedisPipe(client, scripts=(_lua("append.lua"),))
            self.reads = RedisPipe(client, scripts=(_lua("batch_holder.lua"),),
                                   sizes=LARGE_REPLIES)
        self.topics_key = f"{keyspace}:{{topics}}:names"
        self.topic_ids_key = f"{keyspace}:{{topics}}:ids"
        self.producer_ids_key = f"{keyspace}:producer-ids"
        self.append_channel = f"{keyspace}:appends"
        self.topic_channel = f"{keyspace}:topic-changes"

    # --- keys ---------------------------------------------------------------------

    # Topic names are [a-zA-Z0-9._-] (Kafka's rule, checked at creation), so the braces of a
    # partition's hash tag are its own.

    def stream_key(self, topic: str, partition: int) -> str:
        return f"{self.ks}:{{{topic}:{partition}}}:stream"

    def meta_key(self, topic: str, partition: int) -> str:
        return f"{self.ks}:{{{topic}:{partition}}}:partition"

    def topic_key(self, name: str) -> str:
        return f"{self.ks}:{{topics}}:topic:{name}"

    @staticmethod
    def times_key(stream_key: str) -> str:
        """A dense topic partition's time index (append.lua), in the stream's slot."""
        return stream_key.removesuffix(":stream") + ":times"

    @staticmethod
    def open_key(stream_key: str) -> str:
        """The partition's open transactions (append.lua)."""
        return stream_key.removesuffix(":stream") + ":open"

    @staticmethod
    def aborted_key(stream_key: str) -> str:
        """The partition's aborted index (append.lua)."""
        return stream_key.removesuffix(":stream") + ":aborted"

    @staticmethod
    def waiting_key(stream_key: str) -> str:
        """Present while some broker has a fetch waiting for ``stream_key`` (see notifier);
        in the stream's slot, for append.lua checks it."""
        return stream_key.removesuffix(":stream") + ":waiting"

    def old_layout_keys(self) -> list[str]:
        """Keys only the layout before hash tags wrote (Korvet before issue 12)."""
        return [f"{self.ks}:topics", f"{self.ks}:topic-ids", f"{self.ks}:groups"]

    async def check_layout(self) -> None:
        """Refuse data written with the old key names: this version would not see it."""
        found = [k for k in self.old_layout_keys() if await self.redis.exists(k)]
        if found:
            raise OldLayoutError(
                f"Redis holds Korvet data in the key layout before hash tags ({', '.join(found)} "
                f"exist, and streams named {self.ks}:stream:<topic>:<partition>); this version "
                f"reads {self.ks}:{{<topic>:<partition>}}:stream and the other names in "
                "docs/users/storage.md. Read it out with the previous Korvet version (e.g. "
                "MirrorMaker to a new broker), or start on another keyspace (--keyspace) or an "
                "empty Redis.")

    # --- topics -------------------------------------------------------------------

    @staticmethod
    def _topic_from_hash(raw: Mapping[bytes, bytes], defaults: Mapping[str, str]) -> TopicInfo | None:
        if not raw or b"id" not in raw:
            return None
        explicit = {
            k.decode()[len("config."):]: v.decode()
            for k, v in raw.items() if k.startswith(b"config.")
        }
        return TopicInfo(
            name=raw[b"name"].decode(),
            topic_id=raw[b"id"].decode(),
            partitions=int(raw[b"partitions"]),
            config=TopicConfig(explicit=explicit, defaults=defaults),
        )

    async def get_topic(self, name: str, defaults: Mapping[str, str]) -> TopicInfo | None:
        raw: dict[bytes, bytes] = await self.redis.hgetall(self.topic_key(name))  # type: ignore[assignment]
        return self._topic_from_hash(raw, defaults)

    async def list_topic_names(self) -> list[str]:
        names = await self.redis.smembers(self.topics_key)
        return sorted(_text(n) for n in names)

    async def list_topics(self, defaults: Callable[[str], Mapping[str, str]]) -> list[TopicInfo]:
        names = await self.list_topic_names()
        if not names:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self.topic_key(name))
        hashes = await pipe.execute()
        topics = [self._topic_from_hash(raw, defaults(name)) for name, raw in zip(names, hashes, strict=True)]
        return [t for t in topics if t is not None]

    async def topic_name_for_id(self, topic_id: str) -> str | None:
        name = await self.redis.hget(self.topic_ids_key, topic_id)
        return _text(name) if name is not None else None

    async def create_topic(self, name: str, partitions: int, configs: Mapping[str, str],
                           now_ms: int, *, validate_only: bool = False) -> tuple[CreateOutcome, str]:
        """Returns the outcome and the topic id (or the colliding name)."""
        topic_id = str(uuid.uuid4())
        args: list[str | int] = [name, topic_id, partitions, now_ms, 1 if validate_only else 0]
        for key, value in configs.items():
            args.extend((key, value))
        reply = await self._create_topic(
            keys=[self.topic_key(name), self.topics_key, self.topic_ids_key], args=args
        )
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        if text == "OK":
            if not validate_only:
                await self._stamp(name, topic_id, partitions)
                await self.redis.publish(self.topic_channel, name)
            return (CreateOutcome.VALID if validate_only else CreateOutcome.CREATED), topic_id
        if text == "EXISTS":
            return CreateOutcome.EXISTS, ""
        return CreateOutcome.COLLIDES, text.removeprefix("COLLIDES ")

    async def _stamp(self, name: str, topic_id: str, partitions: int) -> None:
        """Stamp every partition with the topic (stamp_partition.lua, one per slot). Until
        then an append to it answers NO_TOPIC, which clients retry."""
        await self._per_partition(self._stamp_script, name, range(partitions),
                                  [topic_id, partitions])

    async def _per_partition(self, script: str, name: str, partitions: range,
                             args: list[str | int]) -> None:
        for start in range(partitions.start, partitions.stop, 500):
            pipe = self.redis.pipeline(transaction=False)
            for partition in range(start, min(start + 500, partitions.stop)):
                stream = self.stream_key(name, partition)
                pipe.eval(script, 9, stream, self.meta_key(name, partition),
                          self.times_key(stream), self.open_key(stream),
                          self.aborted_key(stream), *cleaner_keys(stream), *args)
            await pipe.execute()

    async def delete_topic(self, name: str) -> bool:
        reply = await self._delete_topic(
            keys=[self.topic_key(name), self.topics_key, self.topic_ids_key], args=[name])
        if not reply:
            return False
        topic_id, partitions = _text(reply[0]), int(reply[1])
        await self._per_partition(self._drop_script, name, range(partitions), [topic_id])
        # Committed offsets of every group for this topic's partitions go with it, and the
        # partitions leave the groups' indexes of committed and Redis-group streams (SCAN
        # runs on every master of a cluster; UNLINK is split by slot).
        pattern = f"{_escape(self.ks)}:{{group:*}}:commit:{name}:*"
        batch: list[bytes] = []

        async def flush() -> None:
            pipe = self.redis.pipeline(transaction=False)
            for key in batch:
                text = _text(key)
                group_tag = text[:text.rfind(f":commit:{name}:")]  # {ks}:{group:G}
                partition = text[text.rfind(":") + 1:]
                if partition.isdigit():
                    stream = self.stream_key(name, int(partition))
                    pipe.srem(f"{group_tag}:{INDEX}", stream)
                    pipe.srem(f"{group_tag}:{REDIS_GROUPS}", stream)
            await pipe.execute(raise_on_error=False)
            await self.redis.unlink(*batch)
            batch.clear()

        async for key in self.redis.scan_iter(match=pattern, count=500):
            batch.append(key)
            if len(batch) >= 500:
                await flush()
        if batch:
            await flush()
        await self.redis.publish(self.topic_channel, name)
        return True

    async def grow_partitions(self, name: str, topic_id: str, count: int) -> bool:
        """Raise the partition count atomically; False if the topic changed meanwhile."""
        grown = await self.redis.eval(
            "local t = redis.call('HMGET', KEYS[1], 'id', 'partitions') "
            "if t[1] ~= ARGV[1] or tonumber(t[2]) >= tonumber(ARGV[2]) then return 0 end "
            "redis.call('HSET', KEYS[1], 'partitions', ARGV[2]) return 1",
            1, self.topic_key(name), topic_id, count,
        )
        if grown:
            await self._stamp(name, topic_id, count)
        await self.redis.publish(self.topic_channel, name)
        return bool(grown)

    async def update_topic_configs(self, name: str, set_configs: Mapping[str, str],
                                   delete: Sequence[str]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        if set_configs:
            pipe.hset(self.topic_key(name),
                      mapping={f"config.{k}": v for k, v in set_configs.items()})
        if delete:
            pipe.hdel(self.topic_key(name), *[f"config.{k}" for k in delete])
        await pipe.execute()
        await self.redis.publish(self.topic_channel, name)

    # --- the log --------------------------------------------------------------------

    async def append(self, topic: TopicInfo, partition: int, records: PackedRecords, count: int,
                     now_ms: int, trim: TrimPolicy, producer: ProducerBatch, *,
                     replicated: bool = False) -> AppendResult:
        """Append one batch: ``records`` from ``entries.pack_records``."""
        return await self.append_result(
            topic, await self.append_send(topic, partition, records, count, now_ms, trim, producer,
                                          replicated=replicated))

    async def append_send(self, topic: TopicInfo, partition: int, records: PackedRecords,
                          count: int, now_ms: int, trim: TrimPolicy,
                          producer: ProducerBatch, *, replicated: bool = False) -> asyncio.Future[Any]:
        """Send the append now, on the shared pipe (commands run in the order sent); the
        returned future holds the script's reply, for ``append_result``. The command is packed
        here (redis-py's asyncio client packs in pure Python, which costs more than the
        append): a partition's fixed arguments once (``_append_head``), the records come
        packed already. ``replicated`` (acks=all): followed by WAIT when ``wait_replicas``
        asks for it. A dense topic's append names the Redis life it goes to (its epoch
        follows it: spec/DenseLog.tla), so it is packed for that life."""
        wait = self._wait if replicated else None
        if topic.config.dense:
            stream = self.stream_key(topic.name, partition)

            def pack(life: Life) -> bytes:
                return self.append_command(topic, partition, records, count, now_ms, trim,
                                           producer, life)[1]

            if self.cluster is not None:
                return await self.cluster.send_packed_for(stream, pack, wait)
            assert self.pipe is not None
            life = await self.pipe.life()
            return await self.pipe.send(pack(life), wait, life)
        stream, packed = self.append_command(topic, partition, records, count, now_ms, trim,
                                             producer)
        if self.cluster is not None:
            return await self.cluster.send(stream, packed, wait)
        assert self.pipe is not None
        return await self.pipe.send(packed, wait)

    def append_command(self, topic: TopicInfo, partition: int, records: PackedRecords,
                       count: int, now_ms: int, trim: TrimPolicy,
                       producer: ProducerBatch, life: Life | None = None) -> tuple[str, bytes]:
        """The partition's stream key and the append's RESP bytes: EVALSHA of append.lua
        with its keys and ARGV (in the script's order), then the records, then a dense
        topic's trailer: its index interval and the Redis ``life`` it goes to."""
        txn = producer.transactional
        fixed = self._append_heads.get(_head_key(topic, partition, txn))
        if fixed is None:
            fixed = self._append_head(topic, partition, txn)
        stream, keys, middle, channel, trailer, extra = fixed
        last_sequence = (_bulk(producer.marker) if producer.marker
                         else _bulk_int(producer.last_sequence))
        if extra:
            run_id, clock = (life.run_id, life.clock) if life is not None else ("", 0)
            trailer += _bulk(run_id.encode()) + _bulk_int(clock)
        # The command in one join, the records' bytes copied once: its arguments are the
        # script's sha and keys, then ARGV in append.lua's order, then the records, then a
        # dense topic's trailer (its index interval).
        packed = b"".join((
            b"*%d\r\n" % (_APPEND_HEAD_ARGS + extra + records.args), keys, _bulk_int(now_ms),
            middle, _bulk_int(trim.min_id_ms), _bulk_int(trim.max_len),
            _ONE if trim.approximate else _ZERO,
            _bulk_int(producer.producer_id), _bulk_int(producer.producer_epoch),
            _bulk_int(producer.base_sequence), last_sequence,
            _bulk_int(count), channel, records.body, trailer))
        return stream, packed

    def _append_head(self, topic: TopicInfo, partition: int, txn: bool = False) -> _AppendHead:
        """The parts of a partition's append command that do not change from one append to
        the next, packed by hiredis once: the sha and keys, ARGV 2-4, the channel, and a
        dense topic's time index key and trailer. A transaction's append (``txn``) names the
        time index (of a dense topic only used as one) and the transaction keys too."""
        stream = self.stream_key(topic.name, partition)
        meta = self.meta_key(topic.name, partition)
        dense = topic.config.dense
        more: tuple[str, ...] = (self.times_key(stream),) if dense or txn else ()
        if txn:
            more += (self.open_key(stream), self.aborted_key(stream))
        keys = hiredis.pack_command((  # type: ignore[arg-type]
            "EVALSHA", self._append.sha, 4 + len(more), stream, meta, meta,
            self.waiting_key(stream), *more))
        middle = hiredis.pack_command((  # type: ignore[arg-type]
            topic.config.codec_bits, partition, topic.topic_id))
        channel = hiredis.pack_command((self.append_channel,))
        trailer = (hiredis.pack_command((topic.config.get("index.interval.bytes"),))
                   if dense else b"")
        # pack_command starts each with its own "*<n>\r\n": the parts go without it.
        fixed = (stream, _without_count(keys), _without_count(middle), _without_count(channel),
                 _without_count(trailer) if dense else b"", len(more) + (3 if dense else 0))
        if len(self._append_heads) >= _APPEND_HEADS_KEPT:
            self._append_heads.clear()
        self._append_heads[_head_key(topic, partition, txn)] = fixed
        return fixed

    async def append_result(self, topic: TopicInfo, sent: asyncio.Future[Any]) -> AppendResult:
        reply = await sent
        if isinstance(reply, tuple):  # (the script's reply, replicas that have it: WAIT)
            reply, replicas = reply
            result = _append_result(topic.config.codec, reply)
            if replicas < self.wait_replicas and result.status in (AppendStatus.OK,
                                                                     AppendStatus.DUPLICATE):
                return replace(result, status=AppendStatus.NOT_REPLICATED)
            return result
        return _append_result(topic.config.codec, reply)

    async def read(self, reads: Sequence[tuple[TopicInfo, int, int, int]], *,
                   committed: bool = False) -> list[PartitionRead]:
        """XRANGE from each (topic, partition, offset, max entries), with log bounds.

        One pipeline for all partitions. The bounds are read after the entries, so the
        high watermark is never below the last entry returned. A topic that stores batches
        also gets the batch entry holding the offset when one starts below it.
        ``committed`` (read_committed): the entries end at the last stable offset, and the
        aborted transactions that end at or after the offset come with them.
        """
        try:
            return await self._read(reads, committed)
        except NoScriptError:  # Redis lost its scripts under a live connection: the reads'
            return await self._read(reads, committed)  # pipe has queued them again

    async def _read(self, reads: Sequence[tuple[TopicInfo, int, int, int]],
                    committed: bool = False) -> list[PartitionRead]:
        firsts = [_first_id(topic.config.codec, offset)
                  for topic, _p, offset, _c in reads]
        if self.reads is not None:
            replies = iter(await self.reads.call_all(self._read_commands(reads, firsts,
                                                                         committed)))
            return await self._partition_reads(reads, {}, replies, committed)
        # Redis Cluster: redis-py's cluster pipeline, the batch holders read before it.
        holders = await self._holders(reads, firsts)
        pipe = self.redis.pipeline(transaction=False)
        for (topic, partition, _offset, count), first in zip(reads, firsts, strict=True):
            stream = self.stream_key(topic.name, partition)
            pipe.xrange(stream, min=first, max="+", count=count)
            pipe.hmget(self.meta_key(topic.name, partition), *_BOUNDS[topic.config.dense])
            if committed:
                pipe.zrangebyscore(self.aborted_key(stream), first.partition("-")[0], "+inf")
        try:
            replies = iter(await pipe.execute())
        except AttributeError as exc:
            # redis-py 8.1's cluster pipeline can pick a connection whose socket a failover
            # just closed (its writer is None): a lost connection, for the caller to answer
            # with a retriable error rather than drop the client's connection.
            raise RedisConnectionError(f"Redis connection lost during a read: {exc}") from exc
        return await self._partition_reads(reads, holders, replies, committed)

    def _read_commands(self, reads: Sequence[tuple[TopicInfo, int, int, int]],
                       firsts: Sequence[str], committed: bool = False) -> list[bytes]:
        """A read's commands on one Redis, packed for the reads' pipe (which loads
        batch_holder.lua on connecting): per partition, for a ``batches`` topic the batch
        holding the offset when it starts below it, then XRANGE and the meta hash's bounds."""
        commands: list[bytes] = []
        pack = hiredis.pack_command
        for (topic, partition, _offset, count), first in zip(reads, firsts, strict=True):
            stream = self.stream_key(topic.name, partition)
            if topic.config.stores_batches:
                commands.append(pack(("EVALSHA", self._batch_holder.sha, 1, stream, first,  # type: ignore[arg-type]
                                      topic.config.codec_bits)))
            commands.append(pack(("XRANGE", stream, first, "+", "COUNT", count)))  # type: ignore[arg-type]
            commands.append(pack(("HMGET", self.meta_key(topic.name, partition),  # type: ignore[arg-type]
                                  *_BOUNDS[topic.config.dense])))
            if committed:
                commands.append(pack(("ZRANGEBYSCORE", self.aborted_key(stream),  # type: ignore[arg-type]
                                      first.partition("-")[0], "+inf")))
        return commands

    async def _partition_reads(self, reads: Sequence[tuple[TopicInfo, int, int, int]],
                               holders: Mapping[int, Any], replies: Iterator[Any],
                               committed: bool = False) -> list[PartitionRead]:
        """Each partition's entries below its high watermark, and its bounds, from the
        replies of the read's commands (in their order)."""
        results: list[PartitionRead] = []
        for index, (topic, partition, _offset, _count) in enumerate(reads):
            codec = topic.config.codec
            holder = holders.get(index)
            if topic.config.stores_batches and self.reads is not None:  # in the replies
                holder = next(replies)
            raw_entries, meta = next(replies), next(replies)
            aborted_raw = next(replies) if committed else []
            if holder:
                raw_entries = [holder, *raw_entries]
            if meta[0] is None and meta[1] is None:
                start, end = await self._bounds_without_meta(codec, topic, partition)
            else:
                start, end = _bounds(codec, meta[0], meta[1])
            epochs = Epochs.parse(meta[2]) if topic.config.dense else FIXED
            stable = _stable(codec, meta[-1], start, end)
            aborted = _aborted(codec, aborted_raw, stable) if committed else ()
            results.append(PartitionRead(_below(codec, raw_entries, stable if committed else end),
                                         start, end, epochs, stable, aborted))
        return results

    async def _holders(self, reads: Sequence[tuple[TopicInfo, int, int, int]],
                       firsts: Sequence[str]) -> dict[int, Any]:
        """On Redis Cluster, for the reads of ``batches`` topics, the batch entry holding the
        offset when it starts below it (batch_holder.lua). redis-py refuses EVALSHA in a
        cluster pipeline, so each runs as its own call (all at once, each on its partition's
        master; a master without the script, such as a promoted replica, is given it by
        redis-py on NOSCRIPT), before the pipeline. (On one Redis the EVALSHA goes in the
        read's commands on the reads' pipe, which loads the script: ``_read_commands``.)"""
        wanted = [i for i, (topic, *_) in enumerate(reads) if topic.config.stores_batches]
        if not wanted:
            return {}
        found = await asyncio.gather(*(
            self._batch_holder(keys=[self.stream_key(reads[i][0].name, reads[i][1])],
                               args=[firsts[i], reads[i][0].config.codec_bits])
            for i in wanted))
        return dict(zip(wanted, found, strict=True))

    async def last_stable_offset(self, topic: TopicInfo, partition: int) -> int:
        """The partition's last stable offset (ListOffsets read_committed LATEST)."""
        codec = topic.config.codec
        meta: Any = await self.redis.hmget(self.meta_key(topic.name, partition), "last", "start",
                                           "lso")
        if meta[0] is None and meta[1] is None:
            return (await self._bounds_without_meta(codec, topic, partition))[1]
        start, end = _bounds(codec, meta[0], meta[1])
        return _stable(codec, meta[2], start, end)

    async def removed_up_to(self, topic: TopicInfo, partition: int, offset: int,
                            committed: bool) -> int | None:
        """The end (the high watermark, or the last stable offset for ``committed``) when no
        record is left from ``offset`` up to it: the log cleaner removed them all (None when
        one is there, or ``offset`` is not below the end). The bounds are read before the
        entries, in one pipeline on the partition's connection: every record below them
        existed when they were read, so one the XRANGE does not find was removed, not yet
        written (spec/Compaction.tla, Fetch)."""
        codec = topic.config.codec
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.meta_key(topic.name, partition), "last", "start", "lso")
        pipe.xrange(self.stream_key(topic.name, partition), min=_first_id(codec, offset),
                    max="+", count=1)
        meta, first = await pipe.execute()
        if meta[0] is None:
            return None
        start, end = _bounds(codec, meta[0], meta[1])
        if committed:
            end = _stable(codec, meta[2], start, end)
        if offset >= end or offset < start:
            return None
        if first and _below(codec, first, end):
            return None
        return end

    async def offsets(self, topic: TopicInfo, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of a partition."""
        codec = topic.config.codec
        meta: Any
        if self.reads is not None:  # every fetch answered from a read-ahead asks: kept cheap
            meta = await self.reads.call(hiredis.pack_command((  # type: ignore[arg-type]
                "HMGET", self.meta_key(topic.name, partition), "last", "start")))
        else:
            meta = await self.redis.hmget(self.meta_key(topic.name, partition), "last", "start")
        if meta[0] is None and meta[1] is None:
            return await self._bounds_without_meta(codec, topic, partition)
        return _bounds(codec, meta[0], meta[1])

    async def current_epochs(self, topic: TopicInfo) -> list[int]:
        """Each partition's current leader epoch (Metadata): a dense topic's from its meta
        hashes (0 for a partition never written), 0 for a time topic."""
        if not topic.config.dense:
            return [0] * topic.partitions
        pipe = self.redis.pipeline(transaction=False)
        for partition in range(topic.partitions):
            pipe.hget(self.meta_key(topic.name, partition), "epochs")
        return [Epochs.parse(found).current for found in await pipe.execute()]

    async def epochs(self, topic: TopicInfo, partition: int) -> Epochs:
        """A partition's leader epochs: a dense topic's history (append.lua), else 0."""
        if not topic.config.dense:
            return FIXED
        return Epochs.parse(await self.redis.hget(self.meta_key(topic.name, partition), "epochs"))

    async def _bounds_without_meta(self, codec: Codec, topic: TopicInfo,
                                   partition: int) -> tuple[int, int]:
        """A partition nothing was appended to: bounds.lua gives it its start now. A stream
        written by something else keeps Redis' own view of its ids."""
        key = self.stream_key(topic.name, partition)
        reply = await self._bounds(
            keys=[key, self.meta_key(topic.name, partition), self.meta_key(topic.name, partition)],
            args=[time.time_ns() // 1_000_000, codec.bits, topic.topic_id])
        if reply:
            return _bounds(codec, reply[0], reply[1])
        if not await self.redis.exists(key):
            return 0, 0  # the topic is gone
        info: dict[Any, Any] = await self.redis.xinfo_stream(key)
        first = info.get("first-entry")
        return foreign_bounds(codec, info.get("last-generated-id", b"0-0"),
                              first[0] if first else None)

    async def time_search(self, topic: TopicInfo, partition: int, timestamp: int) -> int | None:
        """A dense topic: the offset to read from for the first record whose timestamp is at
        or after ``timestamp`` (time_search.lua, over the partition's time index); None when
        no record ever appended reaches it."""
        stream = self.stream_key(topic.name, partition)
        reply = await self._time_search(
            keys=[self.times_key(stream), self.meta_key(topic.name, partition)], args=[timestamp])
        return int(reply[0]) if reply else None

    async def scan_from(self, topic: TopicInfo, partition: int, offset: int,
                        count: int) -> list[tuple[int, list[bytes]]]:
        read = await self.read([(topic, partition, offset, count)])
        return read[0].entries(topic.config.codec_bits)

    async def next_producer_id(self) -> int:
        value: int = await self.redis.incr(self.producer_ids_key)
        return value

    async def ping(self) -> None:
        await self.redis.ping()

    async def close(self) -> None:
        if self.pipe is not None:
            await self.pipe.close()
        if self.reads is not None:
            await self.reads.close()
        if self.cluster is not None:
            await self.cluster.close()


def _first_id(codec: Codec, offset: int) -> str:
    """The stream id to read from for ``offset``. Past the last offset there is nothing to
    read: from the first id after it (only ids wider than bits, which have no offset, can be
    there). Clamping the offset instead returned the last record for a fetch one past it
    (spec/PartitionLog.tla)."""
    if offset <= codec.max_offset:
        return str(codec.decode(offset))
    return f"({codec.decode(codec.max_offset)}"


def foreign_bounds(codec: Codec, last_generated: bytes, first: bytes | None
                   ) -> tuple[int, int]:
    """(log start, high watermark) of a stream only something else wrote (XADD *), from
    Redis' last-generated id and first entry. An id wider than bits has no offset: it counts
    as the end of its millisecond (spec/PartitionLog.tla, BoundsAt)."""
    last = EntryId.parse(last_generated)
    end = 0 if last == EntryId(0, 0) else codec.last_offset_of(last) + 1
    if first is None:
        return end, end
    first_id = EntryId.parse(first)
    start = (codec.encode_id(first_id) if codec.has_offset(first_id)
             else codec.last_offset_of(first_id) + 1)
    return min(start, end), end


_APPEND_HEAD_ARGS = 20  # EVALSHA, sha, numkeys, 4 keys, 13 ARGV before the records
# What a read asks of the meta hash (by whether the topic is dense): the bounds, and the epochs.
_BOUNDS = {False: ("last", "start", "lso"), True: ("last", "start", "epochs", "lso")}


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)
# (stream key, the keys, ARGV 2-4, the channel, a dense topic's trailer (its index interval;
# the Redis life's run id and clock follow it), the arguments a dense topic adds: its time
# index key and its trailer of three)
_AppendHead = tuple[str, bytes, bytes, bytes, bytes, int]


def _head_key(topic: TopicInfo, partition: int, txn: bool) -> tuple[str, int, str, int, str, bool]:
    """What a partition's append head is made of: a change of any is another head."""
    return (topic.name, partition, topic.topic_id, topic.config.codec_bits,
            topic.config.get("index.interval.bytes") if topic.config.dense else "", txn)
_APPEND_HEADS_KEPT = 100_000
_ONE = b"$1\r\n1\r\n"
_ZERO = b"$1\r\n0\r\n"


def _bulk_int(value: int) -> bytes:
    text = b"%d" % value
    return b"$%d\r\n%s\r\n" % (len(text), text)


def _without_count(packed: bytes) -> bytes:
    return packed[packed.index(b"\r\n") + 2:]


def _escape(pattern: str) -> str:
    """Escape glob characters for SCAN MATCH."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in pattern)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _raw_entries(response: Any, **_options: Any) -> Any:
    return response or []


def _bounds(codec: Codec, last: bytes | None, start: bytes | None) -> tuple[int, int]:
    """(log start, high watermark) from the meta hash. `last` is the id of the last entry
    append.lua wrote; without one (bounds.lua gave an empty partition its start) the log ends
    where it starts."""
    begin = codec.encode_id(EntryId.parse(start)) if start else 0
    if not last:
        return begin, begin
    end = codec.last_offset_of(EntryId.parse(last)) + 1
    return min(begin, end), end


def _stable(codec: Codec, lso: bytes | None, start: int, end: int) -> int:
    """The last stable offset: the first offset of the oldest open transaction (append.lua's
    `lso`), else the high watermark; never below the log start (spec/Transactions.tla LSO)."""
    if not lso:
        return end
    return max(start, min(end, codec.encode_id(EntryId.parse(lso))))


def _aborted(codec: Codec, raw: list[Any], stable: int) -> tuple[tuple[int, int, int], ...]:
    """The aborted index's entries ("<pid> <first id> <marker id>") that begin below the
    last stable offset, as (producer id, first offset, marker offset)."""
    found = []
    for member in raw:
        pid, first, last = (member.decode() if isinstance(member, bytes) else member).split()
        first_offset = codec.encode_id(EntryId.parse(first))
        if first_offset < stable:
            found.append((int(pid), first_offset, codec.encode_id(EntryId.parse(last))))
    return tuple(found)


def _below(codec: Codec, raw: list[Any], end: int) -> list[Any]:
    """XRANGE's entries below the high watermark. An entry above it was written by something
    other than append.lua (`XADD *`) after the last append: it gets its offset, and is
    fetched, once the next append moves the high watermark past it (spec/PartitionLog.tla,
    FetchWithinBounds). Entries are in id order, so only the tail needs a look; ids with no
    offset (a sequence wider than bits) are skipped by every reader anyway."""
    cut = len(raw)
    while cut:
        ms, _, seq = raw[cut - 1][0].partition(b"-")
        entry = EntryId(int(ms), int(seq))
        offset = codec.encode_id(entry) if codec.has_offset(entry) else None
        if offset is not None and offset < end:
            break
        cut -= 1
    return raw if cut == len(raw) else raw[:cut]


def _append_result(codec: Codec, reply: list[Any]) -> AppendResult:
    status = AppendStatus(reply[0].decode() if isinstance(reply[0], bytes) else reply[0])
    start = codec.from_script(int(reply[5]), int(reply[6])) if status is not AppendStatus.NO_TOPIC else -1
    if status is AppendStatus.OK:
        return AppendResult(status, codec.from_script(int(reply[1]), int(reply[2])),
                            codec.from_script(int(reply[3]), int(reply[4])), start)
    if status is AppendStatus.DUPLICATE:
        return AppendResult(status, codec.from_script(int(reply[1]), int(reply[2])), -1, start)
    return AppendResult(status, -1, -1, start)
