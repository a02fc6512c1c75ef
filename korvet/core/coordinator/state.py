"""The coordinator's state: every group it knows, as frozen values.

Field names follow the record ``grp`` of ``spec/GroupCoordinator.tla`` (the
spec's ``awaitingJoin``/``awaitingSync`` are ``join_request``/``sync_request``
here: the id of the held-back request, or None). What the spec abstracts away
lives here too: deadlines (milliseconds on the adapter's clock), timeouts,
client ids, metadata bytes. A group the coordinator does not know (the spec's
"Absent") is simply not in ``CoordinatorState.groups``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from korvet.core.codec import transient

# Kafka's defaults (GroupCoordinatorConfig).
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3_000
DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
DEFAULT_GROUP_MAX_SIZE = 2**31 - 1
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4_096

NO_GENERATION = -1


class GroupState(Enum):
    """The classic group states, with the names DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class Config:
    """group.min.session.timeout.ms and friends; Kafka's defaults."""

    min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    new_member_join_timeout_ms: int = DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS
    group_max_size: int = DEFAULT_GROUP_MAX_SIZE
    offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES


@dataclass(frozen=True, slots=True)
class Protocol:
    """One entry of a JoinGroup's protocol list: an assignor name and its metadata."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    # A member added by a JoinGroup whose join phase has not completed yet; it
    # expires after the new-member join timeout even while it waits.
    is_new: bool = False
    join_request: int | None = transient()  # the held-back JoinGroup (spec: awaitingJoin)
    sync_request: int | None = transient()  # the held-back SyncGroup (spec: awaitingSync)
    session_deadline: int | None = transient()

    @property
    def awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_request is not None

    def protocol_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.protocols)

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for protocol in self.protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        return b""


@dataclass(frozen=True, slots=True)
class PendingMember:
    """A member id handed out with MEMBER_ID_REQUIRED, not yet used to join."""

    session_timeout_ms: int
    deadline: int | None = transient()


@dataclass(frozen=True, slots=True)
class LeaderSync:
    """The assignment the leader sent in SyncGroup (missing members filled with b"")."""

    generation: int
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: Mapping[str, Member] = field(default_factory=dict)
    pending: Mapping[str, PendingMember] = field(default_factory=dict)
    pending_sync: frozenset[str] = frozenset()
    # This PreparingRebalance started from Empty: the join phase only ends when
    # group.initial.rebalance.delay.ms runs out (extended while members arrive).
    initial_rebalance: bool = False
    new_member_added: bool = False
    initial_delay_ms: int = 0
    initial_remaining_ms: int = 0
    join_deadline: int | None = transient()
    sync_deadline: int | None = transient()
    leader_sync: LeaderSync | None = None
    offsets: Mapping[TopicPartition, CommittedOffset] = field(default_factory=dict)

    @property
    def rebalance_timeout_ms(self) -> int:
        """The largest member rebalance timeout (at least 1 ms: deadlines lie ahead)."""
        return max([1, *(m.rebalance_timeout_ms for m in self.members.values())])


@dataclass(frozen=True, slots=True)
class CoordinatorState:
    config: Config = Config()
    groups: Mapping[str, Group] = field(default_factory=dict)
    # The generation a new group starts from (the spec's `floor`): 0, unless a load after
    # Redis may have lost writes raised it (korvet/core/coordinator/durability.py).
    generation_floor: int = 0


def initial_state(config: Config | None = None) -> CoordinatorState:
    return CoordinatorState(config=config or Config(), groups={})


def new_member_id(client_id: str, group_instance_id: str | None, unique: str) -> str:
    """The member id Kafka would give: ``<instance id or client id>-<unique>``.

    The adapter calls this with a fresh UUID and puts the result in the
    JoinGroup event (core code has no randomness of its own).
    """
    return f"{group_instance_id if group_instance_id is not None else client_id}-{unique}"
