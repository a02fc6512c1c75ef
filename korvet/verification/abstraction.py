"""From the Python coordinator's values to spec/GroupCoordinator.tla's: the one abstraction.

The spec's `grp` is a record with the fields of the Python ``Group`` (camelCase), its
effects are records built by ``JoinReply``, ``SyncReply``, ... (docs/spec/group-coordinator.md
§"What the spec abstracts"). What the spec does not see is dropped: deadlines, timeouts,
client ids and hosts, offset metadata and leader epochs. A reply's request id, which the
adapter sends it by, becomes the spec's ``to``: the member whose request it answers
(``Requests.route``: the step's own request, or a request the group held back), or
``UNROUTED`` for an id that is no member's latest request of the reply's kind (a reply
sent to the wrong connection, or to a request that was superseded). A step's effects keep
their order (``effect_sequence``; the spec's ``EffectsAre``). What the spec sees only up
to equality is renamed by a ``Names``:

- ``PlainNames`` keeps the strings (the replay's models already use the spec's own
  strings: member ids ``m1``..., assignments and metadata as UTF-8, partition ``pN``);
- ``korvet.verification.validate`` builds labels from a broker's event log (member ids in order
  of issue, one label per distinct metadata, assignment, partition and offset).

Values are ``korvet.verification.values`` values (``Record``, ``Function``, tuples, frozensets), so
they compare as TLC's do and ``format_value`` writes them as TLA+ text.

An effect the spec has no record for (OffsetDelete's reply and order, an OffsetCommit reply
whose partitions got different errors or that names none) raises ``OutsideSpec``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from korvet.core.coordinator.effects import (
    DeleteGroupData,
    DeleteGroupsReply,
    Effect,
    HeartbeatReply,
    JoinGroupReply,
    LeaveGroupReply,
    OffsetCommitReply,
    PersistOffsets,
    SyncGroupReply,
)
from korvet.core.coordinator.events import (
    DeleteGroups,
    Event,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    OffsetCommit,
    SyncGroup,
)
from korvet.core.coordinator.state import Group, Member, TopicPartition
from korvet.core.coordinator.state import Protocol as ProtocolEntry
from korvet.verification.values import Function, Record, TlaValue

CONSUMER = "consumer"  # the spec's ProtocolType
NO_ID = ""  # NoId, NoInstance, NoName, NoAssignment
NO_LEADER_SYNC = Record({"gen": -1, "asg": Function()})
# The `to` of a reply whose request id is no member's latest request of the reply's kind:
# never a member id of the spec, so such a reply matches none of the spec's.
UNROUTED = "?"


class OutsideSpec(ValueError):
    """A value the spec has no counterpart for."""


class Names(Protocol):
    """How concrete values the spec sees only up to equality are named in it."""

    def member(self, member_id: str) -> str: ...
    def instance(self, instance: str | None) -> str: ...
    def protocol_name(self, name: str | None) -> str: ...
    def metadata(self, data: bytes) -> str: ...
    def assignment(self, data: bytes) -> str: ...
    def partition(self, tp: TopicPartition) -> str: ...
    def offset(self, offset: int) -> int: ...


class PlainNames:
    """The strings themselves (bytes as UTF-8; partition ``p<number>``)."""

    def member(self, member_id: str) -> str:
        return member_id

    def instance(self, instance: str | None) -> str:
        return instance or NO_ID

    def protocol_name(self, name: str | None) -> str:
        return name or NO_ID

    def metadata(self, data: bytes) -> str:
        return data.decode()

    def assignment(self, data: bytes) -> str:
        return data.decode()

    def partition(self, tp: TopicPartition) -> str:
        return f"p{tp.partition}"

    def offset(self, offset: int) -> int:
        return offset


@dataclass(frozen=True)
class Requests:
    """The requests a step's replies may answer, by request id: the step's own (``current``:
    its id, the kind of reply it gets, the member it is for) and those the group held back
    before the step (``held``: id -> (kind, member)). The spec names a request by its kind
    and member: each member has at most one live request of a kind, its latest. A held-back
    request of the member the step's own request of the same kind comes from is superseded
    by it (the machine forgets it unanswered, as Kafka does)."""

    current: tuple[int, str, str] | None = None  # (request id, reply kind, member id)
    held: Mapping[int, tuple[str, str]] = field(default_factory=dict)

    def route(self, request_id: int, kind: str) -> str | None:
        """The member whose latest request of ``kind`` has this id ("" for a request no
        member id names), or None."""
        if self.current is not None and request_id == self.current[0]:
            return self.current[2] if kind == self.current[1] else None
        found = self.held.get(request_id)
        if found is None or found[0] != kind:
            return None
        if self.current is not None and self.current[1:] == found:
            return None  # superseded by the step's own request
        return found[1]


_KINDS: dict[type, str] = {JoinGroup: "JoinGroup", SyncGroup: "SyncGroup", Heartbeat: "Heartbeat",
                           LeaveGroup: "LeaveGroup", OffsetCommit: "OffsetCommit",
                           DeleteGroups: "DeleteGroups"}


def requests_of(group: Group | None, event: Event, fresh: str | None) -> Requests:
    """The requests of a step of ``event`` on ``group`` (as it was before the step); ``fresh``:
    the member id the step handed out, if it did (a new member's JoinGroup is its request)."""
    held: dict[int, tuple[str, str]] = {}
    for member_id, member in (group.members.items() if group is not None else ()):
        if member.join_request is not None:
            held[member.join_request] = ("JoinGroup", member_id)
        if member.sync_request is not None:
            held[member.sync_request] = ("SyncGroup", member_id)
    match event:
        case JoinGroup():
            return Requests((event.request_id, "JoinGroup", event.member_id or fresh or ""), held)
        case SyncGroup() | Heartbeat() | OffsetCommit():
            return Requests((event.request_id, _KINDS[type(event)], event.member_id), held)
        case LeaveGroup() | DeleteGroups():
            return Requests((event.request_id, _KINDS[type(event)], ""), held)
    return Requests(None, held)  # a timer, a clean-up, a restart: no request of its own


def protocols(entries: Iterable[ProtocolEntry], names: Names) -> tuple[TlaValue, ...]:
    """A JoinGroup's protocol list: <<<<name, metadata>>, ...>> (an element of ProtocolChoices)."""
    return tuple((names.protocol_name(p.name), names.metadata(p.metadata)) for p in entries)


def member_record(member: Member, names: Names) -> Record:
    return Record({
        "instance": names.instance(member.group_instance_id),
        "protocols": protocols(member.protocols, names),
        "awaitingJoin": member.join_request is not None,
        "awaitingSync": member.sync_request is not None,
        "isNew": member.is_new,
        "assignment": names.assignment(member.assignment),
    })


def absent_group(partitions: Iterable[str], state: str = "Absent") -> Record:
    """AbsentGroup (or, with state "Dead", a group being deleted)."""
    return Record({
        "state": state, "generation": 0, "protocolType": NO_ID, "protocolName": NO_ID,
        "leader": NO_ID, "members": Function(), "pending": frozenset(),
        "pendingSync": frozenset(), "initialRebalance": False, "leaderSync": NO_LEADER_SYNC,
        "committed": Function(dict.fromkeys(partitions, -1))})


def group_record(group: Group | None, names: Names, partitions: Iterable[str]) -> Record:
    """The spec's `grp` for a Python group (None: the coordinator does not know it)."""
    partitions = tuple(partitions)
    if group is None:
        return absent_group(partitions)
    if group.protocol_type not in (None, CONSUMER):
        raise OutsideSpec(f"protocol type {group.protocol_type!r}: the spec models consumer "
                          "groups only")
    committed: dict[object, object] = dict.fromkeys(partitions, -1)
    for tp, offset in group.offsets.items():
        committed[names.partition(tp)] = names.offset(offset.offset)
    sync = group.leader_sync
    return Record({
        "state": group.state.value,
        "generation": group.generation,
        "protocolType": group.protocol_type or NO_ID,
        "protocolName": names.protocol_name(group.protocol_name),
        "leader": names.member(group.leader) if group.leader else NO_ID,
        "members": Function({names.member(m): member_record(member, names)
                             for m, member in group.members.items()}),
        "pending": frozenset(names.member(m) for m in group.pending),
        "pendingSync": frozenset(names.member(m) for m in group.pending_sync),
        "initialRebalance": group.initial_rebalance,
        "leaderSync": NO_LEADER_SYNC if sync is None else Record({
            "gen": sync.generation,
            "asg": Function({names.member(m): names.assignment(a)
                             for m, a in sync.assignments.items()})}),
        "committed": Function(committed),
    })


def _member_or_none(member_id: str, names: Names) -> str:
    return names.member(member_id) if member_id else NO_ID


def _to(effect: Effect, kind: str, member_id: str, names: Names,
        requests: Requests | None) -> str:
    """The spec's `to`: the member whose request the reply answers (by its request id), or
    without ``requests`` the member id the reply names (no routing checked)."""
    if requests is None:
        return _member_or_none(member_id, names)
    found = requests.route(effect.request_id, kind)  # type: ignore[union-attr]
    return UNROUTED if found is None else _member_or_none(found, names)


def _join_reply(effect: JoinGroupReply, names: Names, requests: Requests | None) -> Record:
    return Record({
        "api": "JoinGroup", "to": _to(effect, "JoinGroup", effect.member_id, names, requests),
        "err": int(effect.error), "mid": _member_or_none(effect.member_id, names),
        "gen": effect.generation_id, "ptype": effect.protocol_type or NO_ID,
        "leader": _member_or_none(effect.leader, names),
        "proto": names.protocol_name(effect.protocol_name),
        "members": frozenset((names.member(m.member_id), names.instance(m.group_instance_id),
                              names.metadata(m.metadata)) for m in effect.members),
        "skip": effect.skip_assignment})


def _commit_reply(effect: OffsetCommitReply, names: Names, requests: Requests | None) -> Record:
    errors = {int(p.error) for p in effect.partitions}
    if len(errors) != 1:
        raise OutsideSpec("an OffsetCommit answered with " + (
            "no partition" if not errors else "different errors per partition"))
    return Record({"api": "OffsetCommit",
                   "to": _to(effect, "OffsetCommit", effect.member_id, names, requests),
                   "err": errors.pop()})


def effect_record(effect: Effect, names: Names, group_id: str | None = None,
                  requests: Requests | None = None) -> Record | None:
    """The spec's record for one effect; None for a DeleteGroups result or a clean-up order
    that concerns another group than ``group_id`` (None: any group). With ``requests`` a
    reply's `to` is the request it answers (routing); without, the member id it names."""
    match effect:
        case JoinGroupReply():
            return _join_reply(effect, names, requests)
        case SyncGroupReply():
            return Record({"api": "SyncGroup",
                           "to": _to(effect, "SyncGroup", effect.member_id, names, requests),
                           "err": int(effect.error), "ptype": effect.protocol_type or NO_ID,
                           "proto": names.protocol_name(effect.protocol_name),
                           "asg": names.assignment(effect.assignment)})
        case HeartbeatReply():
            return Record({"api": "Heartbeat",
                           "to": _to(effect, "Heartbeat", effect.member_id, names, requests),
                           "err": int(effect.error)})
        case LeaveGroupReply():
            return Record({"api": "LeaveGroup", "to": _to(effect, "LeaveGroup", "", names, requests),
                           "err": int(effect.error), "results": tuple(
                Record({"mid": _member_or_none(r.member_id, names),
                        "inst": names.instance(r.group_instance_id), "err": int(r.error)})
                for r in effect.members)})
        case OffsetCommitReply():
            return _commit_reply(effect, names, requests)
        case PersistOffsets():
            return Record({"api": "PersistOffsets", "mid": _member_or_none(effect.member_id, names),
                           "gen": effect.generation_id,
                           "offsets": Function({names.partition(tp): names.offset(o.offset)
                                                for tp, o in effect.offsets})})
        case DeleteGroupsReply():
            results = [r for r in effect.results if group_id is None or r.group_id == group_id]
            if len(results) != 1:
                return None
            return Record({"api": "DeleteGroups",
                           "to": _to(effect, "DeleteGroups", "", names, requests),
                           "err": int(results[0].error)})
        case DeleteGroupData():
            if group_id is not None and effect.group_id != group_id:
                return None
            return Record({"api": "DeleteGroupData"})
    raise OutsideSpec(f"{type(effect).__name__} has no counterpart in the spec")


def effect_sequence(effects: Iterable[Effect], names: Names, group_id: str | None = None,
                    requests: Requests | None = None) -> tuple[Record, ...]:
    """A step's effects (or the replies sent) as the spec's records, in their order: the
    spec's `out` (or `wire`) is their set, which holds each once (EffectsAre)."""
    found = (effect_record(e, names, group_id, requests) for e in effects)
    return tuple(r for r in found if r is not None)


def effect_records(effects: Iterable[Effect], names: Names, group_id: str | None = None,
                   requests: Requests | None = None) -> frozenset[Record]:
    """The spec's `out` (or `wire`) for a step's effects (or the replies sent)."""
    return frozenset(effect_sequence(effects, names, group_id, requests))
