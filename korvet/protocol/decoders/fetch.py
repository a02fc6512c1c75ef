"""Fetch (v4-18) as a ``FetchCall``: the limits, and what the request says about sessions.

Versions below 7 have no session fields (sessionless: session 0, final epoch), below 9 no
current leader epoch (-1: not checked), below 12 no last fetched epoch (-1: none), below 3
no response limit; from v13 topics are named
by id (their text keys the session's partitions) and ``forgotten_topics_data`` names ids too.
"""

from __future__ import annotations

from typing import Any

from korvet.core import fetch_session as sessions
from korvet.core.fetch import FetchCall, FetchLimits
from korvet.protocol.kbuild import has_field, millis, nested
from korvet.protocol.messages import FetchRequest


def decode_fetch(fetch: FetchRequest) -> FetchCall:
    request: Any = fetch  # any version: the layout says which fields it has
    layout = _layout(type(request))
    limits = FetchLimits.of(millis(request.max_wait), request.min_bytes,
                            request.max_bytes if layout.max_bytes else None)
    by_id = layout.by_id
    partitions = []
    for topic_entry in request.topics:
        key = str(topic_entry.topic_id) if by_id else topic_entry.topic
        for p in topic_entry.partitions:
            partitions.append(sessions.PartitionRequest(
                key, p.partition, p.fetch_offset, p.partition_max_bytes,
                p.current_leader_epoch if layout.leader_epochs else -1,
                p.last_fetched_epoch if layout.last_fetched else -1))
    if not layout.sessions:
        return FetchCall(limits, sessions.FetchRequested(
            sessions.INVALID_SESSION_ID, sessions.FINAL_EPOCH, by_id, tuple(partitions)))
    forgotten = tuple((str(t.topic_id) if by_id else t.topic, index)
                      for t in request.forgotten_topics_data or () for index in t.partitions)
    return FetchCall(limits, sessions.FetchRequested(
        request.session_id, request.session_epoch, by_id, tuple(partitions), forgotten))


def topic_name_of(topic: Any) -> str | None:
    """A request topic's name (None from v13, where it is named by id)."""
    return None if _topic_by_id(type(topic)) else str(topic.topic)


def topic_id_of(topic: Any) -> Any:
    """A request topic's id as kio read it (v13+), None when it is named."""
    return topic.topic_id if _topic_by_id(type(topic)) else None


class _Layout:
    """What a version of the request has, asked once per kio class."""

    __slots__ = ("by_id", "last_fetched", "leader_epochs", "max_bytes", "sessions")

    def __init__(self, cls: type[Any]) -> None:
        self.max_bytes = has_field(cls, "max_bytes")
        self.sessions = has_field(cls, "session_id")
        self.by_id = has_field(nested(cls, "FetchTopic"), "topic_id")
        self.leader_epochs = has_field(nested(cls, "FetchPartition"), "current_leader_epoch")
        self.last_fetched = has_field(nested(cls, "FetchPartition"), "last_fetched_epoch")


_LAYOUTS: dict[type[Any], _Layout] = {}
_BY_ID: dict[type[Any], bool] = {}  # per kio FetchTopic class: whether it names its topic by id


def _layout(cls: type[Any]) -> _Layout:
    found = _LAYOUTS.get(cls)
    if found is None:
        found = _LAYOUTS[cls] = _Layout(cls)
    return found


def _topic_by_id(cls: type[Any]) -> bool:
    found = _BY_ID.get(cls)
    if found is None:
        found = _BY_ID[cls] = has_field(cls, "topic_id")
    return found
