"""A small raw Kafka client on kio: one TCP connection, requests in, responses out.

It sends exactly the bytes the check asks for and decodes exactly what the broker
answers, so checks can assert on wire-level behaviour that real clients hide
(error codes, parked requests, closed connections).

Requests are kio dataclasses (build them with ``messages.build_request``). A
request is framed as ``int32 size``, the request header the class names
(``__header_schema__``: v1, or v2 for flexible versions) and the body. Responses
are read in order: Kafka answers the requests of one connection in the order they
were sent, so ``send`` queues what it expects and ``receive`` takes the next
answer and checks its correlation id. ``send`` and ``receive`` are separate so a
check can have several requests in flight (on several connections, one member
each) while the broker holds a JoinGroup back.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema

from korvet.protocol import framing
from korvet.protocol.frames import FrameDecoder, FrameSizeError

DEFAULT_CLIENT_ID = "korvet-conformance"


class WireError(Exception):
    """The broker did not answer as the protocol says (closed, timed out, or undecodable)."""


class ConnectionClosed(WireError):
    pass


class ResponseTimeout(WireError):
    pass


class DecodeError(WireError):
    pass


def encode_request(request: Any, correlation_id: int, client_id: str | None = DEFAULT_CLIENT_ID,
                   *, api_version: int | None = None) -> bytes:
    """A size-prefixed request frame (korvet.protocol.framing). ``api_version`` overrides
    the version in the header (to send a body of one version labelled as another)."""
    return framing.encode_request(request, correlation_id, client_id, api_version=api_version)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response) from a response frame without its size prefix."""
    try:
        response_type = framing.response_class(api_key, version)
    except Exception as exc:  # kio raises its own index errors
        raise DecodeError(f"no response schema for api key {api_key} v{version}") from exc
    try:
        return framing.decode_response(frame, response_type)
    except Exception as exc:  # kio raises several error types while decoding
        raise DecodeError(f"api key {api_key} v{version}: response does not decode: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Pending:
    correlation_id: int
    api_key: int
    version: int
    sent_at: float


class WireClient:
    """One connection to a broker. Not thread-safe: one thread drives it."""

    def __init__(self, host: str, port: int, *, client_id: str | None = DEFAULT_CLIENT_ID,
                 timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_correlation = 1
        self._pending: deque[Pending] = deque()
        self._decoder = FrameDecoder(min_size=4, what="response")  # a correlation id at least
        self.last_elapsed = 0.0
        # Told of every request sent and response decoded: (correlation id, request or None,
        # response or None). The harness keeps the last few for the reports.
        self.observer: Callable[[int, Any, Any], None] | None = None

    # -- sending -----------------------------------------------------------

    def _next_id(self) -> int:
        correlation = self._next_correlation
        self._next_correlation = (self._next_correlation + 1) % 2**31
        return correlation

    def send(self, request: Any, *, expect_response: bool = True) -> int:
        """Send a kio request; returns its correlation id. ``expect_response=False`` for acks=0."""
        correlation = self._next_id()
        frame = encode_request(request, correlation, self.client_id)
        self.send_bytes(frame)
        if self.observer is not None:
            self.observer(correlation, request, None)
        if expect_response:
            self._pending.append(Pending(correlation, int(request.__api_key__),
                                         int(request.__version__), time.monotonic()))
        return correlation

    def send_frame(self, frame: bytes, *, api_key: int, version: int, correlation_id: int) -> None:
        """Send a hand-made frame and expect a response decoded as ``api_key`` v``version``."""
        self.send_bytes(frame)
        self._pending.append(Pending(correlation_id, api_key, version, time.monotonic()))

    def send_bytes(self, data: bytes) -> None:
        if self._sock is None:
            raise ConnectionClosed("the connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise ConnectionClosed(f"sending failed: {exc}") from exc

    def allocate_correlation_id(self) -> int:
        return self._next_id()

    # -- receiving ---------------------------------------------------------

    def _read_frame(self, deadline: float) -> bytes:
        try:
            while (frame := self._decoder.next_frame()) is None:
                self._decoder.feed(self._recv_some(deadline))
        except FrameSizeError as exc:
            raise DecodeError(str(exc)) from None
        return frame

    def _recv_some(self, deadline: float) -> bytes:
        if self._sock is None:
            raise ConnectionClosed("the connection is closed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ResponseTimeout("no response in time")
        self._sock.settimeout(remaining)
        try:
            chunk = self._sock.recv(65536)
        except TimeoutError as exc:
            raise ResponseTimeout("no response in time") from exc
        except OSError as exc:
            raise ConnectionClosed(f"connection error: {exc}") from exc
        if not chunk:
            raise ConnectionClosed("the broker closed the connection")
        return chunk

    def receive(self, timeout: float | None = None) -> Any:
        """The response to the oldest request still waiting for one."""
        if not self._pending:
            raise WireError("no request is waiting for a response")
        pending = self._pending[0]
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            frame = self._read_frame(deadline)
        except ResponseTimeout:
            raise ResponseTimeout(
                f"no response to api key {pending.api_key} v{pending.version} "
                f"(correlation {pending.correlation_id}) within "
                f"{deadline - pending.sent_at:.1f} s"
            ) from None
        except ConnectionClosed as exc:
            raise ConnectionClosed(
                f"{exc} before answering api key {pending.api_key} v{pending.version}"
            ) from None
        self._pending.popleft()
        self.last_elapsed = time.monotonic() - pending.sent_at
        correlation, body = decode_response(pending.api_key, pending.version, frame)
        if correlation != pending.correlation_id:
            raise DecodeError(
                f"response carries correlation id {correlation}, expected {pending.correlation_id} "
                f"(api key {pending.api_key} v{pending.version})"
            )
        if self.observer is not None:
            self.observer(correlation, None, body)
        return body

    def call(self, request: Any, timeout: float | None = None) -> Any:
        """Send and wait for the answer (any earlier pending answers must be received first)."""
        if self._pending:
            raise WireError("call() with responses still pending; receive() them first")
        self.send(request)
        return self.receive(timeout)

    def response_ready(self, wait: float = 0.0) -> bool:
        """True when bytes of a response (or the end of the connection) arrived."""
        if self._decoder.buffered:
            return True
        if self._sock is None:
            return True
        readable, _, _ = select.select([self._sock], [], [], max(wait, 0.0))
        return bool(readable)

    def wait_closed(self, timeout: float) -> bool:
        """True if the broker closes the connection within ``timeout`` (bytes it sends are dropped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self._recv_some(deadline)
            except ConnectionClosed:
                return True
            except ResponseTimeout:
                return False
        return False

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TlsWireClient(WireClient):
    """A WireClient over TLS (the broker's certificate checked against the CA file)."""

    def __init__(self, host: str, port: int, *, ca_file: str, timeout: float = 30.0,
                 client_id: str | None = DEFAULT_CLIENT_ID) -> None:
        super().__init__(host, port, client_id=client_id, timeout=timeout)
        context = ssl.create_default_context(cafile=ca_file)
        context.check_hostname = False  # test certificates name localhost and 127.0.0.1
        assert self._sock is not None
        try:
            self._sock = context.wrap_socket(self._sock, server_hostname=host)
        except (OSError, ssl.SSLError):
            self.close()
            raise


def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """``host:port`` (the first of a comma-separated list)."""
    first = bootstrap.split(",", maxsplit=1)[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bootstrap {bootstrap!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)
