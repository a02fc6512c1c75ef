"""Which Kafka APIs the broker answers, in which versions, and with which handler: the
dispatch table the listener reads.

The supported range of an API is the intersection of what the handler implements and what
kio has schemas for; ApiVersions answers from this table. The broker fills it from what the
handler modules declare (korvet/server/api.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from korvet.core.api_keys import ApiKey
from korvet.core.security.access import Access
from korvet.protocol.framing import known_versions


class CloseConnection(Exception):
    """Raised by a handler to close the connection without (further) answer; the message
    says why (it is logged with the connection)."""


class RequestContext(Protocol):
    """What a handler knows about the request beyond its body."""

    @property
    def api_version(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def correlation_id(self) -> int: ...

    @property
    def client_host(self) -> str: ...

    @property
    def connection_id(self) -> str: ...

    @property
    def listener_name(self) -> str:
        """The listener the request came in on (Metadata advertises its address)."""
        ...

    @property
    def access(self) -> Access:
        """The principal's rights for this request (everything without an authorizer)."""
        ...


class Deferred:
    """A response that is still being produced: the handler has done, in request order,
    everything that must happen in order (a Produce has sent its appends) and the rest runs
    while the connection's next requests are read. Responses still go out in order."""

    __slots__ = ("response", "waits_on")

    def __init__(self, response: Awaitable[Any | None],
                 waits_on: Sequence[asyncio.Future[Any]] = ()) -> None:
        self.response = response
        self.waits_on = waits_on  # what the response waits for (a Produce: its appends' replies)

    def ready(self) -> bool:
        """Whether awaiting the response would not wait (False when it is not known)."""
        return bool(self.waits_on) and all(future.done() for future in self.waits_on)


Ctx = TypeVar("Ctx", bound=RequestContext)

# A handler takes the request context and the kio request (a dataclass of the API's
# version) and returns the kio response, a Deferred one, or None when no response is
# sent (acks=0 produce).
Handler = Callable[[Ctx, Any], Awaitable[Any | None]]


@dataclass(frozen=True, slots=True)
class Api(Generic[Ctx]):
    key: ApiKey
    min_version: int
    max_version: int
    handler: Handler[Ctx]

    @property
    def name(self) -> str:
        return self.key.kafka_name

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry(Generic[Ctx]):
    def __init__(self) -> None:
        self._apis: dict[int, Api[Ctx]] = {}

    def register(self, key: ApiKey, versions: range, handler: Handler[Ctx]) -> None:
        available = known_versions(key)
        lo = max(versions.start, available.start)
        hi = min(versions.stop, available.stop) - 1
        if lo > hi:
            raise ValueError(f"{key.kafka_name}: no version in {versions} has a kio schema "
                             f"({available})")
        self._apis[key] = Api(key, lo, hi, handler)

    def get(self, key: int) -> Api[Ctx] | None:
        return self._apis.get(key)

    def __iter__(self) -> Iterator[Api[Ctx]]:
        return iter(sorted(self._apis.values(), key=lambda a: a.key))

    def __len__(self) -> int:
        return len(self._apis)
