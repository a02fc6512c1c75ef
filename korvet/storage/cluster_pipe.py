"""Appends on Redis Cluster: one ``RedisPipe`` per master, chosen by the stream's hash slot.

On one Redis every append goes down one ``RedisPipe`` (storage/pipe.py): commands in flight
on one connection run in the order sent, which keeps a producer connection's pipelined
batches in order. On a cluster the same holds per master: a partition's keys live in one
slot, so all appends to it go down the pipe of the master that serves that slot.

A failover moves slots: the old master answers ``MOVED`` (a manual failover) or its
connection breaks (a crash). ``MOVED``, ``ASK``, ``TRYAGAIN`` and ``CLUSTERDOWN`` mean the
script did not run: the topology is read again and the append is sent to the new master.
A broken connection may or may not have run it, so that error goes back to the producer
(a retriable error; an idempotent producer's retry is recognised by the script), and the
topology is read again for the appends after it.

Appends to one key stay in their order across a redirect: an append waits while an
earlier append to the key is not settled and either went to another master or has had its
first reply (a redirect being followed: it will be sent again). It goes straight out only
behind earlier ones still unanswered on the same master's connection: Redis runs it after
them, and when they are redirected so is it (unless the cluster's state changes between
the two commands, a window of one command's time), and it is resent behind them.

Without this, two things happened (found by `korvet faults run --topology cluster`). An
append sent once the slot table was read again (by any redirect, or by redis-py's own
client) overtook the earlier one still on its way to the new master; an idempotent
producer's next batch was then refused as out of order, librdkafka bumped its epoch and
sent the earlier batch again, which had been stored: a duplicate. And while any master is
down and not yet replaced, every master of a cluster that needs all its slots served
answers ``CLUSTERDOWN`` to everything: an append refused so, waiting to be sent again, was
overtaken by a later one to the same, unchanged master once the cluster was back. The
later batch was refused as out of order, and since librdkafka had meanwhile seen the
earlier one acknowledged, that refusal of its head-of-line batch was its fatal "sequence
desynchronization": the application had to make a new producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, RedisError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from korvet.storage.pipe import Life, RedisPipe

log = logging.getLogger("korvet.cluster")

# The replies that say "not here, not now": MOVED (MovedError is an AskError), ASK, TRYAGAIN,
# CLUSTERDOWN and MASTERDOWN (ClusterDownError's). redis-py's parser strips the code from the
# message, so they are told apart by class.
_REDIRECTS = (AskError, TryAgainError, ClusterDownError)
_ATTEMPTS = 20  # resends after redirects: a failover settles within a few topology reads


@dataclass(frozen=True, eq=False, slots=True)
class _Sent:
    """An append not settled yet: the master's pipe it first went down, its first reply
    (a redirect means it is sent again) and its settled reply."""

    pipe: RedisPipe
    first: asyncio.Future[Any]
    settled: asyncio.Future[Any]


class ClusterPipes:
    def __init__(self, cluster: RedisCluster, scripts: tuple[str | bytes, ...] = ()) -> None:
        self.cluster = cluster
        self._scripts = scripts
        self._pipes: dict[str, tuple[aioredis.Redis, RedisPipe]] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._resend = asyncio.Lock()
        # per key: its appends choose a master one at a time, in call order, and those not
        # settled yet, in that order (see the module docstring)
        self._order: dict[str, asyncio.Lock] = {}
        self._unsettled: dict[str, list[_Sent]] = {}

    def _pipe_for(self, key: str) -> RedisPipe:
        node = self.cluster.get_node_from_key(key)
        if node is None:  # a slot no master serves (the cluster is down for it)
            raise RedisConnectionError(f"no Redis Cluster master serves the slot of {key}")
        entry = self._pipes.get(node.name)
        if entry is None:
            kwargs = self.cluster.connection_kwargs
            client = aioredis.Redis(host=node.host, port=int(node.port),
                                    username=kwargs.get("username"),
                                    password=kwargs.get("password"), decode_responses=False)
            entry = (client, RedisPipe(client, self._scripts))
            self._pipes[node.name] = entry
        return entry[1]

    async def send(self, key: str, packed: bytes, wait: bytes | None = None) -> asyncio.Future[Any]:
        """Send ``packed`` (a command on ``key``'s slot) down its master's pipe, with ``wait``
        after it (``RedisPipe.send``); the future holds the reply, after any redirects."""
        async with self._order.setdefault(key, asyncio.Lock()):
            pipe = await self._pipe_in_order(key)
            first = await pipe.send(packed, wait)
            return self._settling(key, pipe, packed, wait, first)

    async def send_packed_for(self, key: str, pack: Callable[[Life], bytes],
                              wait: bytes | None = None) -> asyncio.Future[Any]:
        """As ``send``, for a command that names the Redis life it runs in (a dense topic's
        append, whose epoch follows it): packed by ``pack`` for the life of the master it
        goes to, again after a redirect to another master."""
        async with self._order.setdefault(key, asyncio.Lock()):
            pipe = await self._pipe_in_order(key)
            life = await pipe.life()
            first = await pipe.send(pack(life), wait, life)
            return self._settling(key, pipe, pack, wait, first)

    async def _pipe_in_order(self, key: str) -> RedisPipe:
        """The pipe of ``key``'s master, once no earlier append to the key can be sent after
        this one: an append never overtakes an earlier one being redirected."""
        while True:
            pipe = self._pipe_for(key)
            # A settled one is skipped, not awaited: awaiting a done future does not yield,
            # and its entry leaves the list only in a callback the loop runs later.
            ahead = next((sent for sent in self._unsettled.get(key, ())
                          if not sent.settled.done()
                          and (sent.pipe is not pipe or sent.first.done())), None)
            if ahead is None:
                return pipe
            with contextlib.suppress(Exception):  # its outcome is its own caller's
                await asyncio.shield(ahead.settled)

    def _settling(self, key: str, pipe: RedisPipe, packed: bytes | Callable[[Life], bytes],
                  wait: bytes | None, first: asyncio.Future[Any]) -> asyncio.Future[Any]:
        settled = asyncio.ensure_future(self._settle(key, packed, wait, first))
        sent = _Sent(pipe, first, settled)
        self._unsettled.setdefault(key, []).append(sent)
        settled.add_done_callback(lambda _: self._forget(key, sent))
        return settled

    def _forget(self, key: str, sent: _Sent) -> None:
        unsettled = self._unsettled.get(key)
        if unsettled is not None:
            unsettled.remove(sent)
            if not unsettled:
                del self._unsettled[key]

    async def _settle(self, key: str, packed: bytes | Callable[[Life], bytes],
                      wait: bytes | None, sent: asyncio.Future[Any]) -> Any:
        for attempt in range(_ATTEMPTS):
            try:
                return await sent
            except ResponseError as exc:
                if not isinstance(exc, _REDIRECTS) or attempt == _ATTEMPTS - 1:
                    raise
                log.info("append to %s redirected (%s %s); reading the cluster's topology", key,
                         type(exc).__name__, exc)
                if attempt:  # the slot table was read already: give the cluster a moment
                    await asyncio.sleep(min(0.5, 0.02 * 2 ** attempt))
                # Redirected appends wake in the order their replies came (the shared read's
                # waiters, then the lock's, are FIFO), so they are resent in their first order.
                await self.refresh()
                async with self._resend:
                    pipe = self._pipe_for(key)
                    if isinstance(packed, bytes):
                        sent = await pipe.send(packed, wait)
                    else:  # packed anew for the life of the master it now goes to
                        life = await pipe.life()
                        sent = await pipe.send(packed(life), wait, life)
            except RedisConnectionError:
                self._refresh_soon()
                raise
        raise AssertionError("unreachable")

    async def refresh(self) -> None:
        """Read the slot table again (one read for everyone waiting at the time)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    def _refresh_soon(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self.cluster.nodes_manager.initialize()
        except (RedisError, OSError) as exc:
            log.warning("could not read the Redis Cluster's topology: %s", exc)

    async def close(self) -> None:
        for client, pipe in self._pipes.values():
            await pipe.close()
            with contextlib.suppress(Exception):
                await client.aclose()
        self._pipes.clear()

