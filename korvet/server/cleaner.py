"""The log cleaner: a background task of every broker that keeps compacted topics as big as
their live keys (issue 34; spec/Compaction.tla; docs/implementers/cleaner.md).

Every ``cleaner.backoff-ms`` (Kafka's log.cleaner.backoff.ms) a round reads the status of
every partition of the tenant's compacted topics (one script call each, read only), then visits
them in ``korvet.core.cleaner.round_order``: the filthiest first. A visit is clean.lua's
``begin``, which rolls the active segment when it is due and, when the partition is cleanable,
takes the partition's cleaner lease and starts a pass; the pass then runs to its swap, one call
per chunk of ``cleaner.chunk-entries`` entries, between which Redis serves everyone else.

With several brokers every one runs the task; the lease makes one pass per partition at a
time, and a pass whose broker died is taken over (its half-built key deleted) once the lease
has expired. A broker that loses the lease (paused past it) has every further call refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

from redis.exceptions import RedisClusterException, RedisError

from korvet.core.cleaner import CleanSettings, PartitionDirt, cleanable_topic, round_order
from korvet.core.topics import TopicInfo
from korvet.server.clean_batches import batches_step
from korvet.server.metrics import BrokerMetrics
from korvet.storage.cleaner import CleanerStore
from korvet.storage.redis_store import RedisStore
from korvet.storage.topic_cache import TopicCache

log = logging.getLogger("korvet.cleaner")
T = TypeVar("T")

LEASE_MS = 30_000  # a pass's lease: renewed by every call, so only a dead cleaner's runs out


class LogCleaner:
    """One tenant's cleaner task."""

    def __init__(self, store: RedisStore, topics: TopicCache, metrics: BrokerMetrics, *,
                 broker: str, backoff_ms: int, chunk: int) -> None:
        self.calls = CleanerStore(store, broker, LEASE_MS)
        self.topics = topics
        self.metrics = metrics
        self.backoff = backoff_ms / 1000
        self.chunk = chunk
        self.longest_call = 0.0  # seconds: the longest script call seen (one chunk)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="korvet-log-cleaner")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.backoff)
            try:
                await self.round()
            except (RedisError, RedisClusterException, OSError) as exc:
                # Redis unreachable or refusing (full): the next round tries again; a pass
                # left half done is harmless and the next begin removes it
                log.warning("log cleaner round failed: %s", exc)
            except Exception:
                # a bug must not end the task for good (a batch the codec cannot rebuild):
                # said loudly, and the next round tries again
                log.exception("log cleaner round failed")

    async def round(self) -> int:
        """One round over the compacted partitions; the number of passes that swapped."""
        topics = {t.name: t for t in await self.topics.all() if cleanable_topic(t.config)}
        # a deleted topic's partitions leave the gauge with the round that no longer sees them
        self.metrics.cleaner_dirty_ratio.clear()
        if not topics:
            return 0
        statuses: list[PartitionDirt] = []
        for topic in topics.values():
            settings = CleanSettings.of(topic.config)
            for partition in range(topic.partitions):
                status = await self._timed(self.calls.status(topic, partition, settings,
                                                             _now_ms()))
                statuses.append(status)
                self.metrics.cleaner_dirty_ratio.labels(topic.name, str(partition)).set(
                    status.ratio)
        swapped = 0
        for status in round_order(statuses):
            topic = topics[status.topic]
            if await self.clean(topic, status.partition):
                swapped += 1
        return swapped

    async def clean(self, topic: TopicInfo, partition: int) -> bool:
        """Begin a pass on the partition (when it is cleanable) and run it to its end; True if
        it swapped a cleaned stream in."""
        settings = CleanSettings.of(topic.config)
        started = time.monotonic()
        token = await self._timed(self.calls.begin(topic, partition, settings, _now_ms()))
        if token is None:
            return False
        try:
            while True:
                if topic.config.stores_batches:  # the broker decodes between the calls
                    step = await batches_step(self.calls, topic, partition, token, _now_ms(),
                                              self.chunk, timed=self._timed)
                else:
                    step = await self._timed(self.calls.step(topic, partition, token,
                                                             _now_ms(), self.chunk))
                if step.outcome in ("MAP", "COPY"):
                    continue
                if step.outcome == "SWAPPED":
                    self.metrics.cleaner_passes.labels(topic.name).inc()
                    self.metrics.cleaner_records_removed.labels(topic.name).inc(step.removed)
                    self.metrics.cleaner_seconds.labels(topic.name).inc(
                        time.monotonic() - started)
                    log.info("cleaned %s-%d: %d records removed, %d entries left",
                             topic.name, partition, step.removed, step.entries)
                    return True
                return False  # CLEAN (nothing dirty after all) or LOST (another's now)
        except (RedisError, RedisClusterException, OSError):
            with contextlib.suppress(RedisError, RedisClusterException, OSError):
                await self.calls.abandon(topic, partition, token)
            raise

    async def _timed(self, call: Awaitable[T]) -> T:
        """The call's answer, its time kept when it is the longest yet (the figure that says
        how long the cleaner blocks Redis, network included)."""
        began = time.perf_counter()
        result = await call
        spent = time.perf_counter() - began
        if spent > self.longest_call:
            self.longest_call = spent
            self.metrics.cleaner_longest_call.set(spent)
        return result


def _now_ms() -> int:
    return int(time.time() * 1000)
