"""One JSON codec for the core's frozen dataclasses, driven by their type hints.

The coordinator's snapshot in Redis, the broker's event log and its replay all go
through ``encode``/``decode``: a dataclass's fields are written once, in its
definition, and nowhere else. Values map to JSON as follows:

- ``int``, ``str``, ``bool``, ``None`` as themselves; ``bytes`` as base64 text;
- an ``Enum`` by its value;
- ``tuple[X, ...]``, ``list[X]`` and ``frozenset[X]`` as lists (sets sorted);
- ``Mapping[K, V]`` as a list of ``[key, value]`` pairs (keys need not be strings);
- a dataclass as an object of its fields; where the type is a union of dataclasses
  (an event, an effect) the object carries ``"type": <class name>``.

Fields declared with ``metadata={"transient": True}`` (held-back request ids,
deadlines: they belong to one process and one clock) are left out when
``transient=False`` is asked, and take their defaults when read back.

``decode`` checks every value against the declared type and raises ``CodecError``
naming the path of the first value that does not fit, so a damaged snapshot is a
clear error, never a half-built state.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")

Json = Any  # what json.loads returns; the codec checks it against the declared types


class CodecError(ValueError):
    """A JSON value does not fit the type it is read as."""


def transient(default: Any = None) -> Any:
    """A dataclass field that is not part of a snapshot (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"transient": True})


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _dataclasses_in(tp: Any) -> list[type[Any]]:
    return [t for t in get_args(tp) if isinstance(t, type) and dataclasses.is_dataclass(t)]


def without_transients(value: T) -> T:
    """``value`` with every transient field, at any depth, back at its default (what a
    snapshot keeps of it)."""
    result: T = _strip(value)
    return result


def _strip(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            current = getattr(value, f.name)
            if f.metadata.get("transient"):
                if current != f.default:
                    changes[f.name] = f.default
                continue
            stripped = _strip(current)
            if stripped is not current:
                changes[f.name] = stripped
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, Mapping):
        items = {k: _strip(v) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    return value


def _item_types(tp: Any, count: int) -> list[Any]:
    """The declared type of each item of a sequence type: ``tuple[A, B]`` names each,
    ``tuple[A, ...]``, ``list[A]`` and ``frozenset[A]`` one for all."""
    args = get_args(tp)
    if get_origin(tp) is tuple and args and args[-1] is not Ellipsis:
        return list(args) if len(args) == count else [Any] * count
    return [args[0] if args else Any] * count


def encode(value: Any, *, transient: bool = True, tagged: bool = False) -> Json:
    """JSON-ready data for ``value``. ``tagged`` writes the class name of a dataclass (needed
    when it is read back as one member of a union)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = _hints(type(value))
        out: dict[str, Json] = {"type": type(value).__name__} if tagged else {}
        for f in dataclasses.fields(value):
            if not transient and f.metadata.get("transient"):
                continue
            out[f.name] = _encode_as(getattr(value, f.name), hints[f.name], transient)
        return out
    return _encode_as(value, type(value), transient)


def _encode_as(value: Any, tp: Any, transient: bool) -> Json:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        union = _is_union(tp) and len(_dataclasses_in(tp)) > 1
        return encode(value, transient=transient, tagged=union)
    args = get_args(tp)
    if isinstance(value, Mapping):
        key_type, value_type = args if len(args) == 2 else (Any, Any)
        return [[_encode_as(k, key_type, transient), _encode_as(v, value_type, transient)]
                for k, v in value.items()]
    if isinstance(value, frozenset | set):
        item_type = args[0] if args else Any
        return sorted((_encode_as(v, item_type, transient) for v in value), key=repr)
    if isinstance(value, tuple | list):
        return [_encode_as(v, t, transient) for v, t in zip(value, _item_types(tp, len(value)),
                                                             strict=True)]
    raise CodecError(f"cannot encode a {type(value).__name__}")


def decode(cls: type[T], data: Json, path: str = "$") -> T:
    """The ``cls`` value ``data`` describes (the inverse of ``encode``)."""
    value: T = _decode_as(cls, data, path)
    return value


def decode_any(tp: Any, data: Json, path: str = "$") -> Any:
    """``decode`` for a type that is not a class (a union such as the coordinator's Event)."""
    return _decode_as(tp, data, path)


def _decode_dataclass(cls: type[Any], data: Json, path: str) -> Any:
    if not isinstance(data, dict):
        raise CodecError(f"{path}: expected an object for {cls.__name__}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _decode_as(hints[f.name], data[f.name], f"{path}.{f.name}")
        elif not f.metadata.get("transient"):  # encode writes every other field
            raise CodecError(f"{path}: {cls.__name__} needs {f.name!r}")
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)} - {"type"}
    if unknown:
        raise CodecError(f"{path}: {cls.__name__} has no field {sorted(unknown)[0]!r}")
    return cls(**values)


def _decode_union(tp: Any, data: Json, path: str) -> Any:
    members = get_args(tp)
    if data is None and type(None) in members:
        return None
    classes = _dataclasses_in(tp)
    if len(classes) > 1:
        if not isinstance(data, dict):
            raise CodecError(f"{path}: expected a tagged object")
        by_name = {c.__name__: c for c in classes}
        chosen = by_name.get(str(data.get("type")))
        if chosen is None:
            raise CodecError(f"{path}: unknown type {data.get('type')!r}")
        return _decode_dataclass(chosen, data, path)
    rest = [m for m in members if m is not type(None)]
    if len(rest) == 1:
        return _decode_as(rest[0], data, path)
    raise CodecError(f"{path}: cannot decode the union {tp}")


def _decode_as(tp: Any, data: Json, path: str) -> Any:
    if tp is Any:
        return data
    if _is_union(tp):
        return _decode_union(tp, data, path)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, data, path)
    origin = get_origin(tp)
    if origin is None:
        return _decode_scalar(tp, data, path)
    args = get_args(tp)
    if not isinstance(data, list):
        raise CodecError(f"{path}: expected a list")
    if origin in (Mapping, dict) or (isinstance(origin, type) and issubclass(origin, Mapping)):
        key_type, value_type = args
        out = {}
        for i, pair in enumerate(data):
            if not isinstance(pair, list) or len(pair) != 2:
                raise CodecError(f"{path}[{i}]: expected a [key, value] pair")
            out[_decode_as(key_type, pair[0], f"{path}[{i}].key")] = \
                _decode_as(value_type, pair[1], f"{path}[{i}].value")
        return out
    if origin is tuple and args and args[-1] is not Ellipsis and len(args) != len(data):
        raise CodecError(f"{path}: expected {len(args)} items")
    items = [_decode_as(t, v, f"{path}[{i}]")
             for i, (v, t) in enumerate(zip(data, _item_types(tp, len(data)), strict=True))]
    if origin is frozenset:
        return frozenset(items)
    if origin is list:
        return items
    return tuple(items)


_PLAIN: dict[Any, tuple[Any, str]] = {
    type(None): (lambda d: d is None, "null"),
    bool: (lambda d: isinstance(d, bool), "true or false"),
    int: (lambda d: isinstance(d, int) and not isinstance(d, bool), "an integer"),
    str: (lambda d: isinstance(d, str), "a string"),
}


def _decode_scalar(tp: Any, data: Json, path: str) -> Any:
    plain = _PLAIN.get(tp)
    if plain is not None:
        fits, what = plain
        if not fits(data):
            raise CodecError(f"{path}: expected {what}")
        return data
    if tp is bytes:
        if not isinstance(data, str):
            raise CodecError(f"{path}: expected base64 text")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CodecError(f"{path}: not base64") from exc
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError as exc:
            raise CodecError(f"{path}: {data!r} is not a {tp.__name__}") from exc
    raise CodecError(f"{path}: cannot decode a {tp}")
