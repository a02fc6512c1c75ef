"""Replay TLC's whole state graph of the PartitionLog CI models through the real scripts.

Every state of spec/PartitionLog.tla is rebuilt in a real redis-server by real calls
(tests/support/script_replay.py): AppendBatch is an append.lua call with the retention
korvet.core.topics.trim_policy computes from the model's topic configuration; a read of a
partition nothing was appended to is a bounds.lua call; XAddStar is Redis' own `XADD
<ms>-*`; a fetch's XRANGE and bounds are the commands RedisStore.read sends, judged by
the storage functions the fetch path uses (_bounds, _below, foreign_bounds,
PartitionRead.entries) and the decisions korvet/server/handlers/fetch.py takes through
korvet/core/fetch.py: the range check (``offset_error``), whether a request takes the
prepared response (``read_ahead_key``: same offset), whether it serves it
(``serve_prepared``: records, and no log start moved past the fetch offset) and which
fetch to prepare next (``predicted_offsets``). The client's part (where it fetches next,
its reset on OFFSET_OUT_OF_RANGE, its seeks) is the test's. The caught-up shortcut
(``notifier.caught_up``: a fetch at the high watermark answered from the last read) and
the long poll are not modelled. The stream (ids, who wrote each, and
the node count Redis reports), Redis' last-generated id, the meta hash and every fetch
variable must be exactly TLC's successors. Copies of the scripts with one rule broken
must diverge. Each model is walked once; each action's transitions are also a test of their
own (``test_transition_replays[PartitionLog-AppendAt]``; ``pytest -k AppendBatch`` finds it
too), which fails when the action never fires in the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from korvet.core import fetch as rules
from korvet.core.errors import ErrorCode
from korvet.core.offsets import OffsetCodec
from korvet.core.topics import TopicConfig, trim_policy
from korvet.storage.redis_store import PartitionRead, _below, _bounds, foreign_bounds
from korvet.verification import tlc
from korvet.verification.values import Record, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import (
    ScriptRedis,
    Snapshot,
    Successor,
    WalkReport,
    script_text,
    tla_int,
    tla_ints,
    walk,
)
from tests.support.spec_actions import action_cases, assert_action_replays

CI_MODELS = ["PartitionLog", "PartitionLog-approximate", "PartitionLog-approximate-consumer"]
STREAM, META, TOPIC, WAITING = "pl:stream:t:0", "pl:partition:t:0", "pl:topic:t", "pl:waiting"
TOPIC_ID = "topic-id-pl"
NO_ID = (-1, -1)
# The fetch the model's consumer sends: one partition, the whole response allowed, at least
# one record wanted (a consumer's min_bytes is at least 1; the model counts records, the
# broker bytes: a record is one unit of both here).
MAX_BYTES, MIN_BYTES = 2**20, 1


def _key(offset: int) -> object:
    """The read-ahead key of the model's fetch at ``offset``, as fetch.py's ``_signature``
    builds it (no DeleteRecords in the model)."""
    return rules.read_ahead_key([(TOPIC_ID, 0, offset, MAX_BYTES, False)], MAX_BYTES, 0)

pytestmark = pytest.mark.tlc


@dataclass(frozen=True, slots=True)
class Constants:
    bits: int
    offset_bits: int
    clocks: tuple[int, ...]
    max_batch: int
    retention_ms: int  # -1: none
    max_len: int  # -1: none
    approximate: bool
    node_size: int
    foreign_writes: int
    fetch_count: int
    consumer: bool
    seek_to: tuple[int, ...]
    read_ahead: bool
    read_ahead_checked: bool
    max_appends: int
    same_offset: bool

    @classmethod
    def read(cls, cfg: Path) -> Constants:
        v = tlc.read_constants(cfg)

        return cls(_int(v["Bits"]), _int(v["OffsetBits"]), tla_ints(v, "Clocks"), _int(v["MaxBatch"]),
                   _int(v["RetentionMs"]) if v["TimeRetention"] is True else -1,
                   _int(v["MaxLen"]) if v["SizeRetention"] is True else -1,
                   v["Approximate"] is True, _int(v["NodeSize"]), _int(v["ForeignWrites"]),
                   _int(v["FetchCount"]), v["Consumer"] is True, tla_ints(v, "SeekTo"),
                   v["ReadAhead"] is True,
                   v["ReadAheadChecked"] is True, _int(v["MaxAppends"]),
                   v["ReadAheadSameOffset"] is True)


_int = tla_int


def _rec(value: TlaValue) -> Record:
    assert isinstance(value, Record), value
    return value


def _with(record: TlaValue, **changes: TlaValue) -> Record:
    items = dict(_rec(record).items())
    items.update(changes)
    return Record(items)


def _id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)


NO_FETCH = Record({"phase": "idle", "from": 0, "got": (), "startAtReq": 0, "start": 0, "hw": 0})
NO_PREP = Record({"phase": "none", "from": 0, "got": (), "start": 0, "hw": 0})
NO_RESP = Record({"from": 0, "recs": (), "err": "NO_FETCH", "startAtReq": 0, "hw": 0})


class PartitionReplay:
    def __init__(self, c: Constants, store: ScriptRedis) -> None:
        self.c = c
        self.store = store
        self.codec = OffsetCodec(c.bits, offset_bits=c.offset_bits)
        self.config = TopicConfig(explicit={
            "retention.ms": str(c.retention_ms), "korvet.retention.records": str(c.max_len),
            "korvet.trim.approximate": "true" if c.approximate else "false"})

    # --- reading Redis back as the spec's variables ------------------------------------

    def initial(self, state: dict[str, TlaValue]) -> Snapshot:
        got = self.redis_vars(state["stream"], 0)
        for name in ("stream", "lastGen", "exists", "meta"):
            assert got[name] == state[name], (name, got[name], state[name])
        return self.store.snapshot()

    def redis_vars(self, before: TlaValue, fill_after_adds: int,
                   added_ids: tuple[tuple[int, int], ...] = ()) -> dict[str, TlaValue]:
        """The Redis-side variables. Nodes are not visible entry by entry: the surviving old
        entries keep theirs, new ones fill the last node up to NodeSize, and Redis' node
        count (XINFO radix-tree-keys) must agree."""
        pipe = self.store.client.pipeline(transaction=False)
        self.queue_reads(pipe)
        return self.vars_from(pipe.execute(raise_on_error=False), before, fill_after_adds,
                              added_ids)

    @staticmethod
    def queue_reads(pipe: Any) -> None:
        """The reads redis_vars needs, queued on a pipeline."""
        pipe.xrange(STREAM)
        pipe.exists(STREAM)
        pipe.xinfo_stream(STREAM)
        pipe.hmget(META, "last", "start")

    def vars_from(self, reads: list[Any], before: TlaValue, fill_after_adds: int,
                  added_ids: tuple[tuple[int, int], ...] = ()) -> dict[str, TlaValue]:
        """redis_vars from the replies of queue_reads."""
        entries, exists, info, (last, start) = reads
        exists = bool(exists)
        assert isinstance(before, tuple)
        old: dict[object, object] = {_rec(e)["id"]: _rec(e)["node"] for e in before}
        nodes: dict[tuple[int, int], int] = {}
        last_node = _int(_rec(before[-1])["node"]) if before else 0
        fill = fill_after_adds
        for new_id in added_ids:
            if last_node and 0 < fill < self.c.node_size:
                fill += 1
            else:
                last_node, fill = last_node + 1, 1
            nodes[new_id] = last_node
        stream = []
        for raw_id, fields in entries:
            entry = _id(raw_id)
            node = old.get(entry, nodes.get(entry))
            assert node is not None, f"Redis holds an entry {entry} nobody wrote"
            stream.append([entry, _int(node), "korvet" if fields[b"w"] == b"k" else "foreign"])
        if stream:
            first = stream[0][1]
            for item in stream:
                item[1] -= first - 1  # type: ignore[operator]
        else:
            fill = 0
        last_gen, radix_keys = (0, 0), 0
        if exists:
            last_gen = _id(info["last-generated-id"])
            radix_keys = int(info["radix-tree-keys"])
        assert radix_keys == len({item[1] for item in stream}), (
            f"Redis has {radix_keys} stream nodes, the model {len({item[1] for item in stream})}")
        return {
            "stream": tuple(Record({"id": e, "node": n, "by": by}) for e, n, by in stream),
            "lastGen": last_gen, "exists": exists, "fill": fill,
            "meta": Record({"last": _id(last) if last else NO_ID,
                            "start": _id(start) if start else NO_ID}),
        }

    # --- the actions --------------------------------------------------------------------

    def append(self, s: dict[str, TlaValue], n: int, now: int,
               snapshot: Snapshot) -> tuple[dict[str, TlaValue], Snapshot]:
        """append.lua on the state ``snapshot`` holds, restored, called and read back in one
        round trip: the next state and its keys."""
        records: list[str | int | bytes] = []
        for i in range(n):
            records.extend((1, "w", "k"))  # "k": written by korvet (the spec's `by`)
            del i
        trim = trim_policy(self.config, now, 16 * n, n)
        reply: Any
        reply, after, reads = self.store.call_from(snapshot, "append", [STREAM, META, TOPIC, WAITING], [
            now, self.c.bits, 0, TOPIC_ID, trim.min_id_ms, trim.max_len,
            1 if trim.approximate else 0, -1, -1, -1, -1, n, "", "fields", *records], self.queue_reads)
        status = reply[0].decode()
        assert status in ("OK", "FULL"), status
        added: tuple[tuple[int, int], ...] = ()
        if status == "OK":
            first = self.codec.encode(int(reply[1]), int(reply[2]))
            added = tuple((d.ms, d.seq) for d in (self.codec.decode(first + i) for i in range(n)))
        return {**s, **self.vars_from(reads, s["stream"], _int(s["fill"]), added),
                "appends": _int(s["appends"]) + 1}, after

    def xadd_star(self, s: dict[str, TlaValue], now: int) -> dict[str, TlaValue]:
        last_gen = s["lastGen"]
        assert isinstance(last_gen, tuple)
        self.store.loaded = None
        written = self.store.client.xadd(STREAM, {"w": "f"}, id=f"{max(now, _int(last_gen[0]))}-*")
        return {**s, **self.redis_vars(s["stream"], _int(s["fill"]), (_id(written),)),
                "foreign": _int(s["foreign"]) + 1}

    def xrange(self, offset: int) -> list[Any]:
        """The XRANGE RedisStore.read sends for a fetch at ``offset``."""
        codec = self.codec
        first = (str(codec.decode(offset)) if offset <= codec.max_offset
                 else f"({codec.decode(codec.max_offset)}")
        found: Any = self.store.client.xrange(STREAM, min=first, max="+", count=self.c.fetch_count)
        return list(found)

    def bounds(self, now: int) -> tuple[int, int]:
        """RedisStore.read's bounds: the meta hash, else bounds.lua, else Redis' own view."""
        client = self.store.client
        meta: Any = client.hmget(META, "last", "start")
        last, start = meta
        if last is not None or start is not None:
            return _bounds(self.codec, last, start)
        reply: Any = self.store.call("bounds", [STREAM, META, TOPIC],
                                     [now, self.c.bits, TOPIC_ID])
        if reply:
            return _bounds(self.codec, reply[0], reply[1])
        info = client.xinfo_stream(STREAM)
        first = info.get("first-entry")
        return foreign_bounds(self.codec, info["last-generated-id"], first[0] if first else None)

    def answer(self, s: dict[str, TlaValue], start_at_req: int, frm: int, got: tuple[Any, ...],
               start: int, hw: int) -> dict[str, TlaValue]:
        """fetch.py's decision on what it read, and the client's reaction."""
        err = rules.offset_error(frm, start, hw) is not ErrorCode.NONE
        recs = () if err else self.entries(got, hw)
        pos = start if err else (recs[-1] + 1 if recs else s["pos"])
        prep = NO_PREP
        following = rules.predicted_offsets([(frm, len(recs), recs[-1] + 1 if recs else -1)])
        if self.c.read_ahead and following is not None:
            prep = _with(NO_PREP, phase="range", **{"from": following[0]})
        return {**s, "resp": Record({"from": frm, "recs": recs,
                                     "err": "OFFSET_OUT_OF_RANGE" if err else "NONE",
                                     "startAtReq": start_at_req, "hw": hw}),
                "f": NO_FETCH, "pos": pos, "prep": prep}

    def entries(self, got: tuple[Any, ...], hw: int) -> tuple[int, ...]:
        """The offsets of the records a read's entries give, as RedisStore.read hands them
        to the fetch path: those with an offset, below the high watermark."""
        raw = [[f"{ms}-{seq}".encode(), []] for ms, seq in got]
        return tuple(o for o, _ in PartitionRead(_below(self.codec, raw, hw), 0, hw)
                     .entries(self.c.bits))

    def log_start_now(self) -> int:
        client = self.store.client
        last, start = client.hmget(META, "last", "start")
        if last is None and start is None and not client.exists(STREAM):
            return 0
        return self.bounds(0)[0]  # no write: the meta hash or the stream exists

    def successors(self, s: dict[str, TlaValue], snapshot: Snapshot) -> Iterator[Successor]:  # noqa: C901, PLR0912, PLR0915 -- one branch per spec action
        c = self.c
        redo = self.store.restore

        def run(action: str, step: Any) -> Successor:
            redo(snapshot)
            state = step()
            return Successor(action, state, self.store.snapshot())

        if _int(s["appends"]) < c.max_appends:
            for n in range(1, c.max_batch + 1):
                for now in c.clocks:
                    yield Successor("AppendAt", *self.append(s, n, now, snapshot))
        max_ms = self.codec.max_ms
        if _int(s["foreign"]) < c.foreign_writes:
            for now in c.clocks:
                if 0 < now <= max_ms:
                    yield run("XAddStar", lambda now=now: self.xadd_star(s, now))
        f, prep, pos = _rec(s["f"]), _rec(s["prep"]), _int(s["pos"])
        if f["phase"] == "idle" and c.consumer:
            use = prep["phase"] != "none" and (_key(_int(prep["from"])) == _key(pos)
                                               or not c.same_offset)
            redo(snapshot)
            start_now = self.log_start_now()
            yield Successor("Request", {
                **s, "f": _with(NO_FETCH, phase="await" if use else "range", startAtReq=start_now,
                                **{"from": pos}),
                "prep": prep if use else NO_PREP}, snapshot)
            for offset in c.seek_to:
                if offset != pos:
                    yield Successor("Seek", {**s, "pos": offset, "resp": NO_RESP}, snapshot)
        if f["phase"] == "range":
            redo(snapshot)
            got = tuple(_id(e[0]) for e in self.xrange(_int(f["from"])))
            yield Successor("FetchRange", {**s, "f": _with(f, phase="bounds", got=got)}, snapshot)
        # A read's clock matters only where bounds.lua gives an empty partition its start.
        meta = _rec(s["meta"])
        read_clocks = (c.clocks if meta["last"] == NO_ID and meta["start"] == NO_ID
                       and s["exists"] is False else c.clocks[:1])
        if f["phase"] == "bounds":
            for now in read_clocks:
                def step(now: int = now) -> dict[str, TlaValue]:
                    start, hw = self.bounds(now)
                    after = self.redis_vars(s["stream"], _int(s["fill"]))
                    got = f["got"]
                    assert isinstance(got, tuple)
                    return {**self.answer(s, _int(f["startAtReq"]), _int(f["from"]), got, start,
                                          hw), "meta": after["meta"]}
                yield run("FetchBounds", step)
        if prep["phase"] == "range":
            redo(snapshot)
            got = tuple(_id(e[0]) for e in self.xrange(_int(prep["from"])))
            yield Successor("PrepRange", {**s, "prep": _with(prep, phase="bounds", got=got)},
                            snapshot)
        if prep["phase"] == "bounds":
            for now in read_clocks:
                def prep_step(now: int = now) -> dict[str, TlaValue]:
                    start, hw = self.bounds(now)
                    after = self.redis_vars(s["stream"], _int(s["fill"]))
                    return {**s, "prep": _with(prep, phase="ready", start=start, hw=hw),
                            "meta": after["meta"]}
                yield run("PrepBounds", prep_step)
        if f["phase"] == "await" and prep["phase"] == "ready":
            frm, start, hw = _int(prep["from"]), _int(prep["start"]), _int(prep["hw"])
            prepared = prep["got"]
            assert isinstance(prepared, tuple)
            taken = (0 if rules.offset_error(frm, start, hw) is not ErrorCode.NONE
                     else len(self.entries(prepared, hw)))
            redo(snapshot)
            # fetch.py reads the log start again of each partition it took records from
            starts = [(frm, self.bounds(0)[0])] if c.read_ahead_checked and taken else []
            if not rules.serve_prepared(starts, taken, MIN_BYTES):
                yield Successor("UsePrepared", {**s, "f": _with(f, phase="range"),
                                                "prep": NO_PREP}, snapshot)
            else:
                yield Successor("UsePrepared", self.answer(s, _int(f["startAtReq"]),
                                                           _int(f["from"]), prepared, start, hw),
                                snapshot)
        if prep["phase"] != "none" and f["phase"] != "await":
            yield Successor("Expire", {**s, "prep": NO_PREP}, snapshot)


def actions_of(c: Constants) -> tuple[str, ...]:
    """The actions a model's constants enable, as TLC labels them (``AppendBatch`` is
    ``AppendAt``: TLC names an action after the innermost operator defining it)."""
    actions = ["AppendAt"]
    if c.foreign_writes:
        actions.append("XAddStar")
    if c.consumer:
        actions += ["Request", "FetchRange", "FetchBounds"]
    if c.consumer and c.seek_to:
        actions.append("Seek")
    if c.consumer and c.read_ahead:
        actions += ["PrepRange", "PrepBounds", "UsePrepared", "Expire"]
    return tuple(actions)


CONSTANTS = {name: Constants.read(tlc.spec_dir() / tlc_runs.model(name).config) for name in CI_MODELS}
_graphs: dict[str, tuple[tlc.StateGraph, Constants]] = {}


def _model(name: str) -> tuple[tlc.StateGraph, Constants]:
    if name not in _graphs:
        graph, _ = tlc_runs.state_graph(name)
        assert graph.result.outcome == "pass", (graph.result.violated, graph.result.errors)
        _graphs[name] = graph, CONSTANTS[name]
    return _graphs[name]


def _replay(redis_url: str, graph: tlc.StateGraph, c: Constants,
            mutate: tuple[str, str, str] | None = None) -> WalkReport:
    """Walk the graph; a mutated script stops at its first divergence."""
    def text(name: str) -> str:
        rule = (mutate[1], mutate[2]) if mutate and mutate[0] == name else None
        return script_text(name, offset_bits=c.offset_bits, mutate=rule)

    store = ScriptRedis(redis_url, {"append": text("append.lua"), "bounds": text("bounds.lua")},
                        [STREAM, META], TOPIC, TOPIC_ID,
                        db_config={"stream-node-max-entries": str(c.node_size)})
    try:
        replay = PartitionReplay(c, store)
        return walk(graph, store, replay.initial, replay.successors,
                    max_divergences=1 if mutate else 10)
    finally:
        store.close()


@pytest.fixture(scope="module")
def walked(redis_url: str) -> Callable[[str], WalkReport]:
    """The real scripts' walk of a model's whole graph, once per model and module."""
    reports: dict[str, WalkReport] = {}

    def of(name: str) -> WalkReport:
        if name not in reports:
            graph, c = _model(name)
            reports[name] = _replay(redis_url, graph, c)
            print(f"\n{name}: " + reports[name].summary(graph))
        return reports[name]
    return of


@pytest.mark.spec("PartitionLog", "Spec", "Bits", "OffsetBits", "Clocks", "FetchCount", "Consumer",
                  "ReadAhead", "ReadAheadChecked", "ReadAheadSameOffset", "SeekTo", "stream",
                  "lastGen", "exists", "fill", "meta", "pos", "f", "prep", "resp", "BoundsAt",
                  "BoundsWrite", "ForeignHW", "LogStartNow", "Answer", "Records", "XRange")
@pytest.mark.spec("PartitionLog", "TimeRetention", "RetentionMs", "SizeRetention", "MaxLen",
                  "Approximate", note="the real `trim_policy`")
@pytest.mark.parametrize("name", [
    pytest.param("PartitionLog", marks=pytest.mark.spec("PartitionLog", "ForeignWrites")),
    pytest.param("PartitionLog-approximate", marks=pytest.mark.spec(
        "PartitionLog", "NodeSize", note="Redis' node count checked")),
    pytest.param("PartitionLog-approximate-consumer", marks=pytest.mark.spec(
        "PartitionLog", "NodeSize", "Approximate", note="a consumer under approximate retention")),
])
def test_every_transition_replays_through_the_scripts(walked: Callable[[str], WalkReport],
                                                      name: str) -> None:
    graph, c = _model(name)
    report = walked(name)
    assert not report.divergences, "the scripts diverge from PartitionLog:\n" + "\n".join(
        report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    assert set(report.actions) == set(actions_of(c))


@pytest.mark.parametrize(("name", "action"), [
    case for name in CI_MODELS
    for case in action_cases("PartitionLog", name, actions_of(CONSTANTS[name]), with_model=True,
                             aliases={"AppendAt": ["AppendBatch"]})])
def test_transition_replays(walked: Callable[[str], WalkReport], name: str, action: str) -> None:
    """Every transition of one action of a model, replayed through the scripts."""
    assert_action_replays(walked(name).tally, action)


STALE_LAST = "The ID specified in XADD is equal or smaller than the target stream top item"


@pytest.mark.parametrize("name,script,rule,broken,error", [
    # bounds.lua sets `last` on a read again, as it did (the high watermark of an empty
    # partition then comes from a last id nothing was written at).
    pytest.param("PartitionLog", "bounds.lua", "redis.call('HSET', KEYS[2], 'start', start)",
                 "redis.call('HSET', KEYS[2], 'start', start, 'last', start)", None,
                 id="bounds-writes-last", marks=pytest.mark.spec("PartitionLog", "BoundsWrite")),
    # Exact MAXLEN trimming forgets to raise the log start.
    pytest.param("PartitionLog", "append.lua",
                 "      raise_start(after(entry_last(removed[#removed])))",
                 "      local _ = removed", None,
                 id="maxlen-keeps-start", marks=pytest.mark.spec("PartitionLog", "AppendAt")),
    # An approximate trim forgets to move the log start to the first entry left: a consumer
    # under approximate retention is told a log start below what Redis still holds.
    pytest.param("PartitionLog-approximate-consumer", "append.lua",
                 "    raise_start(norm(split_id(first[1][1])))", "    local _ = first", None,
                 id="approximate-trim-keeps-start",
                 marks=pytest.mark.spec("PartitionLog", "Approximate")),
    # After a refused first XADD the script keeps the stale meta last: it fails, as it did,
    # with Redis' refusal (and only that error counts as caught).
    pytest.param("PartitionLog", "append.lua",
                 "  last_ms, last_seq_id = stream_last_id()\n  ms, seq = first_after",
                 "  ms, seq = first_after", STALE_LAST, id="stale-last-after-xadd-star",
                 marks=pytest.mark.spec("PartitionLog", "AppendAt")),
])
def test_a_broken_rule_is_caught(redis_url: str, name: str, script: str, rule: str, broken: str,
                                 error: str | None) -> None:
    """A copy of a script with one rule broken diverges from the spec: a successor differs,
    or (where the broken rule is known to make Redis refuse a command) the script fails
    with exactly that refusal; any other script error fails the test."""
    graph, c = _model(name)
    try:
        report = _replay(redis_url, graph, c, mutate=(script, rule, broken))
    except redis.exceptions.ResponseError as exc:
        assert error is not None and error in str(exc), (
            f"the broken {script} failed the replay with an unexpected error: {exc}")
        return
    assert error is None, f"the broken {script} was expected to fail with {error!r}"
    assert report.divergences, f"the replay accepted {script} with {rule!r} -> {broken!r}"
