"""The classic group APIs and FindCoordinator as version-free values: the coordinator's
events (korvet/core/coordinator/events.py) where the request becomes one, else the frozen
values below.

What versions change in the requests, and what a version without a field means (Kafka's
meaning, so the coordinator never sees a version number):

- FindCoordinator: a key type from v1 (a group's before); several keys from v4 (one before).
- JoinGroup: a rebalance timeout from v1 (the session timeout before); a group instance id
  from v5; a known member id is required from v4; skipAssignment is understood from v9.
- SyncGroup: a group instance id from v3; the protocol type and name from v5, where Kafka
  requires both (``mandatory_protocol_present``).
- Heartbeat: a group instance id from v3.
- LeaveGroup: one member id until v2, several members from v3 (one leaves as a batch of one).
- OffsetCommit: a partition's leader epoch from v6 (-1 before); a group instance id from v7;
  an unknown group is GROUP_ID_NOT_FOUND from v9 (ILLEGAL_GENERATION before).
- OffsetFetch: one group until v7, several from v8 (``fetches_several_groups``).
- DescribeGroups: authorized operations on request from v3; an unknown group is an error from
  v6 (described as Dead before).
- ListGroups: a state filter from v4, a type filter from v5 (none before: every group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from korvet.core import coordinator as core
from korvet.protocol.kbuild import has_field, millis
from korvet.protocol.messages import (
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types


def _has(cls: type[Any], name: str) -> bool:
    """Whether kio's class has the field (cached per class and name)."""
    found = _FIELDS.get((cls, name))
    if found is None:
        found = _FIELDS[(cls, name)] = has_field(cls, name)
    return found


_FIELDS: dict[tuple[type[Any], str], bool] = {}


def _optional(request: Any, name: str, default: Any) -> Any:
    """A field some versions lack: its value, or ``default``, Kafka's meaning of its absence."""
    return getattr(request, name) if _has(type(request), name) else default


def _version(request: Any) -> int:
    return int(type(request).__version__)


# --- FindCoordinator ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FindCoordinatorCall:
    key_type: int  # as sent: a type Kafka does not have is refused
    keys: tuple[str, ...]
    several: bool  # v4+: the keys and their answers are lists; before, one at the top level


def decode_find_coordinator(request: FindCoordinatorRequest) -> FindCoordinatorCall:
    if fetches_several_keys(request):
        return FindCoordinatorCall(find_coordinator_key_type(request),
                                   tuple(_optional(request, "coordinator_keys", ()) or ()), True)
    return FindCoordinatorCall(find_coordinator_key_type(request),
                               (_optional(request, "key", ""),), False)


def find_coordinator_key_type(request: Any) -> int:
    return int(_optional(request, "key_type", GROUP_KEY))


def fetches_several_keys(request: Any) -> bool:
    """FindCoordinator v4+ (for the check point, which reads kio's request)."""
    return _has(type(request), "coordinator_keys")


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -------------------------------------------

def decode_join_group(request: JoinGroupRequest, *, request_id: int, client_id: str,
                      client_host: str, member_uuid: str) -> core.JoinGroup:
    """``member_uuid`` makes the member id a member without one is given."""
    version = _version(request)
    instance = _optional(request, "group_instance_id", None)
    return core.JoinGroup(
        request_id=request_id, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=instance, protocol_type=request.protocol_type,
        protocols=tuple(core.Protocol(p.name, p.metadata) for p in request.protocols),
        session_timeout_ms=millis(request.session_timeout),
        rebalance_timeout_ms=millis(_optional(request, "rebalance_timeout",
                                              request.session_timeout)),
        client_id=client_id, client_host=client_host,
        requires_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
        new_member_id=core.new_member_id(client_id, instance, member_uuid),
    )


def mandatory_protocol_present(request: SyncGroupRequest) -> bool:
    """Kafka's SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent: from v5 the protocol
    type and name are both required (a request without them is refused before the
    coordinator sees it)."""
    return _version(request) < 5 or (_optional(request, "protocol_type", None) is not None
                                     and _optional(request, "protocol_name", None) is not None)


def decode_sync_group(request: SyncGroupRequest, *, request_id: int) -> core.SyncGroup:
    return core.SyncGroup(
        request_id=request_id, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id", None),
        generation_id=request.generation_id,
        protocol_type=_optional(request, "protocol_type", None),
        protocol_name=_optional(request, "protocol_name", None),
        assignments=tuple(core.MemberAssignment(a.member_id, a.assignment)
                          for a in request.assignments),
    )


def decode_heartbeat(request: HeartbeatRequest, *, request_id: int) -> core.Heartbeat:
    return core.Heartbeat(
        request_id=request_id, group_id=request.group_id, member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id", None),
        generation_id=request.generation_id,
    )


def decode_leave_group(request: LeaveGroupRequest, *, request_id: int) -> core.LeaveGroup:
    shaped: Any = request
    if _has(type(request), "members"):
        members = tuple(core.MemberIdentity(m.member_id, m.group_instance_id)
                        for m in shaped.members)
    else:
        members = (core.MemberIdentity(shaped.member_id, None),)
    return core.LeaveGroup(request_id=request_id, group_id=request.group_id, members=members)


# --- OffsetCommit / OffsetFetch --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CommitTopic:
    name: str
    offsets: tuple[core.OffsetToCommit, ...]  # in request order, a partition named twice twice


@dataclass(frozen=True, slots=True)
class OffsetCommitCall:
    """An OffsetCommit request, whatever its version: the coordinator's ``OffsetCommit`` once
    the handler has kept the offsets of partitions that exist."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    topics: tuple[CommitTopic, ...]
    unknown_group_is_not_found: bool  # v9+

    def event(self, request_id: int, offsets: tuple[core.OffsetToCommit, ...]) -> core.OffsetCommit:
        return core.OffsetCommit(
            request_id=request_id, group_id=self.group_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id, generation_id=self.generation_id,
            offsets=offsets, unknown_group_is_not_found=self.unknown_group_is_not_found)


def decode_offset_commit(request: OffsetCommitRequest) -> OffsetCommitCall:
    return OffsetCommitCall(
        request.group_id, request.member_id, _optional(request, "group_instance_id", None),
        request.generation_id_or_member_epoch,
        tuple(CommitTopic(t.name, tuple(
            core.OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                                p.committed_metadata if p.committed_metadata is not None else "",
                                _optional(p, "committed_leader_epoch", -1))
            for p in t.partitions)) for t in request.topics),
        unknown_group_is_not_found=_version(request) >= 9)


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchedGroup:
    group_id: str
    topics: tuple[FetchedTopic, ...] | None  # None: every committed offset of the group


def decode_offset_fetch(request: OffsetFetchRequest) -> tuple[FetchedGroup, ...]:
    """The groups asked for: one until v7, several from v8."""
    shaped: Any = request
    if fetches_several_groups(request):
        return tuple(FetchedGroup(g.group_id, _fetched_topics(g.topics)) for g in shaped.groups)
    return (FetchedGroup(shaped.group_id, _fetched_topics(shaped.topics)),)


def _fetched_topics(topics: Any) -> tuple[FetchedTopic, ...] | None:
    if topics is None:
        return None
    return tuple(FetchedTopic(t.name, tuple(t.partition_indexes)) for t in topics)


def fetches_several_groups(request: Any) -> bool:
    """OffsetFetch v8+ (for the check point, which reads kio's request)."""
    return _has(type(request), "groups")


# --- DescribeGroups / ListGroups -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DescribeGroupsCall:
    groups: tuple[str, ...]
    include_authorized_operations: bool  # v3+
    unknown_group_is_error: bool  # v6+: GROUP_ID_NOT_FOUND; before, described as Dead


def decode_describe_groups(request: DescribeGroupsRequest) -> DescribeGroupsCall:
    return DescribeGroupsCall(
        tuple(request.groups),
        bool(_optional(request, "include_authorized_operations", False)),
        unknown_group_is_error=_version(request) >= 6)


@dataclass(frozen=True, slots=True)
class ListGroupsCall:
    states: tuple[str, ...]  # v4+; none: every state
    types: tuple[str, ...]  # v5+; none: every type


def decode_list_groups(request: ListGroupsRequest) -> ListGroupsCall:
    return ListGroupsCall(tuple(_optional(request, "states_filter", ()) or ()),
                          tuple(_optional(request, "types_filter", ()) or ()))
