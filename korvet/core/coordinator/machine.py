"""``step(state, event, now_ms) -> (state, effects)``: the group coordinator.

Every handler mirrors an action of ``spec/GroupCoordinator.tla`` and the
helpers mirror its operators (same names, snake_case): ``_Draft`` is one
group being rewritten during one step, the way the spec's operators map a
group record to a group record plus effects. ``step`` never raises on bad
input: every request gets a reply with a Kafka error code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from korvet.core.coordinator.consumer_protocol import subscribed_topics
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
    OffsetCommit,
    OffsetDelete,
    PendingMemberTimeout,
    PendingSyncTimeout,
    RebalanceTimeout,
    Restart,
    SessionTimeout,
    SyncGroup,
    TopicDeleted,
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
    TopicPartition,
)

Step = tuple[CoordinatorState, tuple[Effect, ...]]

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class _Draft:
    """One group being rewritten during one step: the frozen group ``g`` (its scalar fields
    change by ``dataclasses.replace``) and mutable copies of its four collections, which
    the spec's operators update member by member. ``freeze`` puts them back."""

    __slots__ = ("config", "effects", "group", "members", "now", "offsets", "pending", "pending_sync")

    def __init__(self, group: Group, config: Config, now: int, effects: list[Effect]) -> None:
        self.config = config
        self.now = now
        self.effects = effects
        self.group = group
        self.members: dict[str, Member] = dict(group.members)
        self.pending: dict[str, PendingMember] = dict(group.pending)
        self.pending_sync: set[str] = set(group.pending_sync)
        self.offsets: dict[TopicPartition, CommittedOffset] = dict(group.offsets)

    def freeze(self) -> Group:
        return replace(self.group, members=self.members, pending=self.pending,
                       pending_sync=frozenset(self.pending_sync), offsets=self.offsets)

    # --- queries -----------------------------------------------------------------

    def rebalance_timeout_ms(self) -> int:
        # At least 1 ms: a deadline must lie in the future, or the adapter's timer loop
        # would never let time pass (clients may send a rebalance timeout of 0).
        return max([1, *(m.rebalance_timeout_ms for m in self.members.values())])

    def static_id(self, instance: str | None) -> str | None:
        if instance is None:
            return None
        for member_id, member in self.members.items():
            if member.group_instance_id == instance:
                return member_id
        return None

    def awaiting(self) -> list[str]:
        return [m for m, member in self.members.items() if member.join_request is not None]

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_request is not None for m in self.members.values())

    def supports(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.group.state is EMPTY:
            return protocol_type != "" and bool(names)
        return self.group.protocol_type == protocol_type and any(
            all(name in m.protocol_names() for m in self.members.values()) for name in names)

    def select_protocol(self) -> str:
        members = list(self.members.values())
        candidates = set.intersection(*(set(m.protocol_names()) for m in members))
        votes: dict[str, int] = {}
        for member in members:
            vote = next(p.name for p in member.protocols if p.name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        most = max(votes.values())
        # KORVET: ties go to the smallest name (Kafka: HashMap iteration order).
        return min(name for name, count in votes.items() if count == most)

    def validate_member(self, member_id: str, instance: str | None) -> ErrorCode:
        if instance is not None:
            owner = self.static_id(instance)
            if owner is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if owner != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def accept_joining(self, member_id: str) -> bool:
        size = self.config.group_max_size
        if self.group.state is PREPARING:
            member = self.members.get(member_id)
            return (member is not None and member.join_request is not None) or \
                len(self.awaiting()) < size
        if self.group.state in (COMPLETING, STABLE):
            return member_id in self.members or len(self.members) < size
        return True

    def current_members(self) -> tuple[JoinGroupMember, ...]:
        return tuple(JoinGroupMember(m.member_id, m.group_instance_id,
                                     m.metadata_for(self.group.protocol_name))
                     for m in self.members.values())

    # --- effects -----------------------------------------------------------------

    def join_reply(self, request_id: int, error: ErrorCode, member_id: str) -> None:
        self.effects.append(JoinGroupReply(request_id, error, member_id))

    def sync_reply(self, request_id: int, member_id: str, error: ErrorCode,
                   assignment: bytes = b"") -> None:
        if error is ErrorCode.NONE:
            self.effects.append(SyncGroupReply(request_id, member_id, error, self.group.protocol_type,
                                               self.group.protocol_name, assignment))
        else:
            self.effects.append(SyncGroupReply(request_id, member_id, error))

    def removal_replies(self, member_id: str) -> None:
        member = self.members[member_id]
        if member.join_request is not None:
            self.join_reply(member.join_request, ErrorCode.UNKNOWN_MEMBER_ID, "")
        if member.sync_request is not None:
            # KORVET: Kafka leaves a held-back SyncGroup of a removed member unanswered.
            self.sync_reply(member.sync_request, member_id, ErrorCode.UNKNOWN_MEMBER_ID)

    # --- transitions (the spec's operators) -----------------------------------

    def remove_members(self, ids: Iterable[str]) -> None:
        gone = set(ids)
        for member_id in gone:
            self.members.pop(member_id, None)
            self.pending.pop(member_id, None)
        self.pending_sync -= gone
        if not self.pending_sync:
            self.group = replace(self.group, sync_deadline=None)
        if self.group.leader in gone:
            # KORVET: the smallest remaining member id (Kafka: HashMap order).
            self.group = replace(self.group, leader=min(self.members) if self.members else None)

    def rearm_session(self, member_id: str, timeout_ms: int | None = None) -> None:
        member = self.members[member_id]
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.members[member_id] = replace(member, session_deadline=self.now + timeout)

    def complete_join(self) -> None:
        gone = [m for m, member in self.members.items()
                if member.join_request is None and member.group_instance_id is None]
        self.remove_members(gone)
        joined = self.awaiting()
        if self.members and not joined:
            # Nobody rejoined (only static members are left): try again later.
            self.group = replace(self.group, join_deadline=self.now + self.rebalance_timeout_ms())
            return
        self.group = replace(self.group, generation=self.group.generation + 1, initial_rebalance=False,
                         new_member_added=False, join_deadline=None, sync_deadline=None)
        self.pending_sync = set()
        if not self.members:
            self.group = replace(self.group, protocol_name=None, state=EMPTY)
            return
        leader = self.group.leader if self.group.leader in joined else min(joined)
        self.group = replace(self.group, protocol_name=self.select_protocol(), leader=leader,
                         state=COMPLETING)
        listing = self.current_members()
        for member_id, member in list(self.members.items()):
            if member.join_request is not None:
                self.effects.append(JoinGroupReply(
                    member.join_request, ErrorCode.NONE, member_id, self.group.generation,
                    self.group.protocol_type, self.group.protocol_name, self.group.leader or "",
                    listing if member_id == self.group.leader else ()))
            self.members[member_id] = replace(
                member, join_request=None, is_new=False,
                session_deadline=self.now + member.session_timeout_ms)
        self.pending_sync = set(self.members)
        self.group = replace(self.group, sync_deadline=self.now + self.rebalance_timeout_ms())

    def prepare_rebalance(self) -> None:
        for member_id, member in list(self.members.items()):
            updated = member
            if member.sync_request is not None:
                self.sync_reply(member.sync_request, member_id, ErrorCode.REBALANCE_IN_PROGRESS)
                updated = replace(member, sync_request=None,
                                  session_deadline=self.now + member.session_timeout_ms)
            # KORVET: assignments are cleared whenever a rebalance starts.
            if updated.assignment:
                updated = replace(updated, assignment=b"")
            self.members[member_id] = updated
        self.pending_sync = set()
        initial = self.group.state is EMPTY
        self.group = replace(self.group, sync_deadline=None, leader_sync=None, state=PREPARING,
                         initial_rebalance=initial, new_member_added=False)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            self.group = replace(self.group, initial_delay_ms=delay,
                             initial_remaining_ms=max(self.rebalance_timeout_ms() - delay, 0),
                             join_deadline=self.now + delay)
        elif self.all_joined():
            self.complete_join()
        else:
            self.group = replace(self.group, join_deadline=self.now + self.rebalance_timeout_ms())

    def maybe_complete_join_phase(self) -> None:
        if self.group.state is PREPARING and not self.group.initial_rebalance and self.all_joined():
            self.complete_join()

    def maybe_prepare_rebalance_or_complete_join(self) -> None:
        if self.group.state in (EMPTY, COMPLETING, STABLE):
            self.prepare_rebalance()
        else:
            self.maybe_complete_join_phase()

    def add_member_then_rebalance(self, member_id: str, event: JoinGroup) -> None:
        member = Member(
            member_id=member_id, group_instance_id=event.group_instance_id,
            client_id=event.client_id, client_host=event.client_host,
            session_timeout_ms=event.session_timeout_ms,
            rebalance_timeout_ms=event.rebalance_timeout_ms,
            protocol_type=event.protocol_type, protocols=event.protocols, is_new=True,
            join_request=event.request_id,
            # A new member cannot heartbeat while its JoinGroup waits: it gets the
            # new-member join timeout instead of its session timeout.
            session_deadline=self.now + self.config.new_member_join_timeout_ms)
        if self.group.state is PREPARING and self.group.initial_rebalance:
            self.group = replace(self.group, new_member_added=True)
        if not self.members:
            self.group = replace(self.group, protocol_type=event.protocol_type)
        if self.group.leader is None:
            self.group = replace(self.group, leader=member_id)
        self.members[member_id] = member
        self.pending.pop(member_id, None)
        self.maybe_prepare_rebalance_or_complete_join()

    def update_member_then_rebalance(self, member_id: str, event: JoinGroup) -> None:
        # A JoinGroup already held back for this member is superseded (as in
        # Kafka, it gets no answer: its client has given up on it).
        self.members[member_id] = replace(
            self.members[member_id], protocols=event.protocols,
            session_timeout_ms=event.session_timeout_ms,
            rebalance_timeout_ms=event.rebalance_timeout_ms, join_request=event.request_id)
        self.maybe_prepare_rebalance_or_complete_join()

    def replace_static_member(self, old_id: str, new_id: str, event: JoinGroup) -> None:
        old = self.members.pop(old_id)
        if old.join_request is not None:
            self.join_reply(old.join_request, ErrorCode.FENCED_INSTANCE_ID, old_id)
        if old.sync_request is not None:
            self.sync_reply(old.sync_request, old_id, ErrorCode.FENCED_INSTANCE_ID)
        self.members[new_id] = Member(
            member_id=new_id, group_instance_id=old.group_instance_id,
            client_id=old.client_id, client_host=old.client_host,
            session_timeout_ms=event.session_timeout_ms,
            rebalance_timeout_ms=event.rebalance_timeout_ms, protocol_type=old.protocol_type,
            protocols=event.protocols, assignment=old.assignment, is_new=False,
            join_request=event.request_id,
            session_deadline=self.now + event.session_timeout_ms)
        old_leader = self.group.leader
        if self.group.leader == old_id:
            self.group = replace(self.group, leader=new_id)
        # KORVET: the pending-sync entry and the leader's assignment follow the
        # new id (Kafka leaves the old id pending: a needless rebalance later).
        if old_id in self.pending_sync:
            self.pending_sync = (self.pending_sync - {old_id}) | {new_id}
        if self.group.leader_sync is not None and old_id in self.group.leader_sync.assignments:
            moved = {(new_id if k == old_id else k): v
                     for k, v in self.group.leader_sync.assignments.items()}
            self.group = replace(self.group, leader_sync=LeaderSync(self.group.leader_sync.generation, moved))
        if self.group.state is STABLE and self.select_protocol() == self.group.protocol_name:
            is_leader = self.group.leader == new_id
            if event.supports_skip_assignment:
                reply = JoinGroupReply(
                    event.request_id, ErrorCode.NONE, new_id, self.group.generation,
                    self.group.protocol_type, self.group.protocol_name, self.group.leader or "",
                    self.current_members() if is_leader else (), is_leader)
            else:
                # Before v9 the old leader id is returned, so that a new leader
                # does not run the assignor for a group that will not rebalance.
                reply = JoinGroupReply(
                    event.request_id, ErrorCode.NONE, new_id, self.group.generation,
                    self.group.protocol_type, self.group.protocol_name, old_leader or "")
            self.effects.append(reply)
            self.members[new_id] = replace(self.members[new_id], join_request=None)
        elif self.group.state is PREPARING:
            self.maybe_complete_join_phase()
        else:
            self.prepare_rebalance()

    def store_offsets(self, event: OffsetCommit) -> None:
        stored: list[tuple[TopicPartition, CommittedOffset]] = []
        results: list[PartitionResult] = []
        for item in event.offsets:
            if len(item.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionResult(item.topic, item.partition,
                                               ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            tp = TopicPartition(item.topic, item.partition)
            committed = CommittedOffset(item.offset, item.metadata, item.leader_epoch)
            self.offsets[tp] = committed
            stored.append((tp, committed))
            results.append(PartitionResult(item.topic, item.partition, ErrorCode.NONE))
        if stored:
            self.effects.append(PersistOffsets(self.group.group_id, event.member_id,
                                               event.generation_id, tuple(stored)))
        self.effects.append(OffsetCommitReply(event.request_id, event.member_id, tuple(results)))


# --- request handlers -------------------------------------------------------------

def _with_group(state: CoordinatorState, group: Group | None, group_id: str) -> CoordinatorState:
    groups = dict(state.groups)
    if group is None:
        groups.pop(group_id, None)
    else:
        groups[group_id] = group
    return replace(state, groups=groups)


def _join_group(state: CoordinatorState, event: JoinGroup, now: int) -> Step:
    def error(code: ErrorCode, member_id: str = event.member_id) -> Step:
        return state, (JoinGroupReply(event.request_id, code, member_id),)

    config = state.config
    if not event.group_id:
        return error(ErrorCode.INVALID_GROUP_ID)
    if not config.min_session_timeout_ms <= event.session_timeout_ms <= \
            config.max_session_timeout_ms:
        return error(ErrorCode.INVALID_SESSION_TIMEOUT)
    group = state.groups.get(event.group_id)
    if group is None:
        if event.member_id:
            return error(ErrorCode.UNKNOWN_MEMBER_ID)
        group = Group(event.group_id, generation=state.generation_floor)
    effects: list[Effect] = []
    draft = _Draft(group, config, now, effects)
    member_id = event.member_id
    if not draft.accept_joining(member_id):
        draft.remove_members([member_id])
        draft.join_reply(event.request_id, ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    elif draft.group.state is DEAD:
        draft.join_reply(event.request_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
    elif not draft.supports(event.protocol_type, [p.name for p in event.protocols]):
        draft.join_reply(event.request_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
    elif not member_id:
        _join_new_member(draft, event)
    elif member_id in draft.pending and event.group_instance_id is None:
        draft.add_member_then_rebalance(member_id, event)
    else:
        code = draft.validate_member(member_id, event.group_instance_id)
        if code is not ErrorCode.NONE:
            draft.join_reply(event.request_id, code, member_id)
        else:
            _join_known_member(draft, event)
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _join_new_member(draft: _Draft, event: JoinGroup) -> None:
    """The spec's JoinNewMember, once the group accepts the join."""
    new_id = event.new_member_id
    if not new_id or new_id in draft.members or new_id in draft.pending:
        # The adapter must hand out fresh ids; a clash is answered with a
        # retriable error rather than corrupting the group.
        draft.join_reply(event.request_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
        return
    static = draft.static_id(event.group_instance_id)
    if static is not None:
        draft.replace_static_member(static, new_id, event)
    elif event.group_instance_id is None and event.requires_known_member_id:
        draft.pending[new_id] = PendingMember(event.session_timeout_ms,
                                          draft.now + event.session_timeout_ms)
        draft.join_reply(event.request_id, ErrorCode.MEMBER_ID_REQUIRED, new_id)
    else:
        draft.add_member_then_rebalance(new_id, event)


def _join_known_member(draft: _Draft, event: JoinGroup) -> None:
    member_id = event.member_id
    same = draft.members[member_id].protocols == event.protocols
    if draft.group.state is PREPARING:
        draft.update_member_then_rebalance(member_id, event)
    elif (draft.group.state is COMPLETING and same) or \
            (draft.group.state is STABLE and same and draft.group.leader != member_id):
        # Nothing changed: the current generation again (a lost JoinGroup reply).
        group = draft.group
        listing = draft.current_members() \
            if group.state is COMPLETING and group.leader == member_id else ()
        draft.effects.append(JoinGroupReply(event.request_id, ErrorCode.NONE, member_id,
                                            group.generation, group.protocol_type,
                                            group.protocol_name, group.leader or "", listing))
    elif draft.group.state in (COMPLETING, STABLE):
        draft.update_member_then_rebalance(member_id, event)
    else:
        draft.join_reply(event.request_id, ErrorCode.UNKNOWN_MEMBER_ID, member_id)


def _protocol_mismatch(sent: str | None, current: str | None) -> bool:
    return sent is not None and current is not None and sent != current


def _sync_group(state: CoordinatorState, event: SyncGroup, now: int) -> Step:
    def error(code: ErrorCode) -> Step:
        return state, (SyncGroupReply(event.request_id, event.member_id, code),)

    if not event.group_id:
        return error(ErrorCode.INVALID_GROUP_ID)
    group = state.groups.get(event.group_id)
    if group is None or group.state is EMPTY:
        return error(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    code = draft.validate_member(event.member_id, event.group_instance_id)
    if code is not ErrorCode.NONE:
        return error(code)
    if event.generation_id != group.generation:
        return error(ErrorCode.ILLEGAL_GENERATION)
    if _protocol_mismatch(event.protocol_type, group.protocol_type) or \
            _protocol_mismatch(event.protocol_name, group.protocol_name):
        return error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if group.state is PREPARING:
        return error(ErrorCode.REBALANCE_IN_PROGRESS)
    member_id = event.member_id
    draft.pending_sync.discard(member_id)
    if not draft.pending_sync:
        draft.group = replace(draft.group, sync_deadline=None)
    if group.state is STABLE:
        draft.sync_reply(event.request_id, member_id, ErrorCode.NONE,
                     draft.members[member_id].assignment)
        return _with_group(state, draft.freeze(), event.group_id), tuple(effects)
    # CompletingRebalance: hold the request back until the leader's assignment.
    draft.members[member_id] = replace(draft.members[member_id], sync_request=event.request_id)
    if draft.group.leader == member_id:
        _apply_leader_assignment(draft, event)
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _apply_leader_assignment(draft: _Draft, event: SyncGroup) -> None:
    """The leader's SyncGroup in CompletingRebalance: every member gets its part (missing
    ones an empty assignment), every held-back SyncGroup is answered, the group is Stable."""
    sent = {a.member_id: a.assignment for a in event.assignments}
    full = {m: sent.get(m, b"") for m in draft.members}
    for other, member in list(draft.members.items()):
        updated = replace(member, assignment=full[other])
        if member.sync_request is not None:
            draft.sync_reply(member.sync_request, other, ErrorCode.NONE, full[other])
            updated = replace(updated, sync_request=None,
                              session_deadline=draft.now + member.session_timeout_ms)
        draft.members[other] = updated
    draft.group = replace(draft.group, state=STABLE, leader_sync=LeaderSync(draft.group.generation, full))


def _heartbeat(state: CoordinatorState, event: Heartbeat, now: int) -> Step:
    def reply(code: ErrorCode, new_state: CoordinatorState = state) -> Step:
        return new_state, (HeartbeatReply(event.request_id, event.member_id, code),)

    if not event.group_id:
        return reply(ErrorCode.INVALID_GROUP_ID)
    group = state.groups.get(event.group_id)
    if group is None:
        return reply(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    draft = _Draft(group, state.config, now, [])
    code = draft.validate_member(event.member_id, event.group_instance_id)
    if code is not ErrorCode.NONE:
        return reply(code)
    if event.generation_id != group.generation:
        return reply(ErrorCode.ILLEGAL_GENERATION)
    draft.rearm_session(event.member_id)
    new_state = _with_group(state, draft.freeze(), event.group_id)
    if group.state is PREPARING:
        return reply(ErrorCode.REBALANCE_IN_PROGRESS, new_state)
    return reply(ErrorCode.NONE, new_state)


def _leave_group(state: CoordinatorState, event: LeaveGroup, now: int) -> Step:
    if not event.group_id:
        return state, (LeaveGroupReply(event.request_id, ErrorCode.INVALID_GROUP_ID, ()),)
    group = state.groups.get(event.group_id)
    if group is None:
        results = tuple(LeaveResult(m.member_id, m.group_instance_id, ErrorCode.UNKNOWN_MEMBER_ID)
                        for m in event.members)
        return state, (LeaveGroupReply(event.request_id, ErrorCode.NONE, results),)
    if group.state is DEAD:
        return state, (LeaveGroupReply(event.request_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, ()),)
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    results_list: list[LeaveResult] = []
    for identity in event.members:
        code = _leave_one(draft, identity.member_id, identity.group_instance_id)
        results_list.append(LeaveResult(identity.member_id, identity.group_instance_id, code))
    if any(r.error is ErrorCode.NONE for r in results_list):
        if draft.group.state in (STABLE, COMPLETING):
            draft.maybe_prepare_rebalance_or_complete_join()
        else:
            draft.maybe_complete_join_phase()
    effects.append(LeaveGroupReply(event.request_id, ErrorCode.NONE, tuple(results_list)))
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _leave_one(draft: _Draft, member_id: str, instance: str | None) -> ErrorCode:
    if not member_id:
        static = draft.static_id(instance)
        if static is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        draft.removal_replies(static)
        draft.remove_members([static])
        return ErrorCode.NONE
    if member_id in draft.pending:
        draft.pending.pop(member_id)
        return ErrorCode.NONE
    code = draft.validate_member(member_id, instance)
    if code is not ErrorCode.NONE:
        return code
    draft.removal_replies(member_id)
    draft.remove_members([member_id])
    return ErrorCode.NONE


def _offset_commit(state: CoordinatorState, event: OffsetCommit, now: int) -> Step:
    def error(code: ErrorCode) -> Step:
        return state, (OffsetCommitReply(event.request_id, event.member_id, tuple(
            PartitionResult(o.topic, o.partition, code) for o in event.offsets)),)

    if not event.offsets:
        # KORVET: outside the spec (its commits carry at least one offset). Kafka's broker answers
        # a commit with no partition (or only unknown ones) before its coordinator sees it
        # (KafkaApis.handleOffsetCommitRequest): no "simple" group is created, no session is
        # kept alive, and there is no partition to carry an error.
        return state, (OffsetCommitReply(event.request_id, event.member_id, ()),)
    group = state.groups.get(event.group_id)
    effects: list[Effect] = []
    if event.transactional and group is not None and group.state is not DEAD:
        draft = _Draft(group, state.config, now, effects)
        draft.store_offsets(event)
        return _with_group(state, draft.freeze(), event.group_id), tuple(effects)
    if group is None:
        if event.generation_id >= 0:
            return error(ErrorCode.GROUP_ID_NOT_FOUND if event.unknown_group_is_not_found
                         else ErrorCode.ILLEGAL_GENERATION)
        # A consumer outside group management: a "simple" group is created.
        draft = _Draft(Group(event.group_id, generation=state.generation_floor), state.config,
                       now, effects)
        draft.store_offsets(event)
        return _with_group(state, draft.freeze(), event.group_id), tuple(effects)
    if group.state is DEAD:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    draft = _Draft(group, state.config, now, effects)
    if event.generation_id < 0 and group.state is EMPTY:
        draft.store_offsets(event)
        return _with_group(state, draft.freeze(), event.group_id), tuple(effects)
    if event.generation_id < 0 and not event.member_id and event.group_instance_id is None:
        return error(ErrorCode.UNKNOWN_MEMBER_ID)
    code = draft.validate_member(event.member_id, event.group_instance_id)
    if code is not ErrorCode.NONE:
        return error(code)
    if event.generation_id != group.generation:
        return error(ErrorCode.ILLEGAL_GENERATION)
    if group.state is COMPLETING:
        return error(ErrorCode.REBALANCE_IN_PROGRESS)
    draft.rearm_session(event.member_id)  # a commit keeps the session alive
    draft.store_offsets(event)
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _delete_groups(state: CoordinatorState, event: DeleteGroups, now: int) -> Step:
    groups = dict(state.groups)
    effects: list[Effect] = []
    results: list[GroupResult] = []
    seen: set[str] = set()
    for group_id in event.group_ids:
        if group_id in seen:
            continue
        seen.add(group_id)
        group = groups.get(group_id)
        if group is None or group.state is DEAD:
            results.append(GroupResult(group_id, ErrorCode.GROUP_ID_NOT_FOUND))
        elif group.state is EMPTY:
            # KORVET: Dead until the adapter reports the Redis clean-up done.
            groups[group_id] = Group(group_id, state=DEAD)
            effects.append(DeleteGroupData(group_id))
            results.append(GroupResult(group_id, ErrorCode.NONE))
        else:
            results.append(GroupResult(group_id, ErrorCode.NON_EMPTY_GROUP))
    effects.append(DeleteGroupsReply(event.request_id, tuple(results)))
    return replace(state, groups=groups), tuple(effects)


def _offset_delete(state: CoordinatorState, event: OffsetDelete, now: int) -> Step:
    """Kafka's rules: an unknown or Dead group is GROUP_ID_NOT_FOUND; an Empty group's
    offsets go; a consumer group with members keeps the offsets of topics its members
    subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; any other group with
    members is NON_EMPTY_GROUP. KORVET: outside the spec."""
    group = state.groups.get(event.group_id)
    if group is None or group.state is DEAD:
        return state, (OffsetDeleteReply(event.request_id, ErrorCode.GROUP_ID_NOT_FOUND, ()),)
    subscribed: frozenset[str] = frozenset()
    if group.members:
        if group.protocol_type != "consumer":
            return state, (OffsetDeleteReply(event.request_id, ErrorCode.NON_EMPTY_GROUP, ()),)
        for member in group.members.values():
            topics = subscribed_topics(member.metadata_for(group.protocol_name))
            if topics is None:  # unreadable: assume it may read anything
                topics = frozenset(tp.topic for tp in event.partitions)
            subscribed |= topics
    offsets = dict(group.offsets)
    removed: list[TopicPartition] = []
    results: list[PartitionResult] = []
    for tp in event.partitions:
        if tp.topic in subscribed:
            results.append(PartitionResult(tp.topic, tp.partition,
                                           ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
            continue
        if offsets.pop(tp, None) is not None:
            removed.append(tp)
        results.append(PartitionResult(tp.topic, tp.partition, ErrorCode.NONE))
    effects: list[Effect] = []
    if removed:
        effects.append(DeleteOffsets(event.group_id, tuple(removed)))
    effects.append(OffsetDeleteReply(event.request_id, ErrorCode.NONE, tuple(results)))
    return _with_group(state, replace(group, offsets=offsets), event.group_id), tuple(effects)


# --- internal events ----------------------------------------------------------------

def _topic_deleted(state: CoordinatorState, event: TopicDeleted, now: int) -> Step:
    groups = dict(state.groups)
    for group_id, group in state.groups.items():
        kept = {tp: o for tp, o in group.offsets.items() if tp.topic != event.topic}
        if len(kept) != len(group.offsets):
            groups[group_id] = replace(group, offsets=kept)
    return replace(state, groups=groups), ()


def _due(deadline: int | None, now: int) -> bool:
    return deadline is not None and deadline <= now


def _group_data_deleted(state: CoordinatorState, event: GroupDataDeleted, now: int) -> Step:
    group = state.groups.get(event.group_id)
    if group is None or group.state is not DEAD:
        return state, ()
    return _with_group(state, None, event.group_id), ()


def _session_timeout(state: CoordinatorState, event: SessionTimeout, now: int) -> Step:
    group = state.groups.get(event.group_id)
    member = group.members.get(event.member_id) if group is not None else None
    if group is None or member is None or not _due(member.session_deadline, now):
        return state, ()
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    if not member.is_new and (member.awaiting_join or member.awaiting_sync):
        # A member waiting for the rebalance needs no heartbeat; its timer is
        # armed again when its held-back request is answered.
        draft.members[event.member_id] = replace(member, session_deadline=None)
    else:
        draft.removal_replies(event.member_id)
        draft.remove_members([event.member_id])
        if draft.group.state in (STABLE, COMPLETING):
            draft.prepare_rebalance()
        elif draft.group.state is PREPARING and draft.all_joined():
            draft.complete_join()
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _pending_member_timeout(state: CoordinatorState, event: PendingMemberTimeout,
                            now: int) -> Step:
    group = state.groups.get(event.group_id)
    pending = group.pending.get(event.member_id) if group is not None else None
    if group is None or pending is None or not _due(pending.deadline, now):
        return state, ()
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    draft.pending.pop(event.member_id)
    if draft.group.state is PREPARING and draft.all_joined():
        draft.complete_join()
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _rebalance_timeout(state: CoordinatorState, event: RebalanceTimeout, now: int) -> Step:
    group = state.groups.get(event.group_id)
    if group is None or group.state is not PREPARING or not _due(group.join_deadline, now):
        return state, ()
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    if group.initial_rebalance and group.new_member_added and group.initial_remaining_ms > 0:
        # Members are still arriving: extend the initial delay (InitialDelayedJoin).
        delay = min(state.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
        draft.group = replace(group, new_member_added=False, initial_delay_ms=delay,
                              join_deadline=now + delay,
                              initial_remaining_ms=max(group.initial_remaining_ms
                                                       - group.initial_delay_ms, 0))
    else:
        draft.complete_join()
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def _pending_sync_timeout(state: CoordinatorState, event: PendingSyncTimeout, now: int) -> Step:
    group = state.groups.get(event.group_id)
    if group is None or not _due(group.sync_deadline, now):
        return state, ()
    effects: list[Effect] = []
    draft = _Draft(group, state.config, now, effects)
    if draft.group.state in (COMPLETING, STABLE) and draft.pending_sync:
        draft.remove_members(list(draft.pending_sync))
        draft.prepare_rebalance()
    else:
        draft.group = replace(draft.group, sync_deadline=None)
    return _with_group(state, draft.freeze(), event.group_id), tuple(effects)


def restarted_group(group: Group, config: Config, now: int) -> Group:
    """A group as a (re)start finds it in its snapshot: no held-back request, every timer
    armed again from ``now`` (the spec's Restart, for one group)."""
    if group.state is DEAD:
        return group
    members = {
        m: replace(member, join_request=None, sync_request=None, session_deadline=now + (
            config.new_member_join_timeout_ms if member.is_new else member.session_timeout_ms))
        for m, member in group.members.items()}
    pending = {m: replace(p, deadline=now + p.session_timeout_ms)
               for m, p in group.pending.items()}
    join_deadline = None
    if group.state is PREPARING:
        join_deadline = now + (group.initial_delay_ms if group.initial_rebalance
                               else group.rebalance_timeout_ms)
    sync_deadline = now + group.rebalance_timeout_ms if group.pending_sync else None
    return replace(group, members=members, pending=pending, join_deadline=join_deadline,
                   sync_deadline=sync_deadline)


def _restart(state: CoordinatorState, event: Restart, now: int) -> Step:
    groups = {group_id: restarted_group(group, state.config, now)
              for group_id, group in state.groups.items()}
    effects = tuple(DeleteGroupData(group_id) for group_id, group in state.groups.items()
                    if group.state is DEAD)
    return replace(state, groups=groups), effects


def raise_generation(group: Group, floor: int, config: Config, now: int) -> Group:
    """The spec's Raise (GroupCoordinatorDurable): a group loaded after Redis may have lost
    writes moves to the band's first generation; one with members rebalances. A group is
    never in a new band before its raise; after the bands wrap (int32), one at a generation
    above the new band's moves down to it all the same."""
    if group.state is DEAD or group.generation == floor:
        return group
    if group.state is EMPTY:
        return replace(group, generation=floor)
    draft = _Draft(replace(group, generation=floor), config, now, [])
    draft.prepare_rebalance()
    return draft.freeze()


def step(state: CoordinatorState, event: Event, now_ms: int) -> Step:  # noqa: C901, PLR0912 -- one case per event class
    """Apply one event at time ``now_ms``; return the new state and the effects, in order."""
    match event:
        case JoinGroup():
            return _join_group(state, event, now_ms)
        case SyncGroup():
            return _sync_group(state, event, now_ms)
        case Heartbeat():
            return _heartbeat(state, event, now_ms)
        case LeaveGroup():
            return _leave_group(state, event, now_ms)
        case OffsetCommit():
            return _offset_commit(state, event, now_ms)
        case DeleteGroups():
            return _delete_groups(state, event, now_ms)
        case OffsetDelete():
            return _offset_delete(state, event, now_ms)
        case TopicDeleted():
            return _topic_deleted(state, event, now_ms)
        case GroupDataDeleted():
            return _group_data_deleted(state, event, now_ms)
        case SessionTimeout():
            return _session_timeout(state, event, now_ms)
        case PendingMemberTimeout():
            return _pending_member_timeout(state, event, now_ms)
        case RebalanceTimeout():
            return _rebalance_timeout(state, event, now_ms)
        case PendingSyncTimeout():
            return _pending_sync_timeout(state, event, now_ms)
        case Restart():
            return _restart(state, event, now_ms)
