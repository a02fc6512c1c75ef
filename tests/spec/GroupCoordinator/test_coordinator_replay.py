"""Every transition of spec/GroupCoordinator.tla's replay model, replayed through the Python machine.

TLC dumps the model's whole state graph (``-dump dot,actionlabels``). For every
state of it, the test builds the Python state that state stands for
(``concretize``), steps every event a client, a timer or the adapter could
send there (``events_for``: the spec's parameter domains of ``Next``, over the
model's constants), maps each resulting state back (``abstract``) and requires
the set of (event name, successor) pairs to be exactly TLC's set of (action,
successor) pairs. Where TLC discovered a state, the effects of the transition
that discovered it (the spec's ``out``) must also be among the effects of a
Python event leading there.

A timeout or clean-up event whose Python step changes nothing and answers
nothing is a timer that turned out to have nothing to do (a member that was
waiting for the rebalance, an extended initial delay): the spec has no
transition for it, so it is left out. Abstraction (docs/spec/group-coordinator.md):
member ids, instance ids, protocol names, metadata and assignments are the same
strings (bytes as UTF-8); deadlines, timeouts, client ids and request ids have
fixed values; the spec's ``issued`` counts the member ids handed out.

The graph is replayed once per model; each action's transitions are also a test of their
own (``test_transition_replays[GroupCoordinator-replay-SessionTimeout]``, ``pytest -k
SessionTimeout``), which fails when the action never fires in the model.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korvet.core.coordinator import (
    CommittedOffset,
    Config,
    CoordinatorState,
    DeleteGroups,
    DeleteGroupsReply,
    Effect,
    ErrorCode,
    Event,
    Group,
    GroupDataDeleted,
    GroupState,
    Heartbeat,
    HeartbeatReply,
    JoinGroup,
    JoinGroupReply,
    LeaderSync,
    LeaveGroup,
    LeaveGroupReply,
    Member,
    MemberAssignment,
    MemberIdentity,
    OffsetCommit,
    OffsetCommitReply,
    OffsetToCommit,
    PendingMember,
    PendingMemberTimeout,
    PendingSyncTimeout,
    Protocol,
    RebalanceTimeout,
    Restart,
    SessionTimeout,
    SyncGroup,
    SyncGroupReply,
    TopicPartition,
    machine,
    step,
    timers,
)
from korvet.verification import tlc
from korvet.verification.abstraction import PlainNames, Requests, effect_record, requests_of
from korvet.verification.values import Function, Record, TlaValue, parse_state
from tests.support import tlc_runs
from tests.support.examples import examples
from tests.support.spec_actions import ActionTally, action_cases, assert_action_replays

pytestmark = pytest.mark.tlc

GROUP = "g"
TOPIC = "t"
SESSION_MS = 10_000
BAD_SESSION_MS = 1_000  # below group.min.session.timeout.ms
REBALANCE_MS = 20_000
DEADLINE = 1_000_000  # every armed timer of a concretized state
REQUEST_AT = DEADLINE - 500  # requests arrive before any deadline
REQUEST_ID = 1
JOIN_REQUEST_BASE = 1000  # held-back JoinGroup of the i-th member id: 1000 + i
SYNC_REQUEST_BASE = 2000


@dataclass(frozen=True)
class Constants:
    """A model's constants, as its cfg binds them (checked against the cfg and TLC's states)."""

    model: str
    config_file: str
    member_ids_name: str
    member_ids: tuple[str, ...]
    instance_ids: tuple[str, ...]
    protocol_choices: tuple[tuple[tuple[str, str], ...], ...]
    protocol_names: tuple[str, ...]
    partitions: tuple[str, ...]
    offsets: tuple[int, ...]
    assignments: tuple[str, ...]
    group_max_size: int
    leave_batch_max: int
    max_generation: int


REPLAY = Constants(
    model="GroupCoordinator-replay",
    config_file="GroupCoordinatorReplay.cfg",
    member_ids_name="Ids2",
    member_ids=("m1", "m2"),
    instance_ids=("i1",),
    protocol_choices=((("range", "a"),), (("range", "b"),), (("rr", "a"),)),
    protocol_names=("range", "rr"),
    partitions=("p0",),
    offsets=(1,),
    assignments=("A",),
    group_max_size=2,
    leave_batch_max=1,
    max_generation=2,
)

CI = Constants(
    model="GroupCoordinator",
    config_file="GroupCoordinator.cfg",
    member_ids_name="Ids3",
    member_ids=("m1", "m2", "m3"),
    instance_ids=("i1",),
    protocol_choices=((("range", "a"),), (("range", "b"),), (("rr", "a"),)),
    protocol_names=("range", "rr"),
    partitions=("p0",),
    offsets=(1,),
    assignments=("A",),
    group_max_size=2,
    leave_batch_max=1,
    max_generation=1,
)

MODELS = {c.model: c for c in (REPLAY, CI)}

# --- canonical values: TLA+ values and Python values meet here --------------------

Canon = object


def canon(value: object) -> Canon:
    """A hashable normal form of a TLA+ value (the empty sequence is the empty function)."""
    kind = type(value)
    if kind is Record or kind is Function or kind is dict:
        items = value.items()  # type: ignore[attr-defined]
        return ("map", tuple(sorted((canon(k), canon(v)) for k, v in items)))
    if kind is tuple:
        if not value:
            return ("map", ())
        return ("seq", tuple(canon(v) for v in value))  # type: ignore[attr-defined]
    if kind is frozenset or kind is set:
        return ("set", frozenset(canon(v) for v in value))  # type: ignore[attr-defined]
    return value


def as_map(value: TlaValue) -> Mapping[object, object]:
    if isinstance(value, Record | Function):
        return value
    if value == ():
        return {}
    raise AssertionError(f"not a function: {value!r}")


def field(value: TlaValue, name: str) -> TlaValue:
    assert isinstance(value, Record), value
    result = value[name]
    return result  # type: ignore[return-value]


# --- TLA+ state -> Python state -----------------------------------------------------

def concretize(c: Constants, grp: TlaValue) -> CoordinatorState:
    config = Config(group_max_size=c.group_max_size)
    state = str(field(grp, "state"))
    if state == "Absent":
        return CoordinatorState(config=config, groups={})
    members: dict[str, Member] = {}
    for key, rec in as_map(field(grp, "members")).items():
        member_id = str(key)
        index = c.member_ids.index(member_id)
        assert isinstance(rec, Record)
        protocols = rec["protocols"]
        assert isinstance(protocols, tuple)
        members[member_id] = Member(
            member_id=member_id,
            group_instance_id=str(rec["instance"]) or None,
            client_id="client", client_host="/127.0.0.1",
            session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer",
            protocols=tuple(Protocol(str(p[0]), str(p[1]).encode())
                            for p in protocols if isinstance(p, tuple)),
            assignment=str(rec["assignment"]).encode(),
            is_new=bool(rec["isNew"]),
            join_request=JOIN_REQUEST_BASE + index if rec["awaitingJoin"] else None,
            sync_request=SYNC_REQUEST_BASE + index if rec["awaitingSync"] else None,
            session_deadline=DEADLINE)
    pending = field(grp, "pending")
    pending_sync = field(grp, "pendingSync")
    assert isinstance(pending, frozenset) and isinstance(pending_sync, frozenset)
    leader_sync_rec = field(grp, "leaderSync")
    sync_gen = field(leader_sync_rec, "gen")
    assert isinstance(sync_gen, int)
    leader_sync = None if sync_gen < 0 else LeaderSync(sync_gen, {
        str(m): str(a).encode() for m, a in as_map(field(leader_sync_rec, "asg")).items()})
    offsets = {TopicPartition(TOPIC, int(str(p)[1:])): CommittedOffset(o)  # type: ignore[arg-type]
               for p, o in as_map(field(grp, "committed")).items() if o != -1}
    group_state = GroupState(state)
    generation = field(grp, "generation")
    assert isinstance(generation, int)
    group = Group(
        group_id=GROUP, state=group_state, generation=generation,
        protocol_type=str(field(grp, "protocolType")) or None,
        protocol_name=str(field(grp, "protocolName")) or None,
        leader=str(field(grp, "leader")) or None,
        members=members,
        pending={str(m): PendingMember(SESSION_MS, DEADLINE) for m in pending},
        pending_sync=frozenset(str(m) for m in pending_sync),
        initial_rebalance=bool(field(grp, "initialRebalance")),
        new_member_added=False,  # so that the initial delay ends when its timer fires
        initial_delay_ms=config.initial_rebalance_delay_ms,
        initial_remaining_ms=0,
        join_deadline=DEADLINE if group_state is GroupState.PREPARING_REBALANCE else None,
        sync_deadline=DEADLINE if pending_sync else None,
        leader_sync=leader_sync,
        offsets=offsets)
    return CoordinatorState(config=config, groups={GROUP: group})


# --- Python state -> TLA+ state -----------------------------------------------------

def _record(fields: dict[str, Canon]) -> Canon:
    """canon() of a record whose field values are already canonical."""
    return ("map", tuple(sorted(fields.items())))


def _fn(pairs: Iterable[tuple[str, Canon]]) -> Canon:
    """canon() of a function from strings (the empty function included)."""
    return ("map", tuple(sorted(pairs)))


_NO_SYNC = _record({"gen": -1, "asg": _fn(())})


def abstract(c: Constants, state: CoordinatorState) -> Canon:
    """The spec's `grp` (in canonical form) that a Python state stands for.

    Builds canon() of the record directly: the replay calls it for every event."""
    assert set(state.groups) <= {GROUP}, state.groups.keys()
    group = state.groups.get(GROUP)
    committed = dict.fromkeys(c.partitions, -1)
    if group is None:
        return _record({
            "state": "Absent", "generation": 0, "protocolType": "", "protocolName": "",
            "leader": "", "members": _fn(()), "pending": ("set", frozenset()),
            "pendingSync": ("set", frozenset()), "initialRebalance": False,
            "leaderSync": _NO_SYNC, "committed": _fn(committed.items())})
    members = _fn((m, _record({
        "instance": member.group_instance_id or "",
        "protocols": ("seq", tuple(("seq", (p.name, p.metadata.decode())) for p in member.protocols)),
        "awaitingJoin": member.join_request is not None,
        "awaitingSync": member.sync_request is not None,
        "isNew": member.is_new, "assignment": member.assignment.decode()}))
        for m, member in group.members.items())
    sync = group.leader_sync
    for tp, offset in group.offsets.items():
        committed[f"p{tp.partition}"] = offset.offset
    return _record({
        "state": group.state.value, "generation": group.generation,
        "protocolType": group.protocol_type or "", "protocolName": group.protocol_name or "",
        "leader": group.leader or "", "members": members,
        "pending": ("set", frozenset(group.pending)),
        "pendingSync": ("set", group.pending_sync),
        "initialRebalance": group.initial_rebalance,
        "leaderSync": _NO_SYNC if sync is None else _record({
            "gen": sync.generation,
            "asg": _fn((m, a.decode()) for m, a in sync.assignments.items())}),
        "committed": _fn(committed.items()),
    })


_PLAIN = PlainNames()
_EFFECTS: dict[tuple[Effect, str | None], Canon] = {}


def effect_canon(effect: Effect, requests: Requests) -> Canon:
    """The spec's record of an effect (korvet.verification.abstraction, the one abstraction
    trace validation uses too), with `to` the request its request id is: cached by the
    effect and that request, which is all the record depends on."""
    request_id = getattr(effect, "request_id", None)
    route = None if request_id is None else requests.route(request_id, _KIND[type(effect)])
    key = (effect, route)
    known = _EFFECTS.get(key)
    if known is None:
        record = effect_record(effect, _PLAIN, GROUP, requests)
        assert record is not None, effect
        known = _EFFECTS[key] = canon(record)
    return known


_KIND: dict[type, str] = {JoinGroupReply: "JoinGroup", SyncGroupReply: "SyncGroup",
                          HeartbeatReply: "Heartbeat", LeaveGroupReply: "LeaveGroup",
                          OffsetCommitReply: "OffsetCommit", DeleteGroupsReply: "DeleteGroups"}


def effects_canon(effects: Iterable[Effect], requests: Requests) -> tuple[Canon, ...]:
    return tuple(effect_canon(e, requests) for e in effects)


def phase(effect: Canon) -> int:
    """GroupCoordinator.tla's Phase of an effect's canonical record."""
    assert isinstance(effect, tuple) and effect[0] == "map", effect
    fields = dict(effect[1])
    api, err = fields["api"], fields.get("err")
    if api in ("PersistOffsets", "DeleteGroupData"):
        return 0
    if api in ("JoinGroup", "SyncGroup") and err in (int(ErrorCode.UNKNOWN_MEMBER_ID),
                                                     int(ErrorCode.FENCED_INSTANCE_ID)):
        return 1
    if api == "SyncGroup" and err == int(ErrorCode.REBALANCE_IN_PROGRESS):
        return 2
    return 3 if api in ("JoinGroup", "SyncGroup") and err == 0 else 4


def effects_are(machine: Canon, spec: Canon) -> bool:
    """GroupCoordinator.tla's EffectsAre for two sequences of one step's effects: the same
    effects, each once, the machine's in the order of the step's phases. Within a phase the
    replies answer different members' requests, in the order of the machine's member dict,
    which the spec's state (a function of member ids) does not record: two runs reaching
    one spec state may list the same replies in two orders, both Kafka's."""
    assert isinstance(machine, tuple) and isinstance(spec, tuple)
    mine, theirs = machine[1], spec[1]
    phases = [phase(e) for e in mine]
    return (sorted(map(repr, mine)) == sorted(map(repr, theirs))
            and len(set(map(repr, mine))) == len(mine) and phases == sorted(phases))


# --- the events of the spec's Next, over the model's constants ---------------------

def subsets(items: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for size in range(len(items) + 1):
        yield from itertools.combinations(items, size)


def events_for(c: Constants, grp: TlaValue, issued: int) -> Iterator[Event]:  # noqa: C901, PLR0912 -- one branch per spec action
    """The spec's JoinGroup, SyncGroup, ... of Next with every parameter its domain allows."""
    known = c.member_ids[:issued]
    fresh = c.member_ids[issued] if issued < len(c.member_ids) else ""
    instances: tuple[str | None, ...] = (None, *c.instance_ids)
    state = str(field(grp, "state"))
    generation = field(grp, "generation")
    assert isinstance(generation, int)
    gens = (generation, generation - 1 if generation > 0 else 1)  # Gens: current, StaleGen
    protocol_name = str(field(grp, "protocolName"))
    leader = str(field(grp, "leader"))
    members = tuple(str(m) for m in as_map(field(grp, "members")))
    pending = field(grp, "pending")
    assert isinstance(pending, frozenset)

    def join(member_id: str, instance: str | None, protocols: tuple[tuple[str, str], ...],
             session: int, requires_known: bool, skip: bool) -> JoinGroup:
        return JoinGroup(REQUEST_ID, GROUP, member_id, instance, "consumer",
                         tuple(Protocol(n, m.encode()) for n, m in protocols),
                         session, REBALANCE_MS, "client", "/127.0.0.1", requires_known, skip,
                         fresh or "never-used")

    # JoinGroup (JoinVariants), and the session-timeout error for every member id
    if fresh:
        variants = [(None, rk, False) for rk in (False, True)] + \
                   [(i, True, sk) for i in c.instance_ids for sk in (False, True)]
        for (instance, rk, sk), protocols in itertools.product(variants, c.protocol_choices):
            yield join("", instance, protocols, SESSION_MS, rk, sk)
    for member_id, instance, protocols in itertools.product(known, instances,
                                                            c.protocol_choices):
        yield join(member_id, instance, protocols, SESSION_MS, True, False)
    for member_id in ("", *known) if fresh else known:
        yield join(member_id, None, c.protocol_choices[0], BAD_SESSION_MS, True, False)

    # SyncGroup (SyncNames: none, or a name other than the group's)
    mismatch = next(n for n in c.protocol_names if n != protocol_name)
    for member_id, instance, gen, name in itertools.product(known, instances, gens,
                                                            (None, mismatch)):
        maps: list[tuple[MemberAssignment, ...]] = [()]
        if member_id == leader and gen == generation and state == "CompletingRebalance":
            maps = [tuple(MemberAssignment(m, a.encode())
                          for m, a in zip(domain, values, strict=True))
                    for domain in subsets(members)
                    for values in itertools.product(c.assignments, repeat=len(domain))]
        for assignments in maps:
            yield SyncGroup(REQUEST_ID, GROUP, member_id, instance, gen, None, name, assignments)

    for member_id, instance, gen in itertools.product(known, instances, gens):
        yield Heartbeat(REQUEST_ID, GROUP, member_id, instance, gen)

    identities = [MemberIdentity(m, i) for m, i in itertools.product(("", *known), instances)]
    for size in range(1, c.leave_batch_max + 1):
        for batch in itertools.product(identities, repeat=size):
            yield LeaveGroup(REQUEST_ID, GROUP, batch)

    offset_maps = [dict(zip(domain, values, strict=True))
                   for domain in subsets(c.partitions) if domain
                   for values in itertools.product(c.offsets, repeat=len(domain))]
    for member_id, instance, gen, offsets in itertools.product(
            ("", *known), instances, (-1, *gens), offset_maps):
        to_commit = tuple(OffsetToCommit(TOPIC, int(p[1:]), o) for p, o in offsets.items())
        for v9 in ((False, True) if state == "Absent" and gen >= 0 else (False,)):
            yield OffsetCommit(REQUEST_ID, GROUP, member_id, instance, gen, to_commit, v9)

    yield DeleteGroups(REQUEST_ID, (GROUP,))
    yield GroupDataDeleted(GROUP)
    for member_id in members:
        yield SessionTimeout(GROUP, member_id)
    for member_id in sorted(str(m) for m in pending):
        yield PendingMemberTimeout(GROUP, member_id)
    yield RebalanceTimeout(GROUP)
    yield PendingSyncTimeout(GROUP)
    yield Restart()


INTERNAL = (SessionTimeout, PendingMemberTimeout, RebalanceTimeout, PendingSyncTimeout,
            GroupDataDeleted)

Successor = tuple[str, Canon]  # (action name, abstract successor with `issued`)
CoreCanon = tuple[Canon, int]  # (grp, issued)


@dataclass(frozen=True, slots=True)
class MachineStep:
    """One step of the machine from a spec state: an event of the spec's parameter domains."""

    event: Canon  # the spec's `ev` for it (event_record)
    name: str  # the event's class: the spec's action name
    successor: CoreCanon  # abstract state after it, with `issued`
    sequence: tuple[Canon, ...]  # abstract effects, in the machine's order
    beyond: bool  # the group's generation is beyond the model's CONSTRAINT

    @property
    def effects(self) -> frozenset[Canon]:
        return frozenset(self.sequence)


def step_all(c: Constants, grp: TlaValue, issued: int) -> list[MachineStep]:
    """Every step the machine takes from this spec state, for every event of the spec's
    parameter domains; a timer with nothing to do (no transition in the spec) is left out."""
    state = concretize(c, grp)
    here = abstract(c, state)
    fresh = c.member_ids[issued] if issued < len(c.member_ids) else None
    steps: list[MachineStep] = []
    for event in events_for(c, grp, issued):
        now = DEADLINE if isinstance(event, INTERNAL) else REQUEST_AT
        after, effects = step(state, event, now)
        there = here if after is state else abstract(c, after)
        if isinstance(event, INTERNAL) and there == here and not effects:
            continue  # a timer with nothing to do: no transition in the spec
        group = after.groups.get(GROUP)
        used = group is not None and fresh is not None and (
            fresh in group.members or fresh in group.pending)
        requests = requests_of(state.groups.get(GROUP), event, fresh if used else None)
        steps.append(MachineStep(
            event_record(state.config, event), type(event).__name__,
            (there, issued + 1 if used else issued), effects_canon(effects, requests),
            group is not None and group.generation > c.max_generation))
    return steps


class MachineTable:
    """The machine's steps from each (grp, issued), stepped once. The replay, the step check
    and the refinement runs of the whole graph share one table (a fixture); the tests that
    plant a bug in the machine use a table of their own."""

    def __init__(self, c: Constants) -> None:
        self.constants = c
        self.rows: dict[CoreCanon, list[MachineStep]] = {}

    def steps(self, grp: TlaValue, issued: int) -> list[MachineStep]:
        key = (canon(grp), issued)
        if key not in self.rows:
            self.rows[key] = step_all(self.constants, grp, issued)
        return self.rows[key]


def python_successors(c: Constants, grp: TlaValue, issued: int,
                      table: MachineTable | None = None) -> dict[Successor, set[Canon]]:
    """(event name, successor) -> the sets of abstract effects of the events leading there."""
    found: dict[Successor, set[Canon]] = {}
    for taken in (table or MachineTable(c)).steps(grp, issued):
        if taken.beyond:
            continue  # outside the model's CONSTRAINT: TLC does not go there
        found.setdefault((taken.name, taken.successor), set()).add(taken.effects)
    return found


# --- the state graph ----------------------------------------------------------------

_NODE = re.compile(r'^(-?\d+) \[label="')
_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')


def discoveries(dot: str) -> dict[str, tuple[str, str]]:
    """node -> (source, action) of the transition that discovered it (TLC writes a new
    node's label, with that transition's `out`, right after the edge that found it)."""
    found: dict[str, tuple[str, str]] = {}
    last: tuple[str, str, str] | None = None
    for raw in dot.splitlines():
        line = raw.strip()
        edge = _EDGE.match(line)
        if edge:
            last = (edge.group(1), edge.group(2), edge.group(3))
            continue
        node = _NODE.match(line)
        if node and last is not None and last[1] == node.group(1):
            found[node.group(1)] = (last[0], last[2])
    return found


def within_constraint(c: Constants, state: Mapping[str, TlaValue]) -> bool:
    """The model's StateConstraint."""
    generation = field(state["grp"], "generation")
    assert isinstance(generation, int)
    return generation <= c.max_generation


def core(state: Mapping[str, TlaValue]) -> tuple[Canon, int]:
    issued = state["issued"]
    assert isinstance(issued, int)
    return canon(state["grp"]), issued


@dataclass
class Graph:
    constants: Constants
    graph: tlc.StateGraph
    discovered: dict[str, tuple[str, str]]


def load_graph(c: Constants) -> Graph:
    graph, text = tlc_runs.state_graph(c.model)
    assert graph.result.outcome == "pass", graph.result.errors or graph.result.violated
    return Graph(c, graph, discoveries(text))


@dataclass
class Replay:
    states: int = 0
    groups: int = 0
    transitions: int = 0
    outputs_checked: int = 0
    divergences: list[str] = dataclass_field(default_factory=list)
    tally: ActionTally = dataclass_field(default_factory=lambda: ActionTally(0))  # per action


def replay(g: Graph, nodes: Iterable[str] | None = None,
           table: MachineTable | None = None) -> Replay:
    """Compare the machine with the spec at ``nodes`` (default: every state of the graph)."""
    c, graph = g.constants, g.graph
    report = Replay(tally=ActionTally(graph.result.distinct))
    by_core: dict[tuple[Canon, int], dict[Successor, set[Canon]]] = {}
    table = table or MachineTable(c)

    cores: dict[str, tuple[Canon, int]] = {}  # node -> core(its state): each once

    def core_of(node: str) -> tuple[Canon, int]:
        if node not in cores:
            cores[node] = core(graph.states[node])
        return cores[node]

    def successors_of(node: str) -> dict[Successor, set[Canon]]:
        key = core_of(node)
        if key not in by_core:
            by_core[key] = python_successors(c, graph.states[node]["grp"], key[1], table)
        return by_core[key]

    for node in graph.states if nodes is None else nodes:
        state = graph.states[node]
        if not within_constraint(c, state):
            continue
        report.states += 1
        python = successors_of(node)
        spec = {(action, core_of(target))
                for action, target in graph.successors(node)
                if within_constraint(c, graph.states[target])}
        report.transitions += len(spec)
        report.tally.states += 1
        got = set(python)
        if not report.tally.compare(spec, got, (node, state["grp"]), lambda s: str(s)[:300]):
            missing = sorted(a for a, _ in spec - got)
            extra = sorted(a for a, _ in got - spec)
            report.divergences.append(f"state {node} {state['grp']}:\n  the machine lacks "
                                      f"{missing}\n  and adds {extra}")
        if node in g.discovered and node not in graph.initial:
            source, action = g.discovered[node]
            out = state["out"]
            assert isinstance(out, frozenset)
            wanted = frozenset(canon(e) for e in out)
            outs = successors_of(source).get((action, core_of(node)), set())
            report.outputs_checked += 1
            if wanted not in outs:
                problem = f"{action} into state {node}: the spec's effects {out}, the machine's {outs}"
                report.divergences.append(problem)
                report.tally.note(action, problem)
    report.groups = len(by_core)
    return report


# --- the tests ---------------------------------------------------------------------

_GRAPHS: dict[str, Graph] = {}


def cached_graph(c: Constants) -> Graph:
    if c.model not in _GRAPHS:
        _GRAPHS[c.model] = load_graph(c)
    return _GRAPHS[c.model]


# Next's actions: TLC labels each transition with one, and the Python event of the same
# name takes it.
ACTIONS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "DeleteGroups",
           "GroupDataDeleted", "SessionTimeout", "PendingMemberTimeout", "RebalanceTimeout",
           "PendingSyncTimeout", "Restart")

# The dedicated replay model always; the bigger CI model (20,735 states, about 3 minutes
# more) when asked for: KORVET_REPLAY_MODELS=GroupCoordinator-replay,GroupCoordinator
REPLAYED = [name for name in os.environ.get("KORVET_REPLAY_MODELS", REPLAY.model).split(",")
            if name]


@pytest.fixture(scope="module", params=REPLAYED)
def graph(request: pytest.FixtureRequest) -> Graph:
    return cached_graph(MODELS[request.param])


_TABLES: dict[str, MachineTable] = {}


def shared_table(c: Constants) -> MachineTable:
    """The real machine's steps, shared by the tests that check the whole graph."""
    return _TABLES.setdefault(c.model, MachineTable(c))


def test_replayed_models_are_known() -> None:
    assert REPLAYED and set(REPLAYED) <= set(MODELS), REPLAYED


@pytest.mark.spec("GroupCoordinator", "JoinVariants", "Gens", "StaleGen", "SyncNames",
                  "AssignmentMaps", "OffsetMapsOf", "LeaveBatches")
def test_constants_are_the_models(graph: Graph) -> None:
    """The Python side enumerates over the constants the cfg binds."""
    c = graph.constants
    cfg = (tlc.spec_dir() / c.config_file).read_text()
    spec = (tlc.spec_dir() / "GroupCoordinator.tla").read_text()
    ids = ", ".join(f'"{m}"' for m in c.member_ids)
    assert f"MemberIds <- {c.member_ids_name}" in cfg
    assert f"{c.member_ids_name} == <<{ids}>>" in spec
    assert "ProtocolChoices <- ProtocolsBasic" in cfg
    assert 'ProtocolsBasic == {<<<<"range", "a">>>>, <<<<"range", "b">>>>, <<<<"rr", "a">>>>}' \
        in spec
    assert "ProtocolNames <- Names2" in cfg and 'Names2 == <<"range", "rr">>' in spec
    assert list(c.protocol_names) == sorted(c.protocol_names)  # the vote's tie-break
    instances = ", ".join(f'"{i}"' for i in c.instance_ids)
    partitions = ", ".join(f'"{p}"' for p in c.partitions)
    for line in (f"InstanceIds = {{{instances}}}", f"Partitions = {{{partitions}}}",
                 f"Offsets = {{{', '.join(map(str, c.offsets))}}}",
                 f"Assignments = {{{', '.join(f'{chr(34)}{a}{chr(34)}' for a in c.assignments)}}}",
                 f"GroupMaxSize = {c.group_max_size}", f"LeaveBatchMax = {c.leave_batch_max}",
                 f"MaxGeneration = {c.max_generation}"):
        assert line in cfg, line
    assert {s["issued"] for s in graph.graph.states.values()} == \
        set(range(len(c.member_ids) + 1))


_REPLAYS: dict[str, tuple[Replay, float]] = {}


def whole_replay(c: Constants) -> tuple[Replay, float]:
    """The real machine's replay of a model's whole graph and the seconds it took, once per
    module run: the whole-model test and each action's test read it."""
    if c.model not in _REPLAYS:
        graph = cached_graph(c)
        started = time.monotonic()
        report = replay(graph, table=shared_table(c))
        _REPLAYS[c.model] = report, time.monotonic() - started
    return _REPLAYS[c.model]


# The operators every transition goes through (the methods of the machine's ``_Draft``).
OPERATORS = ("CompleteJoin", "PrepareRebalance", "MaybeCompleteJoinPhase",
             "MaybePrepareRebalanceOrCompleteJoin", "AddMemberThenRebalance",
             "UpdateMemberThenRebalance", "ReplaceStaticMember", "RemoveMembers", "RemovalReplies",
             "AcceptJoining", "ValidateMember", "Supports", "SelectProtocol", "AllJoined")


@pytest.mark.spec("GroupCoordinator", "Spec", "grp", "grp.members", "StateConstraint", "CoreView",
                  *OPERATORS)
@pytest.mark.spec("GroupCoordinator", "out", note="effects of every discovering transition")
def test_every_transition_of_the_spec_is_a_step_of_the_machine(graph: Graph) -> None:
    report, elapsed = whole_replay(graph.constants)
    result = graph.graph.result
    print(f"\n{graph.constants.model}: replayed {report.states:,} spec states "
          f"({report.groups:,} distinct groups), {report.transitions:,} distinct transitions "
          f"and the effects of {report.outputs_checked:,} discovering transitions in "
          f"{elapsed:.1f}s (TLC: {result.generated:,} generated, {result.distinct:,} distinct, "
          f"{result.wall_seconds:.1f}s with the graph dump)")
    assert not report.divergences, f"{len(report.divergences)} divergences; the first:\n" + \
        "\n".join(report.divergences[:3])
    assert report.states == result.distinct
    assert report.outputs_checked >= result.distinct - len(graph.graph.initial) - 1
    # Every action of the spec's Next occurs, so none of them was replayed vacuously.
    assert set(report.tally.expected) == set(ACTIONS), sorted(report.tally.expected)


@pytest.mark.parametrize(("model", "action"), [
    case for model in REPLAYED
    for case in action_cases("GroupCoordinator", model, ACTIONS, with_model=True)])
def test_transition_replays(model: str, action: str) -> None:
    """Every transition of one action of a model, replayed through ``step``: the successor
    states, and the effects of the transitions of this action that discovered a state."""
    assert_action_replays(whole_replay(MODELS[model])[0].tally, action)


@pytest.mark.spec("GroupCoordinator", "AllJoined", note="a bug planted in `all_joined` is caught")
def test_the_replay_catches_a_machine_that_strays_from_the_spec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: with a plausible bug planted (pending members no longer hold up the
    end of the join phase), the replay finds divergences."""
    graph = cached_graph(REPLAY)
    pending_states = [n for n, s in graph.graph.states.items()
                      if field(s["grp"], "pending") and
                      field(s["grp"], "state") == "PreparingRebalance"]
    assert pending_states
    monkeypatch.setattr(machine._Draft, "all_joined",
                        lambda self: all(m.join_request is not None
                                         for m in self.members.values()))
    report = replay(graph, pending_states)
    assert report.divergences


@pytest.mark.spec("GroupCoordinator", "grp.state", "Init")
def test_spec_states_read_back_as_themselves() -> None:
    """The abstraction inverts the concretization on TLC's printing of a state."""
    state = parse_state('/\\ grp = [state |-> "Absent", generation |-> 0, protocolType |-> "", '
                        'protocolName |-> "", leader |-> "", members |-> << >>, '
                        'pending |-> {}, pendingSync |-> {}, initialRebalance |-> FALSE, '
                        'leaderSync |-> [gen |-> -1, asg |-> << >>], committed |-> [p0 |-> -1]]\n'
                        '/\\ out = {}\n/\\ issued = 0\n/\\ calm = FALSE')
    assert concretize(REPLAY, state["grp"]).groups == {}
    assert abstract(REPLAY, concretize(REPLAY, state["grp"])) == canon(state["grp"])


# --- every (state, event) step compared by TLC: spec/GroupCoordinatorSteps.tla ------

def tla(value: Canon) -> str:
    """TLA+ text of a canonical value (string-keyed maps print as records, as TLC does)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        assert '"' not in value and "\\" not in value, value
        return f'"{value}"'
    assert isinstance(value, tuple), value
    kind, items = value
    if kind == "map":
        if not items:
            return "<<>>"
        return "[" + ", ".join(f"{k} |-> {tla(v)}" for k, v in items) + "]"
    if kind == "seq":
        return "<<" + ", ".join(tla(v) for v in items) + ">>"
    assert kind == "set", value
    return "{" + ", ".join(sorted(tla(v) for v in items)) + "}"


def event_record(config: Config, event: Event) -> Canon:
    """The spec's `ev` (GroupCoordinatorSteps.tla) for a Python event: its action and parameters."""
    record: dict[str, object]
    match event:
        case JoinGroup():
            record = {"api": "JoinGroup", "mid": event.member_id,
                      "inst": event.group_instance_id or "",
                      "protos": tuple((p.name, p.metadata.decode()) for p in event.protocols),
                      "sessionOk": config.min_session_timeout_ms <= event.session_timeout_ms
                      <= config.max_session_timeout_ms,
                      "requireKnown": event.requires_known_member_id,
                      "skipOk": event.supports_skip_assignment}
        case SyncGroup():
            record = {"api": "SyncGroup", "mid": event.member_id,
                      "inst": event.group_instance_id or "", "gen": event.generation_id,
                      "asg": {a.member_id: a.assignment.decode() for a in event.assignments},
                      "pname": event.protocol_name or ""}
        case Heartbeat():
            record = {"api": "Heartbeat", "mid": event.member_id,
                      "inst": event.group_instance_id or "", "gen": event.generation_id}
        case LeaveGroup():
            record = {"api": "LeaveGroup", "batch": tuple(
                (m.member_id, m.group_instance_id or "") for m in event.members)}
        case OffsetCommit():
            record = {"api": "OffsetCommit", "mid": event.member_id,
                      "inst": event.group_instance_id or "", "gen": event.generation_id,
                      "offs": {f"p{o.partition}": o.offset for o in event.offsets},
                      "v9": event.unknown_group_is_not_found}
        case SessionTimeout() | PendingMemberTimeout():
            record = {"api": type(event).__name__, "mid": event.member_id}
        case _:
            record = {"api": type(event).__name__}
    return canon(record)


StepResult = tuple[CoreCanon, Canon]  # (next state, effects)


def machine_steps(c: Constants, grp: TlaValue, issued: int,
                  table: MachineTable | None = None) -> dict[Canon, StepResult]:
    """ev -> (next state, effects) of every step the machine takes from this spec state,
    for every event of the spec's parameter domains (no-op timers are not steps)."""
    return {taken.event: (taken.successor, ("seq", taken.sequence))
            for taken in (table or MachineTable(c)).steps(grp, issued)}


@dataclass
class StepCheck:
    sources: int  # states of TLC's graph the steps start from
    machine_steps: int  # (state, event) pairs the machine has a step for
    tlc: tlc.TlcResult
    seconds_python: float
    violation: str = ""

    @property
    def tlc_steps(self) -> int:
        return self.tlc.distinct - self.sources  # one depth-1 state per (source, event)


def _intern(table: dict[Any, int], value: object) -> int:
    if value not in table:
        table[value] = len(table) + 1
    return table[value]


def check_steps(g: Graph, nodes: Iterable[str] | None = None,
                table: MachineTable | None = None) -> StepCheck:
    """Write the machine's steps from every state (or ``nodes``) of the graph into a root
    module over GroupCoordinatorSteps.tla and have TLC compare them with the spec's."""
    c, graph = g.constants, g.graph
    table = table or MachineTable(c)
    started = time.monotonic()
    sources: dict[CoreCanon, int] = {}
    grps: dict[CoreCanon, TlaValue] = {}
    for node in graph.states if nodes is None else nodes:
        state = graph.states[node]
        if within_constraint(c, state):
            key = core(state)
            _intern(sources, key)
            grps[key] = state["grp"]
    count = len(sources)
    events: dict[Canon, int] = {}
    outs: dict[Canon, int] = {}
    rows: list[str] = []
    pairs = 0
    for (grp_canon, issued) in list(sources):
        entries = sorted((_intern(events, ev), _intern(sources, there), _intern(outs, effects))
                         for ev, (there, effects) in
                         machine_steps(c, grps[(grp_canon, issued)], issued, table).items())
        pairs += len(entries)
        rows.append("<<" + ", ".join(f"<<{e}, {s}, {o}>>" for e, s, o in entries) + ">>")
    seq = ",\n    ".join
    module = "\n".join([
        "---- MODULE GroupCoordinatorStepsRun ----",
        "EXTENDS GroupCoordinatorSteps",
        "RunSources == <<\n    " + seq(f"<<{tla(s)}, {i}>>" for s, i in sources) + ">>",
        "RunEvents == <<\n    " + seq(tla(e) for e in events) + ">>",
        "RunOuts == <<\n    " + seq(tla(o) for o in outs) + ">>",
        "RunTable == <<\n    " + seq(rows) + ">>",
        f"RunInit == CheckInit(RunSources, {count})",
        "RunAgrees == Agrees(RunSources, RunEvents, RunOuts, RunTable)",
        "====", ""])
    cfg = (tlc.spec_dir() / c.config_file).read_text()
    constants = cfg[cfg.index("CONSTANTS"):cfg.index("MaxGeneration")]
    config = "\n".join(["INIT RunInit", "NEXT CheckNext",
                        constants + f"MaxGeneration = {c.max_generation}",
                        "INVARIANT RunAgrees", ""])
    python_seconds = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="korvet-steps-") as work:
        directory = Path(work)
        for name in ("GroupCoordinator.tla", "GroupCoordinatorSteps.tla"):
            (directory / name).write_text((tlc.spec_dir() / name).read_text())
        (directory / "GroupCoordinatorStepsRun.tla").write_text(module)
        (directory / "GroupCoordinatorStepsRun.cfg").write_text(config)
        model = tlc.Model(name=f"{c.model}-steps", module="GroupCoordinatorStepsRun",
                          config="GroupCoordinatorStepsRun.cfg", extra_args=("-deadlock",))
        result = tlc.run_model(model, directory, workers="1")
    violation = ""
    if result.outcome != "pass":
        violation = "\n".join(result.errors[:3])
        if result.trace:
            last = result.trace[-1].state
            source = list(sources)[int(str(last["src"])) - 1]
            steps = machine_steps(c, grps[source], source[1], table)
            violation += f"\nthe spec's step: {result.trace[-1].raw}\nthe machine's: " + \
                repr(steps.get(canon(last["ev"]), "none"))
    return StepCheck(count, pairs, result, python_seconds, violation)



@pytest.mark.spec("GroupCoordinatorSteps", "StepNext", "ev", "CheckInit", "CheckNext",
                  "MachineStep", "Agrees")
def test_every_step_of_the_spec_is_the_machines_step(graph: Graph) -> None:
    """Every (state, event) of the model, self-loops and error replies included: TLC takes
    each step of StepNext from each state of the graph and finds the machine's step for
    the same event there, into the same state, with the same effects; and the machine has
    no step the spec lacks (the counts agree)."""
    check = check_steps(graph, table=shared_table(graph.constants))
    result = check.tlc
    print(f"\n{graph.constants.model}: {check.machine_steps:,} (state, event) steps of the machine "
          f"from {check.sources:,} states, compared by TLC with the spec's {check.tlc_steps:,} "
          f"({result.generated:,} generated, {result.distinct:,} distinct, "
          f"{result.wall_seconds:.1f}s; tables written in {check.seconds_python:.1f}s)")
    assert result.outcome == "pass", check.violation or result.errors
    assert check.sources == graph.graph.result.distinct
    assert check.tlc_steps == check.machine_steps


@pytest.mark.spec("GroupCoordinatorSteps", "CheckInit", "CheckNext", "MachineStep", "Agrees")
def test_the_step_check_catches_a_wrong_reply_that_changes_no_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: a heartbeat during a rebalance answered NONE instead of
    REBALANCE_IN_PROGRESS leaves the state as it is (the old replay never saw it); the
    step check finds it."""
    graph = cached_graph(REPLAY)
    preparing = [n for n, s in graph.graph.states.items()
                 if field(s["grp"], "state") == "PreparingRebalance"
                 and as_map(field(s["grp"], "members"))]
    assert preparing
    heartbeat = machine._heartbeat

    def silent(state: CoordinatorState, event: Heartbeat, now: int) -> machine.Step:
        after, effects = heartbeat(state, event, now)
        return after, tuple(HeartbeatReply(e.request_id, e.member_id, ErrorCode.NONE)
                            if isinstance(e, HeartbeatReply)
                            and e.error is ErrorCode.REBALANCE_IN_PROGRESS else e
                            for e in effects)

    monkeypatch.setattr(machine, "_heartbeat", silent)
    check = check_steps(graph, preparing[:40])
    assert check.tlc.outcome == "violation" and "Agrees" in check.tlc.violated, check.tlc.errors
    assert "Heartbeat" in check.violation


# --- refinement: random runs of the machine are behaviours of the spec -------------

@dataclass
class Abstraction:
    """TLC's graph by abstract state, and the machine's steps from each (cached)."""

    graph: Graph
    table: MachineTable
    states: dict[CoreCanon, TlaValue] = dataclass_field(default_factory=dict)
    edges: dict[CoreCanon, set[tuple[str, CoreCanon]]] = dataclass_field(default_factory=dict)
    steps: dict[CoreCanon, dict[Canon, StepResult]] = dataclass_field(default_factory=dict)

    def __post_init__(self) -> None:
        graph = self.graph.graph
        cores = {node: core(state) for node, state in graph.states.items()}
        for node, state in graph.states.items():
            key = cores[node]
            self.states[key] = state["grp"]
            self.edges.setdefault(key, set()).update(
                (action, cores[target]) for action, target in graph.successors(node))

    def steps_from(self, key: CoreCanon) -> dict[Canon, StepResult]:
        if key not in self.steps:
            self.steps[key] = machine_steps(self.graph.constants, self.states[key], key[1],
                                            self.table)
        return self.steps[key]


def concrete_events(c: Constants, a: Abstraction, key: CoreCanon, state: CoordinatorState,
                    now: int, data: st.DataObject, request_id: int) -> Event:
    """A request of the spec's parameter domains with concrete values the replay fixes
    drawn freely (timeouts; request ids are the adapter's, unique: ``request_id`` plus a
    drawn gap), a due timer, a clean-up, or a restart."""
    due = timers.due_timeouts(state, now)
    kind = data.draw(st.sampled_from(["request", "request", "request", "timer", "other"]))
    if kind == "timer" and due:
        return data.draw(st.sampled_from(due))
    if kind == "other":
        other: list[Event] = [Restart(), GroupDataDeleted(GROUP)]
        return data.draw(st.sampled_from(other))
    event = data.draw(st.sampled_from(list(events_for(c, a.states[key], key[1]))))
    if isinstance(event, INTERNAL):
        return event  # fired at `now`, due or not
    request_id += data.draw(st.integers(0, 3))
    if isinstance(event, JoinGroup):
        config = state.config
        session = event.session_timeout_ms
        if session == SESSION_MS:
            session = data.draw(st.integers(config.min_session_timeout_ms, 30_000))
        return dataclasses.replace(event, request_id=request_id, session_timeout_ms=session,
                                   rebalance_timeout_ms=data.draw(st.integers(1, 40_000)))
    if isinstance(event, SyncGroup | Heartbeat | LeaveGroup | OffsetCommit | DeleteGroups):
        return dataclasses.replace(event, request_id=request_id)
    return event


def refinement_run(a: Abstraction, data: st.DataObject, length: int) -> int:
    """Step the machine ``length`` times; every step, abstracted, must be a step of the
    spec: a transition of TLC's graph with the effects TLC accepted for that (state,
    event) in the step check, or a stutter (a timer not due: nothing changes, no effect)."""
    c = a.graph.constants
    state = CoordinatorState(config=Config(group_max_size=c.group_max_size), groups={})
    issued, now, taken = 0, 0, 0
    for number in range(length):
        now += data.draw(st.sampled_from([0, 0, 1, 1_000, 3_000, 10_000, 30_000, 400_000]))
        key = (abstract(c, state), issued)
        assert key in a.states, f"the machine reached a state outside TLC's graph: {key}"
        event = concrete_events(c, a, key, state, now, data, 10_000 + 4 * number)
        after, effects = step(state, event, now)
        group = after.groups.get(GROUP)
        fresh = c.member_ids[issued] if issued < len(c.member_ids) else None
        used = group is not None and fresh is not None and (
            fresh in group.members or fresh in group.pending)
        if used:
            issued += 1
        there = (abstract(c, after), issued)
        requests = requests_of(state.groups.get(GROUP), event, fresh if used else None)
        outs = ("seq", effects_canon(effects, requests))
        state = after
        if there == key and not effects:
            continue  # a stutter: the spec allows it
        name = type(event).__name__
        if group is not None and group.generation > c.max_generation:
            break  # beyond the model's bounds
        assert (name, there) in a.edges[key], \
            f"{name} from {key} to {there} is not a transition of TLC's graph ({event})"
        expected = a.steps_from(key).get(event_record(state.config, event))
        assert expected is not None and expected[0] == there and \
            effects_are(outs, expected[1]), \
            f"{event} from {key}: effects {outs}, the spec's step {expected}"
        taken += 1
    return taken


@pytest.fixture(scope="module")
def abstraction() -> Abstraction:
    return Abstraction(cached_graph(REPLAY), shared_table(REPLAY))


@pytest.mark.spec("GroupCoordinator", "Spec")
@settings(max_examples=examples(0.5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_machine_runs_refine_the_spec(abstraction: Abstraction, data: st.DataObject) -> None:
    refinement_run(abstraction, data, 40)
