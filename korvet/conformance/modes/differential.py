"""Differential mode: the same generated requests to the broker under test and to Apache Kafka.

``korvet conformance --bootstrap SUBJECT --oracle KAFKA`` sends, for every API and version
both brokers announce (and the suite knows how to keep harmless, see below), the same
generated request sequences to both, and compares what comes back field by field:

- the outcome (an answer, the connection closed, no answer in time);
- every error code, exactly;
- the shape of the answer: the same fields, the same arrays with the same number of
  entries (arrays of topics, partitions, groups... matched by their name or index);
- every other value, except those that legitimately differ between two brokers and are
  normalised away (``NORMALISED``): ids (member, producer, topic, cluster, session),
  broker ids and their host/port, offsets and timestamps the broker chose, throttle times,
  free-text error messages, record bytes, and the lists that describe the broker itself
  (ApiVersions' API table, DescribeConfigs' config listings).

Requests come from the JSON Schemas of Kafka's messages (``kafka/schemas.py``) through
hypothesis-jsonschema (``fuzz.request_strategy``): a sequence of one to three requests on
one connection, each valid against its schema or made malformed on the wire (truncated, or
with bytes appended). Both brokers first get the same fixture: a topic with two partitions
and three records of fixed timestamps in partition 0. Offsets in requests are drawn from
symbols (the fixture's first, second, third record, its end, past its end) and translated
for each broker, so a request means the same on both even though their offsets differ.
Generation is derandomized (the same sequences every run). The narrowings of the
``generated.*`` checks (``fuzz.TARGETS``) keep requests harmless (no topic auto-creation, validate-only admin
calls, ``kc-fuzz-`` group ids, bounded waits); APIs without one are not sent.

A difference that the profile's ``differential`` section does not excuse fails the API's
entry (``differential.<api>``); Hypothesis shrinks the sequence that showed it, and the
shrunk sequence is printed as a replay file: ``korvet conformance --replay FILE
--bootstrap SUBJECT --oracle KAFKA`` sends it again and shows both answers.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from korvet.conformance.harness.context import CheckContext
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.profile import Profile
from korvet.conformance.harness.registry import Check
from korvet.conformance.harness.runner import read_api_versions
from korvet.conformance.kafka.messages import build, to_plain
from korvet.conformance.kafka.ops import LATEST, Ops
from korvet.conformance.kafka.records import Rec
from korvet.conformance.kafka.schemas import UUID_PATTERN, JsonSchema, api_name, narrow, request_schema
from korvet.conformance.kafka.session import ApiTable
from korvet.conformance.kafka.wire import (
    ConnectionClosed,
    DecodeError,
    ResponseTimeout,
    WireClient,
    encode_request,
)
from korvet.conformance.modes.fuzz import TARGETS, request_strategy, validate_only
from korvet.core.api_keys import ApiKey

# -- what legitimately differs ------------------------------------------------------

# Leaf field names (any depth, any API) whose values two correct brokers may choose differently.
NORMALISED: dict[str, str] = {
    **dict.fromkeys(("throttle_time", "throttle_time_ms"), "timing"),
    **dict.fromkeys(("error_message",), "free text"),
    **dict.fromkeys(("node_id", "leader_id", "broker_id", "controller_id", "replica_nodes", "isr_nodes",
                     "offline_replicas", "eligible_leader_replicas", "last_known_elr", "leader_epoch",
                     "current_leader", "node_endpoints", "coordinator_epoch", "partition_leader_epoch",
                     "committed_leader_epoch", "last_fetched_epoch", "rack"), "broker ids"),
    **dict.fromkeys(("host", "port", "client_host"), "host/port"),
    **dict.fromkeys(("cluster_id", "topic_id", "member_id", "producer_id", "producer_epoch",
                     "leader", "client_id", "member_epoch", "epoch"), "ids"),
    **dict.fromkeys(("base_offset", "offset", "high_watermark", "last_stable_offset", "log_start_offset",
                     "end_offset", "old_style_offsets", "log_append_time", "log_append_time_ms",
                     "timestamp", "max_timestamp"), "offsets and timestamps"),
    **dict.fromkeys(("records", "aborted_transactions", "preferred_read_replica", "diverging_epoch",
                     "snapshot_id"), "record bytes"),
    **dict.fromkeys(("api_keys", "supported_features", "finalized_features", "finalized_features_epoch",
                     "zk_migration_ready"), "the broker's own API table"),
    **dict.fromkeys(("configs", "synonyms"), "the broker's config listing"),
    **dict.fromkeys(("log_dir", "partition_size", "total_bytes", "usable_bytes"), "the broker's own storage"),
    **dict.fromkeys(("cluster_authorized_operations", "topic_authorized_operations",
                     "authorized_operations"), "authorizer"),
}

# Normalised fields where null and a value (or an empty list) are both fine.
_NULL_OR_EMPTY = ("error_message", "records", "leader", "client_id", "rack", "aborted_transactions")

# Keys that identify an entry of an array of structs, tried in this order.
_ENTRY_KEYS = ("name", "topic", "partition_index", "partition", "index", "group_id", "resource_name",
               "transactional_id", "api_key")


@dataclass(frozen=True)
class Difference:
    path: str  # "Api.field.*.sub"
    kind: str  # outcome, error code, shape, value
    subject: Any
    oracle: Any

    @property
    def signature(self) -> str:
        return f"{self.kind} at {self.path}"

    def describe(self) -> str:
        return f"{self.kind} at {self.path}: subject {_short(self.subject)}, Kafka {_short(self.oracle)}"


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def _sort_entries(items: list[Any]) -> list[Any]:
    if not items or not all(isinstance(i, dict) for i in items):
        return items
    for key in _ENTRY_KEYS:
        if all(key in i for i in items):
            return sorted(items, key=lambda i: json.dumps(i[key], default=str))
    return items


def compare(subject: Any, oracle: Any, path: str) -> list[Difference]:
    """Field-by-field differences between two plain responses (``messages.to_plain``)."""
    leaf = path.rsplit(".", 1)[-1]
    if leaf in NORMALISED:
        # Only whether a list or a null is there is compared (a message or record bytes may be
        # absent on one side and present on the other: that is free to differ too).
        differs = (isinstance(subject, list) != isinstance(oracle, list)
                   or (subject is None) != (oracle is None))
        if differs and leaf not in _NULL_OR_EMPTY:
            return [Difference(path, "shape", _kind(subject), _kind(oracle))]
        return []
    if isinstance(subject, dict) and isinstance(oracle, dict):
        out: list[Difference] = []
        for key in sorted(set(subject) | set(oracle)):
            if key not in subject or key not in oracle:
                out.append(Difference(f"{path}.{key}", "shape", key in subject, key in oracle))
                continue
            out += compare(subject[key], oracle[key], f"{path}.{key}")
        return out
    if isinstance(subject, list) and isinstance(oracle, list):
        if len(subject) != len(oracle):
            return [Difference(f"{path}.*", "shape", f"{len(subject)} entries", f"{len(oracle)} entries")]
        out = []
        for a, b in zip(_sort_entries(subject), _sort_entries(oracle), strict=True):
            out += compare(a, b, f"{path}.*")
        return out
    if subject == oracle:
        return []
    kind = "error code" if leaf == "error_code" else ("shape" if _kind(subject) != _kind(oracle) else "value")
    return [Difference(path, kind, subject, oracle)]


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# -- the fixture and symbolic offsets -------------------------------------------------

SYMBOLS = {-7_000_001: "first", -7_000_002: "second", -7_000_003: "third", -7_000_004: "end",
           -7_000_005: "past end"}
# DeleteRecords gets a topic of its own (one partition, three records), so that what it deletes
# never changes what the other APIs see; its offsets have symbols of their own. Both brokers get
# the same requests in the same order, so their log starts move alike.
DELETE_SYMBOLS = {-7_100_001: "first", -7_100_002: "second", -7_100_003: "third", -7_100_004: "end",
                  -7_100_005: "past end"}
# Fetch sessions (KIP-227): a request's session id may be "the session id this broker gave in an
# earlier response of the same sequence" (0 when it gave none), translated when it is sent.
SESSION_SYMBOL = -9_000_001
# Topic ids (Fetch v13+): this one stands for the fixture topic's id on each broker.
FIXTURE_TOPIC_ID = "00000000-0000-4000-8000-0000000f1f1e"


def delete_topic(topic: str) -> str:
    """The DeleteRecords fixture topic that goes with fixture topic ``topic``."""
    return f"{topic}-del"
# The fixture's records carry the same timestamps on both brokers: the start of the current
# minute minus 10 minutes, then 1 s apart (recent, so that no time-based retention removes them).
# In requests they are symbols, translated like offsets: the three timestamps, just before the
# first, just after the last.
TIMESTAMP_SYMBOLS = (-8_000_001, -8_000_002, -8_000_003, -8_000_004, -8_000_005)


def fixture_timestamps() -> tuple[int, int, int]:
    base = int(time.time() // 60 * 60_000) - 600_000
    return (base, base + 1000, base + 2000)


def timestamp_symbols(stamps: tuple[int, int, int]) -> dict[int, int]:
    return dict(zip(TIMESTAMP_SYMBOLS, [*stamps, stamps[0] - 1, stamps[-1] + 1], strict=True))
_OFFSET_CHOICES: JsonSchema = {"anyOf": [
    {"enum": sorted(SYMBOLS)},
    {"enum": [-1, -2]},
    {"type": "integer", "minimum": 2**60, "maximum": 2**63 - 1},
]}
_DELETE_OFFSET_CHOICES: JsonSchema = {"anyOf": [
    {"enum": sorted(DELETE_SYMBOLS)},
    {"enum": [-1, -2]},
    {"type": "integer", "minimum": 2**60, "maximum": 2**63 - 1},
]}
_TIMESTAMP_CHOICES: JsonSchema = {"enum": [-1, -2, -3, *TIMESTAMP_SYMBOLS, 4_000_000_000_000]}
# Request fields holding a log position of the broker's choosing, per API.
OFFSET_PATHS: dict[int, tuple[str, ...]] = {
    ApiKey.FETCH: ("topics.*.partitions.*.fetch_offset", "topics.*.partitions.*.log_start_offset"),
    ApiKey.OFFSET_COMMIT: ("topics.*.partitions.*.committed_offset",),
}
DELETE_OFFSET_PATHS: dict[int, tuple[str, ...]] = {ApiKey.DELETE_RECORDS: ("topics.*.partitions.*.offset",)}
TIMESTAMP_PATHS: dict[int, tuple[str, ...]] = {ApiKey.LIST_OFFSETS: ("topics.*.partitions.*.timestamp",)}


@dataclass
class Side:
    """One broker of the comparison, with its fixture's offsets (and topic id)."""

    name: str
    bootstrap: str
    apis: ApiTable
    symbols: dict[int, int] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)  # symbolic topic id -> this broker's

    def labels(self) -> dict[int, str]:
        """This broker's offsets of the DeleteRecords fixture -> their symbols' names, so that a low
        watermark in an answer compares as "the second record" rather than as a number."""
        return {self.symbols[k]: f"<{name}>" for k, name in DELETE_SYMBOLS.items() if k in self.symbols}

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.bootstrap.rpartition(":")
        return host, int(port)


def prepare_fixture(side: Side, check_name: str, run_id: str, topic: str,
                    stamps: tuple[int, int, int]) -> None:
    """Create the fixture topic on one broker (records with timestamps ``stamps``) and learn its
    offsets (the values of ``SYMBOLS``), in the name of check ``check_name``."""
    ctx = CheckContext(check_name, side.bootstrap, run_id, side.apis)
    try:
        ops = Ops(ctx)
        producer = _warm_up(ops)
        created = ops.create_topic(partitions=2, name=topic)
        # Written by an idempotent producer, which DescribeProducers then lists.
        base = ops.produce_ok(created, 0, [Rec(f"v{i}".encode(), key=f"k{i}".encode(), timestamp=ts)
                                           for i, ts in enumerate(stamps)],
                              producer_id=int(producer.producer_id),
                              producer_epoch=int(producer.producer_epoch), base_sequence=0)
        end = ops.offset_of(created, 0, LATEST)
        topic_id = created.topic_id or ops.topic_id_of(topic)
        doomed = ops.create_topic(partitions=1, name=delete_topic(topic))
        doomed_base = ops.produce_ok(doomed, 0, [Rec(f"d{i}".encode(), timestamp=ts)
                                                 for i, ts in enumerate(stamps)])
        doomed_end = ops.offset_of(doomed, 0, LATEST)
    finally:
        ctx.close()
    side.symbols = dict(zip(sorted(SYMBOLS, reverse=True), [base, base + 1, base + 2, end, end + 5],
                            strict=True))
    side.symbols.update(zip(sorted(DELETE_SYMBOLS, reverse=True),
                            [doomed_base, doomed_base + 1, doomed_base + 2, doomed_end, doomed_end + 5],
                            strict=True))
    side.symbols.update(timestamp_symbols(stamps))
    side.ids = {FIXTURE_TOPIC_ID: str(topic_id)}


def _warm_up(ops: Ops) -> Any:
    """Bring up what a fresh broker creates on first use (Kafka's __consumer_offsets, its producer id
    block), so that answers do not depend on which request happened to come first. Returns the
    InitProducerId answer (the fixture's idempotent producer)."""
    ops.find_coordinator("kc-fuzz-warm-up")
    return ops.init_producer_id(None)


# Request fields whose symbolic values are translated for each broker (only there: Hypothesis may
# copy a value into another field, where it is only a number).
_SYMBOL_KEYS = frozenset([*(path.rsplit(".", 1)[-1] for paths in (*OFFSET_PATHS.values(),
                                                                   *DELETE_OFFSET_PATHS.values(),
                                                                   *TIMESTAMP_PATHS.values())
                            for path in paths), "session_id"])


def translate(value: Any, symbols: dict[int, int], ids: dict[str, str] | None = None) -> Any:
    """``value`` with every symbolic offset, timestamp or session id replaced by this broker's, and
    (with ``ids``) every symbolic topic id by this broker's topic id."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in _SYMBOL_KEYS and isinstance(v, int):
                out[k] = symbols.get(v, v)
            elif k == "topic_id" and ids and isinstance(v, str):
                out[k] = ids.get(v, v)
            else:
                out[k] = translate(v, symbols, ids)
        return out
    if isinstance(value, list):
        return [translate(v, symbols, ids) for v in value]
    return value


def symbolise(value: Any, labels: dict[int, str]) -> Any:
    """An answer with what the broker chose put in terms both brokers share: a session id is
    ``<a session>`` (or 0: none), a low watermark of the DeleteRecords fixture the name of its
    symbol."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "session_id" and isinstance(v, int):
                out[k] = v if v == 0 else "<a session>"
            elif k == "low_watermark" and isinstance(v, int):
                out[k] = labels.get(v, v)
            else:
                out[k] = symbolise(v, labels)
        return out
    if isinstance(value, list):
        return [symbolise(v, labels) for v in value]
    return value


# -- sending ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One request of a sequence: a document valid against its schema, and how it is malformed."""

    api_key: int
    version: int
    document: dict[str, Any]
    mutation: tuple[str, int] | None = None  # ("truncate", n) or ("append", n)
    expect_response: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"api_key": self.api_key, "api": api_name(self.api_key), "version": self.version,
                "request": self.document, "mutation": list(self.mutation) if self.mutation else None,
                "expect_response": self.expect_response}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Step:
        mutation = data.get("mutation")
        return Step(int(data["api_key"]), int(data["version"]), dict(data["request"]),
                    (str(mutation[0]), int(mutation[1])) if mutation else None,
                    bool(data.get("expect_response", True)))


def _frame(step: Step, document: dict[str, Any], correlation: int) -> bytes:
    request = build(load_request_schema(step.api_key, step.version), document)
    frame = encode_request(request, correlation, "korvet-differential")
    if step.mutation is None:
        return frame
    kind, n = step.mutation
    body = frame[4:]
    # A malformed request: the header stays whole (14 bytes is enough for every header here).
    body = body[:max(14, len(body) - n)] if kind == "truncate" else body + bytes(range(n))
    return struct.pack(">i", len(body)) + body


def send_sequence(side: Side, steps: Sequence[Step], timeout: float = 5.0) -> list[Any]:
    """Outcomes of a sequence on a new connection: plain responses (``symbolise``d), or
    "closed"/"timeout"/"no response"."""
    host, port = side.address
    outcomes: list[Any] = []
    conn = WireClient(host, port, client_id="korvet-differential", timeout=timeout)
    labels = side.labels()
    session = 0  # the last fetch session id this broker gave in the sequence
    try:
        for step in steps:
            correlation = conn.allocate_correlation_id()
            symbols = {**side.symbols, SESSION_SYMBOL: session}
            frame = _frame(step, translate(step.document, symbols, side.ids), correlation)
            try:
                if not step.expect_response:
                    conn.send_bytes(frame)
                    outcomes.append("no response expected")
                    continue
                conn.send_frame(frame, api_key=step.api_key, version=step.version, correlation_id=correlation)
                response = conn.receive(timeout)
                if step.api_key == ApiKey.FETCH and int(getattr(response, "session_id", 0)):
                    session = int(response.session_id)
                outcomes.append(symbolise(to_plain(response), labels))
            except ConnectionClosed:
                outcomes.append("closed")
                break
            except ResponseTimeout:
                outcomes.append("timeout")
                break
            except DecodeError as exc:
                outcomes.append(f"undecodable answer: {exc}")
                break
    finally:
        conn.close()
    return outcomes


_NAME_KEYS = ("name", "topic", "group_id")


def _strings(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return {value} if isinstance(value, str) else set()


def only_mentioned(value: Any, mentioned: set[str]) -> Any:
    """A response without the entries (topics, groups) the request did not name: listings of "every
    topic" or "every group" hold the broker's own (Kafka's __consumer_offsets) and other clients'."""
    if isinstance(value, dict):
        return {k: only_mentioned(v, mentioned) for k, v in value.items()}
    if isinstance(value, list):
        kept = []
        for item in value:
            key = next((k for k in _NAME_KEYS
                        if isinstance(item, dict) and isinstance(item.get(k), str)), None)
            if key is None or item[key] in mentioned:
                kept.append(only_mentioned(item, mentioned))
        return kept
    return value


def _error_codes(value: Any) -> set[int]:
    if isinstance(value, dict):
        codes = {int(value["error_code"])} if isinstance(value.get("error_code"), int) else set()
        return codes.union(*(_error_codes(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_error_codes(v) for v in value)) if value else set()
    return set()


def _trailing(answer: dict[str, Any]) -> str:
    return f"answered with error codes {sorted(_error_codes(answer))}"


def diff_outcomes(steps: Sequence[Step], subject: list[Any], oracle: list[Any]) -> list[Difference]:
    out: list[Difference] = []
    for index, step in enumerate(steps):
        name = api_name(step.api_key)
        mentioned = _strings(step.document)
        a = subject[index] if index < len(subject) else "not sent (connection already closed)"
        b = oracle[index] if index < len(oracle) else "not sent (connection already closed)"
        appended = step.mutation is not None and step.mutation[0] == "append"
        if appended and isinstance(a, dict) and isinstance(b, dict) and _error_codes(a) != _error_codes(b):
            # One broker refused the bytes after the request's last field (Kafka: INVALID_REQUEST, or
            # an error of the API), the other read the request without them: one difference, not
            # one per field of the answer.
            out.append(Difference(f"{name}.<trailing bytes>", "outcome", _trailing(a), _trailing(b)))
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            a, b = only_mentioned(a, mentioned), only_mentioned(b, mentioned)
        if isinstance(a, dict) and isinstance(b, dict):
            out += compare(a, b, name)
        elif a != b:
            out.append(Difference(name, "outcome", a if isinstance(a, str) else "answered",
                                  b if isinstance(b, str) else "answered"))
    return out


# -- generation ----------------------------------------------------------------------

_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
# Partition indexes: mostly the fixture's (0, 1) and just past them, sometimes anything.
_PARTITION = {"anyOf": [{"enum": [0, 1, 2, -1]}, _INT32]}


def _names(*names: str) -> JsonSchema:
    return {"anyOf": [{"enum": list(names)}, {"type": "string", "maxLength": 24}]}


def _delete_topics(schema: JsonSchema, topic: str) -> JsonSchema:
    # Only names no one uses (and random topic ids, which name no topic): deleting nothing.
    names = {"type": "string", "pattern": "^kc-fuzz-[a-z0-9]{0,10}$"}
    schema = narrow(schema, "topic_names", {"type": "array", "items": names, "maxItems": 2})
    return narrow(schema, "topics.*.name", {"anyOf": [{"type": "null"}, names]})


def _delete_records(schema: JsonSchema, topic: str) -> JsonSchema:
    # Only the DeleteRecords fixture (or names no one uses): what it deletes, it deletes alike on
    # both brokers. Its offsets are symbols (DELETE_OFFSET_PATHS).
    names = {"anyOf": [{"const": delete_topic(topic)},
                       {"type": "string", "pattern": "^kc-fuzz-[a-z0-9]{0,10}$"}]}
    schema = narrow(schema, "topics.*.name", names)
    return narrow(schema, "topics.*.partitions.*.partition_index", _PARTITION)


def _describe_log_dirs(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "topics.*.topic", _names(topic, delete_topic(topic)))
    return narrow(schema, "topics.*.partitions", {"type": "array", "items": _PARTITION, "maxItems": 3})


def _describe_producers(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "topics.*.name", _names(topic, delete_topic(topic)))
    return narrow(schema, "topics.*.partition_indexes",
                  {"type": "array", "items": _PARTITION, "maxItems": 3})


def _describe_topic_partitions(schema: JsonSchema, topic: str) -> JsonSchema:
    # Topics named (never "every topic": the two brokers hold other clients' topics, which a listing
    # and its cursor would show), the fixtures or not.
    names = _names(topic, delete_topic(topic))
    entry = {"type": "object", "properties": {"name": names}, "required": ["name"]}
    schema = narrow(schema, "topics", {"type": "array", "minItems": 1, "maxItems": 3, "items": entry})
    schema = narrow(schema, "response_partition_limit", _PARTITION)
    schema = narrow(schema, "cursor.topic_name", names)
    return narrow(schema, "cursor.partition_index", _PARTITION)


def _fetch_sessions(schema: JsonSchema, topic: str) -> JsonSchema:
    """Fetch with sessions that mean something: the fixture topic by name or id, its partitions,
    the session id the broker gave earlier in the sequence, the epochs that open, continue and
    close a session."""
    schema = narrow(schema, "session_id", {"anyOf": [{"enum": [SESSION_SYMBOL, 0]}, _INT32]})
    schema = narrow(schema, "session_epoch", {"anyOf": [{"enum": [-1, 0, 1, 2]}, _INT32]})
    topic_id = {"anyOf": [{"const": FIXTURE_TOPIC_ID}, {"type": "string", "pattern": UUID_PATTERN}]}
    for path in ("topics.*.topic_id", "forgotten_topics_data.*.topic_id"):
        schema = narrow(schema, path, topic_id)
    schema = narrow(schema, "topics.*.partitions.*.partition", _PARTITION)
    schema = narrow(schema, "forgotten_topics_data.*.topic", _names(topic))
    return narrow(schema, "forgotten_topics_data.*.partitions",
                  {"type": "array", "items": _PARTITION, "maxItems": 3})


def _targets() -> dict[int, tuple[Any, Callable[[dict[str, Any]], bool] | None]]:
    """The generated checks' narrowings, and those that only the comparison needs."""
    return {**TARGETS,
            ApiKey.ALTER_CONFIGS: (validate_only, None),
            ApiKey.DELETE_TOPICS: (_delete_topics, None),
            ApiKey.DELETE_RECORDS: (_delete_records, None),
            ApiKey.DESCRIBE_LOG_DIRS: (_describe_log_dirs, None),
            ApiKey.DESCRIBE_PRODUCERS: (_describe_producers, None),
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: (_describe_topic_partitions, None)}


def _narrowed(api_key: int, version: int, topic: str) -> tuple[JsonSchema, Callable[[dict[str, Any]], bool]]:
    narrowing, wants = _targets()[api_key]
    schema = narrowing(request_schema(api_key, version, max_string=24, max_bytes=24, max_items=2), topic)
    # Request timeouts long enough that no answer depends on how fast a broker is (a CreateTopics
    # with timeout 0 times out on Kafka's controller, say); Produce's stays short, acks=-1 waits it out.
    produce = api_key == ApiKey.PRODUCE
    schema = narrow(schema, "timeout", {"type": "integer", "minimum": 500 if produce else 10_000,
                                        "maximum": 1000 if produce else 30_000})
    schema = narrow(schema, "timeout_ms", {"type": "integer", "minimum": 10_000, "maximum": 30_000})
    # Consumers send replica_id -1; another id claims to be a follower broker, which Kafka answers
    # with UNKNOWN_SERVER_ERROR (there is no such broker): nothing to compare.
    schema = narrow(schema, "replica_id", {"enum": [-1]})
    # Isolation levels are 0 and 1; Kafka answers another with UNKNOWN_SERVER_ERROR
    # (IsolationLevel.forId throws): nothing to compare either.
    schema = narrow(schema, "isolation_level", {"enum": [0, 1]})
    if api_key == ApiKey.METADATA:
        # Apache Kafka 4.3.1 does not look topics up by id in Metadata (KIP-516 left it out): it
        # answers such a request with errors and no brokers. There is nothing to compare.
        schema = narrow(schema, "topics.*.topic_id", {"const": "00000000-0000-0000-0000-000000000000"})
    if api_key == ApiKey.FETCH:
        schema = _fetch_sessions(schema, topic)
    for path in OFFSET_PATHS.get(api_key, ()):
        schema = narrow(schema, path, _OFFSET_CHOICES)
    for path in DELETE_OFFSET_PATHS.get(api_key, ()):
        schema = narrow(schema, path, _DELETE_OFFSET_CHOICES)
    for path in TIMESTAMP_PATHS.get(api_key, ()):
        schema = narrow(schema, path, _TIMESTAMP_CHOICES)
    return schema, wants or (lambda _: True)


def _fetch_document(topic: str, session_id: int, epoch: int, offsets: Sequence[tuple[int, int]],
                    forgotten: Sequence[int] = ()) -> dict[str, Any]:
    """A Fetch of the fixture topic (by name and by symbolic id: each version keeps the field it
    has) at symbolic offsets, in session ``session_id`` at ``epoch``."""
    partitions = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                   "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                  for p, offset in offsets]
    named = {"topic": topic, "topic_id": FIXTURE_TOPIC_ID}
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{**named, "partitions": partitions}] if offsets else [],
            "forgotten_topics_data": [{**named, "partitions": list(forgotten)}] if forgotten else [],
            "rack_id": ""}


def session_scenarios(versions: Sequence[int], topic: str) -> list[list[Step]]:
    """Fetch sessions as consumers use them (KIP-227), sent to both brokers before the generated
    sequences: open a session, continue it, forget a partition, repeat or skip an epoch, close it and
    use it again, open one without partitions, mix topic ids and names; in the newest version with
    topic ids and the newest with names."""
    by_name = [v for v in versions if 7 <= v <= 12]
    by_id = [v for v in versions if v >= 13]
    first, end = -7_000_001, -7_000_004
    out: list[list[Step]] = []

    def step(version: int, session: int, epoch: int, offsets: Sequence[tuple[int, int]] = (),
             forgotten: Sequence[int] = ()) -> Step:
        return Step(ApiKey.FETCH, version, _fetch_document(topic, session, epoch, offsets, forgotten))

    for version in [*by_name[-1:], *by_id[-1:]]:
        out += [
            [step(version, 0, 0, [(0, first)]), step(version, SESSION_SYMBOL, 1),
             step(version, SESSION_SYMBOL, 2, forgotten=[0])],
            [step(version, 0, 0, [(0, end)]), step(version, SESSION_SYMBOL, 1, [(0, end)]),
             step(version, SESSION_SYMBOL, 1)],
            [step(version, 0, 0, [(0, first)]), step(version, SESSION_SYMBOL, -1, [(0, first)]),
             step(version, SESSION_SYMBOL, 1)],
            [step(version, 0, 0), step(version, SESSION_SYMBOL, 1)],
        ]
    if by_name and by_id:
        out.append([step(by_id[-1], 0, 0, [(0, first)]), step(by_name[-1], SESSION_SYMBOL, 1)])
    return out


def explained(differences: list[Difference], profile: Profile) -> tuple[list[Difference], dict[str, str]]:
    """(unexplained differences, explained signature -> excuse key) under ``profile``."""
    unexplained, excused = [], {}
    for d in differences:
        excuse = profile.field_excuse(d.path, d.subject, d.oracle)
        if excuse is None:
            unexplained.append(d)
        else:
            excused[d.signature] = excuse.key
    return unexplained, excused


def replay_document(subject: Side, oracle: Side, steps: Sequence[Step], differences: list[Difference],
                    topic: str = "") -> str:
    """A replay file: ``korvet conformance --replay FILE --bootstrap S --oracle K`` sends it again."""
    return json.dumps({
        "korvet_replay": 1,
        "about": "requests that answer differently on the broker under test and on Apache Kafka; "
                 "offsets -7000001..-7000005 stand for the fixture's first, second, third record, its end "
                 "and past its end, timestamps -8000001..-8000005 for its records' three timestamps, just "
                 "before and just after them, translated for each broker",
        "fixture_topic": topic,
        "differences": [d.describe() for d in differences[:10]],
        "steps": [s.to_json() for s in steps],
    }, indent=1, default=str)


@dataclass
class ApiOutcome:
    sequences: int = 0
    requests: int = 0
    signatures: dict[str, int] = field(default_factory=dict)  # unexplained difference -> how often
    excused: dict[str, str] = field(default_factory=dict)
    counterexample: str | None = None
    first: list[Difference] = field(default_factory=list)
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)


def explore(subject: Side, oracle: Side, api_key: int, versions: list[int], topic: str, profile: Profile,
            *, examples: int, explicit: Sequence[list[Step]] = ()) -> ApiOutcome:
    """Send the ``explicit`` sequences, then generate sequences for every version; on an unexplained
    difference, shrink it to a counterexample."""
    outcome = ApiOutcome()
    step_strategies = []
    for version in versions:
        schema, wants = _narrowed(api_key, version, topic)
        mutation = st.one_of(st.none(), st.tuples(st.sampled_from(["truncate", "append"]), st.integers(1, 6)))
        step_strategies.append(st.builds(
            lambda doc, mut, v=version, w=wants: Step(api_key, v, doc, mut, w(doc)),
            request_strategy(schema), mutation))
    sequences = st.lists(st.one_of(step_strategies), min_size=1, max_size=3)
    found: list[tuple[list[Step], list[Difference]]] = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=(Phase.explicit, Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
              print_blob=False, report_multiple_bugs=False)
    @given(sequences)
    def one(steps: list[Step]) -> None:
        results_subject = send_sequence(subject, steps)
        results_oracle = send_sequence(oracle, steps)
        outcome.sequences += 1
        outcome.requests += len(steps)
        unexplained, excused = explained(diff_outcomes(steps, results_subject, results_oracle), profile)
        outcome.excused.update(excused)
        if unexplained:
            for d in unexplained:
                outcome.signatures[d.signature] = outcome.signatures.get(d.signature, 0) + 1
                # One example of each kind of difference as generated (not shrunk), for the report.
                outcome.samples.setdefault(d.signature, {"difference": d.describe(),
                                                         "steps": [s.to_json() for s in steps]})
            found.append((steps, unexplained))
            raise AssertionError(unexplained[0].describe())

    for steps in reversed(explicit):
        one = example(steps)(one)
    try:
        one()
    except Exception:  # AssertionError, or Hypothesis' FlakyFailure when a broker answers unsteadily
        if not found:
            raise
        steps, differences = found[-1]  # the last failing example Hypothesis tried: the shrunk one
        outcome.first = differences
        outcome.counterexample = replay_document(subject, oracle, steps, differences, topic)
    return outcome


# -- as checks --------------------------------------------------------------------------

EXAMPLES_PER_API = 60
DIFFERENTIAL_SOURCE = ("Apache Kafka's answers to the same requests (the oracle); requests from Kafka's JSON "
                       "message specs via kio -> JSON Schema -> hypothesis-jsonschema")


def differential_checks(subject: Side, oracle: Side, profile: Profile, run_id: str,
                        examples: int = EXAMPLES_PER_API) -> tuple[list[Check], dict[str, str]]:
    """One check per API both brokers announce (``differential.<api>``), and the APIs left out with why."""
    targets = _targets()
    topic = f"kc-diff-{run_id}"
    state: dict[str, bool] = {}
    skipped: dict[str, str] = {}
    checks = []

    def ensure_fixture(check_name: str) -> None:
        if not state.get("ready"):
            stamps = fixture_timestamps()
            prepare_fixture(subject, check_name, run_id, topic, stamps)
            prepare_fixture(oracle, check_name, run_id, topic, stamps)
            state["ready"] = True

    for api_key in sorted(set(subject.apis.advertised) & set(oracle.apis.advertised)):
        name = api_name(api_key)
        versions = [v for v in subject.apis.usable(api_key) if v in oracle.apis.usable(api_key)]
        if api_key not in targets:
            skipped[name] = "no narrowing keeps its generated requests harmless on a shared broker"
            continue
        if not versions:
            skipped[name] = "no version both brokers announce"
            continue
        slug = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")

        def run(ctx: CheckContext, api_key: int = api_key, versions: list[int] = versions) -> None:
            ensure_fixture(ctx.check_name)
            started = time.monotonic()
            explicit = session_scenarios(versions, topic) if api_key == ApiKey.FETCH else []
            result = explore(subject, oracle, api_key, versions, topic, profile,
                             examples=max(examples, 4 * len(versions)), explicit=explicit)
            ctx.note("versions", versions)
            ctx.note("sequences", result.sequences)
            ctx.note("requests", result.requests)
            ctx.note("seconds", round(time.monotonic() - started, 1))
            if result.excused:
                ctx.note("explained_by_profile", result.excused)
            if result.counterexample is not None:
                ctx.note("unexplained", result.signatures)
                ctx.note("replay", result.counterexample)
                ctx.note("examples", result.samples)
                raise CheckFailed(f"{len(result.signatures)} unexplained differences from Kafka, first: "
                                  f"{result.first[0].describe()} (replay file in the report)")

        checks.append(Check(
            name=f"differential.{slug}", api=f"{name} ({api_key})", serial=True, timeout=300,
            asserts=f"Generated {name} request sequences (valid and malformed, versions "
                    f"{versions[0]}-{versions[-1]}) get the same outcome, error codes and response shape "
                    "from the broker under test as from Apache Kafka, apart from what legitimately differs.",
            source=DIFFERENTIAL_SOURCE, fn=run))
    return checks, skipped


def sides(subject: str, oracle: str) -> tuple[Side, Side]:
    return (Side("subject", subject, ApiTable(read_api_versions(subject))),
            Side("Apache Kafka", oracle, ApiTable(read_api_versions(oracle))))


def replay(path: str, subject_bootstrap: str, oracle_bootstrap: str, profile: Profile) -> tuple[str, bool]:
    """Send a replay file's steps to both brokers; (a report of both answers, no unexplained difference)."""
    import uuid

    data = json.loads(Path(path).read_text())
    steps = [Step.from_json(s) for s in data["steps"]]
    subject, oracle = sides(subject_bootstrap, oracle_bootstrap)
    run_id = uuid.uuid4().hex[:6]
    stamps = fixture_timestamps()
    for side in (subject, oracle):
        prepare_fixture(side, "differential.replay", run_id, f"kc-diff-{run_id}", stamps)
    # The requests named the fixture topic of the run that found them: name this run's instead.
    old_topic = data.get("fixture_topic")
    if old_topic:
        steps = [Step.from_json(json.loads(json.dumps(s.to_json()).replace(old_topic, f"kc-diff-{run_id}")))
                 for s in steps]
    got_subject, got_oracle = send_sequence(subject, steps), send_sequence(oracle, steps)
    unexplained, excused = explained(diff_outcomes(steps, got_subject, got_oracle), profile)
    lines = []
    for index, step in enumerate(steps):
        lines += [f"request {index + 1}: {api_name(step.api_key)} v{step.version}"
                  f"{' (malformed: ' + str(step.mutation) + ')' if step.mutation else ''}",
                  f"  subject: {_short(got_subject[index] if index < len(got_subject) else None, 2000)}",
                  f"  Kafka:   {_short(got_oracle[index] if index < len(got_oracle) else None, 2000)}"]
    lines.append(f"{len(unexplained)} unexplained differences" + (":" if unexplained else ""))
    lines += [f"  {d.describe()}" for d in unexplained]
    if excused:
        lines.append(f"explained by the profile: {excused}")
    return "\n".join(lines), not unexplained

