"""Whether a Redis may lose the broker's keys, and whether it is full: pure rules.

Redis evicts keys when ``maxmemory`` is reached, as its ``maxmemory-policy`` says:

- ``allkeys-lru``, ``allkeys-lfu``, ``allkeys-random`` pick among every key: a partition's
  stream, a group's committed offsets, a topic's registration may go, acknowledged records
  with them, and nobody is told (the issue 35 finding: 60,000 records acknowledged, 10,973
  readable afterwards). Refused unless ``redis.accept-eviction``.
- ``volatile-lru``, ``volatile-lfu``, ``volatile-random``, ``volatile-ttl`` pick only among
  keys with a time to live. The broker gives a TTL to scratch keys only (the readiness
  probe's ``{ks}:health:{id}``, the fetch waiting marks ``...:waiting``), never to a key that
  holds data: streams, partition and topic hashes, snapshots, commits, leases, claims and
  the registry are written without one, and no script or command of the broker sets one on
  them. Evicting a waiting mark costs a long-polling fetch its early wake-up (it answers at
  its max wait), nothing else. With nothing volatile left, these policies refuse writes as
  ``noeviction`` does. So they are safe.
- ``noeviction`` refuses writes past ``maxmemory`` (OOM errors): nothing is lost, the
  broker is *full*.

A policy this version does not know is judged by its prefix (``allkeys-`` evicts any key),
else reported as unknown rather than refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

FIX = "CONFIG SET maxmemory-policy noeviction"


class Eviction(Enum):
    SAFE = "safe"  # the broker's keys are never evicted
    UNSAFE = "unsafe"  # Redis may evict a key holding acknowledged data
    UNKNOWN = "unknown"  # the policy could not be read


def eviction_of(policy: str | None) -> Eviction:
    if policy is None or not policy:
        return Eviction.UNKNOWN
    if policy == "noeviction" or policy.startswith("volatile-"):
        return Eviction.SAFE
    if policy.startswith("allkeys-"):
        return Eviction.UNSAFE
    return Eviction.UNKNOWN


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """One reading of a Redis node's INFO memory (policy None: it could not be read)."""

    policy: str | None
    used: int = 0
    maxmemory: int = 0  # 0: no limit
    node: str = ""


def full(reading: MemoryReading) -> bool:
    """Redis refuses writes for want of memory: at or past maxmemory with nothing it may
    evict (noeviction; volatile-* once the volatile keys are gone shows as OOM errors)."""
    return reading.maxmemory > 0 and reading.used >= reading.maxmemory and \
        eviction_of(reading.policy) is not Eviction.UNSAFE


def unsafe_message(reading: MemoryReading, keyspace: str) -> str:
    """The refusal of an evicting Redis: which setting to change, and how to accept it."""
    where = f" ({reading.node})" if reading.node else ""
    return (f"Redis{where} has maxmemory-policy {reading.policy}: when it reaches maxmemory "
            f"it evicts any key, the broker's streams and committed offsets in keyspace "
            f"'{keyspace}' included, and acknowledged records are lost without a word. Run "
            f"`{FIX}` on it (and set it in redis.conf, or the managed service's parameter "
            "group, so that it survives a restart), or a volatile-* policy (the broker's "
            "data keys carry no time to live); or, if losing records is acceptable (a cache), "
            "set redis.accept-eviction=true (--redis-accept-eviction, "
            "KORVET_REDIS_ACCEPT_EVICTION=true)")
