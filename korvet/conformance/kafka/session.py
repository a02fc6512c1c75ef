"""What the client's operations need of their caller, and how they fail.

``Ops`` and the group ``Member`` do not know who drives them: a conformance check's
context does, and so could any other program. They ask their ``Session`` for
connections (so the caller can watch and close them), the broker's API table, fresh
topic and group names, and a place to note what they observed. When an operation cannot
go on (the broker does not offer a version, a topic it was told to create is not
there), it raises ``KafkaCallFailed``; the harness reports that as the failure of the
check that called it.
"""

from __future__ import annotations

from typing import Any, Protocol

from korvet.conformance.kafka.schemas import api_name, kio_request_versions
from korvet.conformance.kafka.wire import WireClient


class KafkaCallFailed(AssertionError):
    """An operation could not go on; ``details`` are what it observed (for reports)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class ApiTable:
    """The broker's ApiVersions answer, intersected with the versions kio has schemas for."""

    def __init__(self, advertised: dict[int, tuple[int, int]]) -> None:
        self.advertised = dict(advertised)

    def usable(self, api_key: int) -> list[int]:
        if api_key not in self.advertised:
            return []
        lo, hi = self.advertised[api_key]
        return [v for v in kio_request_versions(api_key) if lo <= v <= hi]

    def pick(self, api_key: int, lo: int | None = None, hi: int | None = None) -> int:
        """The newest version both sides know within [lo, hi]; KafkaCallFailed if none."""
        versions = [v for v in self.usable(api_key)
                    if (lo is None or v >= lo) and (hi is None or v <= hi)]
        if not versions:
            advertised = self.advertised.get(api_key)
            shown = f"v{advertised[0]}-{advertised[1]}" if advertised else "not at all"
            wanted = f"v{lo if lo is not None else 0}-{hi if hi is not None else 'max'}"
            raise KafkaCallFailed(
                f"the broker does not advertise {api_name(api_key)} (key {api_key}) in {wanted} "
                f"(ApiVersions lists it {shown})"
            )
        return max(versions)

    def versions(self, api_key: int, lo: int | None = None, hi: int | None = None) -> list[int]:
        """Every usable version within [lo, hi]; fails (like ``pick``) when there is none."""
        self.pick(api_key, lo, hi)
        return [v for v in self.usable(api_key) if (lo is None or v >= lo) and (hi is None or v <= hi)]

    def has(self, api_key: int, version: int | None = None) -> bool:
        versions = self.usable(api_key)
        return bool(versions) if version is None else version in versions


class Session(Protocol):
    """The caller of the operations: where connections come from and where names are made."""

    apis: ApiTable
    host: str  # the broker the session talks to (its bootstrap address)
    port: int

    def client(self, host: str | None = None, port: int | None = None, *,
               client_id: str | None = ..., timeout: float | None = None) -> WireClient:
        """A new connection (to the session's broker unless told otherwise), closed by the
        session when it ends."""
        ...

    def name(self, kind: str = "t") -> str:
        """A topic (``t``) or group (``g``) name nobody else uses."""
        ...

    def note(self, key: str, value: Any) -> None:
        """Record something observed on the way (a report shows it)."""
        ...
