"""JSON for the coordinator's events and effects: the broker's event log, and its replay.

Every dataclass is written as ``{"type": <class name>, <field>: <value>, ...}``;
bytes as ``{"b64": ...}``; enums by value; tuples and sets as lists; mappings as
``{"map": [[key, value], ...]}``. Events read back into the same frozen values, so
a log can be re-run through ``step`` (``korvet spec replay``) and its effects
compared with the ones the broker wrote.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any

from korvet.core.coordinator import effects, events, state

JsonValue = Any

_CLASSES: dict[str, type[Any]] = {
    cls.__name__: cls
    for module in (events, effects, state)
    for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls)
}


def to_json(value: object) -> JsonValue:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        encoded: dict[str, JsonValue] = {"type": type(value).__name__}
        for field in dataclasses.fields(value):
            encoded[field.name] = to_json(getattr(value, field.name))
        return encoded
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {"map": [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted(to_json(v) for v in value)
    return value


def from_json(data: JsonValue) -> Any:
    if isinstance(data, list):
        return tuple(from_json(v) for v in data)
    if isinstance(data, dict):
        if "b64" in data and len(data) == 1:
            return base64.b64decode(data["b64"])
        if "map" in data and len(data) == 1:
            return {from_json(k): from_json(v) for k, v in data["map"]}
        cls = _CLASSES.get(str(data.get("type")))
        if cls is None:
            raise ValueError(f"unknown type in event log: {data.get('type')!r}")
        values = {k: from_json(v) for k, v in data.items() if k != "type"}
        return cls(**values)
    return data


def event_to_json(event: events.Event) -> JsonValue:
    return to_json(event)


def effect_to_json(effect: effects.Effect) -> JsonValue:
    return to_json(effect)


def event_from_json(data: JsonValue) -> events.Event:
    event = from_json(data)
    if not isinstance(event, events.JoinGroup | events.SyncGroup | events.Heartbeat
                      | events.LeaveGroup | events.OffsetCommit | events.OffsetDelete
                      | events.DeleteGroups | events.TopicDeleted
                      | events.GroupDataDeleted | events.SessionTimeout
                      | events.PendingMemberTimeout | events.RebalanceTimeout
                      | events.PendingSyncTimeout | events.Restart):
        raise ValueError(f"not a coordinator event: {type(event).__name__}")
    return event
