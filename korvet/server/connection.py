"""One client connection as the handlers see it: who it is, and the state it owns.

The listener creates a ``Connection`` per accepted socket and passes it to every
handler as the request context; ``ConnectionState`` holds what lives exactly as long
as the connection (the fetch read-ahead today) and is closed with it, so no handler
keeps per-connection data in module globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from korvet.server.read_ahead import ReadAhead

if TYPE_CHECKING:
    from korvet.server.handlers.fetch import PreparedFetch


@dataclass(slots=True)
class ConnectionState:
    read_ahead: ReadAhead[PreparedFetch] = field(default_factory=ReadAhead)

    def close(self) -> None:
        self.read_ahead.close()


@dataclass(slots=True)
class Connection:
    connection_id: str
    client_host: str
    state: ConnectionState = field(default_factory=ConnectionState)
    api_version: int = 0
    correlation_id: int = 0
    client_id: str | None = None
    requests: int = 0
