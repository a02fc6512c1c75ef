"""The broker's watch on Redis' memory: an evicting Redis refused, a full one reported.

At start (``check_at_start``) the broker reads ``maxmemory-policy`` from INFO memory (on
every master of a Redis Cluster) and refuses a policy that may evict its keys
(korvet/core/redis_memory.py) unless ``redis.accept-eviction``. INFO, not CONFIG GET:
managed Redis services (ElastiCache, Memorystore, Azure Cache) disable CONFIG but answer
INFO, so the check works there too; where INFO is denied as well (an ACL user without
+info), the policy is unknown: the broker says so at start and in readiness, and serves.

While running, every ``redis.memory-check-interval-ms`` it reads INFO memory again: a
policy switched to an evicting one makes readiness DOWN with the reason and is logged once
per interval while it lasts (the broker keeps serving: stopping would not bring evicted keys
back, and the operator is told); a Redis at ``maxmemory`` under noeviction is *full*.
Writes Redis refused with OOM (``write_refused``: appends, producer ids) are counted and
logged once per interval, not once per request; readiness says DOWN with the reason while
Redis is full or refused a write within the last interval. Producers get
KAFKA_STORAGE_ERROR (retriable) for those appends, the produce handler's answer to any
append Redis did not take, and COORDINATOR_NOT_AVAILABLE (retriable) for InitProducerId.

Metrics (``collect``): ``korvet_redis_eviction_unsafe``, ``korvet_redis_full``,
``korvet_redis_oom_refusals_total`` and ``korvet_redis_maxmemory_policy_info{policy}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import OutOfMemoryError, RedisClusterException, RedisError

from korvet.core.redis_memory import (
    FIX,
    Eviction,
    MemoryReading,
    eviction_of,
    full,
    unsafe_message,
)

log = logging.getLogger("korvet.redis")


class EvictionRefused(Exception):
    """Redis may evict the broker's keys and the user did not accept it."""


def is_oom(exc: BaseException) -> bool:
    """Redis refused a write for want of memory (noeviction at maxmemory)."""
    # A command refused before it ran answers "OOM command not allowed ..." (redis-py's
    # OutOfMemoryError); a write refused inside a script "... used memory > 'maxmemory'".
    return (isinstance(exc, OutOfMemoryError) or str(exc).startswith("OOM ")
            or "used memory > 'maxmemory'" in str(exc))


def _reading(info: Any, node: str = "") -> MemoryReading:
    if not isinstance(info, dict):
        return MemoryReading(None, node=node)  # an answer of a shape this version cannot read
    policy = info.get("maxmemory_policy")
    return MemoryReading(str(policy) if policy is not None else None,
                         int(info.get("used_memory", 0) or 0),
                         int(info.get("maxmemory", 0) or 0), node)


async def read_memory(client: aioredis.Redis) -> list[MemoryReading]:
    """INFO memory of the Redis, or of every master of a Redis Cluster."""
    if isinstance(client, RedisCluster):
        answer: Any = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        if isinstance(answer, dict) and answer and all(isinstance(v, dict)
                                                       for v in answer.values()):
            return [_reading(info, str(node)) for node, info in sorted(answer.items())]
        return [_reading(answer)]
    return [_reading(await client.info("memory"))]


class RedisMemoryGuard(Collector):
    def __init__(self, client: aioredis.Redis, keyspace: str, *, accept: bool,
                 interval_ms: int) -> None:
        self.client = client
        self.keyspace = keyspace
        self.accept = accept
        self.interval = interval_ms / 1000
        self.readings: list[MemoryReading] = []
        self.unreadable = ""  # why INFO could not be read, when it could not
        self.oom_refusals = 0
        self._oom_since_log = 0
        self._oom_logged_at = -1e9
        self._last_oom = -1e9
        self._unsafe_logged_at = -1e9
        self._task: asyncio.Task[None] | None = None

    # --- what the readings say ------------------------------------------------------------

    @property
    def eviction(self) -> Eviction:
        if not self.readings:
            return Eviction.UNKNOWN
        verdicts = {eviction_of(r.policy) for r in self.readings}
        for verdict in (Eviction.UNSAFE, Eviction.UNKNOWN):
            if verdict in verdicts:
                return verdict
        return Eviction.SAFE

    def _unsafe_reading(self) -> MemoryReading | None:
        return next((r for r in self.readings if eviction_of(r.policy) is Eviction.UNSAFE), None)

    @property
    def is_full(self) -> bool:
        """At maxmemory by the last reading, or an append refused with OOM this interval."""
        return (any(full(r) for r in self.readings)
                or time.monotonic() - self._last_oom < self.interval)

    def problem(self) -> str | None:
        """Why the broker is not ready as far as Redis' memory goes (None: it is)."""
        unsafe = self._unsafe_reading()
        if unsafe is not None and not self.accept:
            return unsafe_message(unsafe, self.keyspace)
        if self.is_full:
            reading = max(self.readings, key=lambda r: r.used, default=MemoryReading(None))
            return (f"Redis is full: used_memory {reading.used} of maxmemory "
                    f"{reading.maxmemory} bytes (policy {reading.policy}); it refuses writes, "
                    f"and producers get KAFKA_STORAGE_ERROR and retry ({self.oom_refusals} "
                    "writes refused so far). Free memory in Redis (delete topics or records, "
                    "shorten retention) or raise its maxmemory")
        return None

    def component(self) -> dict[str, Any]:
        """Readiness' ``redisMemory`` component."""
        details: dict[str, Any] = {"eviction": self.eviction.value,
                                   "evictionAccepted": self.accept,
                                   "full": self.is_full, "oomRefusals": self.oom_refusals}
        if self.readings:
            details["nodes"] = len(self.readings)  # every master of a Redis Cluster
            details["maxmemoryPolicy"] = sorted({r.policy or "?" for r in self.readings})
            details["usedMemory"] = max(r.used for r in self.readings)
            details["maxmemory"] = max(r.maxmemory for r in self.readings)
        if self.unreadable:
            details["unreadable"] = self.unreadable
        problem = self.problem()
        if problem is not None:
            details["reason"] = problem
        return {"status": "DOWN" if problem is not None else "UP", "details": details}

    # --- at start and while running ---------------------------------------------------------

    async def refresh(self) -> None:
        try:
            self.readings = await read_memory(self.client)
            self.unreadable = ""
        except (RedisError, RedisClusterException, OSError) as exc:
            self.unreadable = str(exc)

    async def check_at_start(self) -> None:
        """``EvictionRefused`` with the setting to change if Redis may evict the broker's keys
        and ``redis.accept-eviction`` is off."""
        await self.refresh()
        unsafe = self._unsafe_reading()
        if unsafe is not None:
            if not self.accept:
                raise EvictionRefused(unsafe_message(unsafe, self.keyspace))
            log.warning("Redis has maxmemory-policy %s and redis.accept-eviction is true: "
                        "acknowledged records may be evicted without a word", unsafe.policy)
        elif self.eviction is Eviction.UNKNOWN:
            log.warning("could not read Redis' maxmemory-policy (%s): the broker cannot tell "
                        "whether Redis may evict its keys; make sure it is noeviction (`%s`)",
                        self.unreadable or "INFO memory has no maxmemory_policy", FIX)

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="korvet-redis-memory")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.refresh()
            self._log_state()

    def _log_state(self) -> None:
        now = time.monotonic()
        unsafe = self._unsafe_reading()
        if unsafe is not None and not self.accept and now - self._unsafe_logged_at >= self.interval:
            self._unsafe_logged_at = now
            log.error("%s (noticed while running: readiness is DOWN)",
                      unsafe_message(unsafe, self.keyspace))
        self._log_oom(now)

    def write_refused(self, exc: BaseException) -> bool:
        """A write (an append, a producer id) failed with ``exc``; True if it was Redis
        refusing for want of memory (counted, and logged at most once per interval)."""
        if not is_oom(exc):
            return False
        self.oom_refusals += 1
        self._oom_since_log += 1
        now = time.monotonic()
        self._last_oom = now
        self._log_oom(now)
        return True

    def _log_oom(self, now: float) -> None:
        if self._oom_since_log and now - self._oom_logged_at >= self.interval:
            log.error("Redis is full: it refused %d write(s) in the last %.0f s with OOM "
                      "(maxmemory reached, nothing it may evict); producers get "
                      "KAFKA_STORAGE_ERROR and retry. Free memory in Redis or raise maxmemory",
                      self._oom_since_log, self.interval)
            self._oom_logged_at, self._oom_since_log = now, 0

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # --- metrics -------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "korvet_redis_eviction_unsafe", "1 when Redis' maxmemory-policy may evict the "
            "broker's keys (allkeys-*), -1 when it could not be read",
            value={Eviction.SAFE: 0, Eviction.UNSAFE: 1, Eviction.UNKNOWN: -1}[self.eviction])
        yield GaugeMetricFamily("korvet_redis_full", "1 while Redis refuses writes for want of "
                                "memory (maxmemory reached, nothing it may evict)",
                                value=1 if self.is_full else 0)
        yield CounterMetricFamily("korvet_redis_oom_refusals", "Writes Redis refused with OOM",
                                  value=self.oom_refusals)
        policies = GaugeMetricFamily("korvet_redis_maxmemory_policy_info",
                                     "Redis' maxmemory-policy (1 per policy seen on its masters)",
                                     labels=["policy"])
        for policy in sorted({r.policy or "unknown" for r in self.readings}):
            policies.add_metric([policy], 1)
        yield policies
