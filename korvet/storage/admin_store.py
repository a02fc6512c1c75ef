"""What the admin APIs read and write in Redis, beside the log path of redis_store.py.

- ``raise_log_start``: DeleteRecords' write (lua/delete_records.lua): XTRIM MINID and the
  partition's ``start`` in its meta hash, in one script.
- ``partition_sizes``: DescribeLogDirs' sizes, Redis' own ``MEMORY USAGE`` of each
  partition's stream. For a stream Redis measures the radix tree and samples 5 of its
  listpack nodes (the command's default), so the figure is an estimate that costs the same
  for a stream of any length; a partition with no stream yet is 0.
- ``memory``: the "volume" of DescribeLogDirs v4+: ``maxmemory`` (or the machine's memory
  when Redis has no limit) and what is left of it after ``used_memory``.
- ``producers``: DescribeProducers' idempotent producer state, the ``p:<producer id>``
  fields the append script keeps in the meta hash ("epoch last_sequence last_append_ms
  ...", see lua/append.lua).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript

from korvet.core.topics import TopicInfo
from korvet.storage.redis_store import RedisStore

_DELETE_RECORDS = (resources.files("korvet.storage") / "lua" / "delete_records.lua").read_text()


class LogStartOutcome(Enum):
    OK = "OK"
    TRIMMED = "TRIMMED"  # a stream without a meta hash: its first entry is now its log start
    NO_TOPIC = "NO_TOPIC"
    NO_PARTITION = "NO_PARTITION"


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    epoch: int
    last_sequence: int
    last_append_ms: int
    coordinator_epoch: int = -1  # of its last transaction marker here (-1: none)
    txn_start_offset: int = -1  # the first offset of its open transaction here (-1: none)


class AdminStore:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._delete: AsyncScript = store.redis.register_script(_DELETE_RECORDS)

    async def raise_log_start(self, topic: TopicInfo, partition: int,
                              offset: int) -> tuple[LogStartOutcome, int]:
        """Move the log start up to ``offset``; returns the log start afterwards (-1 if the
        topic or partition is gone)."""
        codec = topic.config.codec
        target = codec.decode(offset)
        stream = self.store.stream_key(topic.name, partition)
        reply = await self._delete(
            keys=[stream, self.store.meta_key(topic.name, partition),
                  self.store.meta_key(topic.name, partition),  # the partition's topic stamp
                  self.store.times_key(stream)],
            args=[topic.topic_id, partition, target.ms, target.seq,
                  1 if topic.config.stores_batches else 0, codec.bits])
        outcome = LogStartOutcome(_text(reply[0]))
        if outcome is LogStartOutcome.OK:
            return outcome, codec.encode(int(reply[1]), int(reply[2]))
        if outcome is LogStartOutcome.TRIMMED:
            start, _ = await self.store.offsets(topic, partition)
            return outcome, start
        return outcome, -1

    async def partition_sizes(self, partitions: Sequence[tuple[str, int]]) -> list[int]:
        if not partitions:
            return []
        pipe = self.store.redis.pipeline(transaction=False)
        for name, partition in partitions:
            pipe.memory_usage(self.store.stream_key(name, partition))
        sizes = await pipe.execute()
        return [int(size) if size is not None else 0 for size in sizes]

    async def memory(self) -> tuple[int, int]:
        """(total bytes, usable bytes) of the Redis the data lives in."""
        info: dict[str, Any] = await self.store.redis.info("memory")
        total = int(info.get("maxmemory", 0) or 0) or int(info.get("total_system_memory", 0) or 0)
        if total <= 0:
            return -1, -1
        used = int(info.get("used_memory", 0) or 0)
        return total, max(0, total - used)

    async def producers(self, topic: TopicInfo, partition: int) -> list[ProducerState]:
        fields: dict[bytes, bytes] = await self.store.redis.hgetall(  # type: ignore[assignment]
            self.store.meta_key(topic.name, partition))
        found = []
        codec = topic.config.codec
        for name, value in fields.items():
            if not name.startswith(b"p:"):
                continue
            parts = value.split()
            if len(parts) < 3:
                continue
            # its transaction here (append.lua): last marker's epoch, coordinator epoch, first id
            txn = (fields.get(b"t:" + name[2:]) or b"-1 -1 -1 -1").split()
            start = (codec.from_script(int(txn[2]), int(txn[3]))
                     if len(txn) == 4 and int(txn[2]) >= 0 else -1)
            found.append(ProducerState(int(name[2:]), int(parts[0]), int(parts[1]),
                                       int(parts[2]),
                                       int(txn[1]) if len(txn) == 4 and txn[0] != b"-1" else -1,
                                       start))
        return sorted(found, key=lambda p: p.producer_id)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
