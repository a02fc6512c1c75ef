"""Generated requests: valid and boundary requests from JSON Schemas of Kafka's messages.

For each API, every version the broker advertises (and kio knows) gets requests
generated from its JSON Schema (``schemas.request_schema``, derived from kio's
classes, which kio generates from Kafka's JSON message specs) by
hypothesis-jsonschema: integer fields at and between their type's bounds, empty
and long strings, nulls where the field is nullable, empty and non-empty arrays.
Fields whose values would harm a shared broker are narrowed (no topic
auto-creation, validate-only admin calls, group ids under a prefix for calls
that change groups, a bounded fetch wait).

Each check asserts: every answer decodes as that API's response of that version
with the request's correlation id, within the time limit; the broker may close
a connection instead of answering a request it cannot process (Kafka does that,
for example, after a failed acks=0 produce), but never sends bytes that do not
decode; and afterwards it still answers ApiVersions on a new connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from korvet.conformance.context import CheckContext, expect
from korvet.conformance.fuzz import broker_alive, exercise
from korvet.conformance.ops import Ops
from korvet.conformance.registry import check
from korvet.conformance.schemas import JsonSchema, api_name, narrow, request_schema

EXAMPLES_PER_API = 120
MIN_PER_VERSION = 6
SOURCE = ("Kafka's JSON message specs (clients/src/main/resources/common/message) via kio's generated "
          "classes -> JSON Schema -> hypothesis-jsonschema")

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


def _validate_only(schema: JsonSchema, topic: str) -> JsonSchema:
    schema = narrow(schema, "validate_only", {"const": True})
    return narrow(schema, "timeout", {"type": "integer", "minimum": 0, "maximum": 1000})


def _offset_for_leader_epoch(schema: JsonSchema, topic: str) -> JsonSchema:
    return _topic_names(schema, topic, "topics.*.topic")


def _same(schema: JsonSchema, topic: str) -> JsonSchema:
    return schema


def _acks(document: dict[str, Any]) -> bool:
    return int(document.get("acks", -1)) != 0


# api key -> (narrowing, does a request expect an answer)
TARGETS: dict[int, tuple[Narrowing, Callable[[dict[str, Any]], bool] | None]] = {
    0: (_produce, _acks),
    1: (_fetch, None),
    2: (_list_offsets, None),
    3: (_metadata, None),
    8: (_fuzz_group, None),
    9: (_same, None),
    10: (_same, None),
    11: (_join, None),
    12: (_same, None),
    13: (_same, None),
    14: (_same, None),
    15: (_same, None),
    16: (_same, None),
    18: (_same, None),
    19: (_validate_only, None),
    22: (_same, None),
    23: (_offset_for_leader_epoch, None),
    32: (_same, None),
    37: (_validate_only, None),
    42: (_delete_groups, None),
    44: (_validate_only, None),
    47: (_fuzz_group, None),
    60: (_same, None),
}


def _run(ctx: CheckContext, api_key: int) -> None:
    narrowing, wants = TARGETS[api_key]
    versions = ctx.apis.usable(api_key)
    expect(bool(versions), f"the broker does not advertise {api_name(api_key)} in a version kio knows")
    topic = Ops(ctx).create_topic(partitions=2).name if api_key in (0, 1, 2, 3, 8, 23) else "kc-fuzz-none"
    per_version = max(MIN_PER_VERSION, EXAMPLES_PER_API // len(versions))
    summary: dict[str, Any] = {}
    violations: list[str] = []
    totals = {"sent": 0, "answered": 0, "closed": 0}
    for version in versions:
        schema = narrowing(request_schema(api_key, version, max_string=40, max_bytes=40, max_items=3), topic)
        outcome = exercise(ctx.host, ctx.port, api_key, version, schema, examples=per_version,
                           expect_response=wants or (lambda _: True))
        summary[f"v{version}"] = {"sent": outcome.sent, "answered": outcome.answered,
                                  "closed": outcome.closed, "top_level_errors": outcome.errors}
        violations += outcome.violations
        for key in totals:
            totals[key] += getattr(outcome, key)
    ctx.note("per_version", summary)
    ctx.note("totals", totals)
    first = violations[0] if violations else ""
    expect(not violations, f"{len(violations)} answers broke the protocol: {first}",
           violations=violations)
    expect(broker_alive(ctx.host, ctx.port),
           "the broker no longer answers ApiVersions after the generated requests")
    expect(totals["answered"] > 0, "no generated request was answered")


def _register(api_key: int) -> None:
    name = api_name(api_key)
    slug = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    check(f"generated.{slug}", api=f"Generated requests ({name})", serial=True, timeout=240,
          asserts=f"Valid and boundary {name} requests generated from the JSON Schema of every advertised "
                  "version are each answered with a response that decodes (or the connection is closed), "
                  "and the broker keeps serving.",
          source=SOURCE)(lambda ctx: _run(ctx, api_key))


for _key in TARGETS:
    _register(_key)
