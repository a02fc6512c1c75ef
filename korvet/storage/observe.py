"""What the broker's metrics read from Redis at scrape time (never on a request's path).

    stream_stats   per partition stream: the high watermark (from the partition's meta
                   hash, as Fetch reads it), the entry count (XLEN) and the Redis consumer
                   groups on it (XINFO GROUPS: position and Redis' own lag count)
    check_redis    a PING and a write (SET with a TTL) against Redis: readiness
    redis_memory   INFO memory's byte counts

Every call is O(1) per stream in Redis (XLEN, HMGET, XINFO GROUPS read counters and
radix-tree ends, never the entries), pipelined in chunks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from korvet.core.offsets import EntryId, codec_for

_CHUNK = 500  # streams per pipeline


@dataclass(frozen=True, slots=True)
class RedisGroup:
    position: str  # last-delivered-id
    lag: int | None  # XINFO GROUPS' lag: None when Redis cannot count it without a scan


@dataclass(frozen=True, slots=True)
class StreamStats:
    high_watermark: int | None  # None: nothing appended through the broker yet
    entries: int
    groups: Mapping[str, RedisGroup]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _groups(reply: Any) -> dict[str, RedisGroup]:
    if isinstance(reply, Exception) or not reply:
        return {}  # no stream yet: XINFO GROUPS answers "no such key"
    found = {}
    for entry in reply:
        info = {_text(k): v for k, v in entry.items()}
        lag = info.get("lag")
        found[_text(info.get("name", b""))] = RedisGroup(
            _text(info.get("last-delivered-id", b"0-0")), None if lag is None else int(lag))
    return found


async def stream_stats(client: aioredis.Redis,
                       streams: Sequence[tuple[str, str, int]]) -> list[StreamStats]:
    """``streams``: (stream key, partition meta key, sequence bits) each."""
    stats: list[StreamStats] = []
    for start in range(0, len(streams), _CHUNK):
        chunk = streams[start:start + _CHUNK]
        pipe = client.pipeline(transaction=False)
        for stream_key, meta_key, _bits in chunk:
            pipe.hget(meta_key, "last")
            pipe.xlen(stream_key)
            pipe.xinfo_groups(stream_key)
        replies = await pipe.execute(raise_on_error=False)
        for index, (_key, _meta, bits) in enumerate(chunk):
            last, length, groups = replies[3 * index: 3 * index + 3]
            high = None
            if isinstance(last, bytes | str):
                high = codec_for(bits).last_offset_of(EntryId.parse(last)) + 1
            entries = length if isinstance(length, int) else 0
            stats.append(StreamStats(high, entries, _groups(groups)))
    return stats


async def check_redis(client: aioredis.Redis, key: str, ttl_ms: int = 60_000) -> float:
    """PING, then write ``key`` (expiring): raises unless Redis is reachable and writable.
    Returns the PING's round trip in seconds."""
    started = time.perf_counter()
    await client.ping()
    roundtrip = time.perf_counter() - started
    await client.set(key, str(time.time_ns() // 1_000_000), px=ttl_ms)
    return roundtrip


async def redis_memory(client: aioredis.Redis) -> dict[str, int]:
    info: dict[str, Any] = await client.info("memory")
    return {k: int(v) for k, v in info.items()
            if k in ("used_memory", "used_memory_peak", "maxmemory") and str(v).isdigit()}
