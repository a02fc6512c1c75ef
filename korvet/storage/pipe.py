"""One Redis connection carrying many commands in flight, answered in order.

Appends are one EVALSHA each. Sent one at a time and awaited, they leave the broker
and Redis taking turns: the broker idles while Redis runs the script and Redis idles
while the broker decodes the next batch. ``RedisPipe`` sends every command on one
connection as soon as it is ready and a reader task hands out the replies in order
(Redis answers a connection's commands in the order it received them). Commands
submitted in some order are also executed in that order, which is what keeps one
producer connection's batches in order while several are in flight.

A command sent with ``wait`` (a packed ``WAIT numreplicas timeout``) is answered only once
Redis' replicas have it too: the commands written together in one system call share one
WAIT after the last of them (WAIT covers everything the connection wrote before it), so a
burst of appends costs one round trip to the replicas, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

_WRITE_HIGH_WATER = 1 << 20  # bytes unsent on the socket above which writes wait for it to drain


class RedisPipe:
    """``scripts`` are loaded first thing on every new connection, so that EVALSHA never meets
    NOSCRIPT on it (even after Redis restarted): a NOSCRIPT retried by each request on its own
    could reorder them."""

    def __init__(self, client: aioredis.Redis, scripts: tuple[str | bytes, ...] = ()) -> None:
        self._pool = client.connection_pool
        self._scripts = scripts
        self._connection: Any = None
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._send_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._buffer: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._write_scheduled = False  # a _write_soon is due
        self._wait: tuple[bytes, asyncio.Future[Any]] | None = None  # the buffer's shared WAIT

    async def send(self, packed: bytes, wait: bytes | None = None) -> asyncio.Future[Any]:
        """Queue a packed command (in call order) and return the future of its reply (or
        the reply's error). Commands queued within one turn of the event loop are written
        together: one system call instead of one each. With ``wait`` the future holds
        (reply, replicas that acknowledged it) once the WAIT written after it answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._buffer.append((packed, future))
        if not self._write_scheduled:
            self._write_scheduled = True
            loop.call_soon(self._write_soon)
        if wait is None:
            return future
        if self._wait is None:
            waited: asyncio.Future[Any] = loop.create_future()
            waited.add_done_callback(_ignore)
            self._wait = (wait, waited)
        return asyncio.ensure_future(_replicated(future, self._wait[1]))

    def _write_soon(self) -> None:
        """Write what was queued in the last turn of the event loop. Done from a plain
        callback (a task per write cost more than the rest of it) whenever the connection is
        up, idle and not backed up; else by the ``_flush`` task, which connects, and waits
        for the socket to drain."""
        self._write_scheduled = False
        if not self._buffer:
            return
        writer = getattr(self._connection, "_writer", None)  # redis-py's asyncio.StreamWriter
        if (not isinstance(writer, asyncio.StreamWriter) or self._send_lock.locked()
                or writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER):
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.create_task(self._flush())
            return
        batch = self._take()
        for _packed, future in batch:
            self._pending.append(future)
        try:
            writer.writelines([p for p, _ in batch])
        except Exception as exc:  # e.g. the transport is gone: its futures fail with it
            self._fail(self._connection, exc)

    def _take(self) -> list[tuple[bytes, asyncio.Future[Any]]]:
        batch, self._buffer = self._buffer, []
        if self._wait is not None:  # after every command of the batch
            batch.append(self._wait)
            self._wait = None
        return batch

    async def _flush(self) -> None:
        async with self._send_lock:
            while self._buffer:
                batch = self._take()
                try:
                    connection = await self._connect()
                    for _packed, future in batch:
                        self._pending.append(future)
                    await connection.send_packed_command([p for p, _ in batch],
                                                         check_health=False)
                except BaseException as exc:
                    for _packed, future in batch:
                        if not future.done():
                            future.set_exception(
                                RedisConnectionError(f"Redis connection lost: {exc}"))
                    if self._connection is not None:
                        self._fail(self._connection, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise

    async def _connect(self) -> Any:
        if self._connection is None:
            connection = self._pool.make_connection()  # type: ignore[no-untyped-call]
            await connection.connect()
            self._connection = connection
            self._reader = asyncio.create_task(self._read(connection), name="korvet-redis-pipe")
            for script in self._scripts:
                loaded: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                loaded.add_done_callback(_ignore)
                self._pending.append(loaded)
                load = ("SCRIPT", "LOAD", script)
                await connection.send_packed_command(
                    hiredis.pack_command(load), check_health=False)  # type: ignore[arg-type]
        return self._connection

    async def call(self, packed: bytes) -> Any:
        return await (await self.send(packed))

    async def _read(self, connection: Any) -> None:
        try:
            while True:
                try:
                    reply = await connection.read_response(disconnect_on_error=False)
                except ResponseError as exc:
                    reply = exc
                if not self._pending:
                    continue
                future = self._pending.popleft()
                if future.done():
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection broke: every reply still owed fails
            self._fail(connection, exc)

    def _fail(self, connection: Any, exc: BaseException) -> None:
        if self._connection is connection:
            self._connection = None
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(RedisConnectionError(f"Redis connection lost: {exc}"))
        task = asyncio.create_task(connection.disconnect(nowait=True))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def close(self) -> None:
        if self._write_scheduled:  # queued in this turn: out (or to the task) before closing
            self._write_soon()
        if self._flusher is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.disconnect()
            self._connection = None


async def _replicated(reply: asyncio.Future[Any], waited: asyncio.Future[Any]) -> tuple[Any, int]:
    result = await reply
    return result, int(await waited)


def _ignore(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
