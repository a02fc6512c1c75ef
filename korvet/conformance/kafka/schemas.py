"""JSON Schemas of Kafka requests, derived from kio's generated message classes.

kio generates one frozen dataclass per message version from Kafka's own JSON
message specs (``clients/src/main/resources/common/message/*.json``), keeping each
field's wire type in ``field.metadata["kafka_type"]``. ``request_schema(api_key,
version)`` turns that into a JSON Schema (draft 7 subset) that accepts exactly the
values that can be encoded at that version:

=================  ============================================================
kafka type         JSON Schema
=================  ============================================================
int8/16/32/64      integer within the type's range; uint16: 0..65535
float64            number
bool               boolean
string             string (nullable: or null); length bounded by ``max_string``
bytes, records     array of 0..255 integers (nullable: or null)
uuid               string matching the canonical uuid pattern
timedelta_i32/64   integer milliseconds within the type's range
datetime_i64       integer milliseconds since the epoch (nullable: or null)
error_code         one of Kafka's error codes (korvet.core.errors)
struct             object with every field required (fields with a default are
                   optional), no other properties
array              array (nullable: or null) of at most ``max_items`` items
=================  ============================================================

``messages.build(cls, document)`` turns a document that validates into the kio
request, so hypothesis-jsonschema can generate requests (``modes/fuzz.py``). Schemas
can be narrowed with ``narrow(schema, "topics.*.name", {...})`` where a field's
values must stay harmless (no topic auto-creation on a shared broker, say).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from functools import cache
from typing import Any

from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.static.primitive import i64_timedelta_max, i64_timedelta_min

from korvet.conformance.kafka.messages import FieldShape, shapes
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

JsonSchema = dict[str, Any]
_MS = datetime.timedelta(milliseconds=1)

UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

_INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "timedelta_i32": (-(2**31), 2**31 - 1),
    # kio carries these as datetime.timedelta, whose range is narrower than int64 ms
    "timedelta_i64": (i64_timedelta_min // _MS, i64_timedelta_max // _MS),
    "datetime_i64": (0, 253_402_300_799_000),  # up to 9999-12-31
}


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``JoinGroup``); ``api N`` for a key Kafka does not have."""
    try:
        return ApiKey(api_key).kafka_name
    except ValueError:
        return f"api {api_key}"


@cache
def kio_request_versions(api_key: int) -> tuple[int, ...]:
    name = api_key_map.get(api_key)
    if name is None:
        return ()
    return tuple(sorted(v for v, kinds in schema_name_map[name].items() if EntityType.request in kinds))


def _nullable(schema: JsonSchema, nullable: bool) -> JsonSchema:
    return {"anyOf": [{"type": "null"}, schema]} if nullable else schema


def _scalar_schema(shape: FieldShape, max_string: int, max_bytes: int) -> JsonSchema:
    kind = shape.kafka_type
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return {"type": "integer", "minimum": lo, "maximum": hi}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "float64":
        return {"type": "number", "minimum": -1e300, "maximum": 1e300}
    if kind == "string":
        return {"type": "string", "maxLength": max_string}
    if kind in ("bytes", "records"):
        return {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255},
                "maxItems": max_bytes}
    if kind == "uuid":
        return {"type": "string", "pattern": UUID_PATTERN}
    if kind == "error_code":
        return {"enum": sorted(int(code) for code in ErrorCode)}
    raise ValueError(f"field {shape.name!r}: no JSON Schema for kafka type {kind!r}")


def entity_schema(cls: type[Any], *, max_string: int = 64, max_bytes: int = 64,
                  max_items: int = 4) -> JsonSchema:
    """The JSON Schema of one kio entity class (request, nested struct or header)."""
    properties: dict[str, JsonSchema] = {}
    required: list[str] = []
    for shape in shapes(cls):
        if shape.entity is not None:
            inner = entity_schema(shape.entity, max_string=max_string, max_bytes=max_bytes,
                                  max_items=max_items)
        else:
            inner = _scalar_schema(shape, max_string, max_bytes)
        if shape.array:
            schema = _nullable({"type": "array", "items": inner, "maxItems": max_items}, shape.nullable)
        else:
            # uuid fields are Optional in kio (None encodes as the zero uuid), not nullable on the wire
            schema = _nullable(inner, shape.nullable and shape.kafka_type != "uuid")
        schema["description"] = f"{shape.kafka_type or 'struct'}{' (tagged)' if shape.tagged else ''}"
        properties[shape.name] = schema
        if not shape.has_default:
            required.append(shape.name)
    return {
        "type": "object",
        "title": f"{cls.__qualname__} v{getattr(cls, '__version__', '?')}",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def request_schema(api_key: int, version: int, **bounds: int) -> JsonSchema:
    """The JSON Schema of a request body (see the module docstring for ``bounds``)."""
    schema = entity_schema(load_request_schema(api_key, version), **bounds)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema


def _children(schema: JsonSchema) -> list[JsonSchema]:
    """The schemas a path step can enter: itself and the non-null arms of an anyOf."""
    if "anyOf" in schema:
        return [arm for arm in schema["anyOf"] if arm.get("type") != "null"]
    return [schema]


def narrow(schema: JsonSchema, path: str, replacement: JsonSchema | None) -> JsonSchema:
    """A copy of ``schema`` with the field at ``path`` replaced (``None``: the field removed).

    ``path`` is dotted field names; ``*`` steps into array items: ``topics.*.partitions.*.index``.
    A path that does not exist in this version is ignored, so one narrowing serves all versions.
    """
    result = copy.deepcopy(schema)
    steps = path.split(".")

    def walk(node: JsonSchema, rest: list[str]) -> None:
        for arm in _children(node):
            step = rest[0]
            if step == "*":
                if arm.get("type") == "array" and isinstance(arm.get("items"), dict):
                    if len(rest) == 1:
                        raise ValueError("a path cannot end in '*'")
                    walk(arm["items"], rest[1:])
                continue
            props = arm.get("properties")
            if not isinstance(props, dict) or step not in props:
                continue
            if len(rest) == 1:
                if replacement is None:
                    del props[step]
                    arm["required"] = [r for r in arm.get("required", []) if r != step]
                else:
                    props[step] = copy.deepcopy(replacement)
            else:
                walk(props[step], rest[1:])

    walk(result, steps)
    return result


def field_kinds(cls: type[Any]) -> dict[str, str]:
    """``{field: kafka_type}`` of a kio class, for documentation and tests."""
    return {f.name: str(f.metadata.get("kafka_type", "struct")) for f in dataclasses.fields(cls)}
