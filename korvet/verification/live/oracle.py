"""The group oracle: Korvet's coordinator machine run beside a live broker.

Every request the harness sends is also stepped through ``korvet.core.coordinator.step``
at the same time on the broker's clock, followed by every timeout then due (with the
broker's ``group.initial.rebalance.delay.ms`` at 0 the first join phase ends at once),
exactly as the adapter does. What the adapter sends after a step is
``durability.ready(...).replies``: in a run where Redis takes every write, those are the
replies, in order, and nothing else. A request whose reply no step released is held back.

Nondeterminism the protocol allows is abstracted, not ignored:

- **Member ids.** The broker picks them (``<client id or instance id>-<uuid>``). The
  machine is given a placeholder (``<prefix>-?<n>``) and the harness binds it to the id
  the broker answers with, once: the id must be fresh and carry the right prefix. From
  then on the machine's state uses the broker's id, so rules that order ids (Korvet's
  leader choice) see the real ones.
- **The leader.** Kafka keeps a leader that rejoined, else takes any member that did
  (``ClassicGroup.maybeElectNewJoinedLeader``), and a removed leader's successor is any
  member (``ClassicGroup.remove``: HashMap order). The oracle tracks the set of members
  that may be the leader and accepts an observed leader from that set, then re-runs the
  step with it. For Korvet the set is the one member its rule picks (KORVET: the smallest
  member id) whenever the ids involved are known; otherwise Kafka's set.
- **The protocol vote.** Korvet breaks ties by the smallest name (KORVET); Kafka takes
  the first of the tied names in ``HashMap`` iteration order. For Kafka the oracle runs
  the machine with Kafka's rule (``kafka_protocol_vote``).

Where Korvet deliberately differs from Kafka (docs/spec/group-coordinator.md §6), the
oracle for Kafka uses Kafka's rule (``Flavour.KAFKA``): a removed member's held-back
SyncGroup may stay unanswered, DescribeGroups shows the last assignment during a
rebalance that started from Stable, and a JoinGroup with a pending member id and an
instance id is Kafka's UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from korvet.core import coordinator as core
from korvet.core.coordinator import durability, machine
from korvet.core.coordinator.state import LeaderSync

PLACEHOLDER_MARK = "-?"


class Flavour(Enum):
    """Whose rules the oracle applies where Korvet and Kafka deliberately differ."""

    KORVET = "korvet"
    KAFKA = "kafka"


# --- Kafka's protocol vote -------------------------------------------------------------

def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (for names in the Basic Multilingual Plane)."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    return value


def java_hashmap_slot(key: str, capacity: int = 16) -> int:
    """The bucket a ``HashMap`` of this capacity puts a String key in (``HashMap.hash``)."""
    h = java_string_hash(key)
    return (h ^ (h >> 16)) & (capacity - 1)


def kafka_vote(members: Iterable[core.Member]) -> str:
    """``ClassicGroup.selectProtocol``: each member votes for its first protocol that every
    member supports; most votes wins, ties go to the first name a ``HashMap`` iterates
    (``Stream.max`` keeps the first of equal elements). Exact for names in distinct
    buckets, which the harness's names are (``tests``: checked)."""
    listed = list(members)
    candidates = frozenset.intersection(*(m.protocol_names() for m in listed))
    votes: dict[str, int] = {}
    for member in listed:
        vote = next(p.name for p in member.protocols if p.name in candidates)
        votes[vote] = votes.get(vote, 0) + 1
    most = max(votes.values())
    return min((name for name, count in votes.items() if count == most), key=java_hashmap_slot)


def _kafka_select_protocol(draft: Any) -> str:
    return kafka_vote(draft.members.values())


@contextlib.contextmanager
def kafka_protocol_vote() -> Iterator[None]:
    """Run the machine with Kafka's tie-break in the protocol vote (the machine's own is
    KORVET's smallest name). Only the oracle's process is affected, for one step."""
    draft_class: Any = machine._Draft
    korvet_rule = draft_class.select_protocol
    draft_class.select_protocol = _kafka_select_protocol
    try:
        yield
    finally:
        draft_class.select_protocol = korvet_rule


# --- renaming placeholders ------------------------------------------------------------

def _renamed_group(group: core.Group, mapping: Mapping[str, str]) -> core.Group:
    def name(member_id: str) -> str:
        return mapping.get(member_id, member_id)

    leader_sync = group.leader_sync
    if leader_sync is not None:
        leader_sync = LeaderSync(leader_sync.generation,
                                 {name(k): v for k, v in leader_sync.assignments.items()})
    return replace(
        group,
        members={name(k): replace(m, member_id=name(k)) for k, m in group.members.items()},
        pending={name(k): p for k, p in group.pending.items()},
        pending_sync=frozenset(name(k) for k in group.pending_sync),
        leader=name(group.leader) if group.leader is not None else None,
        leader_sync=leader_sync)


def rename_members(state: core.CoordinatorState, mapping: Mapping[str, str]
                   ) -> core.CoordinatorState:
    """The state with member ids renamed (a placeholder becomes the broker's id)."""
    groups: dict[str, core.Group] = {}
    for group_id, group in state.groups.items():
        ids = group.members.keys() | group.pending.keys()
        groups[group_id] = _renamed_group(group, mapping) if ids & mapping.keys() else group
    return replace(state, groups=groups)


def is_placeholder(member_id: str) -> bool:
    return PLACEHOLDER_MARK in member_id


# --- predictions ------------------------------------------------------------------------

@dataclass
class Prediction:
    """One request (or a move of the clock) and what the machine says happens."""

    before: core.CoordinatorState
    event: core.Event | None
    now: int
    after: core.CoordinatorState
    replies: tuple[core.Reply, ...]
    pairs: tuple[tuple[core.CoordinatorState, core.CoordinatorState], ...]
    durable: dict[str, core.Group]
    optional: frozenset[int] = frozenset()  # request ids the broker may leave unanswered
    observed: dict[str, str] = field(default_factory=dict)  # group -> leader seen on the wire

    def released(self) -> dict[int, core.Reply]:
        return {r.request_id: r for r in self.replies}

    def completed(self, group_id: str) -> bool:
        return any(_completion(b, a, group_id) for b, a in self.pairs)

    def joined(self, group_id: str) -> frozenset[str]:
        """Members whose JoinGroup this prediction answers with the group's new generation."""
        group = self.after.groups.get(group_id)
        if group is None:
            return frozenset()
        return frozenset(r.member_id for r in self.replies
                         if isinstance(r, core.JoinGroupReply) and r.error is core.ErrorCode.NONE
                         and r.generation_id == group.generation and r.member_id in group.members)


def _completion(before: core.CoordinatorState, after: core.CoordinatorState, group_id: str) -> bool:
    b, a = before.groups.get(group_id), after.groups.get(group_id)
    return (a is not None and a.state is core.GroupState.COMPLETING_REBALANCE
            and (b is None or a.generation > b.generation))


class OracleError(AssertionError):
    """The broker's answer is not one the machine allows."""


class GroupOracle:
    def __init__(self, config: core.Config, flavour: Flavour, now: int) -> None:
        self.flavour = flavour
        self.state = core.initial_state(config)
        self.now = now
        self.durable: dict[str, core.Group] = {}
        self.wire_of: dict[str, str] = {}  # placeholder -> the broker's id
        self.placeholder_of: dict[str, str] = {}  # the broker's id -> placeholder
        self.candidates: dict[str, frozenset[str]] = {}  # group -> who may be the leader
        self.shadow: dict[str, dict[str, bytes]] = {}  # Kafka: assignments DescribeGroups shows
        self._numbers = itertools.count(1)
        self.request_ids = itertools.count(1)

    # -- ids ------------------------------------------------------------------------------

    def placeholder(self, prefix: str) -> str:
        return f"{prefix}{PLACEHOLDER_MARK}{next(self._numbers)}"

    def wire(self, member_id: str) -> str:
        return self.wire_of.get(member_id, member_id)

    def bound(self, member_id: str) -> bool:
        return not is_placeholder(member_id) or member_id in self.wire_of

    def bind(self, placeholder: str, wire_id: str) -> None:
        """The broker answered ``wire_id`` where the machine has ``placeholder``: the id must
        be fresh and start with the placeholder's prefix (Kafka: client or instance id and
        a dash)."""
        if placeholder in self.wire_of:
            if self.wire_of[placeholder] != wire_id:
                raise OracleError(f"member id {wire_id!r} where the broker earlier gave "
                                  f"{self.wire_of[placeholder]!r} for the same member")
            return
        prefix = placeholder.split(PLACEHOLDER_MARK, 1)[0] + "-"
        if not wire_id.startswith(prefix) or len(wire_id) <= len(prefix):
            raise OracleError(f"new member id {wire_id!r} does not start with {prefix!r} "
                              "(Kafka: the client id, or the instance id, a dash and a UUID)")
        if wire_id in self.placeholder_of or self._known_id(wire_id):
            raise OracleError(f"new member id {wire_id!r} was handed out before")
        self.wire_of[placeholder] = wire_id
        self.placeholder_of[wire_id] = placeholder

    def bind_listed(self, model_ids: Iterable[str], wire_ids: Iterable[str]) -> None:
        """A member list the broker sent (a leader's JoinGroup reply, DescribeGroups) may
        name a member whose own reply went to a closed connection: bind its placeholder to
        an id in the list that no placeholder has and that carries its prefix (the client
        or instance id). Placeholders sharing a prefix are bound in any order only when
        their members look the same in everything a reply shows (the order cannot then
        change a reply); otherwise they stay unbound and the comparison shows it."""
        unbound = [m for m in model_ids if is_placeholder(m) and m not in self.wire_of]
        unknown = sorted(w for w in wire_ids if w not in self.placeholder_of
                         and w not in self.wire_of.values() and not self._known_id(w))
        by_prefix: dict[str, list[str]] = {}
        for placeholder in sorted(unbound):
            by_prefix.setdefault(placeholder.split(PLACEHOLDER_MARK, 1)[0] + "-", []).append(
                placeholder)
        for prefix, placeholders in by_prefix.items():
            matches = [w for w in unknown if w.startswith(prefix)]
            if len(matches) != len(placeholders):
                continue
            if len(placeholders) > 1 and len({self._looks(p) for p in placeholders}) != 1:
                continue
            for placeholder, wire_id in zip(placeholders, matches, strict=True):
                self.bind(placeholder, wire_id)

    def _looks(self, member_id: str) -> tuple[Any, ...] | None:
        """What replies show of a member (all but its id and held-back requests)."""
        for group in self.state.groups.values():
            m = group.members.get(member_id)
            if m is not None:
                return (m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                        m.rebalance_timeout_ms, m.protocol_type, m.protocols, m.assignment,
                        m.is_new, m.awaiting_join, m.awaiting_sync, group.leader == member_id)
        return None

    def _known_id(self, member_id: str) -> bool:
        return any(member_id in g.members or member_id in g.pending
                   for g in self.state.groups.values())

    def model_id(self, wire_id: str) -> str:
        return self.placeholder_of.get(wire_id, wire_id)

    # -- stepping -------------------------------------------------------------------------

    def _rules(self) -> contextlib.AbstractContextManager[None]:
        return kafka_protocol_vote() if self.flavour is Flavour.KAFKA else contextlib.nullcontext()

    def predict(self, event: core.Event | None, advance_ms: int = 0) -> Prediction:
        return self._run(self.state, event, self.now + advance_ms)

    def _run(self, start: core.CoordinatorState, event: core.Event | None,
             now: int) -> Prediction:
        state = start
        durable = dict(self.durable)
        replies: list[core.Reply] = []
        pairs: list[tuple[core.CoordinatorState, core.CoordinatorState]] = []
        optional: set[int] = set()

        def apply(item: core.Event) -> None:
            nonlocal state
            with self._rules():
                after, effects = core.step(state, item, now)
            ready = durability.ready(state, after, effects, durable)
            for group_id, snapshot in ready.snapshots.items():
                if snapshot is None:
                    durable.pop(group_id, None)
                else:
                    durable[group_id] = snapshot
            for reply in ready.replies:
                replies.append(self._kafka_reply(state, item, reply, optional))
            pairs.append((state, after))
            state = after

        if event is not None:
            apply(event)
        for timeout in core.due_timeouts(state, now):
            apply(timeout)
        return Prediction(start, event, now, state, tuple(replies), tuple(pairs), durable,
                          frozenset(optional))

    def _kafka_reply(self, before: core.CoordinatorState, event: core.Event, reply: core.Reply,
                     optional: set[int]) -> core.Reply:
        """Where Kafka's rule differs from Korvet's, the reply Kafka gives (the state is the
        same either way)."""
        if self.flavour is not Flavour.KAFKA:
            return reply
        request_id = getattr(event, "request_id", None)
        if (isinstance(reply, core.SyncGroupReply) and reply.request_id != request_id
                and reply.error is core.ErrorCode.UNKNOWN_MEMBER_ID):
            # Kafka leaves a removed member's held-back SyncGroup unanswered (KORVET answers).
            optional.add(reply.request_id)
        elif isinstance(event, core.JoinGroup) and isinstance(reply, core.JoinGroupReply) \
                and _pending_with_instance(before, event) and reply.error in (
                    core.ErrorCode.UNKNOWN_MEMBER_ID, core.ErrorCode.FENCED_INSTANCE_ID):
            # Kafka: IllegalStateException in classicGroupJoinExistingMember.
            return core.JoinGroupReply(reply.request_id, core.ErrorCode.UNKNOWN_SERVER_ERROR,
                                       reply.member_id)
        return reply

    # -- leaders --------------------------------------------------------------------------

    def leader_set(self, group_id: str, state: core.CoordinatorState | None = None
                   ) -> frozenset[str]:
        """Who may be the group's leader now (one member when the oracle knows)."""
        group = (state or self.state).groups.get(group_id)
        if group is None or group.leader is None:
            return frozenset()
        return self.candidates.get(group_id, frozenset({group.leader}))

    def allowed_leaders(self, prediction: Prediction, group_id: str) -> frozenset[str]:
        """Who the broker may name as the leader in this prediction's replies."""
        possible = self.leader_set(group_id, prediction.before)
        if not prediction.completed(group_id):
            return possible
        return self._allowed_at(possible, prediction.joined(group_id))

    def with_leader(self, prediction: Prediction, group_id: str, leader: str) -> Prediction:
        """The prediction again, the group's leader (before the step) being ``leader``."""
        before = prediction.before
        group = before.groups[group_id]
        patched = replace(before, groups={**before.groups,
                                          group_id: replace(group, leader=leader)})
        again = self._run(patched, prediction.event, prediction.now)
        again.observed = {**prediction.observed, group_id: leader}
        return again

    # -- after the broker answered ---------------------------------------------------------

    def commit(self, prediction: Prediction) -> None:
        """Take the prediction's state, with every placeholder the broker has named renamed."""
        mapping = dict(self.wire_of)
        pairs = [(rename_members(b, mapping), rename_members(a, mapping))
                 for b, a in prediction.pairs]
        after = rename_members(prediction.after, mapping)
        for before_state, after_state in pairs:
            after = self._track(prediction, before_state, after_state, after)
        self.state = after
        self.durable = {g: durability.snapshot_of(group) for g, group in after.groups.items()
                        if g in prediction.durable}
        self.now = prediction.now

    def _track(self, prediction: Prediction, before: core.CoordinatorState,
               after: core.CoordinatorState, final: core.CoordinatorState
               ) -> core.CoordinatorState:
        for group_id in before.groups.keys() | after.groups.keys():
            final = self._track_leader(prediction, group_id, before, after, final)
            if self.flavour is Flavour.KAFKA:
                self._track_shadow(group_id, before, after)
        return final

    def _track_leader(self, prediction: Prediction, group_id: str, before: core.CoordinatorState,
                      after: core.CoordinatorState, final: core.CoordinatorState
                      ) -> core.CoordinatorState:
        group = after.groups.get(group_id)
        if group is None or group.leader is None:
            self.candidates.pop(group_id, None)
            return final
        old = before.groups.get(group_id)
        possible = self.candidates.get(group_id) or (
            frozenset({old.leader}) if old is not None and old.leader is not None else frozenset())
        possible = frozenset(_replacements(old, group).get(m, m) for m in possible)
        members = frozenset(group.members)
        if _completion(before, after, group_id):
            if group_id in prediction.observed:
                self.candidates.pop(group_id, None)
                return final
            joined = frozenset(self.wire(m) for m in prediction.joined(group_id)) & members
            new = self._allowed_at(possible, joined)
        elif possible <= members:
            new = possible
        elif self.flavour is Flavour.KORVET and all(self.bound(m) for m in members):
            new = (possible & members) | {min(members)}  # KORVET: the smallest member left
        else:
            new = (possible & members) | members
        return self._settle_leader(group_id, new, final)

    def _allowed_at(self, possible: frozenset[str], joined: frozenset[str]) -> frozenset[str]:
        """At the end of a join phase: a leader that rejoined stays; otherwise Kafka takes
        any member that rejoined, Korvet the smallest id (KORVET) when the ids are known."""
        kept = possible & joined
        if possible and possible <= joined:
            return kept
        if self.flavour is Flavour.KORVET and joined and all(self.bound(m) for m in joined):
            return kept | {min(joined, key=self.wire)}
        return kept | joined

    def _settle_leader(self, group_id: str, possible: frozenset[str],
                       final: core.CoordinatorState) -> core.CoordinatorState:
        group = final.groups.get(group_id)
        if group is None:
            return final
        if len(possible) > 1:
            self.candidates[group_id] = possible
            return final
        self.candidates.pop(group_id, None)
        (only,) = possible or {group.leader}
        if only != group.leader and only in group.members:
            return replace(final, groups={**final.groups, group_id: replace(group, leader=only)})
        return final

    def _track_shadow(self, group_id: str, before: core.CoordinatorState,
                      after: core.CoordinatorState) -> None:
        """Kafka's assignments as DescribeGroups shows them: set when the group becomes
        Stable, cleared only by a rebalance that starts from CompletingRebalance
        (``resetAndPropagateAssignmentWithError``); Korvet clears them at every rebalance."""
        group, old = after.groups.get(group_id), before.groups.get(group_id)
        if group is None:
            self.shadow.pop(group_id, None)
            return
        shadow = self.shadow.setdefault(group_id, {})
        for old_id, new_id in _replacements(old, group).items():
            if old_id in shadow:
                shadow[new_id] = shadow.pop(old_id)
        if group.state is core.GroupState.STABLE:
            shadow.clear()
            shadow.update({m: member.assignment for m, member in group.members.items()})
        elif (old is not None and old.state is core.GroupState.COMPLETING_REBALANCE
              and group.state is core.GroupState.PREPARING_REBALANCE):
            shadow.clear()
        for gone in set(shadow) - set(group.members):
            shadow.pop(gone)

    def shown_assignment(self, group_id: str, member: core.Member) -> bytes:
        if self.flavour is Flavour.KAFKA:
            return self.shadow.get(group_id, {}).get(member.member_id, member.assignment)
        return member.assignment


def _replacements(old: core.Group | None, new: core.Group) -> dict[str, str]:
    """Static members replaced between two versions of a group: old id -> new id."""
    if old is None:
        return {}
    by_instance = {m.group_instance_id: m_id for m_id, m in new.members.items()
                   if m.group_instance_id is not None}
    return {m_id: by_instance[m.group_instance_id] for m_id, m in old.members.items()
            if m.group_instance_id in by_instance and by_instance[m.group_instance_id] != m_id}


def _pending_with_instance(state: core.CoordinatorState, event: core.JoinGroup) -> bool:
    group = state.groups.get(event.group_id)
    return (group is not None and event.group_instance_id is not None
            and event.member_id in group.pending)
