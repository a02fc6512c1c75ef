"""The listener's limits: connection admission, backpressure per connection, idle connections.

The listener (server/listener.py) consults one ``ListenerLimits``: ``admit`` when a
connection is accepted (``None``: close it at once), and per connection a ``ConnectionSlot``
whose ``gate`` it awaits before reading each request and whose counters it updates as
requests are read, handled and answered. The rules are korvet/core/limits.py; this module
holds the counts and the one background task that closes idle connections.

Over a limit the broker does what Kafka does, never more memory: a connection over
``max.connections`` or ``max.connections.per.ip`` is closed as soon as it is accepted (Kafka
closes the per-address ones the same way, and stops accepting while at the broker-wide
limit; a client sees both as a dropped connection and retries with its reconnect backoff); a
connection whose pending bytes pass ``max-pending-bytes`` is not read until they fall to
``resume-pending-bytes`` (the kernel's socket buffers then hold the client's further writes
and TCP pushes back); an idle connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from korvet.core import limits as rules

log = logging.getLogger("korvet.limits")

_REFUSAL_LOG_INTERVAL = 10.0  # seconds between two warnings about refused connections


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class PendingGate:
    """Bytes in flight on one connection, and the wait for reading to be allowed."""

    __slots__ = ("_limits", "_resumed", "paused", "pending")

    def __init__(self, limits: rules.Limits) -> None:
        self._limits = limits
        self.pending = 0
        self.paused = False
        self._resumed: asyncio.Event | None = None  # made only when a connection pauses

    def add(self, count: int) -> None:
        self.pending += count

    def release(self, count: int) -> None:
        self.pending -= count
        if self.paused and not rules.reading_paused(True, self.pending, self._limits):
            self.paused = False
            if self._resumed is not None:
                self._resumed.set()

    def open(self) -> None:
        """Let a paused reader go (its connection is being closed)."""
        self.paused = False
        if self._resumed is not None:
            self._resumed.set()

    async def wait_to_read(self) -> None:
        if not rules.reading_paused(self.paused, self.pending, self._limits):
            return
        if not self.paused:
            log.debug("pausing reads: %d bytes pending", self.pending)
        self.paused = True
        if self._resumed is None:
            self._resumed = asyncio.Event()
        self._resumed.clear()
        while self.paused:
            await self._resumed.wait()


@dataclass(eq=False, slots=True)
class ConnectionSlot:
    """What the limits know of one open connection."""

    address: str
    abort: Callable[[], None]  # drops the transport and its unsent bytes
    gate: PendingGate
    last_active_ms: int = field(default_factory=_now_ms)
    in_hand: int = 0  # requests read whose response is not ready yet

    def touch(self) -> None:
        self.last_active_ms = _now_ms()

    def close(self) -> None:
        """Close the connection now, unsent responses and all (its task then ends)."""
        self.abort()
        self.gate.open()


class ListenerLimits:
    def __init__(self, limits: rules.Limits | None = None,
                 max_request_bytes: int = 100 * 1024 * 1024) -> None:
        self.limits = limits or rules.Limits()
        self.max_request_bytes = max_request_bytes
        self.slots: set[ConnectionSlot] = set()
        self._per_address: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._refusals_logged_at: dict[str, float] = {}
        self._last_refused: dict[str, str] = {}
        self._refusal_flush: dict[str, asyncio.TimerHandle] = {}
        self._reaper: asyncio.Task[None] | None = None

    @property
    def open_connections(self) -> int:
        return len(self.slots)

    def admit(self, address: str, abort: Callable[[], None]) -> ConnectionSlot | None:
        refusal = rules.admission(len(self.slots), self._per_address[address], self.limits)
        if refusal is not None:
            self._note_refusal(refusal, address)
            return None
        slot = ConnectionSlot(address, abort, PendingGate(self.limits))
        self.slots.add(slot)
        self._per_address[address] += 1
        return slot

    def release(self, slot: ConnectionSlot) -> None:
        if slot in self.slots:
            self.slots.discard(slot)
            self._per_address[slot.address] -= 1
            if self._per_address[slot.address] <= 0:
                del self._per_address[slot.address]

    def _note_refusal(self, refusal: str, address: str) -> None:
        """Log refusals at most once per interval and limit, with how many there were; the
        ones held back are counted in the next line, at the latest one interval later."""
        self._refused[refusal] += 1
        self._last_refused[refusal] = address
        now = time.monotonic()
        if now - self._refusals_logged_at.get(refusal, -_REFUSAL_LOG_INTERVAL) >= \
                _REFUSAL_LOG_INTERVAL:
            self._log_refusals(refusal)
        elif refusal not in self._refusal_flush:
            with contextlib.suppress(RuntimeError):  # no running loop: the next refusal logs
                self._refusal_flush[refusal] = asyncio.get_running_loop().call_later(
                    _REFUSAL_LOG_INTERVAL, self._log_refusals, refusal)

    def _log_refusals(self, refusal: str) -> None:
        self._refusal_flush.pop(refusal, None)
        count = self._refused.pop(refusal, 0)
        if count:
            self._refusals_logged_at[refusal] = time.monotonic()
            log.warning("refused %d connection(s) over %s (the last from %s); %d open",
                        count, refusal, self._last_refused.get(refusal, "?"), len(self.slots))

    # -- idle connections ----------------------------------------------------------------

    def start(self) -> None:
        if self.limits.idle_ms > 0 and self._reaper is None:
            self._reaper = asyncio.create_task(self._close_idle())

    async def close(self) -> None:
        for pending in self._refusal_flush.values():
            pending.cancel()
        self._refusal_flush.clear()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    async def _close_idle(self) -> None:
        interval = min(max(self.limits.idle_ms / 4000, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            self.close_idle(_now_ms())

    def close_idle(self, now_ms: int) -> int:
        idle = [s for s in self.slots
                if rules.idle(now_ms, s.last_active_ms, s.in_hand, self.limits)]
        for slot in idle:
            log.debug("closing a connection from %s idle for %d ms", slot.address,
                      now_ms - slot.last_active_ms)
            slot.close()
        return len(idle)


_SPARE_FILES = 128  # besides the Redis pool: data files, pipes, HTTP, the embedded Redis
_QUIET_ABOVE = 10_000  # with max.connections unset, a cap this high is applied silently


def raise_open_files_limit(max_connections: int, redis_pool: int = 256) -> int:
    """Raise this process' open-files limit (soft, up to the hard one) so that
    ``max_connections`` client sockets fit beside ``redis_pool`` Redis connections and a
    few spare files, as servers do. Returns the client connections the broker admits: fewer
    than ``max_connections`` when the limit cannot fit them (logged), so that a connection
    over it is refused cleanly instead of every accept() failing with "Too many open files"
    (asyncio then logged each failure, thousands a second)."""
    spares = redis_pool + _SPARE_FILES
    unbounded = max_connections >= 2**31 - 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if unbounded else max_connections + spares
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if wanted > soft and wanted != resource.RLIM_INFINITY:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft >= max_connections + spares:
        return max_connections
    fits = max(soft - spares, soft // 2)
    if unbounded and fits >= _QUIET_ABOVE:
        return fits  # the usual large limit: a cap no deployment reaches, not worth a warning
    log.warning("the open-files limit (%d, after raising it to the hard limit) leaves room for "
                "%d client connections beside %d Redis connections and spare files: the "
                "broker admits at most %d%s; raise the limit (ulimit -n) for more", soft, fits,
                redis_pool, fits, "" if unbounded else
                f" (max.connections asks for {max_connections})")
    return fits
