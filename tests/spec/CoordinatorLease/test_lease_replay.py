"""Every transition of spec/CoordinatorLease.tla's replay models, replayed through korvet/core/lease.py.

TLC dumps the whole state graph of the ``CoordinatorLease-replay`` model (one takeover,
commits) and of ``CoordinatorLease-replay-takeovers`` (two takeovers: a token-1 write still
in flight when the lease comes back to its first owner, or to a restarted process of it). For every
state the test steps every action the spec's ``Next`` allows there, deciding the
lease parts with the Python machine (``may_acquire``, ``grant``, ``renewal``,
``release``, ``accepts``, ``believes``, ``expired_locally``, ``after_*``) and the
abstract coordinator parts (a rebalance, a commit, a deletion and its clean-up) as the
spec does, and requires the set of (action, successor) pairs to be exactly TLC's. A
lease rule changed in Python (a grant that keeps the token, a write accepted with a
stale token, a deadline without the margin, a release that ends nothing) makes the sets
differ: ``test_a_broken_rule_is_caught`` checks that.
The graph is replayed once; each action's transitions are also a test of their own
(``test_transition_replays[CoordinatorLease-replay-RenewRefused]``, ``pytest -k
RenewRefused``), which fails when the action never fires in the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from korvet.core import lease
from korvet.verification import tlc
from korvet.verification.values import ModelValue, TlaValue
from tests.support import tlc_runs
from tests.support.spec_actions import ActionTally, action_cases, assert_action_replays

MODEL_NAME = "CoordinatorLease-replay"  # the broken rules' model
TAKEOVERS = "CoordinatorLease-replay-takeovers"
MODELS = (MODEL_NAME, TAKEOVERS)

pytestmark = pytest.mark.tlc

Assign = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Copy:
    loaded: bool
    inc: int  # the group's incarnation (its deletions so far)
    dead: bool
    gen: int
    assign: Assign
    committed: int


@dataclass(frozen=True, slots=True)
class Write:
    sender: str
    token: int
    cleanup: bool
    data: Copy  # what the write leaves in Redis (``loaded`` False)


@dataclass(frozen=True, slots=True)
class State:
    now: int
    off: tuple[tuple[str, int], ...]
    record: lease.LeaseRecord
    held: tuple[tuple[str, lease.Held], ...]
    mem: tuple[tuple[str, Copy], ...]
    saved: Copy
    net: frozenset[Write]
    foreign: bool
    assigned: frozenset[tuple[int, int, str, str]]
    high: int
    regress: bool
    wiped: bool


@dataclass(frozen=True, slots=True)
class Constants:
    brokers: tuple[str, ...]
    members: tuple[str, ...]
    partitions: tuple[str, ...]
    ttl: int
    drift: int
    margin: int
    max_time: int
    max_token: int
    max_gen: int
    max_offset: int
    max_deletes: int

    @classmethod
    def read(cls, cfg: Path) -> Constants:
        v = tlc.read_constants(cfg)
        assert v["Fenced"] is True

        def names(key: str) -> tuple[str, ...]:
            value = v[key]
            assert isinstance(value, frozenset)
            return tuple(sorted(_name(x) for x in value))

        def num(key: str) -> int:
            value = v[key]
            assert isinstance(value, int)
            return value

        return cls(names("Brokers"), names("Members"), names("Partitions"), num("TTL"),
                   num("Drift"), num("Margin"), num("MaxTime"), num("MaxToken"),
                   num("MaxGen"), num("MaxOffset"), num("MaxDeletes"))


def _name(value: object) -> str:
    return value.name if isinstance(value, ModelValue) else str(value)


def _get(value: Any, key: str) -> Any:
    """A record's field or a function's value at a model value, by name."""
    for k in value:
        if _name(k) == key:
            return value[k]
    raise KeyError(key)


def _int(value: TlaValue) -> int:
    assert isinstance(value, int)
    return value


def _assign(value: TlaValue) -> Assign:
    return tuple(sorted((_name(p), _name(m)) for p, m in value.items()))  # type: ignore[union-attr]


def from_tla(s: dict[str, TlaValue], c: Constants) -> State:
    record = s["lease"]
    owner = _name(_get(record, "owner"))

    def copy(v: Any, loaded: bool) -> Copy:
        return Copy(loaded, _int(_get(v, "inc")), _get(v, "dead") is True, _int(_get(v, "gen")),
                    _assign(_get(v, "assign")), _int(_get(v, "committed")))

    return State(
        now=_int(s["now"]),
        off=tuple((b, _int(_get(s["off"], b))) for b in c.brokers),
        record=lease.LeaseRecord(None if owner == "none" else owner, _int(_get(record, "token")),
                                _int(_get(record, "expires"))),
        held=tuple((b, lease.Held(_int(_get(_get(s["held"], b), "token")),
                                  _int(_get(_get(s["held"], b), "until")))) for b in c.brokers),
        mem=tuple((b, copy(_get(s["mem"], b), _get(_get(s["mem"], b), "loaded") is True))
                  for b in c.brokers),
        saved=copy(s["saved"], False),
        net=frozenset(Write(_name(_get(w, "from")), _int(_get(w, "token")),
                            _get(w, "cleanup") is True, copy(w, False))
                      for w in s["net"]),  # type: ignore[union-attr]
        foreign=s["foreign"] is True,
        assigned=frozenset((_int(x[0]), _int(x[1]), _name(x[2]), _name(x[3]))  # type: ignore[index]
                           for x in s["assigned"]),  # type: ignore[union-attr]
        high=_int(s["highToken"]),
        regress=s["regress"] is True,
        wiped=s["wiped"] is True,
    )


class Machine:
    """The spec's Next, with the lease decisions taken by korvet/core/lease.py."""

    def __init__(self, c: Constants) -> None:
        self.c = c
        self.nobody = tuple((p, "nobody") for p in c.partitions)
        self.empty = Copy(False, 0, False, 0, self.nobody, 0)

    def new(self, inc: int) -> Copy:
        """What a clean-up leaves: the group's next incarnation, new (spec ``New``)."""
        return Copy(True, inc, False, 0, self.nobody, 0)

    def local(self, s: State, b: str) -> int:
        return s.now + dict(s.off)[b]

    def waiting(self, s: State, b: str) -> bool:
        token = dict(s.held)[b].token
        return any(w.sender == b and w.token == token for w in s.net)

    def owns(self, s: State, b: str) -> bool:
        return (lease.believes(dict(s.held)[b], self.local(s, b)) and not self.waiting(s, b)
                and dict(s.mem)[b].loaded)

    def put(self, s: State, b: str, held: lease.Held | None = None,
            mem: Copy | None = None) -> State:
        h = dict(s.held)
        m = dict(s.mem)
        if held is not None:
            h[b] = held
        if mem is not None:
            m[b] = mem
        return replace(s, held=tuple(sorted(h.items())), mem=tuple(sorted(m.items())))

    def drop(self, s: State, b: str) -> State:
        return self.put(s, b, lease.NOT_HELD, self.empty)

    def send(self, s: State, b: str, copy: Copy, cleanup: bool = False) -> State:
        w = Write(b, dict(s.held)[b].token, cleanup, replace(copy, loaded=False))
        return replace(self.put(s, b, mem=copy), net=s.net | {w})

    def successors(self, s: State) -> Iterator[tuple[str, State]]:
        c = self.c
        if s.now < c.max_time:
            yield "Tick", replace(s, now=s.now + 1)
        for b in c.brokers:
            yield from self.broker_steps(s, b)
        for w in s.net:
            yield from self.delivery(s, w)

    def broker_steps(self, s: State, b: str) -> Iterator[tuple[str, State]]:  # noqa: C901, PLR0912 -- one branch per spec action
        c = self.c
        held, local = dict(s.held)[b], self.local(s, b)
        if (held.token == 0 and s.record.token < c.max_token
                and lease.may_acquire(s.record, b, s.now)):
            record = lease.grant(s.record, b, s.now, c.ttl)
            yield "Acquire", replace(
                self.put(s, b, lease.after_grant(record.token, local, c.ttl, c.margin),
                         replace(s.saved, loaded=True)), record=record)
        if lease.believes(held, local):
            renewed = lease.renewal(s.record, held.token, s.now, c.ttl)
            if renewed is not None:
                yield "Renew", replace(self.put(s, b, lease.after_renewal(
                    held, True, local, c.ttl, c.margin)), record=renewed)
        if held.token != 0 and lease.renewal(s.record, held.token, s.now, c.ttl) is None:
            yield "RenewRefused", self.put(s, b, lease.after_renewal(
                held, False, local, c.ttl, c.margin), self.empty)
        if lease.expired_locally(held, local):
            yield "LocalExpiry", self.drop(s, b)
        owns, mem = self.owns(s, b), dict(s.mem)[b]
        if owns:
            yield "Release", replace(self.drop(s, b), record=lease.release(s.record, held.token))
        if held != lease.NOT_HELD or mem != self.empty:
            yield "Crash", self.drop(s, b)
        if owns and not mem.dead and mem.committed < c.max_offset:
            yield "Commit", self.send(s, b, replace(mem, committed=mem.committed + 1))
        if owns and not mem.dead and mem.inc < c.max_deletes:
            yield "Delete", self.send(s, b, replace(mem, dead=True))
        if owns and mem.dead:
            yield "CleanUp", self.send(s, b, self.new(mem.inc + 1), cleanup=True)
        if held.token != 0 and self.waiting(s, b):
            yield "GiveUp", self.put(s, b, lease.after_write(held, held.token,
                                                             lease.WriteOutcome.UNKNOWN),
                                     self.empty)
        if owns and not mem.dead and mem.gen < c.max_gen:
            for members in itertools.product(c.members, repeat=len(c.partitions)):
                a = tuple(zip(c.partitions, members, strict=True))
                yield "Rebalance", self.send(s, b, replace(mem, gen=mem.gen + 1, assign=a))
        for d in range(-c.drift, c.drift + 1):
            if d != dict(s.off)[b]:
                yield "Skew", replace(s, off=tuple(sorted({**dict(s.off), b: d}.items())))

    def delivery(self, s: State, w: Write) -> Iterator[tuple[str, State]]:
        rest = replace(s, net=s.net - {w})
        held = dict(s.held)[w.sender]
        if lease.accepts(s.record, w.token):
            d, saved = w.data, s.saved
            backwards = (w.token < s.high or d.inc < saved.inc
                         or (d.inc == saved.inc and saved.dead and not d.dead)
                         or (d.inc == saved.inc and (d.gen < saved.gen
                                                     or d.committed < saved.committed)))
            wipes = (w.cleanup and not (saved.dead and saved.inc + 1 == d.inc)
                     and saved != d)
            yield "Apply", replace(
                rest, saved=d, foreign=s.foreign or w.sender != s.record.owner,
                assigned=s.assigned | {(d.inc, d.gen, p, m) for p, m in d.assign
                                       if m != "nobody"},
                high=max(s.high, w.token), regress=s.regress or backwards,
                wiped=s.wiped or wipes)
        else:
            after = lease.after_write(held, w.token, lease.WriteOutcome.REFUSED)
            yield "Refuse", rest if after == held else self.drop(rest, w.sender)
        after = lease.after_write(held, w.token, lease.WriteOutcome.UNKNOWN)
        yield "Lose", rest if after == held else self.drop(rest, w.sender)


# Next's actions, as TLC labels them, Skew aside (actions_of).
ACTIONS = ("Tick", "Acquire", "Renew", "RenewRefused", "LocalExpiry", "Release", "Crash",
           "Commit", "Rebalance", "Delete", "CleanUp", "Apply", "Refuse", "Lose", "GiveUp")


def actions_of(c: Constants) -> tuple[str, ...]:
    """The actions a model takes: Skew only with drifting clocks, Commit only with an offset
    to commit (the takeovers model has none)."""
    return tuple(a for a in (*ACTIONS, "Skew")
                 if (a != "Skew" or c.drift) and (a != "Commit" or c.max_offset))


CONSTANTS = {name: Constants.read(tlc.spec_dir() / tlc_runs.model(name).config)
             for name in MODELS}


def _model(name: str) -> tuple[tlc.StateGraph, Constants]:
    graph, _ = tlc_runs.state_graph(name)
    assert graph.result.outcome == "pass", (graph.result.violated, graph.result.errors)
    return graph, CONSTANTS[name]


@pytest.fixture(scope="module")
def model() -> tuple[tlc.StateGraph, Constants]:
    return _model(MODEL_NAME)


def _replay(graph: tlc.StateGraph, c: Constants, limit: int = 0) -> tuple[list[str], ActionTally]:
    """Compare every state's successors; stop after ``limit`` divergent states (0: never)."""
    machine = Machine(c)
    states = {node: from_tla(s, c) for node, s in graph.states.items()}
    problems: list[str] = []
    tally = ActionTally(len(states))
    for node, state in states.items():
        expected = {(action, states[target]) for action, target in graph.successors(node)}
        got = set(machine.successors(state))
        tally.states += 1
        if not tally.compare(expected, got, state):
            missing = sorted(a for a, _ in expected - got)
            extra = sorted(a for a, _ in got - expected)
            problems.append(f"state {state}: TLC only {missing}, Python only {extra}")
            if len(problems) == limit:
                tally.stopped = f"stopped after {limit} divergent states"
                break
    return problems, tally


Replayed = tuple[list[str], ActionTally]


@pytest.fixture(scope="module")
def walked() -> Callable[[str], Replayed]:
    """The real rules' replay of every state of a model, once per module."""
    done: dict[str, Replayed] = {}

    def of(name: str) -> Replayed:
        if name not in done:
            done[name] = _replay(*_model(name))
        return done[name]
    return of


@pytest.fixture(scope="module")
def replayed(walked: Callable[[str], Replayed]) -> Replayed:
    return walked(MODEL_NAME)


@pytest.mark.spec("CoordinatorLease", "Spec", "Brokers", "held", "net")
@pytest.mark.parametrize("name", [
    MODEL_NAME,
    pytest.param(TAKEOVERS, marks=pytest.mark.spec("CoordinatorLease", "MaxToken",
                                                   note="two takeovers replayed"))])
def test_every_transition_replays_through_the_lease_machine(
        walked: Callable[[str], Replayed], name: str) -> None:
    graph, c = _model(name)
    assert len(graph.states) == graph.result.distinct
    assert graph.transition_count > len(graph.states)
    problems, _ = walked(name)
    assert not problems, f"{len(problems)} divergent states; the first:\n" + "\n".join(problems[:3])
    actions = {a for edges in graph.edges.values() for a, _ in edges}
    # every action of the spec happens in the replayed graph
    assert actions == set(actions_of(c)), actions
    # the takeovers model grants every token up to MaxToken: as many takeovers as it says
    assert max(_int(_get(state["lease"], "token")) for state in graph.states.values()) == \
        c.max_token


@pytest.mark.parametrize(("model_name", "action"), [
    case for name in MODELS
    for case in action_cases("CoordinatorLease", name, actions_of(CONSTANTS[name]),
                             with_model=True)])
def test_transition_replays(walked: Callable[[str], Replayed], model_name: str,
                            action: str) -> None:
    """Every transition of one action of a model, replayed through korvet/core/lease.py."""
    assert_action_replays(walked(model_name)[1], action)


BROKEN: dict[str, tuple[str, Callable[..., object]]] = {
    "grant keeps the token": ("grant", lambda r, b, now, ttl: lease.LeaseRecord(
        b, max(r.token, 1), now + ttl)),
    "stale token accepted": ("accepts", lambda r, token: token != 0),
    "deadline without margin": ("believed_until", lambda local, ttl, margin: local + ttl),
    "refused write keeps the lease": ("after_write", lambda held, token, outcome: held),
    "release ends nothing": ("release", lambda record, token: record),
}


# The spec names whose rule each broken copy breaks.
BROKEN_NAMES = {"grant keeps the token": ("Acquire",), "stale token accepted": ("Apply", "Refuse"),
                "deadline without margin": ("AtMostOneBelieves", "Margin"),
                "refused write keeps the lease": ("Refuse",),
                "release ends nothing": ("Release",)}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.spec("CoordinatorLease", *BROKEN_NAMES[name]))
    for name in sorted(BROKEN)])
def test_a_broken_rule_is_caught(model: tuple[tlc.StateGraph, Constants],
                                 monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    graph, c = model
    attribute, broken = BROKEN[name]
    monkeypatch.setattr(lease, attribute, broken)
    assert _replay(graph, c, limit=3)[0], f"the replay did not notice: {name}"


@pytest.mark.spec("CoordinatorLease", "Apply", "Refuse")
def test_a_broken_rule_fails_the_tests_of_its_actions_only(
        model: tuple[tlc.StateGraph, Constants], monkeypatch: pytest.MonkeyPatch,
        replayed: tuple[list[str], ActionTally]) -> None:
    """Not vacuous, and keyed right: a write accepted with a stale token fails the tests of
    the two deliveries it decides (Apply, Refuse) and no other; an action the model never
    takes (Skew: the replay model's clocks do not drift) fails its test."""
    monkeypatch.setattr(lease, "accepts", BROKEN["stale token accepted"][1])
    _, tally = _replay(*model)
    failed = set()
    for action in ACTIONS:
        try:
            assert_action_replays(tally, action)
        except AssertionError:
            failed.add(action)
    assert failed == {"Apply", "Refuse"}, failed
    with pytest.raises(AssertionError, match="Skew never fires"):
        assert_action_replays(replayed[1], "Skew")
