"""Generated requests: valid and boundary requests from JSON Schemas of Kafka's messages.

For each API, every version the broker advertises (and kio knows) gets requests
generated from its JSON Schema (``schemas.request_schema``, derived from kio's
classes, which kio generates from Kafka's JSON message specs) by
hypothesis-jsonschema: integer fields at and between their type's bounds, empty
and long strings, nulls where the field is nullable, empty and non-empty arrays.
Fields whose values would harm a shared broker are narrowed (``modes.fuzz.TARGETS``:
no topic auto-creation, validate-only admin calls, group ids under a prefix for
calls that change groups, a bounded fetch wait).

Each check asserts: every answer decodes as that API's response of that version
with the request's correlation id, within the time limit; the broker may close
a connection instead of answering a request it cannot process (Kafka does that,
for example, after a failed acks=0 produce), but never sends bytes that do not
decode; and afterwards it still answers ApiVersions on a new connection.
"""

from __future__ import annotations

from typing import Any

from korvet.conformance.harness.context import CheckContext, expect
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.schemas import api_name, request_schema
from korvet.conformance.modes.fuzz import TARGETS, broker_alive, exercise
from korvet.core.api_keys import ApiKey

EXAMPLES_PER_API = 120
MIN_PER_VERSION = 6
SOURCE = ("Kafka's JSON message specs (clients/src/main/resources/common/message) via kio's generated "
          "classes -> JSON Schema -> hypothesis-jsonschema")

# APIs whose generated requests name a topic: they get one of their own.
_WITH_TOPIC = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA,
                         ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                         ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                         ApiKey.DELETE_SHARE_GROUP_OFFSETS})


def _run(ctx: CheckContext, api_key: int) -> None:
    narrowing, wants = TARGETS[api_key]
    versions = ctx.apis.usable(api_key)
    expect(bool(versions), f"the broker does not advertise {api_name(api_key)} in a version kio knows")
    topic = Ops(ctx).create_topic(partitions=2).name if api_key in _WITH_TOPIC else "kc-fuzz-none"
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
