"""A minimal synchronous Kafka wire client for tests: send kio requests, read kio responses."""

from __future__ import annotations

import socket
from typing import Any

from korvet.protocol.frame_io import read_frame_blocking
from korvet.protocol.frames import FrameDecoder
from korvet.protocol.framing import decode_response, encode_request, response_class


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0, source: str | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.correlation = 0
        self.decoder = FrameDecoder(min_size=4, what="response")

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        return read_frame_blocking(self.sock, self.decoder)

    def request(self, request: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(request, self.correlation))
        response_type = response_class(type(request).__api_key__, type(request).__version__)
        correlation, body = decode_response(self.read_frame(), response_type)
        assert correlation == self.correlation, "responses out of order"
        return body

    def is_closed_by_peer(self, wait: float = 2.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
