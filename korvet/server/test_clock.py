"""TEST ONLY: a group-coordinator clock that stands still until a test moves it.

With the hidden setting ``groups.test-clock`` (``--groups-test-clock``; never set in
production, absent from ``--help`` and the configuration page), the coordinator reads
this clock instead of the wall clock: it starts at the wall clock's time when the broker
starts and stays there, so no session, rebalance or pending-sync timer fires by itself.
``korvet spec test-live`` moves it through the HTTP endpoint, and only there:

    GET  /test/groups-clock                 -> {"now_ms": N}
    POST /test/groups-clock?advance_ms=D    -> moves the clock D ms forward, steps every
                                               coordinator timeout due then, and answers
                                               {"now_ms": N + D} once those steps are done

The routes exist only when the setting is on. Only the coordinator reads this clock;
record timestamps, retention and everything else keep the wall clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from korvet.server.http import Request, Response, Route

PATH = "/test/groups-clock"
MAX_ADVANCE_MS = 10 * 365 * 86_400_000  # ten years: more is a typo


class TestClock:
    """Milliseconds that move only when ``advance`` is called."""

    __test__ = False  # not a pytest test class

    def __init__(self, start_ms: int | None = None) -> None:
        self.now_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        if not 0 <= ms <= MAX_ADVANCE_MS:
            raise ValueError(f"advance_ms must be within 0..{MAX_ADVANCE_MS}, got {ms}")
        self.now_ms += ms
        return self.now_ms


def _json(status: int, body: object) -> Response:
    return Response(status, (json.dumps(body) + "\n").encode(), "application/json")


def routes(clock: TestClock, run_due_timers: Callable[[], Awaitable[None]],
           ) -> tuple[dict[str, Route], dict[str, Route]]:
    """(GET routes, POST routes) of the test clock."""

    async def read(request: Request) -> Response:
        return _json(200, {"now_ms": clock()})

    async def advance(request: Request) -> Response:
        values = parse_qs(request.query).get("advance_ms", [])
        try:
            if len(values) != 1 or not values[0].lstrip("-").isdigit():
                raise ValueError("give exactly one advance_ms=<milliseconds>")
            now = clock.advance(int(values[0]))
        except ValueError as exc:
            return _json(400, {"error": str(exc)})
        await run_due_timers()
        return _json(200, {"now_ms": now})

    return {PATH: read}, {PATH: advance}
