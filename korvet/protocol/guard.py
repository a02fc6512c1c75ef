"""Array counts of a request checked before kio reads it.

kio's native reader sizes an array's storage from the count on the wire before it reads the
entries: a request of a few dozen bytes announcing four billion entries made it ask for
tens of gigabytes, and a failed allocation aborts the process (Rust's handler), which no
Python ``except`` catches. Each request body is therefore walked first, by the same schema
kio reads it with, and an array whose entries cannot fit in the bytes left in the frame
(``count * smallest entry > bytes left``) makes the request malformed (``MalformedBody``), so
only the connection that sent it is closed.

The walk reads sizes and counts only, builds nothing, and stops quietly where the frame ends
early or holds something it does not know: kio reads fields in the same order and fails
there with its own error before it reaches any later array.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

# (buffer, position, end) -> the position after the value; raises _Short where the frame
# ends (or a length is negative where it may not be) and MalformedBody for an impossible count.
Skim = Callable[[memoryview, int, int], int]
Step = int | Skim  # a fixed number of bytes to skip, or a walk

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
          "int64": 8, "uint64": 8, "float64": 8, "uuid": 16, "error_code": 2,
          "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedBody(ValueError):
    """An array announces more entries than the rest of the frame can hold, or a field the
    schema says cannot be null was sent as null (Kafka: "non-nullable field ... was
    serialized as null", and the connection is closed)."""


class _Short(Exception):
    """The frame ends, or holds a value the walk does not follow: kio reports it."""


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # one byte: most lengths and counts
        return buf[pos], pos + 1
    value = shift = 0
    while True:
        if pos >= end or shift > 28:
            raise _Short
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _int(fmt: struct.Struct, buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos + fmt.size > end:
        raise _Short
    return fmt.unpack_from(buf, pos)[0], pos + fmt.size


def _sized(kind: str, flexible: bool, name: str, nullable: bool) -> Skim:
    """A string or bytes: compact (uvarint length + 1, 0 for null) when flexible, else an
    int16 (string) or int32 (bytes, records) length, -1 for null."""
    if flexible:
        def compact(buf: memoryview, pos: int, end: int) -> int:
            length, pos = _uvarint(buf, pos, end)
            if length == 0 and not nullable:
                raise _null(name)
            return pos + max(length - 1, 0)
        return compact
    fmt = _I16 if kind == "string" else _I32

    def legacy(buf: memoryview, pos: int, end: int) -> int:
        length, pos = _int(fmt, buf, pos, end)
        if length < 0 and not nullable:
            raise _null(name)
        return pos + max(length, 0)
    return legacy


def _null(name: str) -> MalformedBody:
    return MalformedBody(f"non-nullable field {name} was serialized as null")


def _array(item: Step, smallest: int, flexible: bool, name: str, nullable: bool) -> Skim:
    """An array of ``item`` (a fixed size, or a walk), at least ``smallest`` bytes each."""
    def skim(buf: memoryview, pos: int, end: int) -> int:
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            count -= 1
        else:
            count, pos = _int(_I32, buf, pos, end)
        if count < 0 and not nullable:
            raise _null(name)
        if count <= 0:
            return pos
        if pos > end:
            raise _Short
        if count * smallest > end - pos:
            raise MalformedBody(f"array {name} announces {count} entries, more than the "
                             f"{end - pos} bytes left in the request can hold")
        if isinstance(item, int):
            return pos + count * item
        for _ in range(count):
            pos = item(buf, pos, end)
            if pos > end:
                raise _Short
        return pos
    return skim


def _nullable(entity: Skim) -> Skim:
    def skim(buf: memoryview, pos: int, end: int) -> int:
        marker, pos = _int(_I8, buf, pos, end)
        return pos if marker < 0 else entity(buf, pos, end)
    return skim


_I8 = struct.Struct(">b")


def _field(field: dataclasses.Field[Any], flexible: bool, tagged: bool) -> tuple[Step, int]:
    """The field's walk (a number of bytes for a fixed-size field) and its smallest size on
    the wire."""
    kind = field.metadata.get("kafka_type")
    shape = classify_field(field)
    name = field.name
    # a tagged field is absent rather than null; the header's client_id is read apart
    nullable = tagged or is_optional(field)
    if isinstance(shape, PrimitiveField | PrimitiveTupleField):
        assert isinstance(kind, str)
        size = _FIXED.get(kind)
        array = isinstance(shape, PrimitiveTupleField)
        item: Step = (size if size is not None
                      else _sized(kind, flexible, name, nullable and not array))
        smallest = size if size is not None else (1 if flexible else (2 if kind == "string" else 4))
        if array:
            return _array(item, smallest, flexible, name, nullable), (1 if flexible else 4)
        return item, smallest
    assert isinstance(shape, EntityField | EntityTupleField)
    entity, smallest = _entity(shape.type_)
    if isinstance(shape, EntityTupleField):
        return (_array(entity, max(smallest, 1), flexible, name, nullable),
                (1 if flexible else 4))
    if is_optional(field) and not tagged:
        return _nullable(entity), 1
    return entity, smallest


def _coalesced(fields: list[Step]) -> list[Step]:
    """The walk's steps: each run of fixed-size fields as its total size."""
    steps: list[Step] = []
    for step in fields:
        if isinstance(step, int) and steps and isinstance(steps[-1], int):
            steps[-1] += step
        else:
            steps.append(step)
    return steps


@cache
def _entity(entity_type: type[Any]) -> tuple[Skim, int]:
    flexible = bool(entity_type.__flexible__)
    plain: list[Step] = []
    tagged: dict[int, Skim] = {}  # fixed-size tagged fields need no walk: their size is sent
    smallest = 1 if flexible else 0
    for field in dataclasses.fields(entity_type):
        tag = field.metadata.get("tag")
        skim, size = _field(field, flexible, tag is not None)
        if tag is None:
            plain.append(skim)
            smallest += size
        elif not isinstance(skim, int):
            tagged[int(tag)] = skim

    steps = _coalesced(plain)

    def walk(buf: memoryview, pos: int, end: int) -> int:
        for step in steps:  # a run of fixed-size fields is one number of bytes to skip
            pos = pos + step if step.__class__ is int else step(buf, pos, end)  # type: ignore[operator]
        if pos > end:
            raise _Short
        if not flexible:
            return pos
        if pos < end and buf[pos] == 0:  # no tagged fields: the usual case
            return pos + 1
        count, pos = _uvarint(buf, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if pos + size > end:
                raise _Short
            known = tagged.get(tag)
            if known is not None:
                known(buf, pos, pos + size)
            pos += size
        return pos
    return walk, smallest


@cache
def _request(api_key: int, api_version: int) -> Skim:
    return _entity(load_request_schema(api_key, api_version))[0]


def body_end(api_key: int, api_version: int, frame: memoryview, body_start: int) -> int | None:
    """Where the request body that starts at ``body_start`` ends, by the walk; None where
    the walk stops early (the frame ends, or holds what kio will refuse). Raises MalformedBody
    if an array announces more entries than the frame can hold."""
    try:
        end = _request(api_key, api_version)(frame, body_start, len(frame))
    except _Short:
        return None
    return end if end <= len(frame) else None


def check_counts(api_key: int, api_version: int, frame: memoryview, body_start: int) -> None:
    """Raise MalformedBody if an array of the request body announces more entries than the
    frame can hold; say nothing of anything else (kio's reader does)."""
    body_end(api_key, api_version, frame, body_start)
