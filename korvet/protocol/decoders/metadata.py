"""Metadata (v0-13) as a version-free value.

What versions change in the request: v0 asks for every topic with an empty list (null from
v1); v4 lets a client forbid auto-creation (allowed before); v8 asks for authorized
operations (the cluster's until v10, the topics'); v10 may name a topic by id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import MetadataRequest


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    name: str | None  # None: named by id, or by nothing (v10+, INVALID_REQUEST)
    topic_id: uuid.UUID | None  # v10+, None when the request sends the zero id or none


@dataclass(frozen=True, slots=True)
class MetadataCall:
    topics: tuple[MetadataTopic, ...] | None  # None: every topic
    allow_auto_topic_creation: bool
    include_cluster_authorized_operations: bool
    include_topic_authorized_operations: bool


def decode_metadata(request: MetadataRequest) -> MetadataCall:
    shaped: Any = request  # the fields versions add are asked for here, once
    fields = _fields(type(request))
    requested = request.topics
    every = requested is None or (type(request).__version__ == 0 and not requested)
    return MetadataCall(
        None if every or requested is None else tuple(_topic(t) for t in requested),
        bool(shaped.allow_auto_topic_creation) if "allow_auto_topic_creation" in fields else True,
        "include_cluster_authorized_operations" in fields
        and bool(shaped.include_cluster_authorized_operations),
        "include_topic_authorized_operations" in fields
        and bool(shaped.include_topic_authorized_operations))


def _topic(topic: Any) -> MetadataTopic:
    topic_id = topic.topic_id if has_field(type(topic), "topic_id") else None
    return MetadataTopic(topic.name, topic_id if topic_id is not None and topic_id.int != 0
                         else None)


_OPTIONAL = ("allow_auto_topic_creation", "include_cluster_authorized_operations",
             "include_topic_authorized_operations")
_FIELDS: dict[type[Any], frozenset[str]] = {}  # per kio class: which of _OPTIONAL it has


def _fields(cls: type[Any]) -> frozenset[str]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = frozenset(f for f in _OPTIONAL if has_field(cls, f))
    return found
