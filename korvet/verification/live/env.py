"""What every live run against one broker shares: its address, the versions it serves,
whose rules apply, the topic commits go to, Korvet's test clock, and the counters the
report prints."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.wire import parse_bootstrap
from korvet.core import coordinator as core
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.protocol.frame_io import call_blocking
from korvet.verification.live.oracle import Flavour

# OffsetCommit and OffsetFetch v10 (Kafka 4.1+) name topics by id: the harness sends v9 at most
HARNESS_MAX: dict[int, int] = {ApiKey.OFFSET_COMMIT: 9, ApiKey.OFFSET_FETCH: 9}
# Timeouts every member asks for: long enough that no timer fires on its own during a run
# (a run takes seconds; Kafka's clock runs, Korvet's test clock stands still).
SESSION_MS = 60_000
REBALANCE_MS = 90_000
SHORT_SESSION_MS = 1_000  # below group.min.session.timeout.ms: INVALID_SESSION_TIMEOUT
CLIENT_HOST = "127.0.0.1"


class LiveError(RuntimeError):
    """The run could not be set up (no broker, no topic, no test clock)."""


class Divergence(AssertionError):
    """The broker did something the machine does not allow."""


@dataclass
class Stats:
    """What the runs covered; printed at the end (and asserted on by the tests)."""

    sequences: int = 0
    steps: int = 0
    requests: int = 0
    replies_compared: int = 0
    held_back_confirmed: int = 0
    queries: int = 0
    clock_moves: int = 0
    skipped: int = 0
    leader_choices: int = 0  # a leader accepted from a set the spec allows
    kafka_rules: dict[str, int] = field(default_factory=dict)  # Kafka's rule used, by name
    errors_seen: dict[str, int] = field(default_factory=dict)  # error codes in replies, by name

    def note_rule(self, name: str) -> None:
        self.kafka_rules[name] = self.kafka_rules.get(name, 0) + 1

    def note_error(self, name: str) -> None:
        self.errors_seen[name] = self.errors_seen.get(name, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def error_label(code: int) -> str:
    """An error code's name as Kafka's Errors enum spells it (``error N`` if unknown): how
    the transactions and share models write the answers they expect."""
    return error_name(code).split(" (")[0]


class ModelChecks:
    """Comparing an answer with a model's: a run that has ``env``."""

    env: Environment

    def _check(self, what: str, got: Any, expected: Any) -> None:
        """The broker's answer must be the model's; a non-NONE error name expected (alone
        or first in a tuple) is counted in the run's figures."""
        if got != expected:
            raise Divergence(f"{what}: the broker answered\n    {got}\n  the model says\n"
                             f"    {expected}")
        self.env.stats.replies_compared += 1
        error = expected[0] if isinstance(expected, tuple) and expected else expected
        if isinstance(error, str) and error != "NONE":
            self.env.stats.note_error(error)


class ClockClient:
    """Korvet's test clock (``--groups-test-clock``) over its HTTP endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/test/groups-clock"

    def _call(self, method: str, query: str = "") -> int:
        request = urllib.request.Request(self.url + query, method=method, data=b"" if
                                         method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                body = json.loads(answer.read())
        except OSError as exc:
            raise LiveError(f"the test clock at {self.url} does not answer ({exc}); start "
                            "Korvet with --groups-test-clock and give its HTTP address") from exc
        return int(body["now_ms"])

    def now(self) -> int:
        return self._call("GET")

    def advance(self, ms: int) -> int:
        return self._call("POST", f"?advance_ms={ms}")


@dataclass
class Environment:
    host: str
    port: int
    flavour: Flavour
    versions: dict[int, tuple[int, int]]
    topic: str
    partitions: int = 2
    clock: ClockClient | None = None
    config: core.Config = field(default_factory=core.Config)
    settle: float = 0.03  # how long a held-back request must stay unanswered after a barrier
    reply_timeout: float = 15.0
    stats: Stats = field(default_factory=Stats)

    def version(self, api: int, wanted: int) -> int:
        """``wanted`` within what the broker serves (scripts name versions; brokers differ)."""
        lo, hi = self.versions[api]
        return min(max(wanted, lo), hi, HARNESS_MAX.get(api, hi))


def _call(host: str, port: int, request: Any) -> Any:
    return call_blocking(host, port, request, timeout=15.0, client_id="korvet-live")


def served_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    response = _call(host, port, build_request(ApiKey.API_VERSIONS, 2))
    if int(response.error_code) != ErrorCode.NONE:
        raise LiveError(f"ApiVersions answered error {int(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def wait_for_coordinator(host: str, port: int, versions: dict[int, tuple[int, int]],
                         timeout: float = 60.0) -> None:
    """Kafka answers COORDINATOR_NOT_AVAILABLE until its offsets topic exists."""
    version = min(versions[ApiKey.FIND_COORDINATOR][1], 3)
    deadline = time.monotonic() + timeout
    while True:
        entry = _call(host, port, build_request(ApiKey.FIND_COORDINATOR, version, key="live-probe",
                                                key_type=0))
        if int(entry.error_code) == ErrorCode.NONE:
            return
        if time.monotonic() > deadline:
            raise LiveError(f"FindCoordinator still answers {int(entry.error_code)}")
        time.sleep(0.2)


def create_topic(host: str, port: int, versions: dict[int, tuple[int, int]], name: str,
                 partitions: int, configs: dict[str, str] | None = None) -> None:
    version = min(versions[ApiKey.CREATE_TOPICS][1], 4)
    response = _call(host, port, build_request(
        ApiKey.CREATE_TOPICS, version, timeout=30_000, validate_only=False, topics=[{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "assignments": [], "configs": [{"name": k, "value": v}
                                           for k, v in (configs or {}).items()]}]))
    code = int(response.topics[0].error_code)
    if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        raise LiveError(f"CreateTopics {name}: error {code}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = _call(host, port, build_request(
            ApiKey.METADATA, min(versions[ApiKey.METADATA][1], 9), topics=[{"name": name}],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
        topic = meta.topics[0]
        if int(topic.error_code) == ErrorCode.NONE and len(topic.partitions) == partitions and all(
                int(p.leader_id) >= 0 for p in topic.partitions):
            return
        time.sleep(0.1)
    raise LiveError(f"topic {name} has no leader for every partition after 30 s")


def connect(bootstrap: str, *, flavour: str = "auto", clock_url: str | None = None,
            initial_rebalance_delay_ms: int = 0, group_max_size: int = 2**31 - 1,
            settle: float | None = None) -> Environment:
    """Ask the broker what it serves, wait for its group coordinator, create the topic
    that commits go to."""
    host, port = parse_bootstrap(bootstrap)
    try:
        versions = served_versions(host, port)
    except OSError as exc:
        raise LiveError(f"no broker answers at {bootstrap}: {exc}") from exc
    chosen = Flavour(flavour) if flavour != "auto" else (
        # KIP-848's ConsumerGroupHeartbeat: Apache Kafka 4 serves it, Korvet does not
        Flavour.KAFKA if ApiKey.CONSUMER_GROUP_HEARTBEAT in versions else Flavour.KORVET)
    wait_for_coordinator(host, port, versions)
    topic = f"live-{uuid.uuid4().hex[:10]}"
    create_topic(host, port, versions, topic, 2)
    clock = ClockClient(clock_url) if clock_url else None
    if clock is not None:
        clock.now()
    config = core.Config(initial_rebalance_delay_ms=initial_rebalance_delay_ms,
                         group_max_size=group_max_size)
    return Environment(host, port, chosen, versions, topic, 2, clock, config,
                       settle if settle is not None else
                       (0.05 if chosen is Flavour.KAFKA else 0.02))
