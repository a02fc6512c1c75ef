"""One Redis connection carrying many commands in flight, answered in order.

Appends are one EVALSHA each. Sent one at a time and awaited, they leave the broker
and Redis taking turns: the broker idles while Redis runs the script and Redis idles
while the broker decodes the next batch. ``RedisPipe`` sends every command on one
connection as soon as it is ready, and the replies are handed out in order as they are
read (Redis answers a connection's commands in the order it received them). Commands
submitted in some order are also executed in that order, which is what keeps one
producer connection's batches in order while several are in flight.

A command sent with ``wait`` (a packed ``WAIT numreplicas timeout``) is answered only once
Redis' replicas have it too: the commands written together in one system call share one
WAIT after the last of them (WAIT covers everything the connection wrote before it), so a
burst of appends costs one round trip to the replicas, not one each.

redis-py makes the connection (address, TLS, AUTH, SELECT, client name: everything its URL
and options say) and the pipe then takes its transport over: replies are received into one
fixed buffer and parsed by hiredis straight from it (``_Replies``), where redis-py's own
reading goes through asyncio's ``StreamReader``, which copies every chunk twice and is read
back 64 KiB at a time. The Fetch handler's reads of a megabyte of stored batches are the
ones this matters for (``RedisStore.read`` uses a pipe of its own).

The pipe knows which life of Redis its connection talks to (``life``: the server's
``run_id``, read on connecting) for the partition epochs of dense topics (spec/DenseLog.tla):
an append packed for one connection's life is never written on another's (``send``'s
``life``), and the epochs of a Redis process this pipe has not met before are numbered from
the next second on (``Life.clock``; ``life`` waits for it), so that each is above every epoch
of the life before (docs/spec/dense-offsets.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError

_WRITE_HIGH_WATER = 1 << 20  # bytes unsent on the socket above which writes wait for it to drain
# One socket read at most, and the bytes of parser buffer kept between replies (hiredis
# gives back what it grew past that after each reply; its own default is 64 KiB). A pipe
# for fetches, whose replies are about a megabyte, wants more of both (RedisStore.reads).
SMALL_REPLIES = (64 << 10, 64 << 10)
LARGE_REPLIES = (1 << 20, 4 << 20)
_CLOSE_SECONDS = 5.0  # for the transport to close, on closing the pipe
_INCOMPLETE = object()  # hiredis' answer while the next reply has not fully arrived
# RESP3 out-of-band messages (with protocol=3: client tracking, maintenance notices) answer
# no command: they are dropped, as redis-py's own reading drops them.
_PUSH: tuple[type, ...] = tuple(t for t in (getattr(hiredis, "PushNotification", None),) if t)
EPOCH_BASE_S = 1_704_067_200  # 2024-01-01: epochs count seconds from here (int32 until 2092)


class Life:
    """The Redis process a pipe's connection talks to: its ``run_id``, the connection's
    generation (counted by the pipe), and the clock, in seconds from EPOCH_BASE_S, of the
    first moment an epoch may be numbered for it (``ready_at``, the next second after the
    pipe met the process)."""

    __slots__ = ("clock", "generation", "ready_at", "run_id")

    def __init__(self, run_id: str, generation: int, ready_at: int) -> None:
        self.run_id, self.generation, self.ready_at = run_id, generation, ready_at
        self.clock = ready_at - EPOCH_BASE_S


class _Replies(asyncio.BufferedProtocol):
    """The receiving side of one Redis connection: the transport reads into one fixed
    buffer, hiredis parses the replies out of it (copying what it keeps), each goes to
    ``on_reply`` in the order received. An error reply is handed over as the exception
    redis-py would raise for it (``NoScriptError``, ``MovedError``, ``ResponseError``...).
    ``on_lost`` hears once of the connection's end (or of a reply that cannot be parsed,
    after which nothing on the connection can be trusted). It also carries the write side's
    flow control: ``drain`` waits while the transport holds too much unsent."""

    def __init__(self, transport: asyncio.Transport, on_reply: Callable[[Any], None],
                 on_lost: Callable[[BaseException], None],
                 sizes: tuple[int, int] = SMALL_REPLIES) -> None:
        self.transport = transport
        receive, keep = sizes
        self._buffer = memoryview(bytearray(receive))
        self._parser = hiredis.Reader(protocolError=InvalidResponse,
                                      replyError=BaseParser.parse_error,
                                      notEnoughData=_INCOMPLETE)
        # hiredis frees its buffer after a reply when it grew past maxbuf: with its 64 KiB
        # every fetch's megabyte grew a new one by doubling, from fresh memory.
        self._parser.setmaxbuf(keep)
        self._on_reply = on_reply
        self._on_lost: Callable[[BaseException], None] | None = on_lost
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._gone = False  # connection_lost came
        self._closed: asyncio.Future[None] | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.feed(self._buffer, nbytes)

    def feed(self, data: memoryview | bytes, nbytes: int) -> None:
        self._parser.feed(data, 0, nbytes)  # type: ignore[arg-type]  # any buffer will do
        try:
            while (reply := self._parser.gets()) is not _INCOMPLETE:
                if not isinstance(reply, _PUSH):
                    self._on_reply(reply)
        except InvalidResponse as exc:
            self._lost(exc)
            self.transport.abort()

    def eof_received(self) -> bool:
        return False  # Redis closed its side: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc or RedisConnectionError("Redis closed the connection"))
        self._resume()
        self._gone = True
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _lost(self, exc: BaseException) -> None:
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._resume()

    def _resume(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def wait_closed(self) -> None:
        if not self._gone:
            self._closed = self._closed or asyncio.get_running_loop().create_future()
            await self._closed

    async def drain(self) -> None:
        if self.transport.is_closing():
            raise RedisConnectionError("Redis connection lost")
        if self._paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained


class RedisPipe:
    """``scripts`` are loaded first thing on every new connection, so that EVALSHA never meets
    NOSCRIPT on it (even after Redis restarted): a NOSCRIPT retried by each request on its own
    could reorder them."""

    def __init__(self, client: aioredis.Redis, scripts: tuple[str | bytes, ...] = (),
                 sizes: tuple[int, int] = SMALL_REPLIES) -> None:
        self._pool = client.connection_pool
        self._sizes = sizes  # receive buffer and parser buffer kept: SMALL_ or LARGE_REPLIES
        # SCRIPT LOAD of each script, packed once: sent first on every new connection, and
        # again after a NOSCRIPT
        self._script_loads = [hiredis.pack_command(("SCRIPT", "LOAD", script))  # type: ignore[arg-type]
                              for script in scripts]
        self._connection: Any = None  # redis-py's, which made the connection and closes it
        self._replies: _Replies | None = None  # the connection's transport, taken over
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._send_lock = asyncio.Lock()
        self._buffer: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._write_scheduled = False  # a _write_soon is due
        self._wait: tuple[bytes, asyncio.Future[Any]] | None = None  # the buffer's shared WAIT
        self._reloading = False  # the scripts are being loaded again after a NOSCRIPT
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its connection is on
        self._life: Life | None = None  # the current connection's Redis life
        self._generation = 0  # connections made so far
        self._bound: dict[asyncio.Future[Any], int] = {}  # a command -> the life it was packed for

    async def life(self) -> Life:
        """The Redis life of the connection commands go out on now (connecting if needed),
        once its clock is reached (a process met less than a second ago: the rest of it)."""
        life = self._life
        if life is None or self._replies is None or self._replies.transport.is_closing():
            async with self._send_lock:
                await self._connect()
            life = self._life
            assert life is not None
        wait = life.ready_at - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        return life

    async def send(self, packed: bytes, wait: bytes | None = None,
                   life: Life | None = None) -> asyncio.Future[Any]:
        """Queue a packed command (in call order) and return the future of its reply (or
        the reply's error). Commands queued within one turn of the event loop are written
        together: one system call instead of one each. With ``wait`` the future holds
        (reply, replicas that acknowledged it) once the WAIT written after it answered.
        A command packed for a ``life`` is not written on another connection: it fails
        (retriable) instead."""
        future = self.submit(packed)
        if life is not None:
            self._bound[future] = life.generation
        if wait is None:
            return future
        if self._wait is None:
            waited: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            waited.add_done_callback(_ignore)
            self._wait = (wait, waited)
        return asyncio.ensure_future(_replicated(future, self._wait[1]))

    def submit(self, packed: bytes) -> asyncio.Future[Any]:
        """``send`` without a WAIT, from synchronous code: the future of the reply."""
        if self._closed:
            raise RedisConnectionError("the Redis pipe is closed")
        loop = self._loop
        if loop is None:  # asyncio's lookup costs a getpid() system call: once per pipe
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._buffer.append((packed, future))
        if not self._write_scheduled:
            self._write_scheduled = True
            loop.call_soon(self._write_soon)
        return future

    async def call_all(self, commands: Sequence[bytes]) -> list[Any]:
        """Send packed commands together and return their replies in order; raises the first
        error reply (as redis-py's pipelines do) once every reply is in."""
        futures = [self.submit(packed) for packed in commands]
        replies: list[Any] = []
        error: BaseException | None = None
        for future in futures:
            try:
                replies.append(await future)
            except (RedisConnectionError, asyncio.CancelledError):
                for rest in futures:
                    rest.add_done_callback(_ignore)
                raise
            except Exception as exc:
                error = error or exc
                replies.append(exc)
        if error is not None:
            raise error
        return replies

    def _write_soon(self) -> None:
        """Write what was queued in the last turn of the event loop. Done from a plain
        callback (a task per write cost more than the rest of it) whenever the connection is
        up, idle and not backed up; else by the ``_flush`` task, which connects, and waits
        for the socket to drain."""
        self._write_scheduled = False
        if not self._buffer:
            return
        replies = self._replies
        if (replies is None or replies.transport.is_closing() or self._send_lock.locked()
                or replies.transport.get_write_buffer_size() > _WRITE_HIGH_WATER):
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.create_task(self._flush())
            return
        batch = self._unbound(self._take())
        for _packed, future in batch:
            self._pending.append(future)
        try:
            replies.transport.writelines([p for p, _ in batch])
        except Exception as exc:  # e.g. the transport is gone: its futures fail with it
            self._fail(self._connection, exc)

    def _unbound(self, batch: list[tuple[bytes, asyncio.Future[Any]]]
                 ) -> list[tuple[bytes, asyncio.Future[Any]]]:
        """The batch less the commands packed for another connection's life (they fail)."""
        if not self._bound:
            return batch
        kept = []
        for packed, future in batch:
            generation = self._bound.pop(future, None)
            if generation is not None and generation != self._generation:
                if not future.done():
                    future.set_exception(RedisConnectionError(
                        "the connection to Redis changed before the append was written"))
                continue
            kept.append((packed, future))
        return kept

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
                    replies = await self._connect()
                    batch = self._unbound(batch)
                    for _packed, future in batch:
                        self._pending.append(future)
                    replies.transport.writelines([p for p, _ in batch])
                    await replies.drain()
                except BaseException as exc:
                    for _packed, future in batch:
                        if not future.done():
                            future.set_exception(
                                RedisConnectionError(f"Redis connection lost: {exc}"))
                    if self._connection is not None:
                        self._fail(self._connection, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise

    async def _connect(self) -> _Replies:
        if self._replies is not None:
            if not self._replies.transport.is_closing():
                return self._replies
            # Closing, and its connection_lost not delivered yet (asyncio calls it a loop turn
            # later): what the old connection owes fails now, so that no reply of the new one
            # is taken for a command sent on the old.
            self._fail(self._connection, RedisConnectionError("Redis connection closing"))
        connection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.connect()  # address, TLS, AUTH, SELECT...: redis-py's handshake
            await self._meet(connection)
            writer: asyncio.StreamWriter = connection._writer
            transport = writer.transport
            if not isinstance(transport, asyncio.Transport):
                raise RedisConnectionError(f"unexpected Redis transport {transport!r}")
        except BaseException:
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)
            raise
        replies = _Replies(transport, lambda reply: self._reply(connection, reply),
                           lambda exc: self._fail(connection, exc), self._sizes)
        # Anything redis-py read past its handshake's replies (nothing, as Redis only answers)
        leftover = bytes(getattr(connection._reader, "_buffer", b""))
        transport.set_protocol(replies)
        if leftover:
            replies.feed(leftover, len(leftover))
        if not transport.is_reading():
            transport.resume_reading()
        self._connection, self._replies = connection, replies
        self._load_scripts()
        return replies

    async def _meet(self, connection: Any) -> None:
        """Which Redis process the new connection talks to; a process not met before gets
        its epochs numbered from the next second on (see the module's docstring)."""
        await connection.send_command("INFO", "server")
        info = await connection.read_response()
        text = info.decode() if isinstance(info, bytes) else str(info)
        run_id = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                       if line.startswith("run_id:")), "")
        self._generation += 1
        if self._life is None or self._life.run_id != run_id:
            self._life = Life(run_id, self._generation, math.floor(time.time()) + 1)
        else:
            self._life = Life(run_id, self._generation, self._life.ready_at)

    def _load_scripts(self) -> None:
        """SCRIPT LOAD of every script, ahead of whatever is sent next on the connection. A
        refusal that is the connection's (e.g. -LOADING while a restarted Redis reads its
        data) fails the connection in ``_reply``: the next one loads them again."""
        assert self._replies is not None
        for packed in self._script_loads:
            loaded: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            loaded.add_done_callback(_ignore)
            self._pending.append(loaded)
            self._replies.transport.write(packed)

    async def call(self, packed: bytes) -> Any:
        return await (await self.send(packed))

    def _reply(self, connection: Any, reply: Any) -> None:
        if connection is not self._connection:
            return
        if not self._pending:  # a reply no command asked for: the stream is out of step
            self._fail(connection, InvalidResponse("a Redis reply no command was waiting for"))
            return
        future = self._pending.popleft()
        if isinstance(reply, Exception):
            if not future.done():
                future.set_exception(reply)
            if isinstance(reply, RedisConnectionError):  # -LOADING, an AUTH refusal...
                self._fail(connection, reply)
            elif isinstance(reply, NoScriptError):
                self._reload()
        elif not future.done():
            future.set_result(reply)

    def _reload(self) -> None:
        """Redis lost its scripts under a live connection (SCRIPT FLUSH, a failover behind a
        proxy): load them again ahead of what comes next. The command that met NOSCRIPT
        fails; its caller retries."""
        if self._reloading or not self._script_loads or self._replies is None:
            return
        self._reloading = True
        futures = [self.submit(packed) for packed in self._script_loads]
        for future in futures:
            future.add_done_callback(_ignore)
        futures[-1].add_done_callback(lambda _f: setattr(self, "_reloading", False))

    def _fail(self, connection: Any, exc: BaseException) -> None:
        """The connection broke: every reply still owed fails, and the next command
        connects anew."""
        if self._connection is not connection:
            return
        self._connection, replies, self._replies = None, self._replies, None
        self._loop = None  # the next connection's loop is looked up again
        self._fail_owed(f"Redis connection lost: {exc}")
        if replies is not None:
            replies.transport.abort()
        task = asyncio.create_task(connection.disconnect(nowait=True))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _fail_owed(self, message: str) -> None:
        """Every reply still owed fails (its command may or may not have run)."""
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(RedisConnectionError(message))

    async def close(self) -> None:
        """Write what is queued, then close: what is still owed fails now (Redis may have
        run it), and nothing more is taken."""
        if self._write_scheduled:  # queued in this turn: out (or to the task) before closing
            self._write_soon()
        if self._flusher is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
        self._closed = True
        connection, replies = self._connection, self._replies
        self._connection, self._replies, self._loop = None, None, None
        self._fail_owed("the Redis pipe is closed")
        if connection is not None:
            # redis-py's own wait for the close would wait for its protocol, no longer the
            # transport's: the pipe's own hears of it.
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)
        if replies is not None:
            try:
                await asyncio.wait_for(replies.wait_closed(), _CLOSE_SECONDS)
            except Exception:  # not closed in time (or the wait failed): abort it
                replies.transport.abort()


async def _replicated(reply: asyncio.Future[Any], waited: asyncio.Future[Any]) -> tuple[Any, int]:
    result = await reply
    # shared by every command written with it: one caller's cancellation is not the others'
    return result, int(await asyncio.shield(waited))


def _ignore(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
