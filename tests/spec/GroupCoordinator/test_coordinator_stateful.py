"""The group coordinator machine under random event sequences, and example by example.

``CoordinatorMachine`` (Hypothesis) drives random joins (dynamic and static
members, v3 and v4+ joins), syncs, heartbeats, leaves, commits (current and
stale generations), deletes, timer expiries and restarts through ``step`` and
checks every invariant of spec/GroupCoordinator.tla after every step, plus what
a client would notice: every request is answered exactly once (held-back ones
later), no group is touched by another group's events, and the timers the
adapter is told about are the ones armed.

The example tests below it check each Kafka error code of the classic protocol
(anchors §2) and the main behaviours, named after what they check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from korvet.core.coordinator import (
    CommittedOffset,
    Config,
    CoordinatorState,
    DeleteGroupData,
    DeleteGroups,
    DeleteGroupsReply,
    Effect,
    ErrorCode,
    Event,
    GroupDataDeleted,
    GroupState,
    Heartbeat,
    HeartbeatReply,
    JoinGroup,
    JoinGroupReply,
    LeaveGroup,
    LeaveGroupReply,
    MemberAssignment,
    MemberIdentity,
    OffsetCommit,
    OffsetCommitReply,
    OffsetToCommit,
    PendingMemberTimeout,
    PendingSyncTimeout,
    PersistOffsets,
    Protocol,
    RebalanceTimeout,
    Restart,
    SessionTimeout,
    SyncGroup,
    SyncGroupReply,
    TopicPartition,
    describe_group,
    due_timeouts,
    expired_groups,
    from_snapshot,
    initial_state,
    list_groups,
    new_member_id,
    next_deadline,
    offset_fetch,
    removable_groups,
    step,
    to_snapshot,
)
from korvet.core.coordinator.invariants import INVARIANTS, OUTPUT_INVARIANTS, violations
from korvet.verification import tlc
from tests.support.examples import examples

RANGE_A = (Protocol("range", b"a"),)
RANGE_B = (Protocol("range", b"b"),)
RR = (Protocol("roundrobin", b"r"),)
BOTH = (Protocol("roundrobin", b"r"), Protocol("range", b"a"))
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def request_id_of(effect: Effect) -> int | None:
    return getattr(effect, "request_id", None)


@dataclass
class Harness:
    """A coordinator plus a clock; each call steps one event and returns its effects."""

    state: CoordinatorState = field(default_factory=initial_state)
    now: int = 1_000
    next_request: int = 1
    next_uuid: int = 1

    def run(self, event: Event) -> tuple[Effect, ...]:
        before = self.state
        self.state, effects = step(self.state, event, self.now)
        problems = violations(before, self.state, effects)
        assert not problems, problems
        return effects

    def rid(self) -> int:
        self.next_request += 1
        return self.next_request

    def join(self, group: str = "g", member: str = "", instance: str | None = None, *,
             protocols: tuple[Protocol, ...] = RANGE_A, v4: bool = True, v9: bool = False,
             session_ms: int = SESSION_MS, protocol_type: str = "consumer",
             client: str = "client") -> tuple[int, tuple[Effect, ...]]:
        rid = self.rid()
        unique = f"u{self.next_uuid}"
        self.next_uuid += 1
        return rid, self.run(JoinGroup(
            rid, group, member, instance, protocol_type, protocols, session_ms, REBALANCE_MS,
            client, "/10.0.0.1", v4, v9, new_member_id(client, instance, unique)))

    def sync(self, group: str, member: str, generation: int,
             assignments: dict[str, bytes] | None = None, instance: str | None = None,
             protocol_name: str | None = None) -> tuple[int, tuple[Effect, ...]]:
        rid = self.rid()
        return rid, self.run(SyncGroup(
            rid, group, member, instance, generation, None, protocol_name,
            tuple(MemberAssignment(m, a) for m, a in (assignments or {}).items())))

    def heartbeat(self, group: str, member: str, generation: int,
                  instance: str | None = None) -> ErrorCode:
        (reply,) = self.run(Heartbeat(self.rid(), group, member, instance, generation))
        assert isinstance(reply, HeartbeatReply)
        return reply.error

    def leave(self, group: str, *members: tuple[str, str | None]) -> tuple[Effect, ...]:
        return self.run(LeaveGroup(self.rid(), group,
                                   tuple(MemberIdentity(m, i) for m, i in members)))

    def commit(self, group: str, member: str, generation: int, offset: int = 5,
               instance: str | None = None, metadata: str = "",
               v9: bool = False) -> tuple[Effect, ...]:
        return self.run(OffsetCommit(self.rid(), group, member, instance, generation,
                                     (OffsetToCommit("t", 0, offset, metadata),), v9))

    def delete(self, *groups: str) -> tuple[Effect, ...]:
        return self.run(DeleteGroups(self.rid(), groups))

    def advance(self, ms: int) -> list[Effect]:
        """Let time pass and fire every timer that comes due, as the adapter would."""
        target = self.now + ms
        effects: list[Effect] = []
        while (deadline := next_deadline(self.state)) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            for event in due_timeouts(self.state, self.now):
                effects.extend(self.run(event))
        self.now = target
        return effects

    def settle_join(self, group: str = "g") -> list[Effect]:
        """Let the (initial) rebalance delay run out, however often members extended it."""
        effects: list[Effect] = []
        for _ in range(20):
            if self.state.groups[group].state is not GroupState.PREPARING_REBALANCE:
                break
            effects += self.advance(3_000)
        return effects

    def restart(self) -> tuple[Effect, ...]:
        """A broker restart: the state goes through its JSON snapshot."""
        self.state = from_snapshot(json.loads(json.dumps(to_snapshot(self.state))))
        return self.run(Restart())

    def group(self, group: str = "g") -> object:
        return self.state.groups[group]

    def stable_group(self, *members: str, group: str = "g") -> dict[str, str]:
        """Members (by client id) join with v4 and sync: returns client -> member id."""
        ids: dict[str, str] = {}
        for client in members:
            _, (reply,) = self.join(group, client=client)
            assert isinstance(reply, JoinGroupReply)
            assert reply.error is ErrorCode.MEMBER_ID_REQUIRED
            ids[client] = reply.member_id
            self.join(group, reply.member_id, client=client)
        self.settle_join(group)
        g = self.state.groups[group]
        assert g.state is GroupState.COMPLETING_REBALANCE, g.state
        leader = g.leader
        assert leader is not None
        for member_id in ids.values():
            if member_id != leader:
                self.sync(group, member_id, g.generation)
        self.sync(group, leader, g.generation, {m: m.encode() for m in ids.values()})
        assert self.state.groups[group].state is GroupState.STABLE
        return ids


def replies(effects: Sequence[Effect], kind: type) -> list[Effect]:
    return [e for e in effects if isinstance(e, kind)]


def only(effects: Sequence[Effect], kind: type) -> Effect:
    found = replies(effects, kind)
    assert len(found) == 1, effects
    return found[0]


# --- the random machine -----------------------------------------------------------------

GROUPS = ("g1", "g2")
INSTANCES = ("i1", "i2")
PROTOCOL_LISTS = (RANGE_A, RANGE_B, RR, BOTH)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(state=initial_state(Config(group_max_size=3)))
        self.ids: list[str] = []  # every member id handed out, plus some never handed out
        self.outstanding: set[int] = set()  # requests held back, not answered yet
        self.answered: set[int] = set()

    @initialize()
    def start(self) -> None:
        self.ids = ["never-handed-out"]

    # --- bookkeeping ------------------------------------------------------------

    def apply(self, event: Event, group: str | None) -> tuple[Effect, ...]:
        before = self.h.state
        request = getattr(event, "request_id", None)
        effects = self.h.run(event)
        for effect in effects:
            rid = request_id_of(effect)
            if rid is None:
                continue
            assert rid not in self.answered, f"request {rid} answered twice"
            assert rid == request or rid in self.outstanding, f"answer to unknown request {rid}"
            self.answered.add(rid)
            self.outstanding.discard(rid)
        if request is not None and request not in self.answered:
            assert isinstance(event, JoinGroup | SyncGroup), f"{event} got no answer"
            self.outstanding.add(request)
        for effect in effects:
            if isinstance(effect, JoinGroupReply) and effect.member_id and \
                    effect.member_id not in self.ids:
                self.ids.append(effect.member_id)
        if group is not None:
            for other in GROUPS:
                if other != group:
                    assert before.groups.get(other) == self.h.state.groups.get(other), \
                        f"an event of {group} changed {other}"
        return effects

    def generation(self, group: str, choice: int) -> int:
        g = self.h.state.groups.get(group)
        current = g.generation if g is not None else 0
        return (current, current - 1, current + 1, -1)[choice]

    # --- rules ----------------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), instance=st.none() | st.sampled_from(INSTANCES),
          v4=st.booleans(), v9=st.booleans(), protocols=st.sampled_from(PROTOCOL_LISTS),
          session_ok=st.booleans())
    def join_new(self, group: str, instance: str | None, v4: bool, v9: bool,
                 protocols: tuple[Protocol, ...], session_ok: bool) -> None:
        rid = self.h.rid()
        unique = f"u{self.h.next_uuid}"
        self.h.next_uuid += 1
        self.apply(JoinGroup(rid, group, "", instance, "consumer", protocols,
                             SESSION_MS if session_ok else 10, REBALANCE_MS, "c", "/h", v4, v9,
                             new_member_id("c", instance, unique)), group)

    @rule(group=st.sampled_from(GROUPS), protocols=st.sampled_from(PROTOCOL_LISTS[:2]))
    def client_joins(self, group: str, protocols: tuple[Protocol, ...]) -> None:
        """A v4+ client: MEMBER_ID_REQUIRED, then the join with the id it was given."""
        rid = self.h.rid()
        unique = f"u{self.h.next_uuid}"
        self.h.next_uuid += 1
        effects = self.apply(JoinGroup(rid, group, "", None, "consumer", protocols, SESSION_MS,
                                       REBALANCE_MS, "c", "/h", True, False,
                                       new_member_id("c", None, unique)), group)
        first = effects[0] if effects else None
        if isinstance(first, JoinGroupReply) and first.error is ErrorCode.MEMBER_ID_REQUIRED:
            self.apply(JoinGroup(self.h.rid(), group, first.member_id, None, "consumer",
                                 protocols, SESSION_MS, REBALANCE_MS, "c", "/h", True, False,
                                 "unused"), group)

    @rule(group=st.sampled_from(GROUPS), data=st.data(),
          instance=st.none() | st.sampled_from(INSTANCES), protocols=st.sampled_from(PROTOCOL_LISTS))
    def join_known(self, group: str, data: st.DataObject, instance: str | None,
                   protocols: tuple[Protocol, ...]) -> None:
        member = data.draw(st.sampled_from(self.ids))
        g = self.h.state.groups.get(group)
        if g is not None and member in g.members and data.draw(st.booleans()):
            instance = g.members[member].group_instance_id  # a well-behaved rejoin
        rid = self.h.rid()
        self.apply(JoinGroup(rid, group, member, instance, "consumer", protocols, SESSION_MS,
                             REBALANCE_MS, "c", "/h", True, False, "unused"), group)

    @rule(group=st.sampled_from(GROUPS), data=st.data(), gen=st.integers(0, 3),
          name=st.none() | st.sampled_from(("range", "roundrobin")))
    def sync(self, group: str, data: st.DataObject, gen: int, name: str | None) -> None:
        member = data.draw(st.sampled_from(self.ids))
        g = self.h.state.groups.get(group)
        instance = g.members[member].group_instance_id if g and member in g.members else None
        targets = sorted(g.members) if g else []
        assignments = data.draw(st.dictionaries(st.sampled_from(targets or ["x"]),
                                                st.binary(max_size=3), max_size=3))
        self.apply(SyncGroup(self.h.rid(), group, member, instance, self.generation(group, gen),
                             None, name, tuple(MemberAssignment(m, a)
                                               for m, a in assignments.items())), group)

    @rule(group=st.sampled_from(GROUPS), data=st.data(), gen=st.integers(0, 3),
          instance=st.none() | st.sampled_from(INSTANCES))
    def heartbeat(self, group: str, data: st.DataObject, gen: int, instance: str | None) -> None:
        member = data.draw(st.sampled_from(self.ids))
        self.apply(Heartbeat(self.h.rid(), group, member, instance, self.generation(group, gen)),
                   group)

    @rule(group=st.sampled_from(GROUPS), data=st.data())
    def leave(self, group: str, data: st.DataObject) -> None:
        batch = data.draw(st.lists(st.tuples(st.sampled_from(["", *self.ids]),
                                             st.none() | st.sampled_from(INSTANCES)),
                                   min_size=1, max_size=3))
        self.apply(LeaveGroup(self.h.rid(), group, tuple(MemberIdentity(m, i) for m, i in batch)),
                   group)

    @rule(group=st.sampled_from(GROUPS), data=st.data(), gen=st.integers(0, 3),
          offset=st.integers(0, 100), v9=st.booleans())
    def commit(self, group: str, data: st.DataObject, gen: int, offset: int, v9: bool) -> None:
        member = data.draw(st.sampled_from(["", *self.ids]))
        g = self.h.state.groups.get(group)
        instance = g.members[member].group_instance_id if g and member in g.members else None
        effects = self.apply(OffsetCommit(
            self.h.rid(), group, member, instance, self.generation(group, gen),
            (OffsetToCommit("t", offset % 2, offset),), v9), group)
        if replies(effects, PersistOffsets):
            fetched = dict(offset_fetch(self.h.state, group, [TopicPartition("t", offset % 2)]))
            assert fetched[TopicPartition("t", offset % 2)] == CommittedOffset(offset)

    @rule(groups=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2))
    def delete(self, groups: list[str]) -> None:
        effects = self.apply(DeleteGroups(self.h.rid(), tuple(groups)), None)
        for cleanup in replies(effects, DeleteGroupData):
            assert isinstance(cleanup, DeleteGroupData)
            assert self.h.state.groups[cleanup.group_id].state is GroupState.DEAD

    @rule()
    def periodic_clean_up(self) -> None:
        """The broker's clean-up (groups.retention-check-interval-ms) deletes what
        removable_groups names with DeleteGroups: every one of them is deleted, and no
        group with a member or a committed offset is ever named."""
        removable = removable_groups(self.h.state)
        for group_id in removable:
            group = self.h.state.groups[group_id]
            assert not group.members and not group.offsets and group.state is GroupState.EMPTY
        if removable:
            effects = self.apply(DeleteGroups(self.h.rid(), removable), None)
            (reply,) = replies(effects, DeleteGroupsReply)
            assert isinstance(reply, DeleteGroupsReply)
            assert [r.error for r in reply.results] == [ErrorCode.NONE] * len(removable)

    @rule(since=st.integers(0, 10), retention=st.integers(1, 10))
    def offsets_expire(self, since: int, retention: int) -> None:
        """The clean-up's offset expiry (groups.offsets-retention-ms), every group last
        active at ``since`` and the clock at 10: it names only Empty groups without members
        with committed offsets, every such group once its time has run out, and the
        DeleteGroups it steps deletes every one of them with its offsets."""
        now = 10
        expired = expired_groups(self.h.state, dict.fromkeys(self.h.state.groups, since),
                                 now, retention)
        for group in self.h.state.groups.values():
            empty = (group.state is GroupState.EMPTY and not group.members
                     and not group.pending and bool(group.offsets))
            assert (group.group_id in expired) == (empty and now - since >= retention)
        assert expired_groups(self.h.state, {}, now, retention) == ()
        assert expired_groups(self.h.state, dict.fromkeys(self.h.state.groups, 0), now, -1) == ()
        if expired:
            effects = self.apply(DeleteGroups(self.h.rid(), expired), None)
            (reply,) = replies(effects, DeleteGroupsReply)
            assert isinstance(reply, DeleteGroupsReply)
            assert [r.error for r in reply.results] == [ErrorCode.NONE] * len(expired)
            for group_id in expired:
                assert offset_fetch(self.h.state, group_id) == ()

    @rule(group=st.sampled_from(GROUPS))
    def cleanup_done(self, group: str) -> None:
        self.apply(GroupDataDeleted(group), group)

    @rule(group=st.sampled_from(GROUPS), data=st.data())
    def member_rejoins(self, group: str, data: st.DataObject) -> None:
        """A well-behaved member rejoins a rebalancing group as it was."""
        g = self.h.state.groups.get(group)
        if g is None or g.state is not GroupState.PREPARING_REBALANCE or not g.members:
            return
        member = g.members[data.draw(st.sampled_from(sorted(g.members)))]
        self.apply(JoinGroup(self.h.rid(), group, member.member_id, member.group_instance_id,
                             "consumer", member.protocols, SESSION_MS, REBALANCE_MS, "c", "/h",
                             True, False, "unused"), group)

    @rule(group=st.sampled_from(GROUPS), data=st.data())
    def member_syncs(self, group: str, data: st.DataObject) -> None:
        """A well-behaved member syncs for the current generation (the leader assigns)."""
        g = self.h.state.groups.get(group)
        if g is None or g.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        member = g.members[data.draw(st.sampled_from(sorted(g.members)))]
        assignments = tuple(MemberAssignment(m, m.encode()) for m in g.members) \
            if member.member_id == g.leader else ()
        effects = self.apply(SyncGroup(self.h.rid(), group, member.member_id,
                                       member.group_instance_id, g.generation, "consumer",
                                       g.protocol_name, assignments), group)
        if member.member_id == g.leader and g.state is GroupState.COMPLETING_REBALANCE:
            assert self.h.state.groups[group].state is GroupState.STABLE
            assert all(isinstance(e, SyncGroupReply) and e.error is ErrorCode.NONE
                       for e in effects)

    @rule(group=st.sampled_from(GROUPS))
    def rebalance_completes(self, group: str) -> None:
        """Every member behaves: rejoins, waits out the join phase, syncs. The group must
        end Stable with every member holding the leader's assignment."""
        synced_generation = None  # the generation whose assignment this rule's leader sent
        for _ in range(10):
            g = self.h.state.groups.get(group)
            if g is None or not g.members or g.state is GroupState.STABLE:
                break
            if g.state is GroupState.PREPARING_REBALANCE:
                for member in list(g.members.values()):
                    if member.join_request is None:
                        self.apply(JoinGroup(self.h.rid(), group, member.member_id,
                                             member.group_instance_id, "consumer",
                                             member.protocols, SESSION_MS, REBALANCE_MS, "c",
                                             "/h", True, False, "unused"), group)
                g = self.h.state.groups[group]
                if g.state is GroupState.PREPARING_REBALANCE and g.join_deadline is not None:
                    self.h.now = max(self.h.now, g.join_deadline)
                    for event in due_timeouts(self.h.state, self.h.now):
                        self.apply(event, event.group_id)
            formed = self.h.state.groups[group]
            if formed.state is GroupState.COMPLETING_REBALANCE:
                leader = formed.leader
                for member_id in sorted(formed.members, key=lambda m: m == leader):
                    member = formed.members[member_id]
                    assignments = tuple(MemberAssignment(m, m.encode()) for m in formed.members) \
                        if member_id == leader else ()
                    self.apply(SyncGroup(self.h.rid(), group, member_id,
                                         member.group_instance_id, formed.generation, None, None,
                                         assignments), group)
                synced_generation = formed.generation
        g = self.h.state.groups.get(group)
        # A group that was already Stable keeps whatever its own leader sent; only a
        # rebalance this rule drove must end with the assignment this rule's leader sent.
        if g is not None and g.members and g.state is GroupState.STABLE \
                and g.generation == synced_generation:
            assert all(m.assignment == m.member_id.encode() or m.group_instance_id
                       for m in g.members.values())

    @rule(ms=st.one_of(st.integers(0, 12_000), st.integers(0, 400_000)))
    def time_passes(self, ms: int) -> None:
        target = self.h.now + ms
        while (deadline := next_deadline(self.h.state)) is not None and deadline <= target:
            self.h.now = max(self.h.now, deadline)
            due = due_timeouts(self.h.state, self.h.now)
            assert due, "next_deadline names a time at which nothing is due"
            for event in due:
                self.apply(event, event.group_id)
        self.h.now = target

    @rule(group=st.sampled_from(GROUPS), data=st.data(), kind=st.integers(0, 3))
    def early_timer(self, group: str, data: st.DataObject, kind: int) -> None:
        """A timer event before its deadline (a stale timer in the adapter) changes nothing."""
        member = data.draw(st.sampled_from(self.ids))
        event = (SessionTimeout(group, member), PendingMemberTimeout(group, member),
                 RebalanceTimeout(group), PendingSyncTimeout(group))[kind]
        deadline = next_deadline(self.h.state)
        if deadline is None or deadline > self.h.now:
            before = self.h.state
            assert self.apply(event, group) == ()
            assert self.h.state == before

    @rule()
    def restart(self) -> None:
        in_memory, _ = step(self.h.state, Restart(), self.h.now)
        self.h.restart()
        self.outstanding.clear()  # their connections died with the broker
        assert self.h.state == in_memory, "a snapshot loses something a restart keeps"

    @precondition(lambda self: bool(self.h.state.groups))
    @invariant()
    def every_invariant_holds(self) -> None:
        for name, check in INVARIANTS.items():
            assert check(self.h.state) is None, name
        for g in self.h.state.groups.values():
            hypothesis_event(f"{g.state.value} with {len(g.members)} members")
        assert set(OUTPUT_INVARIANTS) == {"StaleCommitNeverStored",
                                          "SyncRepliesCarryLeaderAssignment"}

    @invariant()
    def timers_are_what_the_state_arms(self) -> None:
        deadline = next_deadline(self.h.state)
        if deadline is None:
            assert due_timeouts(self.h.state, 10**15) == ()
        else:
            assert due_timeouts(self.h.state, deadline - 1) == ()
            assert due_timeouts(self.h.state, deadline)

    @invariant()
    def held_back_requests_are_the_parked_ones(self) -> None:
        parked = {r for g in self.h.state.groups.values() for m in g.members.values()
                  for r in (m.join_request, m.sync_request) if r is not None}
        assert parked <= self.outstanding


# The machine checks every invariant of spec/GroupCoordinator.tla after every step (the
# state's, the effects' and GenerationIncreases); its rules take actions the example tests
# below do not all reach.
TestCoordinatorMachine = CoordinatorMachine.TestCase
for _mark in (pytest.mark.spec("GroupCoordinator", *INVARIANTS, *OUTPUT_INVARIANTS,
                               "GenerationIncreases"),
              pytest.mark.spec("GroupCoordinator", "Restart", note="rule `restart`"),
              pytest.mark.spec("GroupCoordinator", "DeleteGroups",
                               note="rules `periodic_clean_up`, `offsets_expire`"),
              pytest.mark.spec("GroupCoordinatorLive", "RebalanceCompletes",
                               note="rule `rebalance_completes` asserts Stable")):
    TestCoordinatorMachine = _mark(TestCoordinatorMachine)
TestCoordinatorMachine.settings = settings(
    max_examples=examples(3), stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


# --- example tests: error codes ------------------------------------------------------------

@pytest.mark.spec("GroupCoordinator", "DeleteGroups")
def test_the_clean_up_removes_an_empty_group_without_offsets_only() -> None:
    """What Kafka's periodic clean-up removes: a group its last member left without
    committing (a console consumer without --group); a group with committed offsets
    (members gone or never there) and a group with members stay."""
    h = Harness()
    left = h.stable_group("console", group="left")
    h.leave("left", (left["console"], None))
    assert h.state.groups["left"].state is GroupState.EMPTY
    h.commit("committed", "", -1, offset=3)
    h.stable_group("c1", group="active")
    assert removable_groups(h.state) == ("left",)
    h.delete(*removable_groups(h.state))
    assert [g.group_id for g in list_groups(h.state)] == ["active", "committed"]


@pytest.mark.spec("GroupCoordinator", "DeleteGroups")
def test_offsets_expire_once_their_group_has_been_empty_for_the_retention() -> None:
    """Kafka's offsets.retention.minutes for classic groups: an Empty group's offsets go
    once it has been Empty (here: last active) for the retention; a group with members
    keeps its offsets however old they are, and so does a group the adapter has no time
    for. The expired group is deleted with its offsets, as Kafka removes a group whose
    last offset expired."""
    h = Harness()
    left = h.stable_group("c1", group="left")
    h.commit("left", left["c1"], 1, offset=7)
    h.leave("left", (left["c1"], None))
    active = h.stable_group("c2", group="active")
    h.commit("active", active["c2"], 1, offset=3)
    h.commit("standalone", "", -1, offset=2)
    seen = {"left": 1_000, "active": 0, "standalone": 5_000}
    assert expired_groups(h.state, seen, 1_999, 1_000) == ()
    assert expired_groups(h.state, seen, 2_000, 1_000) == ("left",)
    assert expired_groups(h.state, seen, 6_000, 1_000) == ("left", "standalone")
    assert expired_groups(h.state, {"active": 0}, 10**9, 1_000) == ()
    assert expired_groups(h.state, seen, 10**9, -1) == ()
    h.delete("left")
    assert offset_fetch(h.state, "left") == ()
    assert [g.group_id for g in list_groups(h.state)] == ["active", "standalone"]


@pytest.mark.spec("GroupCoordinator", "Heartbeat", "UNKNOWN_MEMBER_ID")
def test_unknown_member_id_for_a_heartbeat_of_a_member_the_group_does_not_know() -> None:
    h = Harness()
    h.stable_group("a")
    assert h.heartbeat("g", "ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nogroup", "ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.spec("GroupCoordinator", "JoinGroup", "UNKNOWN_MEMBER_ID")
def test_unknown_member_id_for_a_join_with_a_member_id_the_group_never_gave() -> None:
    h = Harness()
    _, (reply,) = h.join("g", "made-up-id")
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert "g" not in h.state.groups  # no group is created for it


@pytest.mark.spec("GroupCoordinator", "SyncGroup", "UNKNOWN_MEMBER_ID")
def test_unknown_member_id_for_a_sync_to_an_empty_group() -> None:
    h = Harness()
    h.commit("g", "", -1)  # a simple group: Empty
    _, (reply,) = h.sync("g", "someone", 0)
    assert isinstance(reply, SyncGroupReply)
    assert reply.error is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.spec("GroupCoordinator", "Heartbeat", "SyncGroup", "ILLEGAL_GENERATION")
def test_illegal_generation_for_a_heartbeat_and_sync_of_an_old_generation() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    assert h.heartbeat("g", ids["a"], generation - 1) is ErrorCode.ILLEGAL_GENERATION
    _, (reply,) = h.sync("g", ids["a"], generation + 1)
    assert isinstance(reply, SyncGroupReply)
    assert reply.error is ErrorCode.ILLEGAL_GENERATION


@pytest.mark.spec("GroupCoordinator", "OffsetCommit", "StaleCommitNeverStored")
def test_stale_commit_is_rejected_and_not_stored() -> None:
    h = Harness()
    ids = h.stable_group("a")
    generation = h.state.groups["g"].generation
    effects = h.commit("g", ids["a"], generation - 1, offset=42)
    assert not replies(effects, PersistOffsets)
    reply = only(effects, OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert {p.error for p in reply.partitions} == {ErrorCode.ILLEGAL_GENERATION}
    assert offset_fetch(h.state, "g", [TopicPartition("t", 0)]) == ((TopicPartition("t", 0), None),)


@pytest.mark.spec("GroupCoordinator", "OffsetCommit")
def test_commit_of_the_current_generation_is_persisted_then_answered() -> None:
    h = Harness()
    ids = h.stable_group("a")
    effects = h.commit("g", ids["a"], h.state.groups["g"].generation, offset=42)
    assert [type(e) for e in effects] == [PersistOffsets, OffsetCommitReply]
    persist = effects[0]
    assert isinstance(persist, PersistOffsets)
    assert persist.offsets == ((TopicPartition("t", 0), CommittedOffset(42)),)


@pytest.mark.spec("GroupCoordinator", "OffsetCommit", "ILLEGAL_GENERATION", "GROUP_ID_NOT_FOUND")
def test_illegal_generation_or_group_id_not_found_for_a_commit_to_an_unknown_group() -> None:
    h = Harness()
    reply = only(h.commit("g", "m", 3), OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert reply.partitions[0].error is ErrorCode.ILLEGAL_GENERATION
    reply = only(h.commit("g", "m", 3, v9=True), OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert reply.partitions[0].error is ErrorCode.GROUP_ID_NOT_FOUND
    assert "g" not in h.state.groups


@pytest.mark.spec("GroupCoordinator", "OffsetCommit")
def test_commit_without_group_management_creates_a_simple_group() -> None:
    h = Harness()
    effects = h.commit("g", "", -1, offset=7)
    assert replies(effects, PersistOffsets)
    assert h.state.groups["g"].state is GroupState.EMPTY
    assert describe_group(h.state, "g").protocol_type == ""


@pytest.mark.spec("GroupCoordinator", "OffsetCommit", "UNKNOWN_MEMBER_ID")
def test_unknown_member_id_for_a_generationless_commit_to_a_group_with_members() -> None:
    h = Harness()
    h.stable_group("a")
    reply = only(h.commit("g", "", -1), OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert reply.partitions[0].error is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.spec("GroupCoordinator", "Heartbeat", "SyncGroup", "REBALANCE_IN_PROGRESS")
def test_rebalance_in_progress_for_heartbeat_and_sync_while_preparing() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    h.join("g", client="c", v4=False)  # a new member: Stable -> PreparingRebalance
    assert h.state.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", ids["a"], generation) is ErrorCode.REBALANCE_IN_PROGRESS
    _, (reply,) = h.sync("g", ids["a"], generation)
    assert isinstance(reply, SyncGroupReply)
    assert reply.error is ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.spec("GroupCoordinator", "OffsetCommit")
def test_commit_of_the_previous_generation_is_stored_while_preparing_a_rebalance() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    h.join("g", client="c", v4=False)
    effects = h.commit("g", ids["a"], generation, offset=9)
    assert replies(effects, PersistOffsets)


@pytest.mark.spec("GroupCoordinator", "OffsetCommit", "REBALANCE_IN_PROGRESS")
def test_rebalance_in_progress_for_a_commit_while_completing_the_rebalance() -> None:
    h = Harness()
    for client in ("a", "b"):
        _, held = h.join("g", client=client, v4=False)
        assert held == ()
    h.settle_join()
    g = h.state.groups["g"]
    assert g.state is GroupState.COMPLETING_REBALANCE
    member = next(iter(g.members))
    reply = only(h.commit("g", member, g.generation), OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert reply.partitions[0].error is ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.spec("GroupCoordinator", "LeaveGroup", "REBALANCE_IN_PROGRESS")
def test_held_back_syncs_get_rebalance_in_progress_when_a_member_leaves() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    h.join("g", client="b", v4=False)
    completed = h.settle_join()
    joins = [e for e in completed if isinstance(e, JoinGroupReply)]
    assert len(joins) == 2 and {j.error for j in joins} == {ErrorCode.NONE}
    g = h.state.groups["g"]
    follower = next(m for m in g.members if m != g.leader)
    sync_rid, effects = h.sync("g", follower, g.generation)
    assert effects == ()  # held back until the leader's assignment
    effects = h.leave("g", (g.leader or "", None))
    answer = only(effects, SyncGroupReply)
    assert isinstance(answer, SyncGroupReply)
    assert answer.request_id == sync_rid and answer.error is ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.spec("GroupCoordinator", "JoinGroup", "issued", "FreshId", "MEMBER_ID_REQUIRED")
def test_member_id_required_for_a_v4_join_without_member_id_then_the_rejoin_joins() -> None:
    h = Harness()
    _, (reply,) = h.join("g", client="a")
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.MEMBER_ID_REQUIRED
    assert reply.member_id.startswith("a-")
    assert reply.member_id in h.state.groups["g"].pending
    rid, effects = h.join("g", reply.member_id, client="a")
    assert effects == ()  # the initial rebalance delay holds it back
    (answer,) = h.advance(3_000)
    assert isinstance(answer, JoinGroupReply)
    assert answer.request_id == rid and answer.error is ErrorCode.NONE
    assert answer.generation_id == 1 and answer.leader == reply.member_id
    assert [m.member_id for m in answer.members] == [reply.member_id]


@pytest.mark.spec("GroupCoordinator", "JoinGroup")
def test_v3_join_without_member_id_joins_at_once() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    g = h.state.groups["g"]
    assert len(g.members) == 1 and not g.pending
    assert g.state is GroupState.PREPARING_REBALANCE


@pytest.mark.spec("GroupCoordinator", "PendingMemberTimeout")
def test_pending_member_id_expires_after_the_session_timeout() -> None:
    h = Harness()
    _, (reply,) = h.join("g", client="a")
    assert isinstance(reply, JoinGroupReply)
    h.advance(SESSION_MS)
    assert reply.member_id not in h.state.groups["g"].pending
    _, (late,) = h.join("g", reply.member_id)
    assert isinstance(late, JoinGroupReply)
    assert late.error is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.spec("GroupCoordinator", "ReplaceStaticMember", "FENCED_INSTANCE_ID")
def test_fenced_instance_id_for_the_old_member_id_of_a_replaced_static_member() -> None:
    h = Harness()
    h.join("g", instance="i1", client="a")
    h.advance(3_000)
    g = h.state.groups["g"]
    old_id = next(iter(g.members))
    h.sync("g", old_id, g.generation, {old_id: b"p0"}, instance="i1")
    assert h.state.groups["g"].state is GroupState.STABLE
    generation = h.state.groups["g"].generation
    # The same instance restarts and joins without its member id: it replaces the old one.
    _, (reply,) = h.join("g", instance="i1", client="a")
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.NONE and reply.member_id != old_id
    assert reply.generation_id == generation  # no rebalance
    assert reply.leader == old_id  # pre-v9: the old leader id, so it does not reassign
    assert h.state.groups["g"].state is GroupState.STABLE
    _, (sync_reply,) = h.sync("g", reply.member_id, generation, instance="i1")
    assert isinstance(sync_reply, SyncGroupReply)
    assert sync_reply.assignment == b"p0"  # the assignment moved to the new id
    assert h.heartbeat("g", old_id, generation, instance="i1") is ErrorCode.FENCED_INSTANCE_ID
    reply_old = only(h.commit("g", old_id, generation, instance="i1"), OffsetCommitReply)
    assert isinstance(reply_old, OffsetCommitReply)
    assert reply_old.partitions[0].error is ErrorCode.FENCED_INSTANCE_ID


@pytest.mark.spec("GroupCoordinator", "ReplaceStaticMember")
def test_static_member_rejoin_with_v9_tells_the_leader_to_skip_assignment() -> None:
    h = Harness()
    h.join("g", instance="i1", client="a")
    h.advance(3_000)
    g = h.state.groups["g"]
    old_id = next(iter(g.members))
    h.sync("g", old_id, g.generation, {old_id: b"p0"}, instance="i1")
    _, (reply,) = h.join("g", instance="i1", client="a", v9=True)
    assert isinstance(reply, JoinGroupReply)
    assert reply.leader == reply.member_id and reply.skip_assignment
    assert [m.member_id for m in reply.members] == [reply.member_id]


@pytest.mark.spec("GroupCoordinator", "JoinGroup", "INCONSISTENT_GROUP_PROTOCOL")
def test_inconsistent_group_protocol_for_a_join_sharing_no_protocol() -> None:
    h = Harness()
    h.stable_group("a")
    _, (reply,) = h.join("g", protocols=RR, v4=False)
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    _, (reply,) = h.join("g", protocols=RANGE_A, protocol_type="connect", v4=False)
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.spec("GroupCoordinator", "SyncGroup", "INCONSISTENT_GROUP_PROTOCOL")
def test_inconsistent_group_protocol_for_a_sync_naming_another_protocol() -> None:
    h = Harness()
    ids = h.stable_group("a")
    _, (reply,) = h.sync("g", ids["a"], h.state.groups["g"].generation, protocol_name="sticky")
    assert isinstance(reply, SyncGroupReply)
    assert reply.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.spec("GroupCoordinator", "JoinGroup", "INVALID_SESSION_TIMEOUT")
@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
def test_invalid_session_timeout_outside_the_brokers_bounds(session_ms: int) -> None:
    h = Harness()
    _, (reply,) = h.join("g", session_ms=session_ms)
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.state.groups == {}


@pytest.mark.spec("GroupCoordinator", "DeleteGroups", "NON_EMPTY_GROUP")
def test_non_empty_group_cannot_be_deleted() -> None:
    h = Harness()
    h.stable_group("a")
    reply = only(h.delete("g"), DeleteGroupsReply)
    assert isinstance(reply, DeleteGroupsReply)
    assert reply.results[0].error is ErrorCode.NON_EMPTY_GROUP
    assert h.state.groups["g"].state is GroupState.STABLE


@pytest.mark.spec("GroupCoordinator", "DeleteGroups", "GROUP_ID_NOT_FOUND")
def test_group_id_not_found_for_deleting_an_unknown_group() -> None:
    h = Harness()
    reply = only(h.delete("nope"), DeleteGroupsReply)
    assert isinstance(reply, DeleteGroupsReply)
    assert reply.results[0].error is ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.spec("GroupCoordinator", "GroupDataDeleted", "COORDINATOR_NOT_AVAILABLE")
def test_coordinator_not_available_while_a_deleted_group_is_cleaned_up() -> None:
    h = Harness()
    h.commit("g", "", -1, offset=3)
    effects = h.delete("g")
    assert DeleteGroupData("g") in effects
    assert h.state.groups["g"].state is GroupState.DEAD
    _, (join,) = h.join("g")
    assert isinstance(join, JoinGroupReply)
    assert join.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.heartbeat("g", "x", 0) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    commit = only(h.commit("g", "", -1), OffsetCommitReply)
    assert isinstance(commit, OffsetCommitReply)
    assert commit.partitions[0].error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert offset_fetch(h.state, "g", None) == ()  # the offsets went with the group
    assert describe_group(h.state, "g").state == "Dead"
    assert list_groups(h.state) == ()
    again = only(h.delete("g"), DeleteGroupsReply)
    assert isinstance(again, DeleteGroupsReply)
    assert again.results[0].error is ErrorCode.GROUP_ID_NOT_FOUND
    h.run(GroupDataDeleted("g"))
    assert "g" not in h.state.groups
    _, (join,) = h.join("g")
    assert isinstance(join, JoinGroupReply)
    assert join.error is ErrorCode.MEMBER_ID_REQUIRED  # a new group of the same name


@pytest.mark.spec("GroupCoordinator", "JoinGroup", "GROUP_MAX_SIZE_REACHED")
def test_group_max_size_reached_for_one_member_too_many() -> None:
    h = Harness(state=initial_state(Config(group_max_size=1)))
    h.stable_group("a")
    _, (reply,) = h.join("g", v4=False)
    assert isinstance(reply, JoinGroupReply)
    assert reply.error is ErrorCode.GROUP_MAX_SIZE_REACHED and reply.member_id == ""
    assert len(h.state.groups["g"].members) == 1


@pytest.mark.parametrize("kind", ["join", "sync", "heartbeat", "leave"])
def test_invalid_group_id_for_an_empty_group_id(kind: str) -> None:
    h = Harness()
    if kind == "join":
        _, (reply,) = h.join("")
    elif kind == "sync":
        _, (reply,) = h.sync("", "m", 0)
    elif kind == "heartbeat":
        assert h.heartbeat("", "m", 0) is ErrorCode.INVALID_GROUP_ID
        return
    else:
        (reply,) = h.leave("", ("m", None))
    assert isinstance(reply, JoinGroupReply | SyncGroupReply | LeaveGroupReply)
    assert reply.error is ErrorCode.INVALID_GROUP_ID


def test_offset_metadata_too_large_is_refused_per_partition() -> None:
    h = Harness(state=initial_state(Config(offset_metadata_max_bytes=4)))
    effects = h.commit("g", "", -1, metadata="too long")
    reply = only(effects, OffsetCommitReply)
    assert isinstance(reply, OffsetCommitReply)
    assert reply.partitions[0].error is ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert not replies(effects, PersistOffsets)


@pytest.mark.spec("GroupCoordinator", "LeaveGroup", "UNKNOWN_MEMBER_ID")
def test_leave_of_an_unknown_group_answers_each_member_unknown() -> None:
    h = Harness()
    reply = only(h.leave("g", ("a", None), ("", "i1")), LeaveGroupReply)
    assert isinstance(reply, LeaveGroupReply)
    assert reply.error is ErrorCode.NONE
    assert [r.error for r in reply.members] == [ErrorCode.UNKNOWN_MEMBER_ID] * 2


# --- example tests: behaviour ----------------------------------------------------------------

@pytest.mark.spec("GroupCoordinator", "StableAssignmentFromLeader")
def test_two_members_join_sync_and_hold_the_leaders_assignment() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    g = h.state.groups["g"]
    assert g.generation == 1
    for member_id in ids.values():
        assert g.members[member_id].assignment == member_id.encode()
    description = describe_group(h.state, "g")
    assert description.state == "Stable" and description.protocol_data == "range"
    assert {m.member_id for m in description.members} == set(ids.values())
    assert list_groups(h.state, states=["stable"])[0].group_id == "g"


@pytest.mark.spec("GroupCoordinator", "SyncGroup")
def test_followers_sync_is_answered_when_the_leader_sends_the_assignment() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    h.join("g", client="b", v4=False)
    h.settle_join()
    g = h.state.groups["g"]
    leader = g.leader or ""
    follower = next(m for m in g.members if m != leader)
    rid, held = h.sync("g", follower, g.generation)
    assert held == ()
    _, effects = h.sync("g", leader, g.generation, {follower: b"F", leader: b"L"})
    answers = {e.request_id: e for e in effects if isinstance(e, SyncGroupReply)}
    assert answers[rid].assignment == b"F" and answers[rid].error is ErrorCode.NONE


@pytest.mark.spec("GroupCoordinator", "SyncGroup")
def test_missing_members_get_an_empty_assignment() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    h.join("g", client="b", v4=False)
    h.settle_join()
    g = h.state.groups["g"]
    leader = g.leader or ""
    h.sync("g", leader, g.generation, {leader: b"everything"})
    follower = next(m for m in g.members if m != leader)
    assert h.state.groups["g"].members[follower].assignment == b""


@pytest.mark.spec("GroupCoordinator", "RebalanceTimeout")
def test_initial_rebalance_delay_is_extended_while_members_arrive() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    h.advance(2_000)
    h.join("g", client="b", v4=False)  # arrives during the delay
    assert h.advance(1_000) == []  # the delay is extended, not ended
    assert h.state.groups["g"].state is GroupState.PREPARING_REBALANCE
    completed = h.advance(3_000)
    assert len([e for e in completed if isinstance(e, JoinGroupReply)]) == 2


@pytest.mark.spec("GroupCoordinator", "SessionTimeout")
def test_session_expiry_of_a_member_rebalances_the_rest() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    for _ in range(3):  # a keeps heartbeating, b does not
        h.advance(SESSION_MS // 2)
        h.heartbeat("g", ids["a"], generation)
    g = h.state.groups["g"]
    assert ids["b"] not in g.members
    assert g.state is GroupState.PREPARING_REBALANCE
    _rid, _ = h.join("g", ids["a"])
    g = h.state.groups["g"]
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == generation + 1


@pytest.mark.spec("GroupCoordinator", "JoinGroup")
def test_leader_rejoin_in_stable_starts_a_rebalance_follower_rejoin_does_not() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    g = h.state.groups["g"]
    follower = next(m for m in ids.values() if m != g.leader)
    _, (reply,) = h.join("g", follower)
    assert isinstance(reply, JoinGroupReply)
    assert reply.generation_id == g.generation and reply.members == ()
    assert h.state.groups["g"].state is GroupState.STABLE
    h.join("g", g.leader or "")
    assert h.state.groups["g"].state.value == "PreparingRebalance"


@pytest.mark.spec("GroupCoordinator", "JoinGroup")
def test_changed_metadata_starts_a_rebalance() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    h.join("g", ids["a"], protocols=RANGE_B)
    assert h.state.groups["g"].state is GroupState.PREPARING_REBALANCE


@pytest.mark.spec("GroupCoordinator", "SelectProtocol")
def test_protocol_vote_picks_the_most_preferred_common_protocol() -> None:
    h = Harness()
    h.join("g", client="a", protocols=BOTH, v4=False)
    h.join("g", client="b", protocols=BOTH, v4=False)
    h.join("g", client="c", protocols=(Protocol("range", b"a"), Protocol("roundrobin", b"r")),
           v4=False)
    h.settle_join()
    assert h.state.groups["g"].protocol_name == "roundrobin"  # two votes to one


@pytest.mark.spec("GroupCoordinator", "LeaveGroup")
def test_last_member_leaving_empties_the_group_with_a_new_generation() -> None:
    h = Harness()
    ids = h.stable_group("a")
    generation = h.state.groups["g"].generation
    h.leave("g", (ids["a"], None))
    g = h.state.groups["g"]
    assert g.state is GroupState.EMPTY and g.generation == generation + 1 and not g.members


@pytest.mark.spec("GroupCoordinator", "LeaveGroup")
def test_admin_removes_a_static_member_by_instance_id() -> None:
    h = Harness()
    h.join("g", instance="i1", client="a")
    h.advance(3_000)
    reply = only(h.leave("g", ("", "i1")), LeaveGroupReply)
    assert isinstance(reply, LeaveGroupReply)
    assert reply.members[0].error is ErrorCode.NONE
    assert not h.state.groups["g"].members


@pytest.mark.spec("GroupCoordinator", "PendingSyncTimeout")
def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    h.join("g", client="a", v4=False)
    h.join("g", client="b", v4=False)
    h.settle_join()
    g = h.state.groups["g"]
    leader = g.leader or ""
    h.sync("g", leader, g.generation, {})
    assert h.state.groups["g"].state is GroupState.STABLE
    h.advance(REBALANCE_MS)  # the follower never sent SyncGroup
    g = h.state.groups["g"]
    assert set(g.members) <= {leader} and g.state is not GroupState.STABLE


@pytest.mark.spec("GroupCoordinator", "SessionTimeout")
def test_new_member_waiting_in_join_expires_after_the_new_member_timeout() -> None:
    h = Harness()
    ids = h.stable_group("a")
    rid, _ = h.join("g", client="b", v4=False)  # new member: the group rebalances
    effects = h.advance(300_000)  # a never rejoins; b's join is held back all along
    answers = [e for e in effects if isinstance(e, JoinGroupReply) and e.request_id == rid]
    assert answers, "the new member's JoinGroup must be answered"
    assert ids["a"] not in h.state.groups["g"].members


@pytest.mark.spec("GroupCoordinator", "Restart")
def test_restart_keeps_generations_assignments_and_commits() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    h.commit("g", ids["a"], generation, offset=11)
    h.now += 60_000  # the broker was down for a minute
    h.restart()
    g = h.state.groups["g"]
    assert g.state is GroupState.STABLE and g.generation == generation
    assert g.members[ids["a"]].assignment == ids["a"].encode()
    assert offset_fetch(h.state, "g", [TopicPartition("t", 0)])[0][1] == CommittedOffset(11)
    assert h.heartbeat("g", ids["a"], generation) is ErrorCode.NONE  # timers re-armed
    assert next_deadline(h.state) is not None and next_deadline(h.state) > h.now  # type: ignore[operator]


@pytest.mark.spec("GroupCoordinator", "Restart")
def test_restart_drops_held_back_requests_and_members_rejoin() -> None:
    h = Harness()
    ids = h.stable_group("a", "b")
    generation = h.state.groups["g"].generation
    h.join("g", ids["a"], protocols=RANGE_B)  # held back: PreparingRebalance
    assert h.restart() == ()
    g = h.state.groups["g"]
    assert all(m.join_request is None for m in g.members.values())
    h.join("g", ids["a"], protocols=RANGE_B)
    _rid, _ = h.join("g", ids["b"])
    g = h.state.groups["g"]
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation == generation + 1


@pytest.mark.spec("GroupCoordinator", "Restart")
def test_restart_orders_the_clean_up_of_a_dead_group_again() -> None:
    h = Harness()
    h.commit("g", "", -1)
    h.delete("g")
    assert h.restart() == (DeleteGroupData("g"),)


def test_timeouts_that_are_not_due_change_nothing() -> None:
    h = Harness()
    ids = h.stable_group("a")
    before = h.state
    for event in (SessionTimeout("g", ids["a"]), RebalanceTimeout("g"), PendingSyncTimeout("g"),
                  PendingMemberTimeout("g", "x"), SessionTimeout("nogroup", "x")):
        assert h.run(event) == ()
        assert h.state == before


def test_groups_are_independent() -> None:
    h = Harness()
    h.stable_group("a", group="g1")
    before = h.state.groups["g1"]
    h.stable_group("b", group="g2")
    h.delete("g2")
    assert h.state.groups["g1"] == before


def test_snapshot_is_json_and_round_trips() -> None:
    h = Harness()
    h.stable_group("a", "b")
    h.commit("g", "", -1)  # refused: the group has members
    h.commit("other", "", -1, offset=4, metadata="m")
    text = json.dumps(to_snapshot(h.state))
    again = from_snapshot(json.loads(text))
    assert to_snapshot(again) == to_snapshot(h.state)
    assert again.groups["other"].offsets == h.state.groups["other"].offsets


def test_every_spec_invariant_has_a_python_function() -> None:
    spec = (tlc.spec_dir() / "GroupCoordinator.tla").read_text()
    for name in (*INVARIANTS, *OUTPUT_INVARIANTS, "GenerationIncreases"):
        assert f"\n{name} ==" in spec, name
