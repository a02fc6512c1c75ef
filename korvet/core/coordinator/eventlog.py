"""JSON for the coordinator's events and effects: the broker's event log, and its replay.

Events and effects are written by the one codec (korvet/core/codec.py) with their
class name (``"type"``), and read back into the same frozen values, so a log can be
re-run through ``step`` and its effects compared with the ones the broker wrote.
"""

from __future__ import annotations

from typing import Any

from korvet.core.codec import CodecError, decode_any, encode
from korvet.core.coordinator import effects, events

JsonValue = Any


def event_to_json(event: events.Event) -> JsonValue:
    return encode(event, tagged=True)


def effect_to_json(effect: effects.Effect) -> JsonValue:
    return encode(effect, tagged=True)


def event_from_json(data: JsonValue) -> events.Event:
    try:
        event: events.Event = decode_any(events.Event, data, "event")
    except CodecError as exc:
        raise ValueError(f"not a coordinator event: {exc}") from None
    return event


def effect_from_json(data: JsonValue) -> effects.Effect:
    try:
        effect: effects.Effect = decode_any(effects.Effect, data, "effect")
    except CodecError as exc:
        raise ValueError(f"not a coordinator effect: {exc}") from None
    return effect
