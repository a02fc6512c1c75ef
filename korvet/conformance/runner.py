"""Run checks against a broker: in parallel threads, with time limits, into a ``RunReport``.

Most checks spend their time waiting for the broker (a JoinGroup held for the
initial rebalance delay, a long poll), so they run in a pool of threads; checks
marked ``serial`` (timing-sensitive or Hypothesis-driven) run afterwards, one at
a time. A check that passes its time limit is stopped by closing its
connections and clients, and fails.
"""

from __future__ import annotations

import datetime
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from korvet.conformance import drivers
from korvet.conformance.context import ApiTable, CheckContext
from korvet.conformance.differences import PROFILES
from korvet.conformance.messages import build_request
from korvet.conformance.registry import Check, CheckFailed, CheckSkipped
from korvet.conformance.wire import WireClient, WireError, parse_bootstrap

PASS, FAIL, EXCUSED, SKIP = "pass", "fail", "excused", "skip"
STATUSES = (PASS, FAIL, EXCUSED, SKIP)


@dataclass
class CheckResult:
    name: str
    api: str
    status: str
    seconds: float
    message: str
    asserts: str
    source: str
    kafka_exact: bool
    group_protocol: bool
    requires: str = ""
    excuse: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


@dataclass
class RunReport:
    bootstrap: str
    profile: str
    run_id: str
    started_at: str
    seconds: float
    apis: dict[str, list[int]]
    results: list[CheckResult]
    suite: str = "korvet conformance"

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(r.status != FAIL for r in self.results)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "bootstrap": self.bootstrap, "profile": self.profile,
            "profile_meaning": PROFILES.get(self.profile, ""), "run_id": self.run_id,
            "started_at": self.started_at, "seconds": round(self.seconds, 2), "ok": self.ok,
            "counts": self.counts(), "apis": self.apis,
            "results": [asdict(r) for r in self.results],
        }


def read_api_versions(bootstrap: str, timeout: float = 15.0) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions table (asked with v0, which every broker answers)."""
    host, port = parse_bootstrap(bootstrap)
    with WireClient(host, port, timeout=timeout) as conn:
        response = conn.call(build_request(18, 0))
    if int(response.error_code) != 0:
        raise WireError(f"ApiVersions v0 answered error {int(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def cleanup(bootstrap: str, run_id: str) -> int:
    """Delete the topics a run created (their names start with ``kc-<run id>-``); returns how many.
    Groups are left to the broker's offset retention (deleting them needs them empty)."""
    host, port = parse_bootstrap(bootstrap)
    prefix = f"kc-{run_id}-"
    with WireClient(host, port, timeout=60) as conn:
        versions = ApiTable(read_api_versions(bootstrap))
        meta = conn.call(build_request(3, versions.pick(3, 1), topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
        names = sorted(t.name for t in meta.topics if t.name and t.name.startswith(prefix))
        version = versions.pick(20)
        for start in range(0, len(names), 50):
            chunk = names[start:start + 50]
            if version >= 6:
                request = build_request(20, version, timeout=60_000,
                                        topics=[{"name": n, "topic_id": None} for n in chunk])
            else:
                request = build_request(20, version, timeout=60_000, topic_names=chunk)
            conn.call(request, timeout=90)
    return len(names)


Event = Callable[[str, Check, "CheckResult | None"], None]


def run_check(check: Check, ctx: CheckContext, profile: str) -> CheckResult:
    started = time.monotonic()
    status, message = PASS, ""
    try:
        check.fn(ctx)
    except CheckFailed as exc:
        status, message = FAIL, exc.message
        for key, value in exc.details.items():
            ctx.note(key, value)
    except CheckSkipped as exc:
        status, message = SKIP, str(exc)
    except WireError as exc:
        status, message = FAIL, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a check must report, never crash the run
        status, message = FAIL, f"{type(exc).__name__}: {exc}"
        ctx.note("traceback", traceback.format_exc(limit=8))
    finally:
        ctx.close()
    if ctx.aborted.is_set() and status == FAIL:
        message = f"stopped at its time limit of {check.timeout:.0f} s ({message})"
    excuse = check.excuse(profile)
    if status == FAIL and excuse:
        status = EXCUSED
    return CheckResult(
        name=check.name, api=check.api, status=status, seconds=round(time.monotonic() - started, 3),
        message=message, asserts=check.asserts, source=check.source, kafka_exact=check.kafka_exact,
        group_protocol=check.group_protocol, requires=check.requires,
        excuse=excuse if status == EXCUSED else None, details=ctx.details,
    )


def run(
    bootstrap: str,
    checks: list[Check],
    *,
    profile: str = "kafka",
    jobs: int = 8,
    on_event: Event | None = None,
    security: Any = None,  # a checks.security.SecurityTarget: the secured listener the security.* checks use
) -> RunReport:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    run_id = uuid.uuid4().hex[:6]
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    advertised = read_api_versions(bootstrap)
    apis = ApiTable(advertised)
    drivers.preload()
    results: dict[str, CheckResult] = {}
    running: dict[str, tuple[CheckContext, float]] = {}
    lock = threading.Lock()
    stop_watchdog = threading.Event()

    def execute(check: Check) -> CheckResult:
        ctx = CheckContext(check, bootstrap, run_id, apis, security=security)
        with lock:
            running[check.name] = (ctx, time.monotonic())
        if on_event:
            on_event("start", check, None)
        try:
            result = run_check(check, ctx, profile)
        finally:
            with lock:
                running.pop(check.name, None)
        with lock:
            results[check.name] = result
        if on_event:
            on_event("done", check, result)
        return result

    def watchdog() -> None:
        while not stop_watchdog.wait(0.5):
            now = time.monotonic()
            with lock:
                overdue = [ctx for ctx, began in running.values() if now - began > ctx.check.timeout]
            for ctx in overdue:
                ctx.abort()

    guard = threading.Thread(target=watchdog, name="conformance-watchdog", daemon=True)
    guard.start()
    try:
        parallel = [c for c in checks if not c.serial]
        serial = [c for c in checks if c.serial]
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="check") as pool:
            futures: list[Future[CheckResult]] = [pool.submit(execute, c) for c in parallel]
            for future in futures:
                future.result()
        for c in serial:
            execute(c)
    finally:
        stop_watchdog.set()
    ordered = [results[c.name] for c in checks if c.name in results]
    return RunReport(
        bootstrap=bootstrap, profile=profile, run_id=run_id, started_at=started_at,
        seconds=time.monotonic() - started,
        apis={str(k): [lo, hi] for k, (lo, hi) in sorted(advertised.items())},
        results=ordered,
    )
