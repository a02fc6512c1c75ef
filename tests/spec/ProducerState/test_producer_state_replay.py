"""Replay TLC's whole state graph of the ProducerState CI models through the real append.lua.

Every state of spec/ProducerState.tla (configs ProducerState.cfg: two producers sharing one
meta hash and one offset sequence, a cache of two batches; ProducerStateBatches.cfg: batches
of several records) is rebuilt in a real
redis-server by real append.lua calls (tests/support/script_replay.py). From each state
every action the spec allows is performed: the client's actions (NewBatch, Retry,
BumpEpoch) in Python, Deliver as an append.lua call with the batch's producer id, epoch
and sequences and the append's MAXLEN; the stream (the log), the meta hash's producer
field (pstate) and the script's reply are read back. The successors must be exactly
TLC's, every variable compared. A copy of the script with one rule broken must diverge.
Each graph is walked once; each action's transitions are also a test of their own
(``test_transition_replays[ProducerState-Receive]``, ``pytest -k Receive``), which fails when
the action never fires in the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from korvet.verification import tlc
from korvet.verification.values import Function, ModelValue, Record, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import (
    ScriptRedis,
    Snapshot,
    Successor,
    WalkReport,
    script_text,
    tla_int,
    walk,
)
from tests.support.spec_actions import action_cases, assert_action_replays

CI_MODELS = ["ProducerState", "ProducerState-batches"]
ACTIONS = ("NewBatch", "Retry", "BumpEpoch", "Receive")  # Next's actions, as TLC labels them
BITS = 10  # the clock stands still at 0: offsets 1, 2, ... are the ids 0-1, 0-2, ...
STREAM, META, TOPIC, WAITING = "ps:stream:t:0", "ps:partition:t:0", "ps:topic:t", "ps:waiting"
TOPIC_ID = "topic-id-ps"

pytestmark = pytest.mark.tlc


@dataclass(frozen=True, slots=True)
class Constants:
    producers: tuple[ModelValue, ...]
    max_epoch: int
    max_batch: int
    max_in_flight: int
    cache_size: int
    max_lens: tuple[int, ...]
    max_seq: int
    max_moves: int

    @classmethod
    def read(cls, cfg: Path) -> Constants:
        values = tlc.read_constants(cfg)
        assert values["SurvivesRetention"] is True, "the scripts keep producer state: replay " \
                                                    "only a model where it survives"
        producers = values["Producers"]
        lens = values["MaxLens"]
        assert isinstance(producers, frozenset) and isinstance(lens, frozenset)
        return cls(tuple(sorted((p for p in producers if isinstance(p, ModelValue)),
                                key=lambda p: p.name)),
                   _int(values["MaxEpoch"]), _int(values["MaxBatch"]),
                   _int(values["MaxInFlight"]), _int(values["CacheSize"]),
                   tuple(sorted([-1, *(_int(v) for v in lens)])), _int(values["MaxSeq"]),
                   _int(values["MaxMoves"]))


_int = tla_int


def _get(value: TlaValue, name: object) -> Any:
    assert isinstance(value, (Record, Function)), value
    return value[name]


def _set(value: TlaValue, name: object, new: TlaValue) -> TlaValue:
    assert isinstance(value, (Record, Function))
    items = dict(value.items())
    items[name] = new
    return type(value)(items)


NO_STATE = Record({"epoch": -1, "last": -1, "cache": ()})


def _pid(c: Constants, p: ModelValue) -> int:
    return c.producers.index(p) + 1


class ProducerReplay:
    def __init__(self, c: Constants, store: ScriptRedis) -> None:
        self.c = c
        self.store = store

    def initial(self, state: dict[str, TlaValue]) -> Snapshot:
        assert self.read_log() == state["log"]
        assert self.read_pstate() == state["pstate"]
        return self.store.snapshot()

    def read_log(self, entries: Any = None) -> TlaValue:
        """The stream as the spec's ``log`` (``entries``: an XRANGE's reply, else read now)."""
        if entries is None:
            entries = self.store.client.xrange(STREAM)
        log = []
        for entry_id, fields in entries:
            ms, seq = (int(x) for x in entry_id.split(b"-"))
            p = ModelValue(fields[b"p"].decode())
            log.append(Record({"p": p, "e": int(fields[b"e"]), "s": int(fields[b"s"]),
                               "off": (ms << BITS) | seq}))
        return tuple(log)

    def read_pstate(self, fields: Sequence[Any] | None = None) -> TlaValue:
        """The meta hash's producer fields as the spec's ``pstate`` (``fields``: their HGET
        replies, in the order of ``producers``, else read now)."""
        if fields is None:
            fields = [self.store.client.hget(META, f"p:{_pid(self.c, p)}") for p in self.c.producers]
        states: dict[object, TlaValue] = {}
        for p, raw in zip(self.c.producers, fields, strict=True):
            if raw is None:
                states[p] = NO_STATE
                continue
            numbers = [int(x) for x in raw.split()]
            epoch, last = numbers[0], numbers[1]  # numbers[2]: the clock (touched), unmodelled
            cache = tuple(Record({"first": numbers[i], "last": numbers[i + 1],
                                  "off": (numbers[i + 2] << BITS) | numbers[i + 3]})
                          for i in range(3, len(numbers), 4))
            states[p] = Record({"epoch": epoch, "last": last, "cache": cache})
        return Function(states)

    def deliver(self, snapshot: Snapshot, batch: TlaValue,
                max_len: int) -> tuple[str, int, Snapshot, TlaValue, TlaValue]:
        """append.lua on the state ``snapshot`` holds, in one round trip with reading its
        result back: the status, the offset, the keys after it, ``log`` and ``pstate``."""
        p, e, base, n = (_get(batch, f) for f in ("p", "e", "base", "n"))
        args: list[str | int | bytes] = [0, BITS, 0, TOPIC_ID, -1, max_len, 0, _pid(self.c, p), e,
                                         base, base + n - 1, n, "", "fields"]
        for s in range(base, base + n):
            args.extend((3, "p", p.name, "e", e, "s", s))

        def reads(pipe: Any) -> None:
            pipe.xrange(STREAM)
            for q in self.c.producers:
                pipe.hget(META, f"p:{_pid(self.c, q)}")

        reply: Any
        reply, after, (entries, *fields) = self.store.call_from(
            snapshot, "append", [STREAM, META, TOPIC, WAITING], args, reads)
        status = reply[0].decode()
        offset = (int(reply[1]) << BITS) | int(reply[2]) if status in ("OK", "DUP") else -1
        return status, offset, after, self.read_log(entries), self.read_pstate(fields)

    def successors(self, s: dict[str, TlaValue], snapshot: Snapshot) -> Iterator[Successor]:
        c = self.c
        moves = _int(s["moves"])
        can_move = moves < c.max_moves  # the clients' steps left in this behaviour
        for p in c.producers:
            unacked = _get(s["unacked"], p)
            net = s["net"]
            assert isinstance(unacked, frozenset) and isinstance(net, frozenset)
            epoch, next_seq = _get(s["epoch"], p), _get(s["nextSeq"], p)
            if can_move and len(unacked) < c.max_in_flight:
                for n in range(1, c.max_batch + 1):
                    if next_seq + n <= c.max_seq:
                        b = Record({"p": p, "e": epoch, "base": next_seq, "n": n})
                        yield Successor("NewBatch", {
                            **s, "nextSeq": _set(s["nextSeq"], p, next_seq + n),
                            "unacked": _set(s["unacked"], p, unacked | {b}), "net": net | {b},
                            "moves": moves + 1},
                            snapshot)
            for b in unacked - net:
                yield Successor("Retry", {**s, "net": net | {b}}, snapshot)
            if can_move and epoch < c.max_epoch:
                yield Successor("BumpEpoch", {
                    **s, "epoch": _set(s["epoch"], p, epoch + 1), "nextSeq": _set(s["nextSeq"], p, 0),
                    "unacked": _set(s["unacked"], p, frozenset()), "moves": moves + 1}, snapshot)
        net = s["net"]
        assert isinstance(net, frozenset)
        for batch in sorted(net, key=repr):
            for max_len in c.max_lens:
                status, offset, after, log, pstate = self.deliver(snapshot, batch, max_len)
                p = _get(batch, "p")
                history: TlaValue = s["history"]
                assert isinstance(history, tuple)
                if status == "OK":
                    history = (*history, Record({"p": p, "e": _get(batch, "e"), "base": _get(batch, "base"),
                                                 "n": _get(batch, "n"), "off": offset}))
                reply = Record({"p": p, "e": _get(batch, "e"), "base": _get(batch, "base"),
                                "n": _get(batch, "n"), "status": status, "off": offset})
                common = {**s, "net": net - {batch}, "log": log,
                          "pstate": pstate, "history": history, "reply": reply}
                yield Successor("Receive", common, after)
                if status in ("OK", "DUP"):
                    unacked = _get(s["unacked"], p)
                    assert isinstance(unacked, frozenset)
                    yield Successor("Receive", {**common,
                                             "unacked": _set(s["unacked"], p, unacked - {batch})},
                                    after)


CONSTANTS = {name: Constants.read(tlc.spec_dir() / tlc_runs.model(name).config)
             for name in CI_MODELS}
_graph = tlc_runs.passing_graph


def _replay(redis_url: str, graph: tlc.StateGraph, c: Constants,
            mutate: tuple[str, str] | None = None) -> WalkReport:
    """Walk the graph; a mutated script stops at its first divergence."""
    store = ScriptRedis(redis_url, {"append": script_text("append.lua", offset_bits=63,
                                                          cached_batches=c.cache_size,
                                                          mutate=mutate)},
                        [STREAM, META], TOPIC, TOPIC_ID)
    try:
        replay = ProducerReplay(c, store)
        return walk(graph, store, replay.initial, replay.successors,
                    max_divergences=1 if mutate else 10)
    finally:
        store.close()


@pytest.fixture(scope="module")
def walked(redis_url: str) -> Callable[[str], WalkReport]:
    """The real script's walk of a model's whole graph, once per model and module."""
    reports: dict[str, WalkReport] = {}

    def of(name: str) -> WalkReport:
        if name not in reports:
            graph = _graph(name)
            reports[name] = _replay(redis_url, graph, CONSTANTS[name])
            print(f"\n{name}: " + reports[name].summary(graph))
        return reports[name]
    return of


@pytest.mark.spec("ProducerState", "Spec", "Producers", "MaxEpoch", "MaxBatch", "MaxInFlight",
                  "MaxSeq", "CacheSize", "MaxLens", "MaxMoves", "epoch", "nextSeq", "unacked", "net",
                  "log", "pstate", "history", "reply", "moves")
@pytest.mark.parametrize("name", CI_MODELS)
def test_every_transition_replays_through_append_lua(walked: Callable[[str], WalkReport],
                                                     name: str) -> None:
    graph = _graph(name)
    report = walked(name)
    assert not report.divergences, "append.lua diverges from ProducerState:\n" + "\n".join(
        report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    # Every action occurred, and the script gave every kind of answer.
    assert set(report.actions) == set(ACTIONS)
    statuses = {_get(state["reply"], "status") for state in graph.states.values()}
    assert statuses == {"NONE", "OK", "DUP", "OUT_OF_ORDER", "BAD_EPOCH"}


def test_the_two_producer_model_reaches_the_cache_bound_and_shares_the_log() -> None:
    """What ProducerState.cfg is for: both producers have records in one log, and a
    producer's retry of a batch older than the cache holds is refused as out of order (with
    a larger cache it would be a DUP)."""
    graph = _graph(CI_MODELS[0])
    c = CONSTANTS[CI_MODELS[0]]
    assert len(c.producers) >= 2 and c.cache_size >= 2
    shared = past_cache = False
    for state in graph.states.values():
        log = state["log"]
        assert isinstance(log, tuple)
        shared |= len({_get(r, "p") for r in log}) >= 2
        reply, history = state["reply"], state["history"]
        assert isinstance(history, tuple)
        if _get(reply, "status") == "OUT_OF_ORDER":
            mine = [h for h in history
                    if _get(h, "p") == _get(reply, "p") and _get(h, "e") == _get(reply, "e")]
            past_cache |= any(_get(h, "base") == _get(reply, "base") for h in mine[:-c.cache_size])
    assert shared and past_cache, (shared, past_cache)


@pytest.mark.parametrize(("model_name", "action"), [
    case for name in CI_MODELS
    for case in action_cases("ProducerState", name, ACTIONS, with_model=True)])
def test_transition_replays(walked: Callable[[str], WalkReport], model_name: str,
                            action: str) -> None:
    """Every transition of one action of a model, replayed through append.lua."""
    assert_action_replays(walked(model_name).tally, action)


@pytest.mark.spec("ProducerState", "Receive", "Deliver")
@pytest.mark.parametrize("name,rule,broken", [
    # A DUP answers the offset after the original one.
    pytest.param(
        "ProducerState",
        "return {'DUP', pstate[i + 2], pstate[i + 3], 0, 0, start_ms or 0, start_seq or 0}",
        "return {'DUP', pstate[i + 2], pstate[i + 3] + 1, 0, 0, start_ms or 0, start_seq or 0}",
        id="dup-offset"),
    # A new epoch accepts any sequence, not only 0 (a producer that appended, bumped and
    # sent two batches: five client steps, ProducerStateBatches.cfg's bound).
    pytest.param("ProducerState-batches", "elseif base_seq ~= 0 then", "elseif base_seq < 0 then",
                 id="epoch-bump-sequence"),
    # One batch more is remembered than the cache holds (Kafka: 5).
    pytest.param("ProducerState", "math.min(#cached, 4 * CACHED_BATCHES)",
                 "math.min(#cached, 4 * CACHED_BATCHES + 4)",
                 id="cache-size", marks=pytest.mark.spec("ProducerState", "CacheSize")),
    # Every producer's state in one field of the meta hash: only a model with two producers
    # on one partition sees it.
    pytest.param("ProducerState", "pstate_field = 'p:' .. pid", "pstate_field = 'p:'",
                 id="one-state-for-all-producers",
                 marks=pytest.mark.spec("ProducerState", "Producers")),
])
def test_a_broken_rule_is_caught(redis_url: str, name: str, rule: str, broken: str) -> None:
    report = _replay(redis_url, _graph(name), CONSTANTS[name], mutate=(rule, broken))
    assert report.divergences, f"the replay accepted append.lua with {rule!r} -> {broken!r}"
