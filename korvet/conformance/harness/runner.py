"""Run checks against a broker: in parallel threads, with time limits, into a ``RunReport``.

Most checks spend their time waiting for the broker (a JoinGroup held for the
initial rebalance delay, a long poll), so they run in a pool of threads; checks
marked ``serial`` (timing-sensitive or Hypothesis-driven) run afterwards, one at
a time. A check that passes its time limit is stopped by closing its
connections and clients, and fails.

The broker is watched while checks run (``brokers.py``). When it dies, the checks
that ran since it was last seen alive are the suspects: their results are dropped
and, if the suite started the broker itself, it is restarted and each suspect runs
again alone. The one after which the broker is dead again is the check that killed
it: it fails with that message, the broker is restarted, and the run goes on. A
broker the suite did not start cannot be restarted: the run stops, the suspects fail
with that message and the checks not yet run are skipped.
"""

from __future__ import annotations

import datetime
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from korvet.conformance.harness import context, drivers
from korvet.conformance.harness.brokers import Broker, BrokerError, RemoteBroker
from korvet.conformance.harness.context import CheckContext
from korvet.conformance.harness.outcomes import CheckSkipped
from korvet.conformance.harness.profile import KAFKA, Profile, load
from korvet.conformance.harness.registry import Check
from korvet.conformance.harness.security import SecurityTarget
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.session import ApiTable, KafkaCallFailed
from korvet.conformance.kafka.wire import WireClient, WireError, parse_bootstrap
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

PASS, FAIL, EXCUSED, SKIP = "pass", "fail", "excused", "skip"
STATUSES = (PASS, FAIL, EXCUSED, SKIP)
# Seconds before the last good probe in which a finished check may still have killed the broker.
DEATH_GRACE_S = 3.0


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
    excuse_key: str | None = None
    reference: str | None = None
    # The profile excuses this check but it passed: the excuse may no longer be needed.
    excuse_unneeded: bool = False
    # The last requests and responses of a check that did not pass.
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0  # seconds after the run started (when the check began)

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
    profile_data: dict[str, Any] = field(default_factory=dict)
    # Each time the broker died: its own account, the suspects, the checks that killed it.
    incidents: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why the run stopped early, if it did

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] += 1
        return out

    @property
    def ok(self) -> bool:
        return all(r.status != FAIL for r in self.results) and self.stopped is None

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == FAIL]

    def unneeded_excuses(self) -> list[CheckResult]:
        return [r for r in self.results if r.excuse_unneeded]

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "bootstrap": self.bootstrap, "profile": self.profile,
            "profile_meaning": self.profile_data.get("about", ""), "run_id": self.run_id,
            "started_at": self.started_at, "seconds": round(self.seconds, 2), "ok": self.ok,
            "counts": self.counts(), "apis": self.apis, "profile_data": self.profile_data,
            "unneeded_excuses": [r.name for r in self.unneeded_excuses()],
            "incidents": self.incidents, "stopped": self.stopped,
            "results": [asdict(r) for r in self.results],
        }


def read_api_versions(bootstrap: str, timeout: float = 15.0) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions table (asked with v0, which every broker answers)."""
    host, port = parse_bootstrap(bootstrap)
    with WireClient(host, port, timeout=timeout) as conn:
        response = conn.call(build_request(ApiKey.API_VERSIONS, 0))
    if int(response.error_code) != ErrorCode.NONE:
        raise WireError(f"ApiVersions v0 answered error {int(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def cleanup(bootstrap: str, run_id: str) -> int:
    """Delete the topics a run created (their names start with ``kc-<run id>-``); returns how many.
    Groups are left to the broker's offset retention (deleting them needs them empty)."""
    host, port = parse_bootstrap(bootstrap)
    prefix = f"kc-{run_id}-"
    with WireClient(host, port, timeout=60) as conn:
        versions = ApiTable(read_api_versions(bootstrap))
        meta = conn.call(build_request(ApiKey.METADATA, versions.pick(ApiKey.METADATA, 1), topics=None,
                                       allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
        names = sorted(t.name for t in meta.topics if t.name and t.name.startswith(prefix))
        version = versions.pick(ApiKey.DELETE_TOPICS)
        for start in range(0, len(names), 50):
            chunk = names[start:start + 50]
            if version >= 6:
                request = build_request(ApiKey.DELETE_TOPICS, version, timeout=60_000,
                                        topics=[{"name": n, "topic_id": None} for n in chunk])
            else:
                request = build_request(ApiKey.DELETE_TOPICS, version, timeout=60_000, topic_names=chunk)
            conn.call(request, timeout=90)
    return len(names)

Event = Callable[[str, Check, "CheckResult | None"], None]


def run_check(check: Check, ctx: CheckContext, profile: Profile) -> CheckResult:
    started = time.monotonic()
    status, message = PASS, ""
    try:
        check.fn(ctx)
    except KafkaCallFailed as exc:  # a CheckFailed, or an operation that could not go on
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
    excuse = profile.excuse_for(check.name)
    if status == FAIL and excuse is not None:
        status = EXCUSED
    return CheckResult(
        name=check.name, api=check.api, status=status, seconds=round(time.monotonic() - started, 3),
        message=message, asserts=check.asserts, source=check.source, kafka_exact=check.kafka_exact,
        group_protocol=check.group_protocol, requires=check.requires,
        excuse=excuse.reason if status == EXCUSED and excuse is not None else None, details=ctx.details,
        excuse_key=excuse.key if excuse is not None else None,
        reference=excuse.reference if excuse is not None else None,
        excuse_unneeded=status == PASS and excuse is not None,
        exchanges=ctx.exchanges() if status in (FAIL, EXCUSED) else [],
    )


class _Run:
    """One run's scheduling: the pool, the watch on the broker, and what happens when it dies."""

    def __init__(self, broker: Broker, run_id: str, apis: ApiTable, profile: Profile,
                 on_event: Event | None, on_note: Callable[[str], None] | None,
                 security: SecurityTarget | None = None) -> None:
        self.broker = broker
        self.security = security  # the secured listener of the security.* checks (--security FILE)
        self.run_id = run_id
        self.apis = apis
        self.profile = profile
        self.on_event = on_event
        self.on_note: Callable[[str], None] = on_note or (lambda _: None)
        self.results: dict[str, CheckResult] = {}
        self.incidents: list[dict[str, Any]] = []
        self.stopped: str | None = None
        self.lock = threading.Lock()
        self.running: dict[str, tuple[Check, CheckContext, float]] = {}
        self.spans: list[tuple[str, float, float]] = []  # (check, started, ended) of finished checks
        self.last_alive = time.monotonic()
        self.began = time.monotonic()
        self.attempts: dict[str, int] = {}  # check -> how often it started (reruns after a death)

    def execute(self, check: Check) -> CheckResult:
        with self.lock:
            attempt = self.attempts[check.name] = self.attempts.get(check.name, 0) + 1
        # A rerun gets names of its own: a client of the earlier attempt may still be retrying
        # against the restarted broker and recreate that attempt's topics there.
        ctx = CheckContext(check.name, self.broker.bootstrap, self.run_id, self.apis,
                           security=self.security, attempt=attempt)
        began = time.monotonic()
        with self.lock:
            self.running[check.name] = (check, ctx, began)
        if self.on_event:
            self.on_event("start", check, None)
        try:
            result = run_check(check, ctx, self.profile)
            result.started = round(began - self.began, 3)
            if ctx.details.get("unclosed"):
                self.on_note(f"{check.name}: a close did not return within {context.CLOSE_SECONDS:.0f}"
                             f" s and was left running ({', '.join(ctx.details['unclosed'])})")
            return result
        finally:
            with self.lock:
                self.running.pop(check.name, None)
                self.spans.append((check.name, began, time.monotonic()))

    def publish(self, check: Check, result: CheckResult) -> None:
        self.results[check.name] = result
        if self.on_event:
            self.on_event("done", check, result)

    def watchdog(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            now = time.monotonic()
            with self.lock:
                overdue = [ctx for check, ctx, began in self.running.values() if now - began > check.timeout]
            for ctx in overdue:
                ctx.abort()

    def probe(self) -> bool:
        if self.broker.alive():
            self.last_alive = time.monotonic()
            return True
        return False

    def batch(self, checks: list[Check], jobs: int) -> None:
        """Run ``checks``, up to ``jobs`` at a time, handling the broker's death."""
        by_name = {c.name: c for c in checks}
        pending = list(reversed(checks))  # pop() from the end keeps the given order
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="check") as pool:
            in_flight: dict[Future[CheckResult], Check] = {}
            while (pending or in_flight) and self.stopped is None:
                while pending and len(in_flight) < max(1, jobs):
                    check = pending.pop()
                    in_flight[pool.submit(self.execute, check)] = check
                done, _ = wait(list(in_flight), timeout=0.5, return_when=FIRST_COMPLETED)
                finished = [(in_flight.pop(f), f.result()) for f in done]
                window_start = self.last_alive
                if self.probe():
                    for check, result in finished:
                        self.publish(check, result)
                    continue
                # The broker died: stop what still runs (closing its connections ends raw-protocol
                # checks at once) and restart the broker right away, so that real clients, which
                # retry until their own timeouts, find it again and end soon too.
                death = self.broker.death()
                with self.lock:
                    for _, ctx, _ in self.running.values():
                        ctx.abort()
                incident: dict[str, Any] = {"death": death, "suspects": [], "killers": [], "restarts": 0}
                self.incidents.append(incident)
                restarted = self.broker.restartable and self.restart(incident, [], [])
                for future in list(in_flight):
                    future.result()
                in_flight.clear()
                with self.lock:
                    # The check that started last before the death is the likeliest killer: try it first.
                    # A process dying of a request may still answer the probe for a moment (a busy
                    # machine, a panic in another goroutine), so checks that ended shortly before the
                    # last good probe are suspects too.
                    since = window_start - DEATH_GRACE_S
                    spans = sorted((s for s in self.spans if s[2] >= since), key=lambda s: -s[1])
                suspects = list(dict.fromkeys(name for name, _, _ in spans if name in by_name))
                self.after_death(incident, [by_name[n] for n in suspects], pending, restarted)

    def after_death(self, incident: dict[str, Any], suspects: list[Check], pending: list[Check],
                    restarted: bool) -> None:
        death = incident["death"]
        names = ", ".join(c.name for c in suspects) or "(none)"
        incident["suspects"] = [c.name for c in suspects]
        self.on_note(f"the broker died while these checks ran: {names}\n{death}")
        if not self.broker.restartable:
            self.stop_run(incident, suspects, pending,
                          f"the broker at {self.broker.bootstrap} stopped answering while these checks ran: "
                          f"{names}; the suite did not start it, so it cannot restart it ({death})")
            return
        # Restart again if the first restart failed, or a check still running then killed it again.
        needs_restart = not restarted or not self.settled_alive()
        if needs_restart and not self.restart(incident, suspects, pending):
            return
        for index, check in enumerate(suspects):
            result = self.execute(check)
            if self.settled_alive():
                self.publish(check, result)
                continue
            incident["killers"].append(check.name)
            self.publish(check, self.killer_result(check, result, self.broker.death()))
            self.on_note(f"{check.name} killed the broker (it died again when the check ran alone); "
                         "restarting it")
            rest = suspects[index + 1:]
            if not self.restart(incident, rest, pending):
                return
            # The others go back to the queue, first in line: they run in parallel again (if one
            # of them kills the broker too, that is a new incident).
            pending.extend(reversed(rest))
            return
        incident["note"] = "none of the suspects killed the broker when it ran alone"

    def settled_alive(self) -> bool:
        """Alive, and still a moment later: a process dying of the last request may take a moment."""
        if not self.probe():
            return False
        time.sleep(0.3)
        return self.probe()

    def killer_result(self, check: Check, result: CheckResult, death: str) -> CheckResult:
        first_line = death.splitlines()[0] if death else "it stopped"
        result.details["broker_death"] = death
        excuse = self.profile.excuse_for(check.name)
        result.status = EXCUSED if excuse is not None else FAIL
        result.excuse = excuse.reason if excuse is not None else None
        result.excuse_unneeded = False
        result.message = (f"the broker died during this check (it died while the check ran among others, "
                          f"and again when it ran alone: {first_line}); it was restarted and the run went "
                          f"on. The check itself saw: {result.message or 'nothing wrong'}")
        return result

    def restart(self, incident: dict[str, Any], unrun: list[Check], pending: list[Check]) -> bool:
        try:
            self.broker.restart()
        except BrokerError as exc:
            if unrun or pending:
                self.stop_run(incident, unrun, pending, f"the broker could not be restarted: {exc}")
            return False
        incident["restarts"] += 1
        self.last_alive = time.monotonic()
        return True

    def stop_run(self, incident: dict[str, Any], suspects: list[Check], pending: list[Check],
                 reason: str) -> None:
        self.stopped = reason
        incident["stopped"] = reason
        self.on_note(f"the run stops: {reason}")
        short = reason.split(";", maxsplit=1)[0]
        for check in suspects:
            self.publish(check, self.unrun(check, FAIL, f"{short}; this check may have killed it"))
        for check in reversed(pending):
            self.publish(check, self.unrun(check, SKIP, f"not run: {short}"))
        pending.clear()

    def unrun(self, check: Check, status: str, message: str) -> CheckResult:
        return CheckResult(name=check.name, api=check.api, status=status, seconds=0.0, message=message,
                           asserts=check.asserts, source=check.source, kafka_exact=check.kafka_exact,
                           group_protocol=check.group_protocol, requires=check.requires)


def run(
    bootstrap: str,
    checks: list[Check],
    *,
    profile: Profile | str = KAFKA,
    jobs: int = 8,
    on_event: Event | None = None,
    broker: Broker | None = None,
    on_note: Callable[[str], None] | None = None,
    security: SecurityTarget | None = None,  # the secured listener the security.* checks use
) -> RunReport:
    """Run ``checks`` against the broker at ``bootstrap``. ``broker``: one the caller started (the
    runner restarts it if it dies); ``on_note`` hears when the broker died and what was done."""
    chosen = profile if isinstance(profile, Profile) else load(profile)
    watched: Broker = broker or RemoteBroker(bootstrap)
    run_id = uuid.uuid4().hex[:6]
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    advertised = read_api_versions(watched.bootstrap)
    drivers.preload()
    state = _Run(watched, run_id, ApiTable(advertised), chosen, on_event, on_note, security)
    stop_watchdog = threading.Event()
    guard = threading.Thread(target=state.watchdog, args=(stop_watchdog,), name="conformance-watchdog",
                             daemon=True)
    guard.start()
    try:
        state.batch([c for c in checks if not c.serial], jobs)
        serial = [c for c in checks if c.serial]
        if state.stopped is None:
            state.batch(serial, 1)
        else:
            for c in serial:
                state.publish(c, state.unrun(c, SKIP, f"not run: {state.stopped.split(';')[0]}"))
    finally:
        stop_watchdog.set()
    ordered = [state.results[c.name] for c in checks if c.name in state.results]
    return RunReport(
        bootstrap=watched.bootstrap, profile=chosen.name, run_id=run_id, started_at=started_at,
        seconds=time.monotonic() - started,
        apis={str(k): [lo, hi] for k, (lo, hi) in sorted(advertised.items())},
        results=ordered, profile_data=chosen.to_json(), incidents=state.incidents, stopped=state.stopped,
    )
