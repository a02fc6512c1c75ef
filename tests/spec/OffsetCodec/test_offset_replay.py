"""Replay TLC's whole state graph of the OffsetCodec CI model through the Python codec.

TLC dumps every reachable state of spec/OffsetCodec.tla (config OffsetCodec.cfg)
and every transition, labelled with the action name only. For each state this
test rebuilds the state's successors in Python, with OffsetCodec.reserve /
decode / last_offset_of doing the work the spec's AppendBatch does, and
requires the set of (action, successor) pairs to equal TLC's. It also requires
every value the spec derives in a state (the offset a consumer reads from a
record's id and the one its producer was told, the append floor from the
last-generated id) to be what the Python codec computes. The constants come from the .cfg file, so the test
follows the model when it changes. The graph is walked once; each action's
transitions are also a test of their own (``test_transition_replays[AppendBatch]``,
``pytest -k AppendBatch``), which fails when the action never fires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from korvet.core.offsets import EntryId, OffsetCodec, OffsetError
from korvet.verification import tlc
from korvet.verification.values import Function, ModelValue, Record, TlaValue, format_value
from tests.support import tlc_runs
from tests.support.spec_actions import ActionTally, action_cases, assert_action_replays

MODEL_NAME = "OffsetCodec"
ACTIONS = ("Tick", "Send", "AppendBatch", "RejectBatch")  # Next's disjuncts, as TLC labels them

pytestmark = pytest.mark.tlc


@dataclass(frozen=True, slots=True)
class Constants:
    bits: int
    offset_bits: int
    max_clock: int
    producers: tuple[ModelValue, ...]
    max_batch: int
    max_batches: int

    @classmethod
    def of(cls, values: dict[str, TlaValue]) -> Constants:
        producers = values["Producers"]
        assert isinstance(producers, frozenset)
        return cls(
            bits=_int(values["Bits"]),
            offset_bits=_int(values["OffsetBits"]),
            max_clock=_int(values["MaxClock"]),
            producers=tuple(sorted((p for p in producers if isinstance(p, ModelValue)),
                                   key=lambda p: p.name)),
            max_batch=_int(values["MaxBatch"]),
            max_batches=_int(values["MaxBatches"]),
        )


def _int(value: object) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


# --- the partition, as Python values ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StoredRecord:
    id: EntryId
    batch: int  # the produce request it came in: an index into the acks


@dataclass(frozen=True, slots=True)
class Ack:
    producer: ModelValue
    base: int
    count: int


@dataclass(frozen=True, slots=True)
class Partition:
    clock: int
    inflight: tuple[tuple[ModelValue, int], ...]  # sorted by producer
    last_id: EntryId
    stream: tuple[StoredRecord, ...]
    acks: tuple[Ack, ...]

    def inflight_of(self, producer: ModelValue) -> int:
        return dict(self.inflight)[producer]

    def with_inflight(self, producer: ModelValue, count: int) -> tuple[tuple[ModelValue, int], ...]:
        return tuple((p, count if p == producer else n) for p, n in self.inflight)

    def to_tla(self) -> dict[str, TlaValue]:
        return {
            "clock": self.clock,
            "inflight": Function(dict(self.inflight)),
            "lastId": (self.last_id.ms, self.last_id.seq),
            "stream": tuple(Record({"id": (r.id.ms, r.id.seq), "batch": r.batch})
                            for r in self.stream),
            "acks": tuple(Record({"producer": a.producer, "base": a.base, "count": a.count})
                          for a in self.acks),
        }

    @classmethod
    def from_tla(cls, state: dict[str, TlaValue]) -> Partition:
        inflight = state["inflight"]
        assert isinstance(inflight, Function)
        stream = state["stream"]
        acks = state["acks"]
        assert isinstance(stream, tuple) and isinstance(acks, tuple)
        return cls(
            clock=_int(state["clock"]),
            inflight=tuple(sorted(((_model_value(p), _int(n)) for p, n in inflight.items()),
                                  key=lambda pn: pn[0].name)),
            last_id=_entry_id(state["lastId"]),
            stream=tuple(StoredRecord(_entry_id(_field(r, "id")), _int(_field(r, "batch")))
                         for r in stream),
            acks=tuple(Ack(_model_value(_field(a, "producer")), _int(_field(a, "base")),
                           _int(_field(a, "count"))) for a in acks),
        )


def _field(record: TlaValue, name: str) -> object:
    assert isinstance(record, Record), record
    return record[name]


def _model_value(value: object) -> ModelValue:
    assert isinstance(value, ModelValue), value
    return value


def _entry_id(value: object) -> EntryId:
    assert isinstance(value, tuple) and len(value) == 2, value
    return EntryId(_int(value[0]), _int(value[1]))


StateKey = tuple[tuple[str, TlaValue], ...]


def key(state: dict[str, TlaValue]) -> StateKey:
    return tuple(sorted(state.items()))


# --- the spec's actions, in Python ------------------------------------------------------

def initial_states(c: Constants) -> set[StateKey]:
    return {key(Partition(clock, tuple((p, 0) for p in c.producers), EntryId(0, 0), (), ())
                .to_tla()) for clock in range(c.max_clock + 1)}


def within_constraint(c: Constants, state: Partition) -> bool:
    """StateConstraint: TLC neither keeps nor expands states outside it."""
    return len(state.acks) <= c.max_batches


def successors(c: Constants, codec: OffsetCodec, s: Partition) -> Iterator[tuple[str, Partition]]:
    for t in range(c.max_clock + 1):
        if t != s.clock:
            yield "Tick", Partition(t, s.inflight, s.last_id, s.stream, s.acks)
    for p in c.producers:
        n = s.inflight_of(p)
        if n == 0:
            for size in range(1, c.max_batch + 1):
                yield "Send", Partition(s.clock, s.with_inflight(p, size), s.last_id, s.stream,
                                        s.acks)
            continue
        try:
            offsets = codec.reserve(codec.last_offset_of(s.last_id), s.clock, n)
        except OffsetError:
            yield "RejectBatch", Partition(s.clock, s.with_inflight(p, 0), s.last_id, s.stream,
                                           s.acks)
            continue
        batch = len(s.acks) + 1
        records = tuple(StoredRecord(codec.decode(o), batch) for o in offsets)
        yield "AppendBatch", Partition(s.clock, s.with_inflight(p, 0), records[-1].id,
                                       s.stream + records,
                                       (*s.acks, Ack(p, offsets[0], len(offsets))))


def derived_value_errors(codec: OffsetCodec, s: Partition) -> list[str]:
    """Values the spec derives in a state, recomputed by the Python codec: the offset a
    consumer reads from each record's id (``Read``) is the one its producer was told
    (``Told``: its batch's base offset plus its place in the batch) and decodes back to the
    id; the append floor is the last record's offset."""
    errors: list[str] = []
    placed: dict[int, int] = {}
    for i, record in enumerate(s.stream, start=1):
        placed[record.batch] = placed.get(record.batch, 0) + 1
        told = s.acks[record.batch - 1].base + placed[record.batch] - 1
        if codec.encode_id(record.id) != told:
            errors.append(f"stream[{i}]: encode_id({record.id}) = {codec.encode_id(record.id)}, "
                          f"its producer was told {told}")
        if codec.decode(told) != record.id:
            errors.append(f"stream[{i}]: decode({told}) = {codec.decode(told)}, the spec's id "
                          f"is {record.id}")
    floor = codec.encode_id(s.stream[-1].id) if s.stream else 0
    if codec.last_offset_of(s.last_id) != floor:
        errors.append(f"last_offset_of({s.last_id}) = {codec.last_offset_of(s.last_id)}, "
                      f"the spec's LastOffset is {floor}")
    return errors


# --- the test -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Replay:
    graph: tlc.StateGraph
    constants: Constants


@pytest.fixture(scope="module")
def replay() -> Replay:
    graph, _ = tlc_runs.state_graph(MODEL_NAME)
    assert graph.result.outcome == "pass", (graph.result.violated, graph.result.errors)
    config = tlc.spec_dir() / tlc_runs.model(MODEL_NAME).config
    return Replay(graph, Constants.of(tlc.read_constants(config)))


def _describe(state: dict[str, TlaValue]) -> str:
    return ", ".join(f"{name} = {format_value(value)}" for name, value in sorted(state.items()))


@pytest.mark.spec("OffsetCodec", "OffsetBits")
def test_constants_read_from_the_cfg(replay: Replay) -> None:
    c = replay.constants
    assert c.producers and c.max_batch >= 1 and c.max_clock >= 1
    # The model must reach the boundaries the replay is for: the carry into the next
    # millisecond (a batch wider than one seq step), and a clock past the last millisecond.
    codec = OffsetCodec(c.bits, offset_bits=c.offset_bits)
    assert c.max_batch >= 2
    assert c.max_clock > codec.max_ms


@pytest.mark.spec("OffsetCodec", "Init")
def test_initial_states_match(replay: Replay) -> None:
    tlc_initial = {key(replay.graph.states[node]) for node in replay.graph.initial}
    assert tlc_initial == initial_states(replay.constants)


@dataclass
class Walked:
    """The replay of every state, once per module: the whole model's findings and each
    action's share."""

    replayed: int
    actions: dict[str, int]
    divergences: list[str]
    tally: ActionTally


@pytest.fixture(scope="module")
def walked(replay: Replay) -> Walked:
    c = replay.constants
    codec = OffsetCodec(c.bits, offset_bits=c.offset_bits)
    graph = replay.graph
    tally = ActionTally(len(graph.states))
    replayed = 0
    actions: dict[str, int] = {}
    divergences: list[str] = []
    for node, tla_state in graph.states.items():
        state = Partition.from_tla(tla_state)
        assert state.to_tla() == tla_state, f"state did not convert back: {_describe(tla_state)}"
        divergences.extend(f"{_describe(tla_state)}: {e}" for e in derived_value_errors(codec, state))
        tlc_successors = {(action, key(graph.states[target]))
                          for action, target in graph.successors(node)}
        tally.states += 1
        if not within_constraint(c, state):
            assert not tlc_successors, "TLC expanded a state outside StateConstraint"
            continue
        python_successors = {(action, key(successor.to_tla()))
                             for action, successor in successors(c, codec, state)
                             if within_constraint(c, successor)}
        if not tally.compare(tlc_successors, python_successors, key(tla_state),
                             lambda s: _describe(dict(s))):
            only_tlc = sorted(a for a, _ in tlc_successors - python_successors)
            only_python = sorted(a for a, _ in python_successors - tlc_successors)
            divergences.append(f"{_describe(tla_state)}: successors only TLC has {only_tlc}, "
                               f"only Python has {only_python}")
        for action, _ in tlc_successors:
            actions[action] = actions.get(action, 0) + 1
        replayed += len(tlc_successors)
        if len(divergences) > 20:
            tally.stopped = "stopped after 20 divergences"
            break
    print(f"\nreplayed {replayed:,} transitions from {len(graph.states):,} states "
          f"(TLC: {graph.result.generated:,} generated, {graph.result.distinct:,} distinct); "
          f"by action: {dict(sorted(actions.items()))}")
    return Walked(replayed, actions, divergences, tally)


@pytest.mark.spec("OffsetCodec", "Spec", "LastOffset", "StateConstraint")
def test_every_transition_replays(replay: Replay, walked: Walked) -> None:
    graph = replay.graph
    assert not walked.divergences, "Python diverges from the spec:\n" + "\n".join(
        walked.divergences[:20])
    assert walked.replayed > 0
    assert len(graph.states) == graph.result.distinct
    # Every action of the spec occurred, so none of them was replayed vacuously.
    assert set(walked.actions) == set(ACTIONS)


@pytest.mark.parametrize(("model", "action"), action_cases("OffsetCodec", MODEL_NAME, ACTIONS))
def test_transition_replays(walked: Walked, model: str, action: str) -> None:
    """Every transition of one action of the model, replayed through the codec."""
    assert_action_replays(walked.tally, action)
