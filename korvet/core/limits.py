"""The rules of the listener's limits, as pure functions (the listener consults
korvet/server/limits.py, which applies them).

- Admission (Kafka's ``max.connections``, ``max.connections.per.ip``): a new connection is
  refused when the broker already has ``max_connections`` open, or its address has
  ``max_per_ip``. ``admission`` names the setting that refused it.
- Backpressure (the original's ``max-pending-bytes`` / ``resume-pending-bytes``): a
  connection's pending bytes are the requests read and not yet answered plus the responses
  not yet handed to the socket. Reading stops once they are above the high mark and starts
  again only when they are at or below the low mark (hysteresis, so a connection at the
  mark does not flip on every request).
- Idle (Kafka's ``connections.max.idle.ms``): a connection is idle when nothing was read
  from or written to it for that long and no request of it is being handled; a response
  the client does not read does not keep it alive. 0 or less turns the timeout off.

Tests: tests/unit/core/test_limit_rules.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    max_pending_bytes: int = 64 * 1024 * 1024
    resume_pending_bytes: int = 32 * 1024 * 1024
    idle_ms: int = 600_000


def admission(open_total: int, open_from_address: int, limits: Limits) -> str | None:
    """None to accept a new connection, else the name of the limit that refuses it."""
    if open_total >= limits.max_connections:
        return "max.connections"
    if open_from_address >= limits.max_connections_per_ip:
        return "max.connections.per.ip"
    return None


def reading_paused(paused: bool, pending_bytes: int, limits: Limits) -> bool:
    """Whether reading from a connection stays (or becomes) paused."""
    if paused:
        return pending_bytes > limits.resume_pending_bytes
    return pending_bytes > limits.max_pending_bytes


def idle(now_ms: int, last_active_ms: int, requests_in_hand: int, limits: Limits) -> bool:
    return (limits.idle_ms > 0 and requests_in_hand == 0
            and now_ms - last_active_ms > limits.idle_ms)
