"""Replay TLC's whole state graph of the ProducerState CI model through the real append.lua.

Every state of spec/ProducerState.tla (config ProducerState.cfg) is rebuilt in a real
redis-server by real append.lua calls (tests/support/script_replay.py). From each state
every action the spec allows is performed: the client's actions (NewBatch, Retry,
BumpEpoch) in Python, Deliver as an append.lua call with the batch's producer id, epoch
and sequences and the append's MAXLEN; the stream (the log), the meta hash's producer
field (pstate) and the script's reply are read back. The successors must be exactly
TLC's, every variable compared. A copy of the script with one rule broken must diverge.
The graph is walked once; each action's transitions are also a test of their own
(``test_transition_replays[Receive]``, ``pytest -k Receive``), which fails when the action
never fires in the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
    walk,
)
from tests.support.spec_actions import action_cases, assert_action_replays

MODEL_NAME = "ProducerState"
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
                   tuple(sorted([-1, *(_int(v) for v in lens)])), _int(values["MaxSeq"]))


def _int(value: object) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


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
        for p in c.producers:
            unacked = _get(s["unacked"], p)
            net = s["net"]
            assert isinstance(unacked, frozenset) and isinstance(net, frozenset)
            epoch, next_seq = _get(s["epoch"], p), _get(s["nextSeq"], p)
            if len(unacked) < c.max_in_flight:
                for n in range(1, c.max_batch + 1):
                    if next_seq + n <= c.max_seq:
                        b = Record({"p": p, "e": epoch, "base": next_seq, "n": n})
                        yield Successor("NewBatch", {
                            **s, "nextSeq": _set(s["nextSeq"], p, next_seq + n),
                            "unacked": _set(s["unacked"], p, unacked | {b}), "net": net | {b}},
                            snapshot)
            for b in unacked - net:
                yield Successor("Retry", {**s, "net": net | {b}}, snapshot)
            if epoch < c.max_epoch:
                yield Successor("BumpEpoch", {
                    **s, "epoch": _set(s["epoch"], p, epoch + 1), "nextSeq": _set(s["nextSeq"], p, 0),
                    "unacked": _set(s["unacked"], p, frozenset())}, snapshot)
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


@pytest.fixture(scope="module")
def model() -> tuple[tlc.StateGraph, Constants]:
    graph, _ = tlc_runs.state_graph(MODEL_NAME)
    assert graph.result.outcome == "pass", (graph.result.violated, graph.result.errors)
    return graph, Constants.read(tlc.spec_dir() / tlc_runs.model(MODEL_NAME).config)


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
def walked(redis_url: str, model: tuple[tlc.StateGraph, Constants]) -> WalkReport:
    """The real script's walk of the whole graph, once per module."""
    graph, c = model
    report = _replay(redis_url, graph, c)
    print("\n" + report.summary(graph))
    return report


@pytest.mark.spec("ProducerState", "Spec", "Producers", "MaxEpoch", "MaxBatch", "MaxInFlight",
                  "MaxSeq", "CacheSize", "MaxLens", "epoch", "nextSeq", "unacked", "net", "log",
                  "pstate", "history", "reply")
def test_every_transition_replays_through_append_lua(
        walked: WalkReport, model: tuple[tlc.StateGraph, Constants]) -> None:
    graph, _ = model
    report = walked
    assert not report.divergences, "append.lua diverges from ProducerState:\n" + "\n".join(
        report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    # Every action occurred, and the script gave every kind of answer.
    assert set(report.actions) == set(ACTIONS)
    statuses = {_get(state["reply"], "status") for state in graph.states.values()}
    assert statuses == {"NONE", "OK", "DUP", "OUT_OF_ORDER", "BAD_EPOCH"}


@pytest.mark.parametrize(("model_name", "action"), action_cases("ProducerState", MODEL_NAME, ACTIONS))
def test_transition_replays(walked: WalkReport, model_name: str, action: str) -> None:
    """Every transition of one action of the model, replayed through append.lua."""
    assert_action_replays(walked.tally, action)


@pytest.mark.spec("ProducerState", "Receive", "Deliver")
@pytest.mark.parametrize("rule,broken", [
    # A DUP answers the offset after the original one.
    pytest.param(
        "return {'DUP', pstate[i + 2], pstate[i + 3], 0, 0, start_ms or 0, start_seq or 0}",
        "return {'DUP', pstate[i + 2], pstate[i + 3] + 1, 0, 0, start_ms or 0, start_seq or 0}",
        id="dup-offset"),
    # A new epoch accepts any sequence, not only 0.
    pytest.param("elseif base_seq ~= 0 then", "elseif base_seq < 0 then", id="epoch-bump-sequence"),
    # One batch more is remembered than the cache holds (Kafka: 5).
    pytest.param("math.min(#cached, 4 * CACHED_BATCHES)", "math.min(#cached, 4 * CACHED_BATCHES + 4)",
                 id="cache-size", marks=pytest.mark.spec("ProducerState", "CacheSize")),
])
def test_a_broken_rule_is_caught(redis_url: str, model: tuple[tlc.StateGraph, Constants],
                                 rule: str, broken: str) -> None:
    graph, c = model
    report = _replay(redis_url, graph, c, mutate=(rule, broken))
    assert report.divergences, f"the replay accepted append.lua with {rule!r} -> {broken!r}"
