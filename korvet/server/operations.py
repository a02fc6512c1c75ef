"""The operations endpoint: health probes and Prometheus metrics over HTTP (issue 15).

Routes (the original product's Spring Boot Actuator paths and the short ones):

    /actuator/health, /health                 overall: UP when live and ready (JSON)
    /actuator/health/liveness, /health/liveness     the broker's event loop answers and
                                              its Kafka listener is open
    /actuator/health/readiness, /health/readiness   Redis answers a PING and takes a write
                                              (``{ks}:health:{broker.id}``, 60 s TTL)
    /metrics, /actuator/prometheus            Prometheus text format (OpenMetrics on request)
    /actuator/info                            name and version

Probes answer 200 when UP and 503 otherwise, with a JSON body in Actuator's shape
(``{"status": "UP", "components": {"redis": {"status": "UP", ...}}}``), which is what
Kubernetes' httpGet probes and the original's deployments expect.

A scrape of /metrics first refreshes what is read at scrape time (``Scraper.refresh``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.exposition import choose_encoder
from redis.exceptions import RedisError

from korvet import __version__
from korvet.core.coordinator.state import CoordinatorState
from korvet.server.http import Request, Response, Route
from korvet.server.metrics import BrokerMetrics, PartitionLag
from korvet.server.services import Services
from korvet.storage.groups import id_before
from korvet.storage.observe import check_redis, redis_memory, stream_stats

log = logging.getLogger("korvet.operations")

_CHECK_TIMEOUT = 2.0
_JSON = "application/json"


class Health:
    """Liveness and readiness. ``live`` is a callable so the listener's state is read when
    asked (it is False before the Kafka listener is bound and once the broker stops)."""

    def __init__(self, services: Services, live: Callable[[], bool]) -> None:
        self.services = services
        self.live = live
        self.health_key = f"{services.store.ks}:health:{services.node_id}"

    async def redis(self) -> dict[str, Any]:
        try:
            roundtrip = await asyncio.wait_for(
                check_redis(self.services.store.redis, self.health_key), _CHECK_TIMEOUT)
        except (RedisError, OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
            return {"status": "DOWN", "details": {"error": reason}}
        return {"status": "UP", "details": {"roundtripMs": round(roundtrip * 1000, 3)}}

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        redis = await self.redis()
        ready = self.live() and redis["status"] == "UP"
        return ready, {"status": "UP" if ready else "OUT_OF_SERVICE",
                       "components": {"redis": redis}}

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        live = self.live()
        return live, {"status": "UP" if live else "DOWN"}


class Scraper:
    """Fills ``metrics.scraped`` from Redis and the coordinator, one scrape at a time."""

    def __init__(self, services: Services, metrics: BrokerMetrics, health: Health) -> None:
        self.services = services
        self.metrics = metrics
        self.health = health
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:
            started = time.perf_counter()
            snapshot = self.metrics.scraped
            coordinator = self.services.coordinator
            if coordinator is not None:
                self._groups(coordinator.durable_view)
            try:
                redis = await self.health.redis()
                snapshot.redis_up = redis["status"] == "UP"
                snapshot.redis_roundtrip = (redis["details"]["roundtripMs"] / 1000
                                            if snapshot.redis_up else None)
                if snapshot.redis_up:
                    snapshot.redis_memory = await redis_memory(self.services.store.redis)
                    await self._streams(coordinator.durable_view if coordinator else None)
                else:  # the health check answered DOWN: nothing else was read from Redis
                    snapshot.scrape_errors += 1
            except (RedisError, OSError) as exc:
                log.warning("metrics scrape could not read Redis: %s", exc)
                snapshot.redis_up = False
                snapshot.scrape_errors += 1
            snapshot.scrape_seconds = time.perf_counter() - started

    def _groups(self, state: CoordinatorState) -> None:
        by_state: dict[str, int] = {}
        members: dict[str, int] = {}
        for group_id, group in state.groups.items():
            by_state[group.state.value] = by_state.get(group.state.value, 0) + 1
            members[group_id] = len(group.members)
        self.metrics.scraped.groups_by_state = by_state
        self.metrics.scraped.members = members

    async def _streams(self, state: CoordinatorState | None) -> None:
        store = self.services.store
        topics = await self.services.topics.all()
        partitions = [(t, p) for t in topics for p in range(t.partitions)]
        stats = await stream_stats(store.redis, [
            (store.stream_key(t.name, p), store.meta_key(t.name, p), t.config.codec_bits)
            for t, p in partitions])
        entries: dict[str, int] = {}
        by_partition = {}
        for (topic, partition), stat in zip(partitions, stats, strict=True):
            entries[topic.name] = entries.get(topic.name, 0) + stat.entries
            by_partition[topic.name, partition] = (topic.config.codec_bits, stat)
        snapshot = self.metrics.scraped
        snapshot.topics, snapshot.partitions, snapshot.entries = (
            len(topics), len(partitions), entries)
        snapshot.lag = self._lag(state, by_partition) if state is not None else []

    @staticmethod
    def _lag(state: CoordinatorState, by_partition: dict[Any, Any]) -> list[PartitionLag]:
        """Lag of every committed offset of every group.

        Offsets are sparse (``ms << bits | seq``), so the high watermark minus the
        committed offset counts offsets, not records. Records are counted by Redis
        itself: the group's Redis consumer group is moved to the committed position at
        every commit (XGROUP SETID), and XINFO GROUPS reports its ``lag`` from the
        stream's entries-added counter whenever Redis can do so without a scan (the
        position is the last entry — lag 0 —, before or at the first entry, or its read
        counter is valid). Where it cannot (a position inside the stream), or the Redis
        group is not at the committed position, the records series is left out rather
        than guessed; the offsets and seconds series are always there.
        """
        lags = []
        for group_id, group in state.groups.items():
            for tp, committed in group.offsets.items():
                found = by_partition.get((tp.topic, tp.partition))
                if found is None:
                    continue
                bits, stat = found
                if stat.high_watermark is None:
                    continue
                offsets = max(0, stat.high_watermark - committed.offset)
                redis_group = stat.groups.get(group_id)
                records = None
                if redis_group is not None and redis_group.position == id_before(
                        bits, committed.offset):
                    records = redis_group.lag
                if offsets == 0:
                    records = 0
                newest_ms = (stat.high_watermark - 1) >> bits
                seconds = max(0, newest_ms - (committed.offset >> bits)) / 1000 if offsets else 0.0
                lags.append(PartitionLag(group_id, tp.topic, tp.partition, offsets, records,
                                         seconds))
        return lags


def _json(ok: bool, body: dict[str, Any]) -> Response:
    return Response(200 if ok else 503, (json.dumps(body) + "\n").encode(), _JSON)


def routes(health: Health, scraper: Scraper, metrics: BrokerMetrics) -> dict[str, Route]:
    async def overall(request: Request) -> Response:
        live, _ = health.liveness()
        ready, body = await health.readiness()
        body["status"] = "UP" if live and ready else "DOWN"
        body["components"]["livenessState"] = {"status": "UP" if live else "DOWN"}
        body["components"]["readinessState"] = {"status": "UP" if ready else "OUT_OF_SERVICE"}
        return _json(live and ready, body)

    async def liveness(request: Request) -> Response:
        return _json(*health.liveness())

    async def readiness(request: Request) -> Response:
        return _json(*await health.readiness())

    async def prometheus(request: Request) -> Response:
        await scraper.refresh()
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(200, encoder(metrics.registry), content_type)

    async def info(request: Request) -> Response:
        return _json(True, {"app": {"name": "korvet", "version": __version__,
                                    "implementation": "Korvet (Python)"}})

    async def index(request: Request) -> Response:
        return Response(200, ("Korvet operations endpoint:\n" + "\n".join(sorted(table))
                              + "\n").encode())

    table: dict[str, Route] = {
        "/actuator/health": overall, "/health": overall,
        "/actuator/health/liveness": liveness, "/health/liveness": liveness,
        "/actuator/health/readiness": readiness, "/health/readiness": readiness,
        "/metrics": prometheus, "/actuator/prometheus": prometheus,
        "/actuator/info": info,
    }
    return {**table, "/": index}
