"""ListOffsets (v1-11) and OffsetForLeaderEpoch (v2-4) as version-free requests.

ListOffsets v1 has no isolation level (read_uncommitted) and v1-3 no current leader epoch
(-1: not checked); OffsetForLeaderEpoch v2-4 all carry the current leader epoch.
"""

from __future__ import annotations

from typing import Any

from korvet.core.list_offsets import (
    EpochPartition,
    EpochTopic,
    ListOffsetsCall,
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from korvet.protocol.kbuild import has_field, nested
from korvet.protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def decode_list_offsets(list_offsets: ListOffsetsRequest) -> ListOffsetsCall:
    request: Any = list_offsets  # any version: the class says which fields it has
    cls = type(request)
    epochs = has_field(nested(cls, "ListOffsetsPartition"), "current_leader_epoch")
    isolation = request.isolation_level if has_field(cls, "isolation_level") else READ_UNCOMMITTED
    return ListOffsetsCall(int(isolation), tuple(
        ListOffsetsTopic(topic.name, tuple(
            ListOffsetsPartition(p.partition_index, p.timestamp,
                                 p.current_leader_epoch if epochs else -1)
            for p in topic.partitions))
        for topic in request.topics))


def decode_offset_for_leader_epoch(request: OffsetForLeaderEpochRequest) -> tuple[EpochTopic, ...]:
    return tuple(
        EpochTopic(topic.topic, tuple(
            EpochPartition(p.partition, p.current_leader_epoch, p.leader_epoch)
            for p in topic.partitions))
        for topic in request.topics)
