"""Build kio response dataclasses for any API version from plain values.

kio generates one class per version, and fields come and go between versions
(``name`` becomes ``topic_id``, ``throttle_time`` appears, ...). ``make(cls,
**values)`` keeps the values the class has fields for and ignores the rest, and
converts plain numbers into the types kio's writers expect: ``ErrorCode`` for
error codes, ``timedelta`` for millisecond durations, ``datetime`` (or None for
-1) for millisecond timestamps. Handlers therefore describe a response once
and build it for whichever version the client asked.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from typing import Any, TypeVar

from kio.index import load_response_from_request
from kio.schema.errors import ErrorCode

T = TypeVar("T")

_PLAIN, _ERROR, _DELTA, _TIME = 0, 1, 2, 3
_UTC = datetime.UTC


_LAYOUTS: dict[type[Any], tuple[tuple[str, int, bool], ...]] = {}
_RESPONSES: dict[type[Any], type[Any]] = {}


def _layout(cls: type[Any]) -> tuple[tuple[str, int, bool], ...]:
    cached = _LAYOUTS.get(cls)
    if cached is not None:
        return cached
    layout = []
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        kind = {
            "error_code": _ERROR,
            "timedelta_i32": _DELTA,
            "timedelta_i64": _DELTA,
            "datetime_i64": _TIME,
        }.get(kafka_type, _PLAIN)
        has_default = (f.default is not dataclasses.MISSING or
                       f.default_factory is not dataclasses.MISSING)
        layout.append((f.name, kind, has_default))
    _LAYOUTS[cls] = tuple(layout)
    return _LAYOUTS[cls]


def _convert(kind: int, value: Any) -> Any:
    if kind == _ERROR:
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kind == _DELTA and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kind == _TIME and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    return value


def make(cls: type[T], **values: Any) -> T:
    kwargs: dict[str, Any] = {}
    for name, kind, has_default in _layout(cls):
        if name in values:
            kwargs[name] = _convert(kind, values[name])
        elif not has_default:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} needs a value for {name!r}")
    return cls(**kwargs)


def nested(cls: type[Any], name: str) -> type[Any]:
    """The version-specific nested class ``name`` from the module that defines ``cls``."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


def maybe_nested(cls: type[Any], name: str) -> type[Any] | None:
    """Like ``nested``, or None when this version has no such class."""
    found: type[Any] | None = getattr(sys.modules[cls.__module__], name, None)
    return found


def has_field(cls: type[Any], name: str) -> bool:
    return any(field_name == name for field_name, _, _ in _layout(cls))


def millis(value: Any) -> int:
    """Milliseconds from a kio timedelta/datetime/int field."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def response_type(request_type: type[Any]) -> type[Any]:
    """The response class of the same API and version as a kio request class."""
    found = _RESPONSES.get(request_type)
    if found is None:
        found = load_response_from_request(request_type)
        _RESPONSES[request_type] = found
    return found
