"""A Fetch request's partitions as the Fetch handler plans and fills them.

Its own module because two parts of the server hold them: the Fetch handler
(korvet/server/handlers/fetch.py) and the connection's read-ahead (korvet/server/connection.py,
korvet/server/read_ahead.py), which keeps a fetch prepared before its request arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from korvet.core import fetch_session as sessions
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicInfo
from korvet.protocol.fetch_response import RecordSet


@dataclass(slots=True)
class PartitionFetch:
    """One requested partition: what was asked, and what the response will say."""

    topic_key: Any  # the request's topic name or id, echoed in the response
    session_key: sessions.PartitionKey  # (topic name or id text, partition)
    topic: TopicInfo | None
    partition: int
    offset: int
    max_bytes: int
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    records: RecordSet | None = None
    taken: int = 0
    next_offset: int = -1  # after the last record returned; -1 when none
    leader_epoch: int = -1  # the request's current_leader_epoch for a dense topic (checked once read)
    committed: bool = False  # isolation_level read_committed: records end at the last stable offset
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] | None = None  # (producer id, first offset), read_committed
    last_fetched_epoch: int = -1  # v12+: the request's (-1: none)
    diverging: tuple[int, int] | None = None  # (epoch, end offset) where the fetcher's log parts

    @property
    def readable(self) -> bool:
        return self.topic is not None and self.error is ErrorCode.NONE


PreparedFetch = tuple[list[PartitionFetch], int]  # partitions filled in, record bytes
