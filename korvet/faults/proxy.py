"""A TCP proxy between one broker and its Redis that the fault scheduler controls.

``slow(seconds)`` delays every chunk the broker sends by that much (a latency, not a
bandwidth limit: chunks keep their order and are not spaced out). ``cut()`` is a network
partition between the broker and Redis while its clients still reach it: nothing is
forwarded either way, new connections are accepted and hang, as packets that are dropped
rather than refused. ``heal()`` ends both; the connections that lived through a cut are
then closed, as TCP gives up on a peer it has not heard from (forwarding their held bytes
afterwards would hand Redis half a command long after the broker gave up on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field

from korvet.process import free_port


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    port: int = field(default_factory=free_port)
    delay: float = 0.0
    _cut: bool = False
    _generation: int = 0  # bumped by every cut: connections older than the last cut close
    _connections: set[tuple[asyncio.StreamWriter, int]] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.base_events.Server | None = None
    _open: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._open = asyncio.Event()
            self._open.set()
            self._server = loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name=f"fault-proxy-{self.port}")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def slow(self, seconds: float) -> None:
        self.delay = seconds

    def cut(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._close_gate)

    def heal(self) -> None:
        self.delay = 0.0
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._open_gate)

    def _close_gate(self) -> None:
        assert self._open is not None
        self._cut = True
        self._generation += 1
        self._open.clear()

    def _open_gate(self) -> None:
        assert self._open is not None
        if not self._cut:
            return
        self._cut = False
        for writer, generation in list(self._connections):
            if generation < self._generation:
                writer.close()
        self._open.set()

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer, _ in list(self._connections):
                writer.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        # accepted during a cut: hangs until the cut ends, then closes with the others
        born = self._generation - 1 if self._cut else self._generation
        entry = (writer, born)
        self._connections.add(entry)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()
            if born < self._generation:
                return
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host,
                                                                 self.upstream_port)
            self._connections.add((up_writer, born))
            await asyncio.gather(self._pump(reader, up_writer, born, delayed=True),
                                 self._pump(up_reader, writer, born, delayed=False))
        except OSError:
            pass
        finally:
            self._connections.discard(entry)
            for w in (writer, up_writer):
                if w is not None:
                    self._connections.discard((w, born))
                    w.close()
                    with contextlib.suppress(Exception):
                        await w.wait_closed()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, born: int,
                    *, delayed: bool) -> None:
        """Forward one direction; chunks read during a cut wait for its end and are then
        dropped with the connection."""
        assert self._open is not None
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while chunk := await reader.read(65536):
                if not self._open.is_set():
                    await self._open.wait()
                if born < self._generation:
                    break
                queue.put_nowait((time.monotonic() + (self.delay if delayed else 0.0), chunk))
                if sender.done():
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(ConnectionError, OSError):
                await sender
            writer.close()
