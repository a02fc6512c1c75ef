"""What a check gets: the broker's address and API table, fresh names, connections, notes.

Every check runs with its own ``CheckContext``. Names it makes (``ctx.name()``)
hold the run id and the check's name, so checks never share a topic or group,
and, from the second attempt on, the attempt number: a check the harness runs
again (after the broker died) never meets the leftovers of its earlier attempt,
such as a topic a client of that attempt recreated on the restarted broker.
Connections and clients opened through the context are closed when the check ends, also
when it fails or times out (closing them is how a stuck check is stopped).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import Any, NoReturn

from korvet.conformance.harness.outcomes import CheckFailed, CheckSkipped
from korvet.conformance.harness.security import SecurityTarget
from korvet.conformance.kafka.messages import error_name, to_plain
from korvet.conformance.kafka.session import ApiTable, KafkaCallFailed
from korvet.conformance.kafka.wire import WireClient, parse_bootstrap

CLOSE_SECONDS = 20.0  # how long one closer of a check may take (a client's close, say)


def _close_within(closer: Callable[[], None]) -> str | None:
    """Run ``closer`` (its exceptions ignored) for at most CLOSE_SECONDS; None when it
    returned, else its name (it keeps running in a daemon thread)."""
    def call() -> None:
        with contextlib.suppress(Exception):
            closer()

    thread = threading.Thread(target=call, name="conformance-close", daemon=True)
    thread.start()
    thread.join(CLOSE_SECONDS)
    if not thread.is_alive():
        return None
    return getattr(closer, "__qualname__", None) or repr(closer)


class CheckContext:
    """One run of one check (named ``check_name``): a ``kafka.session.Session`` for ``Ops``."""

    def __init__(self, check_name: str, bootstrap: str, run_id: str, apis: ApiTable,
                 *, request_timeout: float = 30.0, security: SecurityTarget | None = None,
                 attempt: int = 1) -> None:
        self.check_name = check_name
        self.security = security  # the secured listener of the security.* checks (--security FILE)
        self.attempt = attempt
        self.bootstrap = bootstrap
        self.host, self.port = parse_bootstrap(bootstrap)
        self.run_id = run_id
        self.apis = apis
        self.request_timeout = request_timeout
        self.details: dict[str, Any] = {}
        self._names = 0
        self._lock = threading.Lock()
        self._closers: list[Callable[[], None]] = []
        self.aborted = threading.Event()
        # The last requests and responses on the check's connections, for the reports (kept as
        # kio objects; turned into plain data only when a check fails).
        self._exchanges: deque[dict[str, Any]] = deque(maxlen=EXCHANGES_KEPT)
        self._connections = 0

    # -- names ---------------------------------------------------------------

    def name(self, kind: str = "t") -> str:
        """A topic or group name no other check, no other run and no other attempt of this check uses."""
        with self._lock:
            self._names += 1
            n = self._names
        slug = self.check_name.replace(".", "-").replace("_", "-")
        if len(slug) > 60:
            slug = slug[:60]
        again = f"a{self.attempt}-" if self.attempt > 1 else ""
        return f"kc-{self.run_id}-{slug}-{again}{kind}{n}"

    # -- resources -----------------------------------------------------------

    def client(self, host: str | None = None, port: int | None = None, *,
               client_id: str | None = "korvet-conformance", timeout: float | None = None) -> WireClient:
        if self.aborted.is_set():
            raise CheckFailed("the check was stopped (time limit)")
        conn = WireClient(host or self.host, port or self.port, client_id=client_id,
                          timeout=self.request_timeout if timeout is None else timeout)
        with self._lock:
            self._connections += 1
            label = f"{conn.host}:{conn.port} #{self._connections}"
        conn.observer = lambda correlation, request, response: self._observe(label, correlation, request,
                                                                           response)
        self.on_close(conn.close)
        return conn

    def _observe(self, connection: str, correlation: int, request: Any, response: Any) -> None:
        with self._lock:
            if request is not None:
                self._exchanges.append({"connection": connection, "correlation_id": correlation,
                                        "request": request, "response": None})
                return
            for exchange in reversed(self._exchanges):
                if exchange["connection"] == connection and exchange["correlation_id"] == correlation:
                    exchange["response"] = response
                    return

    def exchanges(self) -> list[dict[str, Any]]:
        """The last requests and responses of this check as plain data (for the reports)."""
        with self._lock:
            kept = list(self._exchanges)
        out = []
        for exchange in kept:
            request, response = exchange["request"], exchange["response"]
            out.append({
                "connection": exchange["connection"], "correlation_id": exchange["correlation_id"],
                "api": f"{type(request).__name__} (key {request.__api_key__}) v{request.__version__}",
                "request": _bounded(to_plain(request)),
                "response": None if response is None else _bounded(to_plain(response)),
            })
        return out

    def on_close(self, closer: Callable[[], None]) -> None:
        with self._lock:
            self._closers.append(closer)

    def close(self) -> None:
        """Close what the check opened, newest first. Each closer gets CLOSE_SECONDS: a
        client whose close blocks (librdkafka's consumer close once hung for good against a
        kfake restarted after a crash) is left behind in a daemon thread, and the check's
        details say so (``unclosed``), instead of the whole run waiting for it."""
        with self._lock:
            closers, self._closers = self._closers[::-1], []
        unclosed = [name for name in map(_close_within, closers) if name]
        if unclosed:
            self.note("unclosed", unclosed)

    def abort(self) -> None:
        self.aborted.set()
        self.close()

    def sleep(self, seconds: float) -> None:
        if self.aborted.wait(seconds):
            raise CheckFailed("the check was stopped (time limit)")

    # -- reporting -----------------------------------------------------------

    def note(self, key: str, value: Any) -> None:
        """Record an observed value: it appears in the JSON and HTML reports."""
        self.details[key] = value

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        """Prefix failures inside the block with ``what`` (which step of a scenario failed)."""
        try:
            yield
        except KafkaCallFailed as exc:
            raise CheckFailed(f"{what}: {exc.message}", **exc.details) from exc


EXCHANGES_KEPT = 6
_EXCHANGE_CHARS = 4000


def _bounded(value: Any) -> Any:
    """``value`` unless its JSON is longer than a report can show; then its text, cut."""
    text = json.dumps(value, default=str)
    return value if len(text) <= _EXCHANGE_CHARS else text[:_EXCHANGE_CHARS] + f"... ({len(text)} chars)"


# -- assertions -------------------------------------------------------------


def expect(condition: bool, message: str, **details: Any) -> None:
    if not condition:
        raise CheckFailed(message, **details)


def expect_eq(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise CheckFailed(f"{what}: expected {_wire(expected)!r}, got {_wire(actual)!r}")


def _wire(value: Any) -> Any:
    """``value`` with Kafka's named codes (``ErrorCode``, ``ApiKey``, ACL codes) as the numbers the
    broker sends, inside lists, tuples, sets and dicts too: a check names what it expects, the
    broker answers numbers, and a failure shows both alike."""
    if isinstance(value, IntEnum):
        return int(value)
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return kind(_wire(v) for v in value)
    if kind is dict:
        return {_wire(k): _wire(v) for k, v in value.items()}
    return value


def expect_error(actual: Any, expected: int | tuple[int, ...], what: str) -> None:
    """An error code equals ``expected`` (or one of them); the message names both codes."""
    code = int(actual)
    wanted = (expected,) if isinstance(expected, int) else expected
    if code not in wanted:
        names = " or ".join(error_name(c) for c in wanted)
        raise CheckFailed(f"{what}: expected {names}, got {error_name(code)}")


def skip(reason: str) -> NoReturn:
    raise CheckSkipped(reason)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise CheckFailed(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(interval)
