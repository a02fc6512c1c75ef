"""The group coordinator of Kafka's classic consumer-group protocol, as a pure machine.

``step(state, event, now_ms) -> (state, effects)``; spec: spec/GroupCoordinator.tla;
names and tests: spec/README.md; for implementers: docs/spec/group-coordinator.md.
"""

from korvet.core.coordinator.effects import (
    DeleteGroupData,
    DeleteGroupsReply,
    DeleteOffsets,
    Effect,
    GroupResult,
    HeartbeatReply,
    JoinGroupMember,
    JoinGroupReply,
    LeaveGroupReply,
    LeaveResult,
    OffsetCommitReply,
    OffsetDeleteReply,
    PartitionResult,
    PersistOffsets,
    Reply,
    SyncGroupReply,
)
from korvet.core.coordinator.errors import ErrorCode
from korvet.core.coordinator.events import (
    DeleteGroups,
    Event,
    GroupDataDeleted,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    MemberAssignment,
    MemberIdentity,
    OffsetCommit,
    OffsetDelete,
    OffsetToCommit,
    PendingMemberTimeout,
    PendingSyncTimeout,
    RebalanceTimeout,
    RequestEvent,
    Restart,
    SessionTimeout,
    SyncGroup,
    TimeoutEvent,
    TopicDeleted,
    group_of,
)
from korvet.core.coordinator.machine import step
from korvet.core.coordinator.queries import (
    DescribedMember,
    GroupDescription,
    ListedGroup,
    describe_group,
    expired_groups,
    list_groups,
    offset_fetch,
    removable_groups,
)
from korvet.core.coordinator.snapshot import (
    SnapshotError,
    from_snapshot,
    group_snapshot,
    read_group,
    to_snapshot,
)
from korvet.core.coordinator.state import (
    CommittedOffset,
    Config,
    CoordinatorState,
    Group,
    GroupState,
    LeaderSync,
    Member,
    PendingMember,
    Protocol,
    TopicPartition,
    initial_state,
    new_member_id,
)
from korvet.core.coordinator.timers import due_timeouts, next_deadline

__all__ = [
    "CommittedOffset", "Config", "CoordinatorState", "DeleteGroupData", "DeleteGroups",
    "DeleteGroupsReply", "DeleteOffsets", "DescribedMember", "Effect", "ErrorCode", "Event", "Group",
    "GroupDataDeleted", "GroupDescription", "GroupResult", "GroupState", "Heartbeat",
    "HeartbeatReply", "JoinGroup", "JoinGroupMember", "JoinGroupReply", "LeaderSync",
    "LeaveGroup", "LeaveGroupReply", "LeaveResult", "ListedGroup", "Member", "MemberAssignment",
    "MemberIdentity", "OffsetCommit", "OffsetCommitReply", "OffsetDelete", "OffsetDeleteReply",
    "OffsetToCommit", "PartitionResult",
    "PendingMember", "PendingMemberTimeout", "PendingSyncTimeout", "PersistOffsets", "Protocol",
    "RebalanceTimeout", "Reply", "RequestEvent", "Restart", "SessionTimeout", "SnapshotError",
    "SyncGroup", "SyncGroupReply", "TimeoutEvent", "TopicDeleted", "TopicPartition", "describe_group",
    "due_timeouts", "expired_groups", "from_snapshot", "group_of", "group_snapshot", "initial_state",
    "list_groups",
    "new_member_id", "next_deadline", "offset_fetch", "read_group", "removable_groups", "step", "to_snapshot",
]
