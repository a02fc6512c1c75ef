"""The invariants of spec/GroupCoordinator.tla, over the Python state.

Each function carries the name of its TLA+ invariant in snake_case
(``INVARIANTS`` maps the TLA+ names to them) and returns None when the
invariant holds, else a message saying what is wrong. The spec's invariants
over ``out`` (the effects of the last step) take the step's effects too.
``GenerationIncreases`` is a property of a step (TLA+ ``[][...]_vars``): it
takes the state before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from korvet.core.coordinator.effects import Effect, PersistOffsets, SyncGroupReply
from korvet.core.coordinator.errors import ErrorCode
from korvet.core.coordinator.state import CoordinatorState, Group, GroupState

Violation = str | None

REBALANCING = (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
FORMED = (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)


def _first(messages: Iterable[str | None]) -> Violation:
    return next((m for m in messages if m), None)


def _type_ok(g: Group) -> str | None:
    if g.generation < 0:
        return f"{g.group_id}: negative generation {g.generation}"
    for member_id, member in g.members.items():
        if member.member_id != member_id:
            return f"{g.group_id}: member stored under {member_id!r} is {member.member_id!r}"
        if not member.protocols:
            return f"{g.group_id}: member {member_id} has no protocol"
    if g.initial_rebalance and g.state is not GroupState.PREPARING_REBALANCE:
        return f"{g.group_id}: initial rebalance flag set in {g.state.value}"
    return None


def type_ok(state: CoordinatorState) -> Violation:
    return _first(_type_ok(g) for g in state.groups.values())


def _leader_is_member(g: Group) -> str | None:
    if g.leader is not None and g.leader not in g.members:
        return f"{g.group_id}: leader {g.leader} is not a member"
    if g.members and g.leader is None:
        return f"{g.group_id}: {len(g.members)} members and no leader"
    return None


def leader_is_member(state: CoordinatorState) -> Violation:
    """LeaderIsMember: the leader is a member; a group with members has a leader."""
    return _first(_leader_is_member(g) for g in state.groups.values())


def _instance_id_unique(g: Group) -> str | None:
    owners: dict[str, str] = {}
    for member_id, member in g.members.items():
        instance = member.group_instance_id
        if instance is None:
            continue
        if instance in owners:
            return f"{g.group_id}: instance {instance} held by {owners[instance]} and {member_id}"
        owners[instance] = member_id
    return None


def instance_id_unique(state: CoordinatorState) -> Violation:
    """InstanceIdUnique: an instance id maps to at most one live member."""
    return _first(_instance_id_unique(g) for g in state.groups.values())


def _stable_assignment_from_leader(g: Group) -> str | None:
    if g.state is not GroupState.STABLE:
        return None
    sync = g.leader_sync
    if sync is None or sync.generation != g.generation:
        return f"{g.group_id}: Stable at generation {g.generation} without the leader's " \
               f"assignment for it"
    if set(sync.assignments) != set(g.members):
        return f"{g.group_id}: the leader assigned {sorted(sync.assignments)}, " \
               f"members are {sorted(g.members)}"
    for member_id, member in g.members.items():
        if member.assignment != sync.assignments[member_id]:
            return f"{g.group_id}: {member_id} holds {member.assignment!r}, the leader sent " \
                   f"{sync.assignments[member_id]!r}"
    return None


def stable_assignment_from_leader(state: CoordinatorState) -> Violation:
    """StableAssignmentFromLeader: in Stable every member holds the assignment the
    leader sent for the current generation."""
    return _first(_stable_assignment_from_leader(g) for g in state.groups.values())


def _parked_only_while_rebalancing(g: Group) -> str | None:
    for member_id, member in g.members.items():
        if member.awaiting_join and g.state is not GroupState.PREPARING_REBALANCE:
            return f"{g.group_id}: {member_id} has a JoinGroup held back in {g.state.value}"
        if member.awaiting_sync and g.state is not GroupState.COMPLETING_REBALANCE:
            return f"{g.group_id}: {member_id} has a SyncGroup held back in {g.state.value}"
    return None


def parked_only_while_rebalancing(state: CoordinatorState) -> Violation:
    """ParkedOnlyWhileRebalancing: held-back requests exist only in the phase that holds them."""
    return _first(_parked_only_while_rebalancing(g) for g in state.groups.values())


def _membership_consistent(g: Group) -> str | None:
    if set(g.pending) & set(g.members):
        return f"{g.group_id}: {sorted(set(g.pending) & set(g.members))} both pending and members"
    if not g.pending_sync <= set(g.members):
        return f"{g.group_id}: pending sync {sorted(g.pending_sync - set(g.members))} not members"
    if g.pending_sync and g.state not in FORMED:
        return f"{g.group_id}: members pending sync in {g.state.value}"
    if g.state in (GroupState.EMPTY, GroupState.DEAD) and g.members:
        return f"{g.group_id}: {g.state.value} with members"
    if g.state in FORMED and not g.members:
        return f"{g.group_id}: {g.state.value} without members"
    if g.state is GroupState.DEAD and (g.pending or g.offsets or g.generation):
        return f"{g.group_id}: a Dead group keeps data"
    return None


def membership_consistent(state: CoordinatorState) -> Violation:
    """MembershipConsistent: pending, pending-sync and members agree with the state."""
    return _first(_membership_consistent(g) for g in state.groups.values())


def _protocol_agreed(g: Group) -> str | None:
    if g.state not in FORMED:
        return None
    if g.protocol_name is None:
        return f"{g.group_id}: {g.state.value} without a protocol"
    for member_id, member in g.members.items():
        if g.protocol_name not in member.protocol_names():
            return f"{g.group_id}: {member_id} does not support {g.protocol_name}"
    return None


def protocol_agreed(state: CoordinatorState) -> Violation:
    """ProtocolAgreed: outside a rebalance every member supports the selected protocol."""
    return _first(_protocol_agreed(g) for g in state.groups.values())


def stale_commit_never_stored(state: CoordinatorState, effects: Iterable[Effect]) -> Violation:
    """StaleCommitNeverStored: an offset write is ordered only for the current
    generation of a member (Stable or PreparingRebalance), or for generation -1
    on an Empty group. ``state`` is the state after the step."""
    for effect in effects:
        if not isinstance(effect, PersistOffsets):
            continue
        g = state.groups.get(effect.group_id)
        if g is None:
            return f"{effect.group_id}: offsets written for an unknown group"
        if effect.generation_id < 0 and g.state is GroupState.EMPTY:
            continue
        if effect.generation_id != g.generation:
            return f"{g.group_id}: commit of generation {effect.generation_id} stored at " \
                   f"generation {g.generation}"
        if effect.member_id not in g.members:
            return f"{g.group_id}: commit of non-member {effect.member_id!r} stored"
        if g.state not in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            return f"{g.group_id}: commit stored in {g.state.value}"
    return None


def sync_replies_carry_leader_assignment(state: CoordinatorState,
                                         effects: Iterable[Effect]) -> Violation:
    """SyncRepliesCarryLeaderAssignment: every successful SyncGroup answer carries
    the assignment the leader sent for this generation, in a Stable group."""
    for effect in effects:
        if not isinstance(effect, SyncGroupReply) or effect.error is not ErrorCode.NONE:
            continue
        holders = [g for g in state.groups.values() if effect.member_id in g.members]
        if not any(g.state is GroupState.STABLE and g.leader_sync is not None
                   and effect.assignment == g.leader_sync.assignments.get(effect.member_id)
                   and effect.protocol_name == g.protocol_name for g in holders):
            return f"SyncGroup answer {effect.assignment!r} to {effect.member_id!r} is not " \
                   f"the leader's assignment of a Stable group it is a member of"
    return None


def generation_increases(before: CoordinatorState, after: CoordinatorState) -> Violation:
    """GenerationIncreases: within a group's life the generation only moves forward,
    by one, when a join phase completes (the group then is CompletingRebalance or Empty)."""
    for group_id, old in before.groups.items():
        new = after.groups.get(group_id)
        if new is None or new.state is GroupState.DEAD:
            continue
        if new.generation == old.generation:
            continue
        if new.generation != old.generation + 1 or new.state not in (
                GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            return f"{group_id}: generation {old.generation} -> {new.generation} " \
                   f"({old.state.value} -> {new.state.value})"
    return None


StateInvariant = Callable[[CoordinatorState], Violation]
OutputInvariant = Callable[[CoordinatorState, Iterable[Effect]], Violation]

INVARIANTS: dict[str, StateInvariant] = {
    "TypeOK": type_ok,
    "LeaderIsMember": leader_is_member,
    "InstanceIdUnique": instance_id_unique,
    "StableAssignmentFromLeader": stable_assignment_from_leader,
    "ParkedOnlyWhileRebalancing": parked_only_while_rebalancing,
    "MembershipConsistent": membership_consistent,
    "ProtocolAgreed": protocol_agreed,
}

OUTPUT_INVARIANTS: dict[str, OutputInvariant] = {
    "StaleCommitNeverStored": stale_commit_never_stored,
    "SyncRepliesCarryLeaderAssignment": sync_replies_carry_leader_assignment,
}


def violations(before: CoordinatorState, after: CoordinatorState,
               effects: Iterable[Effect]) -> list[str]:
    """Every invariant and property violated by one step, as "Name: message"."""
    effects = tuple(effects)
    found = [f"{name}: {msg}" for name, check in INVARIANTS.items() if (msg := check(after))]
    found += [f"{name}: {msg}" for name, check in OUTPUT_INVARIANTS.items()
              if (msg := check(after, effects))]
    if msg := generation_increases(before, after):
        found.append(f"GenerationIncreases: {msg}")
    return found
