"""A TCP proxy between one broker and Redis that can hold the broker's commands back.

The proxy forwards bytes both ways. Armed with markers (``hold``), it catches the first
chunk from the broker that contains all of them: it forwards that chunk (or holds it too,
``forward=False``) and then holds every later chunk the broker sends, on every connection,
until ``release``. Redis' answers flow, but for the caught chunk's if it is to be lost
(``lose_answer``: the broker's connection is closed instead, so the broker cannot tell
whether that write landed). So a test lets a write through or keeps it in flight, and
whatever the broker sends after it reaches Redis only when the test says: a network that
delays a broker's writes, exactly at the point the test chose, while the broker itself may
be paused (SIGSTOP) or running.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from korvet.process import free_port


@dataclass
class HoldingProxy:
    upstream_url: str
    port: int = field(default_factory=free_port)
    held_chunks: int = 0  # chunks that waited at the gate since the last hold began
    caught_sent: bool = False  # the caught chunk went on to Redis (at once, or on release)
    _markers: tuple[bytes, ...] = ()
    _forward: bool = True
    _lose_answer: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _gate: asyncio.Event | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.base_events.Server | None = None
    _holding: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def holding(self) -> bool:
        return self._holding.is_set()

    def start(self) -> HoldingProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._gate = asyncio.Event()
            self._gate.set()
            self._server = loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="redis-hold-proxy")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def hold(self, markers: tuple[bytes, ...], *, forward: bool = True,
             lose_answer: bool = False) -> None:
        """Catch the next chunk from the broker containing every marker: forward it (its
        answer lost if ``lose_answer``) or not, and hold everything the broker sends after."""
        assert self._loop is not None and markers and (forward or not lose_answer)
        self._loop.call_soon_threadsafe(self._arm, markers, forward, lose_answer)

    def _arm(self, markers: tuple[bytes, ...], forward: bool, lose_answer: bool) -> None:
        self._markers, self._forward, self._lose_answer = markers, forward, lose_answer

    def release(self) -> None:
        """Let everything held (and everything after) through, in order."""
        assert self._loop is not None and self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)
        self._holding.clear()

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._gate is not None:
                self._gate.set()
            if self._server is not None:
                self._server.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(5)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parts = urlsplit(self.upstream_url)
        try:
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
        except OSError:
            writer.close()
            return
        cut = asyncio.Event()  # this connection's answers are no longer forwarded
        try:
            await asyncio.gather(self._to_redis(reader, up_writer, writer, cut),
                                 self._to_broker(up_reader, writer, cut))
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def _to_redis(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        broker: asyncio.StreamWriter, cut: asyncio.Event) -> None:
        assert self._gate is not None
        tail = b""  # a marker may straddle two reads
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                if not self._gate.is_set():
                    self.held_chunks += 1
                    await self._gate.wait()
                window, tail = tail + chunk, chunk[-64:]
                caught = bool(self._markers) and all(m in window for m in self._markers)
                if caught:
                    self._markers = ()
                    self.held_chunks = 0
                    self.caught_sent = False
                    self._gate.clear()
                    self._holding.set()
                    if self._lose_answer:
                        cut.set()
                    if not self._forward:
                        self.held_chunks += 1
                        await self._gate.wait()
                writer.write(chunk)
                await writer.drain()
                if caught:
                    self.caught_sent = True
                if cut.is_set():
                    await self._rest_of_the_write(reader, writer)
                    broker.close()  # the broker sees its connection break, no answer
                    return
        writer.close()

    @staticmethod
    async def _rest_of_the_write(reader: asyncio.StreamReader,
                                 writer: asyncio.StreamWriter) -> None:
        """What the broker sends right after a write whose answer is lost, on its connection,
        is the rest of that write (a transaction's EXEC may come in a read of its own)."""
        with contextlib.suppress(TimeoutError):
            while chunk := await asyncio.wait_for(reader.read(65536), 0.2):
                writer.write(chunk)
                await writer.drain()

    @staticmethod
    async def _to_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         cut: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while (chunk := await reader.read(65536)) and not cut.is_set():
                writer.write(chunk)
                await writer.drain()
        writer.close()
