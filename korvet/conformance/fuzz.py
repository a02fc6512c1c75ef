"""Generated requests: Hypothesis strategies from the JSON Schemas of ``schemas.py``.

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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from korvet.conformance.messages import build
from korvet.conformance.schemas import JsonSchema
from korvet.conformance.wire import ConnectionClosed, WireClient, WireError


def request_strategy(schema: JsonSchema) -> st.SearchStrategy[Any]:
    """A strategy for documents valid against ``schema`` (a ``schemas.py`` request schema)."""
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
    from korvet.conformance.messages import build_request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with WireClient(host, port, timeout=timeout) as client:
                response = client.call(build_request(18, 0))
            return int(response.error_code) == 0
        except (OSError, WireError):
            time.sleep(0.2)
    return False
