"""A Kafka-aware TCP proxy that loses produce responses, to force client retries.

The proxy forwards each request to the broker and the broker's response back,
one at a time. For the Produce requests it is told to sabotage, it lets the
broker store the batch, throws the response away and closes the client's
connection: the producer cannot tell whether the batch was stored and sends it
again. An idempotent producer retries with the same producer id, epoch and
sequence numbers, and the broker must not store the batch a second time.

Run the broker with ``--advertised-port <proxy port>`` so that clients, after
bootstrapping through the proxy, keep talking through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from dataclasses import dataclass, field

from korvet.tools.host import free_port

PRODUCE = 0


@dataclass
class ResponseDroppingProxy:
    upstream_port: int = 0
    drop_every: int = 3  # lose the response of every n-th produce request ...
    max_drops: int = 10  # ... this many times in all
    port: int = field(default_factory=free_port)
    produce_requests: int = 0
    dropped: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.base_events.Server | None = None

    def start(self) -> ResponseDroppingProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="fault-proxy")
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            loop = self._loop

            async def shutdown() -> None:
                if self._server is not None:
                    self._server.close()
                loop.stop()

            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(5)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        try:
            while True:
                head = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack(">i", head)[0])
                api_key, _version = struct.unpack_from(">hh", body, 0)
                acks = _produce_acks(body) if api_key == PRODUCE else None
                up_writer.write(head + body)
                await up_writer.drain()
                if acks == 0:
                    continue  # no response will come
                response_head = await up_reader.readexactly(4)
                response = await up_reader.readexactly(struct.unpack(">i", response_head)[0])
                if api_key == PRODUCE:
                    self.produce_requests += 1
                    if (self.dropped < self.max_drops
                            and self.produce_requests % self.drop_every == 0):
                        self.dropped += 1
                        break  # the batch is stored, but the client never hears so
                writer.write(response_head + response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()


def _produce_acks(body: bytes) -> int | None:
    """acks of a Produce request (v3+: after the header and the transactional id)."""
    try:
        _key, version, _correlation = struct.unpack_from(">hhi", body, 0)
        position = 8
        (client_id_length,) = struct.unpack_from(">h", body, position)
        position += 2 + max(client_id_length, 0)
        if version >= 9:  # flexible: tagged fields, then a compact nullable string
            position += 1  # empty tag buffer (clients send none)
            length = body[position] - 1
            position += 1 + max(length, 0)
        else:
            (txn_length,) = struct.unpack_from(">h", body, position)
            position += 2 + max(txn_length, 0)
        (acks,) = struct.unpack_from(">h", body, position)
        return int(acks)
    except struct.error:
        return None
