"""Kafka messages as plain values: build kio request dataclasses from dicts, and back.

kio generates one frozen dataclass per API version, with typed fields
(``timedelta`` for millisecond durations, ``uuid.UUID`` for topic ids, nested
entity classes for arrays of structs). The suite describes requests once, as
plain values, and builds them for whichever version it negotiated::

    build_request(ApiKey.JOIN_GROUP, 5, group_id="g", session_timeout=10_000, member_id="",
                  protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}])

Rules (the same ones turn a JSON document generated from ``schemas.py`` back into
a request): millisecond durations are ints, uuids are ``uuid.UUID`` or strings,
bytes may be a list of ints, arrays are lists, nested structs are dicts. Keys the
class has no field for are dropped (fields come and go between versions); a
missing field falls back to its default, and a missing field without one raises.

``to_plain`` goes the other way, for reports: a response becomes JSON-able data;
``error_name`` names an error code as Kafka does (``UNKNOWN_MEMBER_ID (25)``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode

from korvet.core.errors import ErrorCode

NoneType = type(None)


@dataclasses.dataclass(frozen=True, slots=True)
class FieldShape:
    """What one dataclass field holds, resolved once per class."""

    name: str
    kafka_type: str  # "int32", "string", ... ("" for nested entities)
    nullable: bool
    array: bool
    entity: type[Any] | None  # the nested dataclass, for struct fields
    has_default: bool
    tagged: bool


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


_SHAPES: dict[type[Any], tuple[FieldShape, ...]] = {}


def shapes(cls: type[Any]) -> tuple[FieldShape, ...]:
    """The fields of a kio entity class, in wire order."""
    cached = _SHAPES.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    result = []
    for f in dataclasses.fields(cls):
        tp, nullable = _unwrap_optional(hints[f.name])
        array = False
        if typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
            array = True
            tp, inner_nullable = _unwrap_optional(tp)
            nullable = nullable or inner_nullable
        entity = tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        result.append(FieldShape(
            name=f.name,
            kafka_type=str(f.metadata.get("kafka_type", "")),
            nullable=nullable,
            array=array,
            entity=entity,
            has_default=has_default,
            tagged="tag" in f.metadata,
        ))
    _SHAPES[cls] = tuple(result)
    return _SHAPES[cls]


class MessageError(ValueError):
    """Values that cannot become the requested message."""


def _scalar(shape: FieldShape, value: Any) -> Any:  # noqa: C901, PLR0912 -- one case per Kafka schema type
    if value is None:
        return None
    kind = shape.kafka_type
    if kind in ("timedelta_i32", "timedelta_i64"):
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=int(value))
    if kind == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if int(value) < 0:
            return None
        return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
    if kind == "error_code":
        return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))
    if kind == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if kind in ("bytes", "records"):
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        return bytes(int(b) for b in value)
    if kind == "bool":
        return bool(value)
    if kind == "float64":
        return float(value)
    if kind == "string":
        return str(value)
    return int(value)


def build(cls: type[Any], values: Mapping[str, Any]) -> Any:
    """An instance of kio entity ``cls`` from plain values (see the module docstring)."""
    kwargs: dict[str, Any] = {}
    for shape in shapes(cls):
        if shape.name not in values:
            if not shape.has_default:
                raise MessageError(f"{cls.__qualname__} v{getattr(cls, '__version__', '?')}: "
                                   f"field {shape.name!r} is required")
            continue
        value = values[shape.name]
        if value is None:
            kwargs[shape.name] = None
            continue
        if shape.array:
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise MessageError(f"{cls.__qualname__}.{shape.name}: expected a list, got {value!r}")
            if shape.entity is not None:
                kwargs[shape.name] = tuple(
                    item if dataclasses.is_dataclass(item) else build(shape.entity, item) for item in value
                )
            else:
                kwargs[shape.name] = tuple(_scalar(shape, item) for item in value)
        elif shape.entity is not None:
            kwargs[shape.name] = value if dataclasses.is_dataclass(value) else build(shape.entity, value)
        else:
            kwargs[shape.name] = _scalar(shape, value)
    return cls(**kwargs)


def build_request(api_key: int, version: int, **values: Any) -> Any:
    """A kio request of ``api_key`` at ``version`` from plain values."""
    return build(load_request_schema(api_key, version), values)


def response_type(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def to_plain(value: Any) -> Any:
    """A kio entity (or anything inside one) as JSON-able data: durations and times in ms."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return int(value.value) if isinstance(value.value, int) else str(value.value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return None if value.int == 0 else str(value)  # kio reads the zero uuid as None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return data.hex() if len(data) <= 64 else f"{data[:32].hex()}... ({len(data)} bytes)"
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return repr(value)


def error_name(code: int) -> str:
    """``NAME (code)`` for an error code, as Kafka's Errors enum spells it."""
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"
