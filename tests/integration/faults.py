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
import threading
from dataclasses import dataclass, field

from korvet.process import free_port
from korvet.protocol.frame_io import read_frame
from korvet.protocol.frames import REQUEST_MIN_SIZE, FrameDecoder, frame
from korvet.protocol.framing import parse_request, peek_prefix

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
        requests = FrameDecoder(min_size=REQUEST_MIN_SIZE, what="request")
        responses = FrameDecoder(min_size=4, what="response")
        try:
            while (request := await read_frame(reader, requests)) is not None:
                api_key, _version, _correlation = peek_prefix(request)
                acks = parse_request(request).body.acks if api_key == PRODUCE else None
                up_writer.write(frame(request))
                await up_writer.drain()
                if acks == 0:
                    continue  # no response will come
                response = await read_frame(up_reader, responses)
                if response is None:
                    break
                if api_key == PRODUCE:
                    self.produce_requests += 1
                    if (self.dropped < self.max_drops
                            and self.produce_requests % self.drop_every == 0):
                        self.dropped += 1
                        break  # the batch is stored, but the client never hears so
                writer.write(frame(response))
                await writer.drain()
        except (ValueError, ConnectionError, OSError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()
