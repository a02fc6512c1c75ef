"""This broker's claim on its keyspace (korvet/storage/claims.py), taken before it serves.

Every broker claims its broker id in ``{ks}:broker-claims`` at start, whatever its
settings, and renews the claim every third of ``cluster.broker-ttl-ms``. A broker without
``cluster.multi-broker`` claims as the single broker: it coordinates every group alone, so
the script refuses every other broker while its claim lives, and refuses it while another
broker's does. The refusal names the other broker (id, address) and the setting to use.

At start a refused broker does not give up at once: a broker killed with -9 leaves a
claim that lives until its time ends. So it watches the other claim: renewed, the other
broker runs and this one refuses to start; ended, this one takes it. With the embedded
Redis (started by this broker, its data folder locked) the claim is taken at once.

A single broker believes it holds the claim until its own deadline (the time to live
minus ``cluster.lease-margin-ms``, counted on its monotonic clock from when it sent the
last renewal that was granted); past it, its coordinator neither answers group requests
nor writes (``GroupCoordinator.may_write``). A renewal that finds the claim taken (it was
paused or cut off from Redis past the time to live, and another broker started) makes
the broker stop: ``lost`` is set and ``korvet serve`` exits 1 with the other broker's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from redis.exceptions import RedisError

from korvet.server.redis_memory import is_oom
from korvet.storage.claims import ClaimStore, Holder

log = logging.getLogger("korvet.claim")

_MULTI = "--multi-broker (cluster.multi-broker: true, KORVET_CLUSTER_MULTI_BROKER=true)"


def _local_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ClaimRefused(Exception):
    """Another broker holds what this one would claim; the message says what to change."""


def refusal(holder: Holder, *, single: bool, node_id: int, keyspace: str) -> str:
    """Why this broker may not serve keyspace ``keyspace``, and which setting to use."""
    other = f"broker {holder.node_id} at {holder.address}"
    if holder.why == "id":
        return (f"{other} holds broker id {node_id} on keyspace '{keyspace}' of this Redis: "
                "every broker sharing a keyspace needs its own broker.id (--broker-id, "
                "KORVET_BROKER_ID), and all of them " + _MULTI)
    if holder.single:
        return (f"{other} serves keyspace '{keyspace}' of this Redis as the single broker "
                "(it runs without cluster.multi-broker and coordinates every group alone). "
                f"To run several brokers on one Redis, start every one of them with {_MULTI} "
                "and its own --broker-id; or give this broker its own Redis or keyspace "
                "(--keyspace)")
    return (f"{other} serves keyspace '{keyspace}' of this Redis with cluster.multi-broker; "
            "this broker runs without it and would coordinate every group alone: start it "
            f"with {_MULTI} and its own --broker-id, or give it its own Redis or keyspace "
            "(--keyspace)")


class BrokerClaim:
    def __init__(self, store: ClaimStore, node_id: int, keyspace: str, *, single: bool,
                 ttl_ms: int, margin_ms: int, force: bool,
                 address: Callable[[], tuple[str, int]],
                 clock: Callable[[], int] = _local_ms) -> None:
        self.store = store
        self.node_id = node_id
        self.keyspace = keyspace
        self.single = single
        self.ttl_ms = ttl_ms
        self.margin_ms = min(margin_ms, ttl_ms // 2)
        self.force = force
        self._address = address
        self._clock = clock
        self.instance = uuid.uuid4().hex
        self.granted_at = 0
        self.deadline_ms = 0
        self.lost: str | None = None  # why the claim was lost; the broker stops
        self._task: asyncio.Task[None] | None = None

    def believes(self) -> bool:
        """Whether this broker may still act on its claim (its own deadline, with margin)."""
        return self.lost is None and self._clock() < self.deadline_ms

    async def take(self) -> None:
        """Claim, waiting for a claim left by a dead broker to end; ``ClaimRefused`` if a
        live broker holds it."""
        give_up = self._clock() + self.ttl_ms + self.margin_ms
        seen: dict[str, int] = {}
        while True:
            sent = self._clock()
            host, port = self._address()
            answer = await self.store.claim(self.node_id, self.instance, host, port,
                                            single=self.single, ttl_ms=self.ttl_ms,
                                            force=self.force)
            if answer.granted:
                self.granted_at = answer.count
                self.deadline_ms = sent + self.ttl_ms - self.margin_ms
                log.info("claimed broker id %d on keyspace '%s'%s", self.node_id, self.keyspace,
                         " as the single broker" if self.single else "")
                return
            holder = answer.holder
            assert holder is not None
            why = refusal(holder, single=self.single, node_id=self.node_id,
                          keyspace=self.keyspace)
            before = seen.get(holder.node_id)
            if (before is not None and holder.expires_ms > before) or self._clock() > give_up:
                raise ClaimRefused(why)  # renewed meanwhile: that broker is alive
            if before is None:
                log.warning("%s; waiting up to %d ms in case that broker is gone (its claim then "
                            "ends)", why, self.ttl_ms)
                seen[holder.node_id] = holder.expires_ms
            await asyncio.sleep(min(self.ttl_ms / 6000, 0.5))

    def start(self) -> None:
        self._task = asyncio.create_task(self._renewals(), name="korvet-claim")

    async def _renewals(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self.ttl_ms / 3000)
            await self.renew()

    async def renew(self) -> None:
        sent = self._clock()
        host, port = self._address()
        try:
            answer = await self.store.renew(self.node_id, self.instance, host, port,
                                            single=self.single, ttl_ms=self.ttl_ms,
                                            granted_at=self.granted_at)
        except (RedisError, OSError) as exc:
            # a full Redis is logged once per interval by the memory watch
            (log.debug if is_oom(exc) else log.warning)(
                "renewing this broker's claim on keyspace '%s' failed: %s", self.keyspace, exc)
            return
        if answer.granted:  # the count moves only if Redis lost the claim and it was re-taken
            self.granted_at = answer.count
            self.deadline_ms = sent + self.ttl_ms - self.margin_ms
            return
        holder = answer.holder
        assert holder is not None
        self.lost = (f"this broker lost its claim on keyspace '{self.keyspace}' (it was paused "
                     "or cut off from Redis for longer than cluster.broker-ttl-ms): "
                     + refusal(holder, single=self.single, node_id=self.node_id,
                               keyspace=self.keyspace)
                     + "; it stops serving so that only one broker coordinates each group")
        log.error("%s", self.lost)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.lost is None:
            with contextlib.suppress(RedisError, OSError):
                await self.store.release(self.node_id, self.instance)
