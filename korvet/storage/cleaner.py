"""The log cleaner's Redis side: clean.lua's calls for one partition (spec/Compaction.tla).

Each call is one atomic script on the partition's hash slot and reads at most ``chunk``
entries: ``status`` (read only: the dirty and clean sections' sizes), ``begin`` (rolls the
active segment when due, takes the partition's cleaner lease and starts a pass when the
partition is cleanable), ``step`` (a map chunk, a copy chunk or the swap) and ``abandon``.
The keys, all in the stream's slot, are listed in clean.lua and ``redis_store.cleaner_keys``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript

from korvet.core.cleaner import CleanSettings, PartitionDirt
from korvet.core.topics import TopicInfo
from korvet.storage.redis_store import RedisStore, cleaner_keys


def _lua(name: str) -> str:
    return (resources.files("korvet.storage") / "lua" / name).read_text()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class StepResult:
    """A step's answer: MAP, COPY, CLEAN (nothing dirty: no swap), SWAPPED (with the records
    removed, the entries kept in the clean section and the stream's entries after), or LOST
    (the lease or the topic is gone: the pass stops)."""

    outcome: str
    removed: int = 0
    kept: int = 0
    entries: int = 0


class CleanerStore:
    """clean.lua for one keyspace's partitions."""

    def __init__(self, store: RedisStore, broker: str, lease_ms: int) -> None:
        self.store = store
        self.broker = broker
        self.lease_ms = lease_ms
        self._script: AsyncScript = store.redis.register_script(_lua("clean.lua"))

    def _keys(self, topic: TopicInfo, partition: int) -> list[str]:
        stream = self.store.stream_key(topic.name, partition)
        return [stream, self.store.meta_key(topic.name, partition), self.store.aborted_key(stream),
                *cleaner_keys(stream)]

    def _args(self, op: str, token: int, now_ms: int, chunk: int,
              settings: CleanSettings | None = None, dense: bool = False) -> list[Any]:
        args: list[Any] = [op, self.broker, token, now_ms, chunk, self.lease_ms]
        if settings is not None:
            args += [settings.min_lag_ms, settings.max_lag_ms, settings.segment_ms, -1,
                     settings.delete_retention_ms, repr(settings.min_dirty_ratio),
                     1 if dense else 0]
        return args

    async def status(self, topic: TopicInfo, partition: int, settings: CleanSettings,
                     now_ms: int) -> PartitionDirt:
        reply: list[Any] = await self._script(
            keys=self._keys(topic, partition),
            args=self._args("status", 0, now_ms, 1, settings, topic.config.dense))
        dirty, clean, overdue, busy = (int(x) for x in reply)
        return PartitionDirt(topic.name, partition, dirty, clean, bool(overdue), bool(busy),
                             settings.min_dirty_ratio)

    async def begin(self, topic: TopicInfo, partition: int, settings: CleanSettings,
                    now_ms: int) -> int | None:
        """A pass's lease token, or None (nothing to clean, or another broker's pass)."""
        reply: list[Any] = await self._script(
            keys=self._keys(topic, partition),
            args=self._args("begin", 0, now_ms, 1, settings, topic.config.dense))
        return int(reply[1]) if _text(reply[0]) == "STARTED" else None

    async def step(self, topic: TopicInfo, partition: int, token: int, now_ms: int,
                   chunk: int, plan: list[Any] | None = None) -> StepResult:
        """A step; on a batches topic with the broker's ``plan`` for the chunk it read
        (clean.lua's ARGV 7 on, from 'batches')."""
        reply: list[Any] = await self._script(
            keys=self._keys(topic, partition),
            args=self._args("step", token, now_ms, chunk) + (plan or []))
        outcome = _text(reply[0])
        if outcome == "SWAPPED":
            return StepResult(outcome, int(reply[1]), int(reply[2]), int(reply[3]))
        return StepResult(outcome)

    async def abandon(self, topic: TopicInfo, partition: int, token: int) -> None:
        await self._script(keys=self._keys(topic, partition),
                           args=self._args("abandon", token, 0, 1))


@dataclass(frozen=True, slots=True)
class PassView:
    """A running pass as a batches topic's step reads it before deciding (clean.lua's pass
    hash): only this pass's cleaner writes it, under the lease."""

    phase: str
    upto: str
    cursor: str
    young: int
    last_swap: int
    retention_ms: int


class BatchReads:
    """The reads a step of a batches topic makes before its call (the pass, the chunk, the
    aborted index, the map). They are not atomic with the call, and need not be: below the
    pass's bound the stream only loses entries (retention, DeleteRecords), which the call
    notices, and the pass and the map are written by this pass alone."""

    def __init__(self, calls: CleanerStore) -> None:
        self.calls = calls
        self.redis = calls.store.redis

    async def view(self, topic: TopicInfo, partition: int, token: int) -> PassView | None:
        keys = self.calls._keys(topic, partition)
        got = await self.redis.hmget(keys[3], "token", "phase", "upto", "cur", "young",
                                     "prev", "keep")
        if got[0] is None or _text(got[0]) != str(token):
            return None
        phase, upto, cursor, young, prev, keep = (_text(v) for v in got[1:])
        return PassView(phase, upto, cursor, int(young), int(prev), int(keep))

    async def entries(self, topic: TopicInfo, partition: int, low: str, high: str,
                      count: int) -> list[tuple[str, list[bytes]]]:
        stream = self.calls.store.stream_key(topic.name, partition)
        reply: Any = await self.redis.xrange(stream, low, high, count)
        return [(_text(entry), list(fields)) for entry, fields in reply]

    async def aborted(self, topic: TopicInfo, partition: int, from_ms: int) -> list[str]:
        key = self.calls.store.aborted_key(self.calls.store.stream_key(topic.name, partition))
        return [_text(m) for m in await self.redis.zrangebyscore(key, from_ms, "+inf")]

    async def mapped(self, topic: TopicInfo, partition: int, keys: list[bytes]
                     ) -> list[str | None]:
        if not keys:
            return []
        got = await self.redis.hmget(self.calls._keys(topic, partition)[4], keys)
        return [None if v is None else _text(v) for v in got]
