"""The coordinator's inputs. Each class is named after the spec action it models.

Requests carry an opaque ``request_id`` (the adapter's handle on the connection
and correlation id); every reply effect names the request it answers, whether
it is sent at once or held back (JoinGroup during a rebalance, SyncGroup until
the leader's assignment). Requests carry whatever the protocol version changes,
as plain fields, so core code never sees version numbers:

- JoinGroup v4+ requires a known member id (``requires_known_member_id``:
  a dynamic member without one gets MEMBER_ID_REQUIRED), v5+ may carry a
  ``group_instance_id``, v9+ understands ``skipAssignment``
  (``supports_skip_assignment``).
- SyncGroup v5+ carries ``protocol_type``/``protocol_name`` (None before).
- OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for an unknown group with a
  generation (``unknown_group_is_not_found``); earlier versions ILLEGAL_GENERATION.
- LeaveGroup v0-v2 carry one member id: send a batch of one.

Timeout events are what the adapter sends when a deadline of the state has
passed (see ``timers.due_timeouts``); a timeout whose deadline is not due, or
whose member is gone, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from korvet.core.coordinator.state import Protocol, TopicPartition


@dataclass(frozen=True, slots=True)
class JoinGroup:
    request_id: int
    group_id: str
    member_id: str  # "" for a member that has none yet
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    requires_known_member_id: bool  # JoinGroup v4+
    supports_skip_assignment: bool  # JoinGroup v9+
    new_member_id: str  # the id to hand out if this request needs one (see state.new_member_id)


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class SyncGroup:
    request_id: int
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None  # v5+
    protocol_name: str | None  # v5+
    assignments: tuple[MemberAssignment, ...]  # the leader's; followers send none


@dataclass(frozen=True, slots=True)
class Heartbeat:
    request_id: int
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str  # "" with a group_instance_id: remove that static member (admin)
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    request_id: int
    group_id: str
    members: tuple[MemberIdentity, ...]


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    request_id: int
    group_id: str
    member_id: str  # "" for a consumer outside group management
    group_instance_id: str | None
    generation_id: int  # -1 outside group management
    offsets: tuple[OffsetToCommit, ...]
    unknown_group_is_not_found: bool = False  # OffsetCommit v9+
    # KORVET: not a spec action here (spec/Transactions.tla has it: the group's `committed`).
    # The offsets of a committed transaction, applied when its marker reached the group:
    # stored whatever the group's members and generation (they were checked when the
    # producer sent them, TxnOffsetCommit), as Kafka's coordinator applies a commit marker.
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class OffsetDelete:
    """OffsetDelete (key 47). KORVET: not a spec action; spec/GroupCoordinator.tla does not
    model deleting offsets (nor offset retention)."""

    request_id: int
    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    """The adapter deleted a topic: every group forgets its committed offsets for it, as
    Kafka removes a deleted partition's offsets. KORVET: not a spec action."""

    topic: str


@dataclass(frozen=True, slots=True)
class DeleteGroups:
    request_id: int
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupDataDeleted:
    """The adapter has carried out DeleteGroupData: the group may be forgotten."""

    group_id: str


@dataclass(frozen=True, slots=True)
class SessionTimeout:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class PendingMemberTimeout:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class RebalanceTimeout:
    """The join phase's deadline (rebalance timeout or initial rebalance delay)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class PendingSyncTimeout:
    group_id: str


@dataclass(frozen=True, slots=True)
class Restart:
    """The broker (re)started from a snapshot: held-back requests are gone, timers re-armed."""


TimeoutEvent = SessionTimeout | PendingMemberTimeout | RebalanceTimeout | PendingSyncTimeout
RequestEvent = (JoinGroup | SyncGroup | Heartbeat | LeaveGroup | OffsetCommit | OffsetDelete
                | DeleteGroups)
Event = RequestEvent | TimeoutEvent | GroupDataDeleted | TopicDeleted | Restart


def group_of(event: Event) -> str | None:
    """The one group an event is about: None for an event about several (DeleteGroups) or
    about none in particular (TopicDeleted, Restart)."""
    if isinstance(event, DeleteGroups | TopicDeleted | Restart):
        return None
    return event.group_id
