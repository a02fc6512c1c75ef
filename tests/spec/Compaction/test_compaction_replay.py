"""Replay TLC's whole state graph of the Compaction replay models through the real scripts.

Every state of spec/Compaction.tla's replay models (``Compaction-replay``, pure ``compact``;
``Compaction-replay-delete``, ``compact,delete`` with DeleteRecords and an abandoned pass) is
rebuilt in a real redis-server by real calls (tests/support/script_replay.py walks the graph),
the partition's keys named as ``RedisStore`` names them (a ``dense`` topic in the ``records``
format):

- Produce: a producer's batch of one record (its key, a value or a tombstone), decoded and
  packed by the Produce handler's own code, appended by the EVALSHA of append.lua that
  ``RedisStore.append_command`` packs;
- Begin, MapChunk, CopyChunk, Swap, Abandon: clean.lua's ``begin``, ``step`` and ``abandon``
  with the keys and ARGV ``CleanerStore`` sends (``_keys``, ``_args``) and the topic's settings
  (``CleanSettings.of``);
- DeleteRecords: the DeleteRecords handler's steps (``RedisStore.offsets``, the rule
  ``korvet.core.admin.delete_records``, ``AdminStore.raise_log_start``: delete_records.lua);
- Tick moves the model's clock: the time every call is given is ``BASE_MS`` plus the clock,
  and a record's timestamp is the clock at its append.

Redis is read back through an abstraction into the spec's variables: the stream (each entry's
offset, its record's key, tombstone, value (its offset), timestamp and delete horizon: the
field ``delete-horizon`` the copy writes, absent, ``pending`` or a time), the log start, the
checkpoint ``cleaned`` and the last swap's time ``swapped`` of the meta hash, the pass
(``:clean``: phase, ``upto``, the cursor; ``:clean:map``: key -> latest offset) and the new key
``:clean:new``; every one must be exactly TLC's successor.

Where the code departs from the spec by design (docs/implementers/cleaner.md), the replay says
so here, each departure named, rather than comparing less:

- D1 (the active segment): Korvet's append.lua keeps no segment; the cleaner keeps one
  (``cseg``) and rolls it at its next ``begin``, timed from when it first saw the segment hold a
  record. The spec rolls on the append too (``Write``) and times the segment from its first
  record. So ``seg`` is the replay's: Produce moves it by the spec's rule, and before each
  cleaner call the replay writes the state's ``seg`` into ``cseg``. Roll is ``begin``'s segment
  rule alone: ``begin`` given the segment with its time, the triggers off (a dirty ratio of 1,
  no max lag; segment.ms is ``Min(SegMs, MaxLag)``, what the code rolls at), and the segment it
  wrote read back; the spec rolls during a pass too, where the broker calls no ``begin`` (its
  roll waits for the next one): ``begin`` with the triggers off answers CLEAN before it touches
  a pass, so the replay makes it then too. Begin is ``begin`` given the segment as one it has
  not seen hold a record yet (time -1: the code takes it as it is, without a roll), with the
  topic's settings: the pass it starts (its ``upto`` from the segment) is compared. The roll at
  ``begin`` is later than the spec's on append, so the code's head is never smaller (what the
  replay cannot see).
- D2 (min.compaction.lag.ms): the code finds the head's young records during the map, not at
  ``begin``; its ``begin`` counts them as dirty for the trigger (the spec does not), so it
  starts passes the spec does not start. In the replay models the lag is within the segment's
  roll time (MinLag <= Min(SegMs, MaxLag)), so every young record is in the active segment,
  above ``upto`` already. (With MinLag 2 the first divergence is a Begin the spec does not
  make: two records, both young, the first below the active segment.)
- D3 (segment.bytes): not acted on by the broker (``CleanerStore`` passes -1): SegRecords is
  past the log in the replay models.
- D4 (ghosts): ``hist`` and ``hz`` are the spec's ghosts: ``hist`` gains the record the replay
  appended (at the offset append.lua gave it); ``hz`` takes each surviving record's horizon
  from Redis and, for a record the copy removed, the spec's ``Mark`` (the code keeps none).
- D5 (retention): Korvet's retention is append.lua's cut at an append, not the spec's
  independent ``Retain``; the replay models have RetentionMs 0 (DeleteRecords is replayed).
- D6 (a pass with nothing dirty left): DeleteRecords may remove a pass's whole dirty section
  under its map; the code's map then ends the pass (CLEAN) without a swap, where the spec's
  copies and swaps (moving only the checkpoint and the swap's time, both below the new log
  start's reach). The replay checks the code's state is the source's without a pass, then
  sets the pass as a map that found something leaves it and replays the spec's copy and swap
  through the script from there (``map_found_nothing``).
- Not in the replay models: transactions (the code keeps markers for ever and does not shrink
  the aborted index, where the spec removes markers after their horizon), the reader (fetch).

Copies of clean.lua with one rule broken must diverge (``test_a_broken_rule_is_caught``). Each
model is walked once; each action's transitions are also a test of their own
(``test_transition_replays[Compaction-replay-Swap]``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

from korvet.core import admin as admin_rules
from korvet.core.cleaner import CleanSettings
from korvet.core.topics import TopicConfig, TopicInfo, trim_policy
from korvet.protocol.records import build_batch, decode_batches
from korvet.server.handlers.produce import _pack_records
from korvet.storage import entries
from korvet.storage.admin_store import AdminStore
from korvet.storage.cleaner import CleanerStore
from korvet.storage.pipe import EPOCH_BASE_S, Life
from korvet.storage.redis_store import ProducerBatch, RedisStore, _lua
from korvet.verification import tlc
from korvet.verification.values import Function, ModelValue, Record, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import (
    Command,
    ScriptRedis,
    Snapshot,
    Successor,
    WalkReport,
    once_per_model,
    script_text,
    tla_int,
    tla_ints,
    walk,
)
from tests.support.spec_actions import action_cases, assert_action_replays

pytestmark = pytest.mark.tlc

CI_MODELS = ["Compaction-replay", "Compaction-replay-delete"]
# The same models grown (spec/models.yaml, tier deep): walked when KORVET_REPLAY_DEEP=1.
DEEP_MODELS = ["Compaction-replay-deep", "Compaction-replay-delete-deep"]
DEEP = os.environ.get("KORVET_REPLAY_DEEP") == "1"
KEYSPACE, TOPIC, TOPIC_ID = "cr", "t", "topic-id-cr"
_base = f"{KEYSPACE}:{{{TOPIC}:0}}"
STREAM, META, TIMES, ABORTED = (f"{_base}:stream", f"{_base}:partition", f"{_base}:times",
                                f"{_base}:aborted")
PASS, MAP, NEW, LEASE = f"{_base}:clean", f"{_base}:clean:map", f"{_base}:clean:new", \
    f"{_base}:clean:lease"
KEYS = (STREAM, META, TIMES, ABORTED, PASS, MAP, NEW, LEASE)
BASE_MS = 1_000_000  # the model's time 0, in ms
BROKER = "1"
NO_LAG = 2**53  # a max.compaction.lag.ms that never forces a pass
READS: list[Command] = [("XRANGE", STREAM, "-", "+"), ("HGETALL", META), ("HGETALL", PASS),
                        ("HGETALL", MAP), ("XRANGE", NEW, "-", "+")]
T = TypeVar("T")
State = dict[str, TlaValue]


@dataclass(frozen=True, slots=True)
class Constants:
    policy: str
    keys: tuple[str, ...]
    max_appends: int
    append_by: int
    max_clock: int
    min_lag: int
    max_lag: int
    seg_ms: int
    seg_records: int
    min_dirty: int
    delete_retention: int
    retention_ms: int
    delete_to: tuple[int, ...]
    chunk: int
    max_abandons: int

    @classmethod
    def read(cls, name: str) -> Constants:
        v = tlc.read_constants(tlc.spec_dir() / tlc_runs.model(name).config)
        assert v["Format"] == "records" and v["MaxBatch"] == 1 and v["Txns"] == 0, (
            "the replay models append one record at a time, records format, no transactions")
        assert v["MaxReads"] == 0 and v["Keyless"] is False
        keys = v["Keys"]
        assert isinstance(keys, frozenset)
        policy = v["Policy"]
        assert isinstance(policy, str)
        n = {name: tla_int(v[name]) for name in (
            "MaxAppends", "AppendBy", "MaxClock", "MinLag", "MaxLag", "SegMs", "SegRecords",
            "MinDirty", "DeleteRetention", "RetentionMs", "Chunk", "MaxAbandons")}
        c = cls(policy, tuple(sorted(str(k) for k in keys)), n["MaxAppends"], n["AppendBy"],
                n["MaxClock"], n["MinLag"], n["MaxLag"], n["SegMs"], n["SegRecords"],
                n["MinDirty"], n["DeleteRetention"], n["RetentionMs"], tla_ints(v, "DeleteTo"),
                n["Chunk"], n["MaxAbandons"])
        assert c.min_lag <= min(c.seg_ms, c.max_lag), (
            "D2: the code counts young records as dirty at begin; with the lag within the "
            "segment's roll time they are all in the active segment")
        assert c.seg_records > c.max_appends, "D3: segment.bytes is not acted on"
        assert c.retention_ms == 0, "D5: retention is append.lua's, not an independent step"
        assert c.seg_ms <= c.max_lag, "Roll's begin folds max lag into segment.ms"
        return c


def _int(value: TlaValue | object) -> int:
    return tla_int(value)


def _rec(value: TlaValue | object) -> Record:
    assert isinstance(value, Record), value
    return value


def _seq(value: TlaValue | object) -> tuple[Any, ...]:
    assert isinstance(value, tuple), value
    return value


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _hash(reply: Sequence[bytes] | dict[bytes, bytes]) -> dict[str, str]:
    """A hash's fields as HGETALL replies them (a map in RESP3, a flat list in RESP2)."""
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    return {_text(k): _text(v) for k, v in pairs}


def _id(offset: int) -> str:
    """A dense topic's entry id of an offset (also the bound just below it)."""
    return f"{offset}-1"


def _offset(entry_id: str) -> int:
    ms, _, seq = entry_id.partition("-")
    assert seq == "1", f"not a dense entry id: {entry_id}"
    return int(ms)


def _bound(entry_id: str) -> int:
    """The offset an exclusive id bound stands for: ``<o>-1`` is offset o's id, ``<o>-2`` the
    bound after it (clean.lua's ``succ``), ``0-0`` the empty log's start."""
    ms, _, seq = entry_id.partition("-")
    return int(ms) + 1 if int(seq) >= 2 else int(ms)


def _cursor(cur: str) -> int:
    """The pass's cursor: ``-`` (the stream's start), ``(<id>`` (after an entry), or a bound."""
    if cur == "-":
        return 0
    if cur.startswith("("):
        return _offset(cur[1:]) + 1
    return _bound(cur)


def _fn(like: TlaValue | object, items: dict[Any, int]) -> Function:
    assert isinstance(like, Function), like
    return Function(items)


class CompactionReplay:
    def __init__(self, c: Constants, store: ScriptRedis, url: str,
                 mutate: tuple[str, str, str] | None) -> None:
        self.c = c
        self.store = store
        self.loop = asyncio.new_event_loop()
        self.config = TopicConfig(explicit={
            "korvet.offset.scheme": "dense", "korvet.storage.format": "records",
            "cleanup.policy": c.policy, "min.compaction.lag.ms": str(c.min_lag),
            "max.compaction.lag.ms": str(c.max_lag), "segment.ms": str(c.seg_ms),
            "delete.retention.ms": str(c.delete_retention),
            "min.cleanable.dirty.ratio": repr(c.min_dirty / 100)})
        self.topic = TopicInfo(TOPIC, TOPIC_ID, 1, self.config)
        self.settings = CleanSettings.of(self.config)
        # Roll: begin's segment rule alone (D1)
        self.roll_settings = replace(self.settings, min_dirty_ratio=1.0, max_lag_ms=NO_LAG,
                                     segment_ms=min(c.seg_ms, c.max_lag))
        self.redis: RedisStore = self.run(self._open(url, mutate))
        self.admin = AdminStore(self.redis)
        if mutate and mutate[0] == "delete_records.lua":
            self.admin._delete = self.redis.redis.register_script(
                script_text(mutate[0], mutate=(mutate[1], mutate[2])))
        self.cleaner = CleanerStore(self.redis, BROKER, 30_000)
        assert self.cleaner._keys(self.topic, 0) == [STREAM, META, ABORTED, PASS, MAP, NEW,
                                                      LEASE]
        self.packed: dict[tuple[str, bool, int, int], entries.PackedRecords] = {}
        self.nothing_dirty = 0  # D6's transitions

    async def _open(self, url: str, mutate: tuple[str, str, str] | None) -> RedisStore:
        store = RedisStore(aioredis.Redis.from_url(url), keyspace=KEYSPACE)
        assert store.stream_key(TOPIC, 0) == STREAM and store.meta_key(TOPIC, 0) == META
        if mutate and mutate[0] == "append.lua":
            store._append = store.redis.register_script(
                script_text(mutate[0], mutate=(mutate[1], mutate[2])))
        return store

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    def close(self) -> None:
        async def shut() -> None:
            await self.redis.close()
            await self.redis.redis.aclose()
        self.run(shut())
        self.loop.close()

    # --- reading Redis back as the spec's variables ------------------------------------

    def initial(self, state: State) -> Snapshot:
        snapshot, replies = self.store.snapshot_and(READS)
        got = self.read_back(state, replies)
        assert got == state, (got, state)
        return snapshot

    def records_of(self, raw: Sequence[Any]) -> tuple[Record, ...]:
        """A stream's entries as the spec's ``[id, recs]``, one record each."""
        found = []
        for entry_id, fields in raw:
            offset = _offset(_text(entry_id))
            stamp, key, value, _headers = entries.decode_fields(fields)
            named = {_text(fields[i]): fields[i + 1] for i in range(0, len(fields) - 1, 2)}
            horizon = named.get("delete-horizon")
            dh = (-1 if horizon is None else -2 if horizon == b"pending"
                  else int(horizon) - BASE_MS)
            found.append(Record({"id": offset, "recs": (Record({
                "off": offset, "key": ModelValue(_text(key or b"?")), "tomb": value is None,
                "ctl": False, "x": 0,
                # a value is its offset; a tombstone has none: its identity is its offset
                "v": offset if value is None else int(value),
                "t": stamp - BASE_MS, "dh": dh}),)}))
        return tuple(found)

    def read_back(self, s: State, replies: Sequence[Any]) -> State:
        """The spec's variables after a call: Redis' abstraction, the ghosts and the replay's
        own (``seg``, the clock and counters) carried from ``s``."""
        raw, meta_reply, pass_reply, map_reply, new_raw = replies
        meta, cl, latest = _hash(meta_reply), _hash(pass_reply), _hash(map_reply)
        keymap = {ModelValue(k): -1 for k in self.c.keys}
        for k, entry_id in latest.items():
            keymap[ModelValue(k)] = _offset(entry_id)
        phase = cl.get("phase", "idle")
        pass_ = Record({"phase": phase, "upto": _bound(cl["upto"]) if "upto" in cl else 0,
                        "cur": _cursor(cl["cur"]) if "cur" in cl else 0,
                        "map": _fn(_rec(s["cl"])["map"], keymap)})
        return {**s, "stream": self.records_of(raw), "new": self.records_of(new_raw),
                "start": _bound(meta.get("start", "0-0")),
                "cleanedTo": _bound(meta["cleaned"]) if "cleaned" in meta else 0,
                "lastSwap": int(meta["swapped"]) - BASE_MS if "swapped" in meta else -1,
                "cl": pass_}

    # --- the actions --------------------------------------------------------------------

    def append_command(self, s: State, key: str, tomb: bool) -> bytes:
        clock = _int(s["clock"])
        now = BASE_MS + clock
        offset = len(_seq(s["hist"]))
        cache = (key, tomb, offset, clock)
        if cache not in self.packed:
            raw = build_batch([(now, key.encode(), None if tomb else b"%d" % offset, [])])
            self.packed[cache] = _pack_records(decode_batches(raw)[0], self.topic, now)
        packed = self.packed[cache]
        trim = trim_policy(self.config, now, packed.size, 1)
        return self.redis.append_command(self.topic, 0, packed, 1, now, trim, ProducerBatch(),
                                         Life("life-0", 0, EPOCH_BASE_S + clock))[1]

    def produced(self, s: State, key: str, tomb: bool) -> Callable[
            [list[Any], Snapshot, list[Any]], Successor]:
        c = self.c
        clock, hw = _int(s["clock"]), len(_seq(s["hist"]))
        seg = _rec(s["seg"])
        base, t = _int(seg["base"]), _int(seg["t"])
        empty = base == hw
        roll = not empty and (hw - base >= c.seg_records or clock - t >= min(c.seg_ms, c.max_lag))
        seg_next = Record({"base": hw, "t": clock}) if empty or roll else seg  # D1: the spec's

        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor:
            got = self.read_back(s, reads)
            if replies[0][0] != b"OK":  # a divergence: the spec's append always succeeds
                return Successor(f"Produce ({replies[0]!r})", got, after)
            # D4: hist gains the record at the offset append.lua gave it
            first = got["stream"][-1]["id"] if got["stream"] else -1  # type: ignore[index]
            record = Record({"key": ModelValue(key), "tomb": tomb, "ctl": False, "x": 0,
                             "t": clock, "b": first})
            return Successor("Produce", {**got, "hist": (*_seq(s["hist"]), record),
                                         "seg": seg_next, "appends": _int(s["appends"]) + 1},
                             after)
        return make

    def clean_call(self, op: str, token: int, now: int, settings: CleanSettings | None
                   ) -> Command:
        args = self.cleaner._args(op, token, now, self.c.chunk, settings, dense=True)
        keys = self.cleaner._keys(self.topic, 0)
        return ("EVALSHA", self.store.sha["clean"], len(keys), *keys, *args)

    def segment_write(self, s: State, timed: bool) -> Command:
        """The state's segment in the meta hash (D1): with its time (the roll's call) or as a
        segment the cleaner has not seen hold a record (Begin's)."""
        seg = _rec(s["seg"])
        t = BASE_MS + _int(seg["t"]) if timed and _int(seg["t"]) >= 0 else -1
        return ("HSET", META, "cseg", f"{_id(_int(seg['base']))} {t}")

    def horizons(self, s: State, chunk: Sequence[Record], new: Sequence[Record]) -> Function:
        """``hz`` after a copy of ``chunk`` (D4): a survivor's horizon as Redis has it, a removed
        record's as the spec's ``Mark`` gives it."""
        source = s["hz"]
        assert isinstance(source, Function), source
        hz: dict[object, object] = dict(source)
        cl = _rec(s["cl"])
        upto, last_swap = _int(cl["upto"]), _int(s["lastSwap"])
        kept = {_int(r["off"]): _int(r["dh"]) for e in new for r in _seq(e["recs"])}
        for entry in chunk:
            for r in _seq(entry["recs"]):
                off, dh = _int(r["off"]), _int(r["dh"])
                if off in kept:
                    mark = kept[off]
                elif off < upto and r["tomb"] is True:
                    mark = -2 if dh == -1 else last_swap + self.c.delete_retention if dh == -2 \
                        else dh
                else:
                    mark = dh
                if mark >= 0:
                    hz[off] = mark
        return Function(hz)

    def successors(self, s: State, snapshot: Snapshot) -> Iterator[Successor]:
        c = self.c
        clock = _int(s["clock"])
        now = BASE_MS + clock
        cl = _rec(s["cl"])
        groups: list[tuple[list[Command], Callable[[list[Any], Snapshot, list[Any]],
                                                     Successor | None]]] = []
        if _int(s["appends"]) < c.max_appends and clock <= c.append_by:
            for key in c.keys:
                for tomb in (False, True):
                    groups.append(([self.append_command(s, key, tomb)],
                                   self.produced(s, key, tomb)))
        # D1: the spec rolls during a pass too; begin's segment rule with the triggers off
        # answers CLEAN before it touches a pass, so it runs in any phase
        groups.append(([self.segment_write(s, True),
                        self.clean_call("begin", 0, now, self.roll_settings)], self.rolled(s)))
        if cl["phase"] == "idle":
            groups.append(([self.segment_write(s, False),
                            self.clean_call("begin", 0, now, self.settings)], self.begun(s)))
        else:
            token = self.token(snapshot)
            groups.append(([self.clean_call("step", token, now, None)],
                           self.stepped(s, snapshot)))
            if _int(s["abandons"]) < c.max_abandons:
                groups.append(([self.clean_call("abandon", token, now, None)],
                               self.abandoned(s)))
        sent = self.store.send_all_from(snapshot, [(commands, READS) for commands, _ in groups])
        for (_, make), (replies, after, reads) in zip(groups, sent, strict=True):
            made = make(replies, after, reads)
            if made is not None:
                yield made
        for offset in c.delete_to:
            self.store.restore(snapshot)
            if self.run(self.delete_records(offset)):
                after, replies = self.store.snapshot_and(READS)
                yield Successor("DeleteRecords", self.read_back(s, replies), after)
        if clock < c.max_clock:
            yield Successor("Tick", {**s, "clock": clock + 1}, snapshot)

    def token(self, snapshot: Snapshot) -> int:
        self.store.restore(snapshot)
        return int(self.store.client.hget(PASS, "token") or 0)

    def rolled(self, s: State) -> Callable[[list[Any], Snapshot, list[Any]], Successor | None]:
        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor | None:
            if replies[1] != [b"CLEAN"]:  # a divergence: with the triggers off, no pass
                return Successor(f"Roll ({replies[1]!r})", self.read_back(s, reads), after)
            base, _, t = _hash(reads[1])["cseg"].partition(" ")
            if _bound(base) == _int(_rec(s["seg"])["base"]):
                return None  # not due: begin leaves the segment
            return Successor("Roll", {**self.read_back(s, reads), "seg": Record(
                {"base": _bound(base), "t": int(t) if int(t) < 0 else int(t) - BASE_MS})},
                after)
        return make

    def begun(self, s: State) -> Callable[[list[Any], Snapshot, list[Any]], Successor | None]:
        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor | None:
            if replies[1] == [b"CLEAN"]:
                return None
            label = "Begin" if replies[1][0] == b"STARTED" else f"Begin ({replies[1]!r})"
            return Successor(label, self.read_back(s, reads), after)
        return make

    def stepped(self, s: State, snapshot: Snapshot) -> Callable[
            [list[Any], Snapshot, list[Any]], Successor]:
        cl = _rec(s["cl"])

        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor:
            reply = replies[0]
            got = self.read_back(s, reads)
            if cl["phase"] == "map" and reply == [b"CLEAN"]:
                return self.map_found_nothing(s, snapshot, got)
            if cl["phase"] == "map":
                return Successor("MapChunk", got, after)
            rest = [e for e in _seq(s["stream"]) if _int(e["id"]) >= _int(cl["cur"])]
            if reply[0] == b"SWAPPED":
                return Successor("Swap", {**got, "hz": self.horizons(
                    s, rest, _seq(got["stream"]))}, after)
            return Successor("CopyChunk" if reply[0] == b"COPY" else _text(reply[0]), {
                **got, "hz": self.horizons(s, rest[:self.c.chunk], _seq(got["new"]))}, after)
        return make

    def map_found_nothing(self, s: State, snapshot: Snapshot, got: State) -> Successor:
        """D6: a map that found no dirty record (DeleteRecords removed the pass's dirty
        section under it) ends the pass, CLEAN, without a swap; the spec's map goes on to the
        copy and a swap of nothing but the checkpoint and the swap's time. The code's state
        must be the source with no pass; the spec's path is then replayed through the copy
        and the swap from the pass as a map that found something leaves it (phase copy, the
        cursor at the stream's start)."""
        cl = _rec(s["cl"])
        upto, start = _int(cl["upto"]), _int(s["start"])
        dirty = [e for e in _seq(s["stream"]) if _int(cl["cur"]) <= _int(e["id"]) < upto]
        idle = Record({"phase": "idle", "upto": 0, "cur": 0,
                       "map": _fn(cl["map"], {ModelValue(k): -1 for k in self.c.keys})})
        if dirty or start < upto or got != {**s, "cl": idle}:
            return Successor("MapChunk (CLEAN)", got, snapshot)  # not D6: a divergence
        self.nothing_dirty += 1
        _replies, after, reads = self.store.send_from(
            snapshot, [("HSET", PASS, "phase", "copy", "cur", "-")], READS)
        return Successor("MapChunk", self.read_back(s, reads), after)

    def abandoned(self, s: State) -> Callable[[list[Any], Snapshot, list[Any]], Successor]:
        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor:
            label = "Abandon" if replies[0] == [b"OK"] else f"Abandon ({replies[0]!r})"
            return Successor(label, {**self.read_back(s, reads),
                                         "abandons": _int(s["abandons"]) + 1}, after)
        return make

    async def delete_records(self, offset: int) -> bool:
        """The DeleteRecords handler's steps (handlers/admin.py ``_delete``): whether the
        log start moved."""
        start, high_watermark = await self.redis.offsets(self.topic, 0)
        outcome = admin_rules.delete_records(offset, start, high_watermark)
        if not outcome.ok or outcome.low_watermark <= start:
            return False
        await self.admin.raise_log_start(self.topic, 0, outcome.low_watermark)
        return True


def actions_of(c: Constants) -> tuple[str, ...]:
    actions = ["Produce", "Tick", "Roll", "Begin", "MapChunk", "CopyChunk", "Swap"]
    if c.delete_to:
        actions.append("DeleteRecords")
    if c.max_abandons:
        actions.append("Abandon")
    return tuple(actions)


CONSTANTS = {name: Constants.read(name) for name in CI_MODELS + DEEP_MODELS}
_graph = tlc_runs.passing_graph


def _replay(redis_url: str, name: str, mutate: tuple[str, str, str] | None = None) -> WalkReport:
    """Walk the model's graph; a mutated script stops at its first divergence."""
    texts = {name: script_text(f"{name}.lua", mutate=(mutate[1], mutate[2])
                               if mutate and mutate[0] == f"{name}.lua" else None)
             for name in ("append", "clean", "delete_records", "bounds")}
    assert texts["clean"] == _lua("clean.lua") or mutate, "the replay runs the broker's script"
    store = ScriptRedis(redis_url, texts, KEYS, META, TOPIC_ID)
    replay = CompactionReplay(CONSTANTS[name], store, redis_url, mutate)
    try:
        report = walk(_graph(name), store, replay.initial, replay.successors,
                      max_divergences=1 if mutate else 10)
        if replay.nothing_dirty:
            print(f"\n{name}: {replay.nothing_dirty} map chunks found nothing dirty (D6)")
        return report
    finally:
        replay.close()
        store.close()


@pytest.fixture(scope="module")
def walked(redis_url: str) -> Callable[[str], WalkReport]:
    """The real scripts' walk of a model's whole graph, once per model and module."""
    return once_per_model(lambda name: _replay(redis_url, name), _graph)


@pytest.mark.spec("Compaction", "Spec", "Format", "Policy", "Keys", "MaxAppends", "AppendBy",
                  "MaxClock", "MinLag", "MaxLag", "SegMs", "SegRecords", "MinDirty",
                  "DeleteRetention", "Chunk", "hist", "stream", "start", "seg", "cleanedTo",
                  "lastSwap", "cl", "new", "hz")
@pytest.mark.parametrize("name", [*CI_MODELS, *(pytest.param(name, marks=pytest.mark.skipif(
    not DEEP, reason="a deep model: KORVET_REPLAY_DEEP=1 walks it")) for name in DEEP_MODELS)])
def test_every_transition_replays_through_the_scripts(walked: Callable[[str], WalkReport],
                                                      name: str) -> None:
    graph, c = _graph(name), CONSTANTS[name]
    report = walked(name)
    assert not report.divergences, "the scripts diverge from Compaction:\n" + "\n".join(
        report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    assert set(report.actions) == set(actions_of(c))


@pytest.mark.parametrize(("name", "action"), [
    case for name in CI_MODELS
    for case in action_cases("Compaction", name, actions_of(CONSTANTS[name]), with_model=True)])
def test_transition_replays(walked: Callable[[str], WalkReport], name: str, action: str) -> None:
    """Every transition of one action of a model, replayed through the scripts."""
    assert_action_replays(walked(name).tally, action)


@pytest.mark.parametrize("name,script,rule,broken", [
    # The swap renames the new key without trimming it at the log start: what DeleteRecords
    # removed during the pass comes back (the spec's -NothingBelowStart mutant).
    pytest.param("Compaction-replay-delete", "clean.lua",
                 "redis.call('XTRIM', KEYS[6], 'MINID', start_now)", "local _ = start_now",
                 id="swap-without-trim", marks=pytest.mark.spec("Compaction", "Swap", "KeepFrom")),
    # A tombstone's horizon set from the clock of the chunk that first copies it (Kafka's
    # rule per chunk), not pending until the swap that makes it visible.
    pytest.param("Compaction-replay", "clean.lua", "    h = 'pending'\n",
                 "    h = string.format('%d', now + keep_ms)\n", id="horizon-from-chunk",
                 marks=pytest.mark.spec("Compaction", "CopyChunk", "FirstHorizon", "Mark")),
    # The pending horizon fixed from the second pass's clock, not the last swap's time.
    pytest.param("Compaction-replay", "clean.lua", "h = string.format('%d', prev + keep_ms)",
                 "h = string.format('%d', now + keep_ms)", id="horizon-from-pass",
                 marks=pytest.mark.spec("Compaction", "CopyChunk", "Horizon", "lastSwap")),
    # The copy takes its key's latest record for superseded (the spec's -LatestPerKeyKept).
    pytest.param("Compaction-replay", "clean.lua", "if l and less(id, l) then",
                 "if l and not less(l, id) then", id="latest-superseded",
                 marks=pytest.mark.spec("Compaction", "CopyChunk", "Keep")),
    # The map keeps a key's first offset in the dirty section, not its latest.
    pytest.param("Compaction-replay", "clean.lua",
                 "if #flat > 0 then redis.call('HSET', KEYS[5], unpack(flat)) end",
                 "if #flat > 0 then redis.call('HSETNX', KEYS[5], flat[1], flat[2]) end",
                 id="map-keeps-first", marks=pytest.mark.spec("Compaction", "MapChunk")),
    # A pass cleans up to the high watermark, the active segment ignored (-HeadUntouched).
    pytest.param("Compaction-replay", "clean.lua", "  local u = seg[1]\n",
                 "  local u = last and succ(last) or seg[1]\n", id="no-active-segment",
                 marks=pytest.mark.spec("Compaction", "Begin", "HeadStart")),
    # The dirty ratio must be exceeded, not just reached, to start a pass.
    pytest.param("Compaction-replay", "clean.lua", "dirty <= ratio * (dirty + clean)",
                 "dirty < ratio * (dirty + clean)", id="ratio-reached",
                 marks=pytest.mark.spec("Compaction", "Begin", "MinDirty")),
    # The active segment rolls only once older than its time, not at it.
    pytest.param("Compaction-replay", "clean.lua", "now - t >= math.min(seg_ms, max_lag)",
                 "now - t > math.min(seg_ms, max_lag)", id="roll-late",
                 marks=pytest.mark.spec("Compaction", "Roll", "SegMs")),
    # The swap's checkpoint left where it was: the next pass maps the cleaned section again.
    pytest.param("Compaction-replay", "clean.lua", "redis.call('HSET', KEYS[2], 'cleaned', upto,",
                 "redis.call('HSET', KEYS[2], 'cleaned', meta[5] or start,",
                 id="checkpoint-kept", marks=pytest.mark.spec("Compaction", "Swap", "cleanedTo")),
])
def test_a_broken_rule_is_caught(redis_url: str, name: str, script: str, rule: str,
                                 broken: str) -> None:
    """A copy of a script with one rule broken diverges from the spec."""
    report = _replay(redis_url, name, mutate=(script, rule, broken))
    assert report.divergences, f"the replay accepted {script} with {rule!r} -> {broken!r}"
    print(f"\n{name} {script}: {rule!r} -> {broken!r} caught after {report.states:,} states: "
          + report.divergences[0][:300])
