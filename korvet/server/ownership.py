"""Several brokers on one Redis (``cluster.multi-broker``): the registry and group ownership.

``Membership`` heartbeats this broker's entry in the registry (every listener's
advertised address) and keeps the list of live brokers that Metadata, DescribeCluster
and FindCoordinator report, each at the address of the listener the request came in on
(``on_listener``; partition leaders are spread over them by rendezvous hashing,
korvet/core/placement.py).

``Ownership`` holds the groups this broker coordinates: for each, the lease's fencing
token and the broker's own deadline (korvet/core/lease.py; spec/CoordinatorLease.tla).
FindCoordinator acquires a group's lease on demand: granted, the coordinator adopts
the group from its durable snapshot (returned by the same script) before the broker
names itself; refused, it names the owner. A renewal task extends every lease held;
a refused renewal, the broker's own deadline passing, a write refused for a stale
token or a write whose outcome is unknown all make the broker forget the group, and
requests for it are answered NOT_COORDINATOR until a FindCoordinator acquires it again
(with a new token). Forgetting a group cancels the work the coordinator still had pending
for it (the clean-up of a deleted group): that work goes on only while the broker
``holds`` the token it was decided with, and its write carries that token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from korvet.core import lease
from korvet.storage.leases import BrokerEntry, BrokerRegistry, LeaseStore

log = logging.getLogger("korvet.ownership")


def _local_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Membership:
    def __init__(self, registry: BrokerRegistry, me: Callable[[], BrokerEntry],
                 ttl_ms: int) -> None:
        self.registry = registry
        self._me = me
        self.ttl_ms = ttl_ms
        self.live: list[BrokerEntry] = []
        self._task: asyncio.Task[None] | None = None
        self._unreachable: set[tuple[int, str]] = set()  # (broker, listener) logged once

    def begin(self) -> None:
        """Once the broker listens (its advertised port is known): heartbeat from now on."""
        if self._task is None:
            self._task = asyncio.create_task(self._beat(), name="korvet-registry")

    async def _beat(self) -> None:
        while True:
            try:
                self.live = await self.registry.heartbeat(self._me(), self.ttl_ms)
            except (RedisError, OSError) as exc:
                log.warning("registry heartbeat failed: %s", exc)
            await asyncio.sleep(self.ttl_ms / 3000)

    def brokers(self) -> list[BrokerEntry]:
        """The live brokers, this one always among them."""
        me = self._me()
        others = [b for b in self.live if b.node_id != me.node_id]
        return sorted([me, *others], key=lambda b: b.node_id)

    def entry(self, node_id: int) -> BrokerEntry | None:
        return next((b for b in self.brokers() if b.node_id == node_id), None)

    def on_listener(self, listener: str, me: BrokerEntry) -> list[BrokerEntry]:
        """The live brokers as a client of ``listener`` reaches them (this one as ``me``,
        the address its request came in on): Kafka's rule, a broker without a listener of
        that name is left out (and logged, once)."""
        reachable: list[BrokerEntry] = []
        for broker in self.brokers():
            if broker.node_id == me.node_id:
                reachable.append(me)
                continue
            found = broker.at(listener)
            if found is not None:
                reachable.append(found)
            elif (broker.node_id, listener) not in self._unreachable:
                self._unreachable.add((broker.node_id, listener))
                log.warning("broker %d has no listener %r: clients of that listener are not "
                            "told about it", broker.node_id, listener)
        return reachable

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(RedisError, OSError):
            await self.registry.heartbeat(self._me(), self.ttl_ms, leave=True)


_RENEW_AT_ONCE = 64  # lease renewals sent together
_UNNEEDED_ROUNDS = 3  # renewal rounds a group may be missing before its lease is given back


class Ownership:
    def __init__(self, store: LeaseStore, broker: str, ttl_ms: int, margin_ms: int,
                 adopt: Callable[[str, str | None, int], Awaitable[None]],
                 forget: Callable[[str], Awaitable[None]],
                 clock: Callable[[], int] = _local_ms,
                 needed: Callable[[str], bool] = lambda group: True) -> None:
        self.store = store
        self._needed = needed  # the coordinator still has the group (not deleted)
        self._unneeded: dict[str, int] = {}  # group -> renewal rounds it has not been
        self._had: set[str] = set()  # held groups the coordinator has had since taking them
        self.broker = broker
        self.ttl_ms = ttl_ms
        self.margin_ms = margin_ms
        self._adopt = adopt
        self._forget = forget
        self._clock = clock
        self.held: dict[str, lease.Held] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._renewals(), name="korvet-leases")

    def believes(self, group: str) -> bool:
        held = self.held.get(group, lease.NOT_HELD)
        return lease.believes(held, self._clock())

    def token(self, group: str) -> int:
        return self.held.get(group, lease.NOT_HELD).token

    def holds(self, group: str, token: int) -> bool:
        """Whether this broker still holds the group with ``token`` (and believes it)."""
        return lease.holds(self.held.get(group, lease.NOT_HELD), token, self._clock())

    async def acquire(self, group: str) -> tuple[bool, str]:
        """(True, this broker) if it coordinates the group (now), else (False, owner)."""
        lock = self._locks.setdefault(group, asyncio.Lock())
        async with lock:
            if self.believes(group):
                return True, self.broker
            if group in self.held:
                await self.drop(group)
            sent = self._clock()
            grant = await self.store.acquire(group, self.broker, self.ttl_ms)
            if not grant.granted:
                return False, grant.owner
            await self._adopt(group, grant.snapshot, grant.token)
            self._unneeded.pop(group, None)
            if self._needed(group):  # adopted from its snapshot: deleted later, it goes back
                self._had.add(group)
            else:
                self._had.discard(group)
            self.held[group] = lease.after_grant(grant.token, sent, self.ttl_ms, self.margin_ms)
            log.info("coordinating group %r (token %d)", group, grant.token)
            return True, self.broker

    async def drop(self, group: str) -> None:
        """Forget the group (spec: Drop): requests for it get NOT_COORDINATOR."""
        self._had.discard(group)
        self._unneeded.pop(group, None)
        if self.held.pop(group, None) is not None:
            log.info("no longer coordinating group %r", group)
        await self._forget(group)

    async def lost(self, group: str, token: int, outcome: str) -> None:
        """A write for the group carrying ``token`` was refused, or its outcome is unknown,
        outside a coordinator step (its pending clean-up): if this broker still holds that
        token it forgets the group (spec: Refuse, Lose, GiveUp)."""
        if self.held.get(group, lease.NOT_HELD).token != token or self.after_write(
                group, token, outcome):
            return
        self._had.discard(group)
        self._unneeded.pop(group, None)
        log.info("no longer coordinating group %r", group)
        await self._forget(group)

    def after_write(self, group: str, token: int, outcome: str) -> bool:
        """Record a write's outcome; True if the group is still held afterwards."""
        held = self.held.get(group, lease.NOT_HELD)
        after = lease.after_write(held, token, outcome)
        if after == lease.NOT_HELD:
            self.held.pop(group, None)
            return False
        return True

    async def _renewals(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            await self.renew_all()

    async def renew_all(self) -> None:
        """One round: every lease held is renewed, _RENEW_AT_ONCE at a time (one at a time,
        a round of hundreds of leases outlasted their time whenever Redis or the event loop
        stalled, and the broker dropped every group at once); a lease of a group the
        coordinator had and no longer has (deleted, expired) for _UNNEEDED_ROUNDS rounds is
        given back.
        """
        pending: list[tuple[str, lease.Held]] = []
        unneeded: list[str] = []
        for group, held in list(self.held.items()):
            if self._needed(group):
                self._had.add(group)
                self._unneeded.pop(group, None)
            elif group not in self._had:
                pass  # taken for a client that has not joined yet (FindCoordinator)
            elif self._unneeded.get(group, 0) + 1 >= _UNNEEDED_ROUNDS:
                unneeded.append(group)
                continue
            else:
                self._unneeded[group] = self._unneeded.get(group, 0) + 1
            pending.append((group, held))
        for start in range(0, len(pending), _RENEW_AT_ONCE):
            await asyncio.gather(*(self._renew(group, held)
                                   for group, held in pending[start:start + _RENEW_AT_ONCE]))
        for start in range(0, len(unneeded), _RENEW_AT_ONCE):  # after the renewals
            await asyncio.gather(*(self.release(group)
                                   for group in unneeded[start:start + _RENEW_AT_ONCE]))

    async def release(self, group: str) -> None:
        """Give back the lease of a group this broker no longer has anything of."""
        async with self._locks.setdefault(group, asyncio.Lock()):
            if self._needed(group):
                return  # a client brought it back meanwhile
            held = self.held.pop(group, None)
            self._unneeded.pop(group, None)
            self._had.discard(group)
            if held is None:
                return
            await self._forget(group)
            with contextlib.suppress(RedisError, OSError):
                await self.store.release(group, held.token)
            log.info("gave back the lease of group %r (deleted)", group)

    async def adopt_orphans(self) -> int:
        """Take the groups no broker coordinates (their lease expired: the broker holding it
        stopped or dropped it, and no client asked for them since), so that the clean-up
        rounds expire them as Kafka expires every group. Returns how many were taken."""
        records, now = await self.store.every_lease()
        taken = 0
        for group, record in records.items():
            if group in self.held or not lease.may_acquire(record, self.broker, now):
                continue
            try:
                mine, _owner = await self.acquire(group)
            except (RedisError, OSError) as exc:
                log.warning("taking orphan group %r failed: %s", group, exc)
                continue
            taken += mine
        return taken

    async def _renew(self, group: str, held: lease.Held) -> None:
        now = self._clock()
        if lease.expired_locally(held, now):
            await self.drop(group)
            return
        try:
            renewed = await self.store.renew(group, held.token, self.ttl_ms)
        except (RedisError, OSError) as exc:
            log.warning("renewing the lease of group %r failed: %s", group, exc)
            return
        if self.held.get(group) != held:
            return
        after = lease.after_renewal(held, renewed, now, self.ttl_ms, self.margin_ms)
        if after == lease.NOT_HELD:
            await self.drop(group)
        else:
            self.held[group] = after

    async def close(self) -> None:
        """Stop renewing and give every lease back, so other brokers take over at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for group, held in list(self.held.items()):
            with contextlib.suppress(RedisError, OSError):
                await self.store.release(group, held.token)
        self.held.clear()
