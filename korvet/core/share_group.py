"""Share-group membership (KIP-932): ShareGroupHeartbeat's rules as a pure machine.

A share group's members heartbeat as KIP-848 consumers do, with three differences that
make the machine small: the member id is the client's own (a UUID it keeps for its
lifetime), partitions are not exclusive (every member subscribed to a topic may be
assigned any of its partitions, several members one partition), so there is no revocation
barrier, and a member's epoch jumps straight to the group's assignment epoch on its own
next heartbeat (the reference note ../shared/reference/wave3-candidates.md, A3
"membership").

Epochs: the group epoch rises by one on every change of the membership or of what the
members subscribe to (a member joining, leaving, expiring, changing its subscription, a
subscribed topic gaining partitions); the target assignment is recomputed at once, so
the assignment epoch always equals the group epoch here. A member's epoch is 0 to join
and -1 to leave; otherwise it must be the epoch the coordinator last gave that member
(FENCED_MEMBER_EPOCH else), and the reply carries the new one.

The assignor is Kafka's ``simple`` one in spirit: every partition of a subscribed topic
goes to at least one of the members subscribed to it, and every such member gets at least
one partition when there are enough (``assign``). The machine reads no clock: deadlines
are ``now_ms`` plus the session timeout, and ``expire`` removes the members whose
deadline passed. The adapter is korvet/server/share_groups.py;
docs/implementers/share-group-membership.md maps the rules to the code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from korvet.core.errors import ErrorCode

# Kafka 4.3.1's defaults (GroupCoordinatorConfig / ShareGroupConfig).
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # group.share.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # group.share.heartbeat.interval.ms
DEFAULT_MAX_SIZE = 200  # group.share.max.size
ASSIGNOR = "simple"

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

EMPTY = "Empty"
STABLE = "Stable"

# A topic's partitions assigned to one member: (topic, sorted partition indexes).
TopicAssignment = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ShareConfig:
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    max_size: int = DEFAULT_MAX_SIZE


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]  # sorted, without duplicates
    assignment: TopicAssignment
    deadline_ms: int
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: Mapping[str, Member] = field(default_factory=dict)
    # partition counts of the subscribed topics that exist, as the last assignment saw them
    topics: Mapping[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ShareGroupHeartbeat, version-free (v1 is the only stable version)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None  # None: unchanged since the member last heard


def _refused(error: ErrorCode, message: str, request: Heartbeat) -> HeartbeatReply:
    return HeartbeatReply(error, message, member_id=request.member_id,
                          member_epoch=request.member_epoch)


def invalid(request: Heartbeat) -> str | None:
    """Why Kafka answers INVALID_REQUEST to this heartbeat, or None."""
    if not request.group_id:
        return "GroupId can't be empty."
    if not request.member_id:
        return "MemberId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return "RackId can't be empty."
    if request.member_epoch < LEAVE_EPOCH:
        return f"MemberEpoch {request.member_epoch} is invalid."
    if request.member_epoch == JOIN_EPOCH and not request.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    return None


def assign(members: Iterable[Member], topics: Mapping[str, int]
           ) -> dict[str, TopicAssignment]:
    """The target assignment: for each existing topic, its partitions spread over the
    members subscribed to it, in member id order. With fewer members than partitions each
    partition goes to one member (round robin); with more, each member gets one partition
    and every partition at least one member (partitions are not exclusive)."""
    by_member: dict[str, dict[str, list[int]]] = {}
    ordered = sorted(members, key=lambda m: m.member_id)
    for m in ordered:
        by_member[m.member_id] = {}
    for topic in sorted(topics):
        count = topics[topic]
        subscribers = [m.member_id for m in ordered if topic in m.subscribed]
        if not subscribers or count <= 0:
            continue
        n = len(subscribers)
        if n <= count:
            pairs = ((subscribers[p % n], p) for p in range(count))
        else:
            pairs = ((member, i % count) for i, member in enumerate(subscribers))
        for member, partition in pairs:
            by_member[member].setdefault(topic, []).append(partition)
    return {member: tuple((t, tuple(sorted(ps))) for t, ps in sorted(parts.items()))
            for member, parts in by_member.items()}


def _reassigned(group: ShareGroup, members: Mapping[str, Member],
                topics: Mapping[str, int]) -> ShareGroup:
    """The group one epoch on, with ``members`` and its target assignment recomputed.
    Members keep their own epoch until they heartbeat (no revocation barrier)."""
    wanted = frozenset(t for m in members.values() for t in m.subscribed)
    seen = {t: n for t, n in topics.items() if t in wanted}
    targets = assign(members.values(), seen)
    epoch = group.group_epoch + 1
    return replace(group, group_epoch=epoch, assignment_epoch=epoch, topics=seen,
                   members={mid: replace(m, assignment=targets[mid])
                            for mid, m in sorted(members.items())})


def heartbeat(group: ShareGroup | None, request: Heartbeat, topics: Mapping[str, int],
              now_ms: int, config: ShareConfig = ShareConfig(), *,
              other_type: bool = False) -> tuple[ShareGroup | None, HeartbeatReply]:
    """One heartbeat: the group after it (None: there is still no such group) and the
    reply. ``topics`` holds the partition counts of the topics that exist (at least the
    subscribed ones); ``other_type``: the id is taken by a group of another type (a
    classic group), which Kafka answers GROUP_ID_NOT_FOUND."""
    reason = invalid(request)
    if reason is not None:
        return group, _refused(ErrorCode.INVALID_REQUEST, reason, request)
    if other_type:
        return group, _refused(ErrorCode.GROUP_ID_NOT_FOUND,
                               f"Group {request.group_id} is not a share group.", request)
    if group is None:
        if request.member_epoch != JOIN_EPOCH:
            return None, _refused(ErrorCode.GROUP_ID_NOT_FOUND,
                                  f"Share group {request.group_id} not found.", request)
        group = ShareGroup(request.group_id)
    member = group.members.get(request.member_id)
    if request.member_epoch == LEAVE_EPOCH:
        return _leave(group, member, request, topics)
    if member is None and request.member_epoch != JOIN_EPOCH:
        return group, _refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Member {request.member_id} is not a member of group "
                               f"{request.group_id}.", request)
    if member is not None and request.member_epoch not in (JOIN_EPOCH, member.member_epoch):
        relation = "larger" if request.member_epoch > member.member_epoch else "smaller"
        return group, _refused(ErrorCode.FENCED_MEMBER_EPOCH,
                               f"The share group member has a {relation} member epoch "
                               f"({request.member_epoch}) than the one known by the group "
                               f"coordinator ({member.member_epoch}).", request)
    if member is None and len(group.members) >= config.max_size:
        return group, _refused(ErrorCode.GROUP_MAX_SIZE_REACHED,
                               f"The share group has reached its maximum capacity of "
                               f"{config.max_size} members.", request)
    return _beat(group, member, request, topics, now_ms, config)


def _leave(group: ShareGroup, member: Member | None, request: Heartbeat,
           topics: Mapping[str, int]) -> tuple[ShareGroup, HeartbeatReply]:
    if member is None:
        return group, _refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Member {request.member_id} is not a member of group "
                               f"{request.group_id}.", request)
    rest = {mid: m for mid, m in group.members.items() if mid != member.member_id}
    return (_reassigned(group, rest, topics),
            HeartbeatReply(ErrorCode.NONE, member_id=member.member_id, member_epoch=LEAVE_EPOCH))


def _beat(group: ShareGroup, member: Member | None, request: Heartbeat,
          topics: Mapping[str, int], now_ms: int, config: ShareConfig
          ) -> tuple[ShareGroup, HeartbeatReply]:
    """A join (epoch 0, new or again) or a member's heartbeat with its current epoch."""
    subscribed = (tuple(sorted(set(request.subscribed_topic_names)))
                  if request.subscribed_topic_names is not None
                  else member.subscribed if member is not None else ())
    deadline = now_ms + config.session_timeout_ms
    current = member if member is not None else Member(
        request.member_id, JOIN_EPOCH, subscribed, (), deadline)
    current = replace(current, subscribed=subscribed, deadline_ms=deadline,
                      rack_id=request.rack_id if request.rack_id is not None else current.rack_id,
                      client_id=request.client_id, client_host=request.client_host)
    members = dict(group.members)
    members[current.member_id] = current
    wanted = frozenset(t for m in members.values() for t in m.subscribed)
    seen = {t: n for t, n in topics.items() if t in wanted}
    changed = member is None or member.subscribed != subscribed or dict(group.topics) != seen
    group = _reassigned(group, members, topics) if changed else replace(group, members=members)
    before = member.member_epoch if member is not None else None
    ours = group.members[current.member_id]
    ours = replace(ours, member_epoch=group.assignment_epoch)
    group = replace(group, members={**group.members, ours.member_id: ours})
    tell = (request.member_epoch == JOIN_EPOCH or before != ours.member_epoch
            or request.subscribed_topic_names is not None)
    return group, HeartbeatReply(ErrorCode.NONE, member_id=ours.member_id,
                                 member_epoch=ours.member_epoch,
                                 heartbeat_interval_ms=config.heartbeat_interval_ms,
                                 assignment=ours.assignment if tell else None)


def expire(group: ShareGroup, now_ms: int, topics: Mapping[str, int]
           ) -> tuple[ShareGroup, tuple[str, ...]]:
    """The group without the members whose session ran out by ``now_ms`` (one epoch
    per member removed, as each of Kafka's session timers fences one member), and their
    ids."""
    gone = tuple(sorted(mid for mid, m in group.members.items() if m.deadline_ms <= now_ms))
    for mid in gone:
        rest = {k: m for k, m in group.members.items() if k != mid}
        group = _reassigned(group, rest, topics)
    return group, gone


def next_deadline(group: ShareGroup) -> int | None:
    """When the first member's session runs out (None: no member)."""
    return min((m.deadline_ms for m in group.members.values()), default=None)


def refreshed(group: ShareGroup, topics: Mapping[str, int]) -> ShareGroup:
    """The group with its assignment recomputed if a subscribed topic changed (created,
    deleted, gained partitions) since the last assignment; unchanged otherwise."""
    wanted = group.subscribed_topics()
    seen = {t: n for t, n in topics.items() if t in wanted}
    if dict(group.topics) == seen:
        return group
    return _reassigned(group, group.members, topics)


def restored(group_id: str, group_epoch: int) -> ShareGroup:
    """The group as a broker finds it in Redis after a restart or a lease move: its epoch
    and no members (membership is kept in memory; members that come back are answered
    UNKNOWN_MEMBER_ID and join again, raising the epoch from where it was)."""
    return ShareGroup(group_id, group_epoch=group_epoch, assignment_epoch=group_epoch)
