"""The coordinator's outputs: replies and orders the adapter carries out, in order.

A step returns its effects as a tuple; the adapter performs them in that
order. Replies name the request they answer (``request_id``); a reply to a
held-back request is released by a later step than the one that received it.
"""

from __future__ import annotations

from dataclasses import dataclass

from korvet.core.coordinator.errors import ErrorCode
from korvet.core.coordinator.state import CommittedOffset, TopicPartition


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes  # the member's metadata for the selected protocol


@dataclass(frozen=True, slots=True)
class JoinGroupReply:
    request_id: int
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinGroupMember, ...] = ()  # the leader's reply lists every member
    skip_assignment: bool = False  # v9+


@dataclass(frozen=True, slots=True)
class SyncGroupReply:
    request_id: int
    member_id: str  # who asked (not on the wire; for the event log)
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    request_id: int
    member_id: str  # who asked (not on the wire; for the event log)
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupReply:
    """LeaveGroup v3+: top-level error and one result per member.

    For v0-v2 (one member, no per-member results) answer ``error`` if it is not
    NONE, else the single member's error.
    """

    request_id: int
    error: ErrorCode
    members: tuple[LeaveResult, ...]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitReply:
    request_id: int
    member_id: str  # who asked (not on the wire; for the event log)
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class PersistOffsets:
    """Write these committed offsets durably (Redis ``{ks}:{group:<groupId>}:commit:<topic>:<partition>``).

    The OffsetCommitReply that follows in the same step must not be sent
    before the write is durable. If the write fails, answer every partition
    of that reply with COORDINATOR_NOT_AVAILABLE instead (the client retries);
    the machine has already recorded the offsets, which is harmless: the
    client was not told they were committed, and a retry writes them again.
    ``generation_id`` and ``member_id`` are the commit's, for the event log.
    """

    group_id: str
    member_id: str
    generation_id: int
    offsets: tuple[tuple[TopicPartition, CommittedOffset], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteReply:
    request_id: int
    error: ErrorCode  # top level: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or NONE
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """Remove these committed offsets from Redis; the OffsetDeleteReply that follows in the
    same step must not be sent before."""

    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupResult:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsReply:
    request_id: int
    results: tuple[GroupResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupData:
    """Delete everything Redis holds for this group.

    That is its committed offsets (``{ks}:{group:<groupId>}:commit:*``) and its Redis
    consumer groups (XGROUP DESTROY on every stream). When done, step
    ``GroupDataDeleted(group_id)``; until then the group is Dead and answers
    COORDINATOR_NOT_AVAILABLE, so no new commit can race with the clean-up.
    """

    group_id: str


Reply = (JoinGroupReply | SyncGroupReply | HeartbeatReply | LeaveGroupReply | OffsetCommitReply
         | OffsetDeleteReply | DeleteGroupsReply)
Effect = Reply | PersistOffsets | DeleteOffsets | DeleteGroupData
