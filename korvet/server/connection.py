"""One client connection as the handlers see it: who it is, and the state it owns.

The listener creates a ``Connection`` per accepted socket and passes it to every
handler as the request context; ``ConnectionState`` holds what lives exactly as long
as the connection (the fetch read-ahead, the authentication session) and is closed with
it, so no handler keeps per-connection data in module globals.

Who the client is: ``principal`` comes from the authentication session (a SASL user, a
TLS client certificate's subject, or ``User:ANONYMOUS``); ``access`` is what that
principal may do for the request being handled, from the broker's current ACL snapshot;
``tenant`` is the API table of the keyspace's broker that serves its requests
(security.tenants).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from korvet.core.security import sasl
from korvet.core.security.access import OPEN, Access
from korvet.core.security.acl import ANONYMOUS
from korvet.protocol.registry import ApiRegistry
from korvet.server.fetch_plan import PreparedFetch
from korvet.server.read_ahead import ReadAhead

if TYPE_CHECKING:
    from korvet.server.security import Security


@dataclass(slots=True)
class ConnectionState:
    read_ahead: ReadAhead[PreparedFetch] = field(default_factory=ReadAhead)
    auth: sasl.Session = field(default_factory=lambda: sasl.open_session(ANONYMOUS))
    closing: str | None = None  # set by a handler: close after this response (the reason)
    # called once the connection is closed (share sessions release what their member holds)
    on_close: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.read_ahead.close()
        for hook in self.on_close:
            hook()
        self.on_close.clear()


@dataclass(slots=True)
class Connection:
    connection_id: str
    client_host: str
    state: ConnectionState = field(default_factory=ConnectionState)
    api_version: int = 0
    correlation_id: int = 0
    client_id: str | None = None
    requests: int = 0
    listener_name: str = "PLAINTEXT"
    security: Security | None = None
    # the API table of the tenant serving this connection (its handlers are bound to the
    # tenant's services), once known
    tenant: ApiRegistry[Connection] | None = None

    @property
    def principal(self) -> str:
        return self.state.auth.principal or ANONYMOUS

    @property
    def access(self) -> Access:
        if self.security is None:
            return OPEN
        return self.security.access(self.principal, self.client_host)
