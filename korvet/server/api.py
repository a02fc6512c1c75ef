"""One Kafka API as its handler module declares it, and the table of every declared API.

A handler module (korvet/server/handlers/<name>.py) ends with ``APIS``: one ``Api`` per Kafka
API it serves. Each names

- the key (korvet/core/api_keys.py) and the versions the handler implements (the broker
  serves their intersection with kio's schemas, protocol/registry.py);
- the handler: every handler has the one signature ``(services, conn, request)``, the
  tenant's ``Services``, the ``Connection`` and the request as kio decoded it, and returns
  the response, a ``Deferred`` one, or None when no response is sent (acks=0);
- the shape of its denials (korvet/protocol/denials.py), which the authorization check point
  (korvet/server/authz.py) needs to apply the API's row of korvet/core/security/rules.py;
- a line for the API table of docs/implementers/broker.md, which is generated from this
  table (korvet/devtools/docgen.py) and checked by tests/test_docs.py.

So a new API is one handler module and one rules row: ``declared_apis`` finds the module,
the broker registers what it declares (korvet/server/broker.py), ApiVersions announces it,
the check point guards it and the docs list it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from korvet.core.api_keys import ApiKey
from korvet.protocol.denials import Shape

if TYPE_CHECKING:
    from korvet.server.connection import Connection
    from korvet.server.services import Services

# (the tenant's services, the connection, kio's request of the version the client sent)
Handler = Callable[["Services", "Connection", Any], Awaitable[Any]]

HANDLERS_PACKAGE = "korvet.server.handlers"

Part = TypeVar("Part")


@dataclass(frozen=True, slots=True)
class Api:
    """A Kafka API as a handler module serves it."""

    key: ApiKey
    versions: range  # what the handler implements; the broker serves the part kio has schemas for
    handle: Handler
    notes: str  # one line for the API table of docs/implementers/broker.md
    shape: Shape | None = None  # how the check point answers denied items; None: the rule needs none

    @property
    def name(self) -> str:
        return self.key.kafka_name


@dataclass(frozen=True, slots=True)
class OnPart(Generic[Part]):
    """The handler of an API whose module keeps state per tenant: ``method`` of the tenant's
    one ``part`` (``Services.part``), e.g. ``OnPart(FetchHandler, FetchHandler.handle)``."""

    part: Callable[[Services], Part]
    method: Callable[[Part, Connection, Any], Awaitable[Any]]

    async def __call__(self, services: Services, conn: Connection, request: Any) -> Any:
        return await self.method(services.part(self.part), conn, request)


def bind(handle: Handler, services: Services) -> Callable[[Connection, Any], Awaitable[Any]]:
    """A handler bound to one tenant's services, as the dispatch table calls it: a part's
    method is bound to the part itself (made now), with no call in between."""
    if isinstance(handle, OnPart):
        return partial(handle.method, services.part(handle.part))
    return partial(handle, services)


def declared_apis(modules: Iterable[ModuleType] | None = None) -> tuple[Api, ...]:
    """Every API the handler modules declare (each module's ``APIS``), by key. Two modules
    declaring one key is a programming error, named here rather than served by chance."""
    found: dict[ApiKey, tuple[Api, str]] = {}
    for module in handler_modules() if modules is None else modules:
        for api in getattr(module, "APIS", ()):
            earlier = found.get(api.key)
            if earlier is not None:
                raise ValueError(f"{api.name} is declared by {earlier[1]} and {module.__name__}")
            found[api.key] = (api, module.__name__)
    return tuple(api for _, (api, _) in sorted(found.items()))


def declared(key: ApiKey) -> Api:
    """The declaration of one API (KeyError when no handler module serves it)."""
    for api in declared_apis():
        if api.key is key:
            return api
    raise KeyError(key.kafka_name)


def handler_modules() -> list[ModuleType]:
    """The modules of korvet/server/handlers, imported (discovered, not listed)."""
    package = importlib.import_module(HANDLERS_PACKAGE)
    return [importlib.import_module(f"{HANDLERS_PACKAGE}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
