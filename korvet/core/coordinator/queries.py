"""Read-only questions the adapter answers without a step: DescribeGroups,
ListGroups, OffsetFetch, and which groups the periodic clean-up deletes (empty ones
without offsets, and those whose offsets expired)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from korvet.core.coordinator.errors import ErrorCode
from korvet.core.coordinator.state import (
    CommittedOffset,
    CoordinatorState,
    GroupState,
    TopicPartition,
)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # only in Stable (the selected protocol's), else b""
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode  # GROUP_ID_NOT_FOUND for an unknown group (DescribeGroups v6+; v0-v5: NONE)
    state: str  # "Dead" for an unknown group
    protocol_type: str
    protocol_data: str  # the selected protocol, only in Stable
    members: tuple[DescribedMember, ...]


def describe_group(state: CoordinatorState, group_id: str) -> GroupDescription:
    group = state.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        return GroupDescription(group_id, ErrorCode.GROUP_ID_NOT_FOUND, GroupState.DEAD.value,
                                "", "", ())
    stable = group.state is GroupState.STABLE
    members = tuple(
        DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.metadata_for(group.protocol_name) if stable else b"", m.assignment)
        for m in group.members.values())
    return GroupDescription(group_id, ErrorCode.NONE, group.state.value,
                            group.protocol_type or "",
                            (group.protocol_name or "") if stable else "", members)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


def list_groups(state: CoordinatorState, states: Iterable[str] = (),
                types: Iterable[str] = ()) -> tuple[ListedGroup, ...]:
    """Groups the coordinator knows (not Dead ones), filtered as ListGroups v4/v5 ask.

    ``states`` matches case-insensitively; ``types`` are group types, and every
    group here is a "classic" one.
    """
    wanted_states = {s.lower() for s in states}
    wanted_types = {t.lower() for t in types}
    if wanted_types and "classic" not in wanted_types:
        return ()
    return tuple(
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for _, g in sorted(state.groups.items())
        if g.state is not GroupState.DEAD
        and (not wanted_states or g.state.value.lower() in wanted_states))


def offset_fetch(state: CoordinatorState, group_id: str,
                 partitions: Iterable[TopicPartition] | None = None,
                 ) -> tuple[tuple[TopicPartition, CommittedOffset | None], ...]:
    """Committed offsets, regardless of the group's state (None: nothing committed, offset -1).

    ``partitions=None`` asks for every committed partition of the group.
    """
    group = state.groups.get(group_id)
    offsets = {} if group is None or group.state is GroupState.DEAD else group.offsets
    if partitions is None:
        return tuple(sorted(offsets.items()))
    return tuple((tp, offsets.get(tp)) for tp in partitions)


def removable_groups(state: CoordinatorState) -> tuple[str, ...]:
    """The groups Kafka's periodic clean-up (offsets.retention.check.interval.ms) deletes:
    Empty, with no member, no pending join and no committed offset. The adapter deletes them
    with DeleteGroups, the step a client's request takes; a group that changed meanwhile is
    answered NON_EMPTY_GROUP there and stays."""
    return tuple(sorted(
        g.group_id for g in state.groups.values()
        if g.state is GroupState.EMPTY and not g.members and not g.pending and not g.offsets))


def expired_groups(state: CoordinatorState, last_active: Mapping[str, int], now_ms: int,
                   retention_ms: int) -> tuple[str, ...]:
    """The groups whose committed offsets Kafka's offsets.retention.minutes expires (KIP-211,
    classic protocol): Empty, with no member and no pending join, for ``retention_ms``.
    Kafka counts from the moment the group became Empty, or a group that never had members
    from each offset's commit; ``last_active`` holds, per group, the adapter's time of the
    last step that wrote the group or left it with members (a commit, a join, a leave, a
    session expiry), which is never earlier. A group without a time there, and every group
    when ``retention_ms`` is negative, is kept. Once every offset of an Empty group has
    expired Kafka removes the group; the adapter deletes these with DeleteGroups, which
    answers NON_EMPTY_GROUP, and keeps the group, if a member came meanwhile."""
    if retention_ms < 0:
        return ()
    return tuple(sorted(
        g.group_id for g in state.groups.values()
        if g.state is GroupState.EMPTY and not g.members and not g.pending and g.offsets
        and (since := last_active.get(g.group_id)) is not None
        and now_ms - since >= retention_ms))
