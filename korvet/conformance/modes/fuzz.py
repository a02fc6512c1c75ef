"""Generated requests: Hypothesis strategies from the JSON Schemas of ``kafka/schemas.py``.

``request_strategy(schema)`` walks a request's JSON Schema. Leaves (integers with
their type's range, strings, byte arrays, uuid patterns, enums, nulls) are handed
to hypothesis-jsonschema's ``from_schema``; objects and arrays are composed here
with ``fixed_dictionaries`` and ``lists``. (hypothesis-jsonschema 0.23.1 builds
object strategies with a Hypothesis internal that Hypothesis 6.170 no longer
has, so the composition is done on this side; the leaf semantics are still
hypothesis-jsonschema's, boundary values included.)

``exercise(...)`` sends generated requests to a broker and classifies each
answer: decoded, connection closed, or a protocol violation (an answer that does
not decode, a wrong correlation id, no answer in time).

``TARGETS`` names the APIs whose generated requests stay harmless on a shared broker,
each with the narrowing of its schema that keeps them so (no topic auto-creation,
validate-only admin calls, group ids under the ``kc-fuzz-`` prefix for calls that change
groups, a bounded fetch wait). The ``generated.*`` checks and the differential mode both
send only what these narrowings allow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from korvet.conformance.kafka.messages import build, build_request
from korvet.conformance.kafka.schemas import JsonSchema, narrow
from korvet.conformance.kafka.wire import ConnectionClosed, WireClient, WireError
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode


def request_strategy(schema: JsonSchema) -> st.SearchStrategy[Any]:
    """A strategy for documents valid against ``schema`` (a ``kafka/schemas.py`` request schema)."""
    if "anyOf" in schema:
        return st.one_of([request_strategy(arm) for arm in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        properties: dict[str, JsonSchema] = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {name: request_strategy(sub) for name, sub in properties.items() if name in required},
            optional={name: request_strategy(sub) for name, sub in properties.items()
                      if name not in required},
        )
    if kind == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type") == "object":
        return st.lists(request_strategy(schema["items"]), min_size=int(schema.get("minItems", 0)),
                        max_size=int(schema.get("maxItems", 4)))
    leaf = {k: v for k, v in schema.items() if k not in ("description", "title")}
    return from_schema(leaf)


@dataclass
class Outcome:
    version: int
    sent: int = 0
    answered: int = 0
    closed: int = 0
    errors: dict[int, int] = field(default_factory=dict)  # error codes seen at the top of answers
    violations: list[str] = field(default_factory=list)


def _top_error(response: Any) -> int | None:
    code = getattr(response, "error_code", None)
    return None if code is None else int(code)


def exercise(
    host: str,
    port: int,
    api_key: int,
    version: int,
    schema: JsonSchema,
    *,
    examples: int,
    timeout: float = 10.0,
    expect_response: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> Outcome:
    """Send ``examples`` generated requests (derandomized: the same ones every run) and classify
    the answers."""
    from kio.index import load_request_schema

    cls = load_request_schema(api_key, version)
    outcome = Outcome(version)
    conn: list[WireClient] = []

    def connection() -> WireClient:
        if not conn:
            conn.append(WireClient(host, port, client_id="korvet-conformance-fuzz", timeout=timeout))
        return conn[0]

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(request_strategy(schema))
    def one(document: dict[str, Any]) -> None:
        request = build(cls, document)
        outcome.sent += 1
        client = connection()
        wants_answer = expect_response(document)
        try:
            client.send(request, expect_response=wants_answer)
            if not wants_answer:
                return
            response = client.receive()
        except ConnectionClosed:
            outcome.closed += 1
            client.close()
            conn.clear()
            return
        except WireError as exc:
            if len(outcome.violations) < 5:
                outcome.violations.append(f"v{version} {exc} for {_short(document)}")
            client.close()
            conn.clear()
            return
        outcome.answered += 1
        code = _top_error(response)
        if code is not None:
            outcome.errors[code] = outcome.errors.get(code, 0) + 1

    try:
        one()
    finally:
        for c in conn:
            c.close()
    return outcome


def _short(document: dict[str, Any], limit: int = 300) -> str:
    text = repr(document)
    return text if len(text) <= limit else text[:limit] + "..."


def broker_alive(host: str, port: int, timeout: float = 10.0) -> bool:
    """The broker answers ApiVersions v0 on a new connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with WireClient(host, port, timeout=timeout) as client:
                response = client.call(build_request(ApiKey.API_VERSIONS, 0))
            return int(response.error_code) == ErrorCode.NONE
        except (OSError, WireError):
            time.sleep(0.2)
    return False


# -- what keeps generated requests harmless --------------------------------------

FUZZ_GROUP = {"type": "string", "pattern": "^kc-fuzz-[a-z0-9]{0,10}$"}
NO_WAIT = {"type": "integer", "minimum": 0, "maximum": 100}

Narrowing = Callable[[JsonSchema, str], JsonSchema]


def _topic_names(schema: JsonSchema, topic: str, *paths: str) -> JsonSchema:
    choice = {"anyOf": [{"const": topic}, {"type": "string", "maxLength": 300}]}
    for path in paths:
        schema = narrow(schema, path, choice)
    return schema


def _metadata(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "allow_auto_topic_creation", {"const": False})
    return _topic_names(schema, topic, "topics.*.name")


def _produce(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "timeout", {"type": "integer", "minimum": -1, "maximum": 1000})
    # Records are never null here: Apache Kafka 4.3.1 does not answer a Produce request whose
    # handling fails (records that do not parse) when another partition's records are null --
    # logging the request (ProduceRequest.toString -> partitionSizes) throws a
    # NullPointerException and the connection waits forever. Found by this generator.
    schema = narrow(schema, "topic_data.*.partition_data.*.records",
                    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255},
                     "maxItems": 40})
    return _topic_names(schema, topic, "topic_data.*.name")


def _fetch(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "max_wait", NO_WAIT)
    return _topic_names(schema, topic, "topics.*.topic")


def _list_offsets(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "timeout", {"type": "integer", "minimum": 0, "maximum": 1000})
    return _topic_names(schema, topic, "topics.*.name")


def _join(schema: JsonSchema, topic: str) -> JsonSchema:
    # A non-empty member id keeps every generated JoinGroup from parking in a rebalance.
    return narrow(schema, "member_id", {"type": "string", "minLength": 1, "maxLength": 40})


def _fuzz_group(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "group_id", FUZZ_GROUP)
    return _topic_names(schema, topic, "topics.*.name")


def _delete_groups(schema: JsonSchema, topic: str) -> JsonSchema:
    return narrow(schema, "groups_names", {"type": "array", "items": FUZZ_GROUP, "maxItems": 4})


def validate_only(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "validate_only", {"const": True})
    return narrow(schema, "timeout", {"type": "integer", "minimum": 0, "maximum": 1000})


def _offset_for_leader_epoch(schema: JsonSchema, topic: str) -> JsonSchema:
    return _topic_names(schema, topic, "topics.*.topic")


def _share_heartbeat(schema: JsonSchema, topic: str) -> JsonSchema:
    # a member that joins stays until its session ends: only in a group of the suite's own
    schema = narrow(schema, "group_id", FUZZ_GROUP)
    return narrow(schema, "subscribed_topic_names", {"anyOf": [
        {"type": "null"},
        {"type": "array", "maxItems": 3,
         "items": {"anyOf": [{"const": topic}, {"type": "string", "maxLength": 64}]}}]})


def _share_session(schema: JsonSchema, topic: str) -> JsonSchema:
    """ShareFetch, ShareAcknowledge: a group of the suite's own (acquisitions and
    acknowledgements change its share partitions) and a bounded wait."""
    schema = narrow(schema, "group_id", {"anyOf": [{"type": "null"}, FUZZ_GROUP]})
    return narrow(schema, "max_wait", NO_WAIT)


def _share_offsets(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "group_id", FUZZ_GROUP)
    return _topic_names(schema, topic, "topics.*.topic_name")


def _same(schema: JsonSchema, topic: str) -> JsonSchema:
    return schema


def _acks(document: dict[str, Any]) -> bool:
    return int(document.get("acks", -1)) != 0


# api key -> (narrowing, does a request expect an answer)
TARGETS: dict[int, tuple[Narrowing, Callable[[dict[str, Any]], bool] | None]] = {
    ApiKey.PRODUCE: (_produce, _acks),
    ApiKey.FETCH: (_fetch, None),
    ApiKey.LIST_OFFSETS: (_list_offsets, None),
    ApiKey.METADATA: (_metadata, None),
    ApiKey.OFFSET_COMMIT: (_fuzz_group, None),
    ApiKey.OFFSET_FETCH: (_same, None),
    ApiKey.FIND_COORDINATOR: (_same, None),
    ApiKey.JOIN_GROUP: (_join, None),
    ApiKey.HEARTBEAT: (_same, None),
    ApiKey.LEAVE_GROUP: (_same, None),
    ApiKey.SYNC_GROUP: (_same, None),
    ApiKey.DESCRIBE_GROUPS: (_same, None),
    ApiKey.LIST_GROUPS: (_same, None),
    ApiKey.API_VERSIONS: (_same, None),
    ApiKey.CREATE_TOPICS: (validate_only, None),
    ApiKey.INIT_PRODUCER_ID: (_same, None),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (_offset_for_leader_epoch, None),
    ApiKey.DESCRIBE_CONFIGS: (_same, None),
    ApiKey.CREATE_PARTITIONS: (validate_only, None),
    ApiKey.DELETE_GROUPS: (_delete_groups, None),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (validate_only, None),
    ApiKey.OFFSET_DELETE: (_fuzz_group, None),
    ApiKey.DESCRIBE_CLUSTER: (_same, None),
    ApiKey.SHARE_GROUP_HEARTBEAT: (_share_heartbeat, None),
    ApiKey.SHARE_GROUP_DESCRIBE: (_same, None),
    ApiKey.SHARE_FETCH: (_share_session, None),
    ApiKey.SHARE_ACKNOWLEDGE: (_share_session, None),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (_same, None),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (_share_offsets, None),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (_share_offsets, None),
}
