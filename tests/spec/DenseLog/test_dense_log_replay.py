"""Replay TLC's whole state graph of the DenseLog CI models through the real scripts.

Every state of spec/DenseLog.tla is rebuilt in a real redis-server by real calls
(tests/support/script_replay.py walks the graph). The partition's keys are named as
``RedisStore`` names them, and the broker's own code makes every call:

- AppendBatch: the records are a Kafka batch built as a producer would (``build_batch``),
  read by the Produce handler's decoding (``decode_batches`` / ``scan_batches``) and
  packed by its ``_pack_records`` / ``_pack_stored``; the retention cutoff comes from the
  real ``trim_policy`` (``retention.ms``), and the EVALSHA of append.lua is the very RESP
  ``RedisStore.append_command`` packs (keys, ARGV, records, the dense trailer: the topic's
  ``index.interval.bytes``, the Redis life's run id and clock, ``pipe.Life``);
- DeleteRecords: the DeleteRecords handler's steps, ``RedisStore.offsets``, the rule
  ``korvet.core.admin.delete_records``, then ``AdminStore.raise_log_start``
  (delete_records.lua);
- the consumer (DenseLog-consumer): Metadata's epoch is the meta hash's history
  (``Epochs.parse(...).current``, as ``RedisStore.current_epochs``); a fetch goes through
  ``Epochs.fence`` (FENCED_LEADER_EPOCH is FetchFenced), ``RedisStore.read``, the range
  check ``korvet.core.fetch.offset_error`` and ``Epochs.epoch_of`` for the epoch of the last
  record; ListLatest is the ListOffsets handler's LATEST answer (its offset and leader
  epoch, 0 on a partition never written); Validate is OffsetForLeaderEpoch's
  ``dense_epoch_end``. What the client does with
  the answers (reset to the log start, go back to the end of its epoch) is the test's, as
  Kafka's consumer does it.
- Redis' persistence is the test's: Fsync copies the partition's three keys to three "disk"
  keys, RedisRestart copies them back, and the broker's next append names a new Redis life
  (its run id) and the model's clock. Tick moves the clock.

Each state's stream (offsets, each record's id and timestamp, batches whole), meta hash
(last, start, epoch, the life that set it, the epoch history, tmax, the bytes since the last
checkpoint), time index and disk copy are read back and must be exactly TLC's successor.
Besides, in each distinct log, the ListOffsets handler's own ``_read`` answers EARLIEST,
LATEST and every time of the model's ``Times`` (time_search.lua, then the handler's scan of
the records from where it says, looking inside stored batches), and its offset, timestamp
and leader epoch must be Kafka's answer computed from TLC's state (``KafkaAnswer``,
``EpochOf``): TLC proves the spec's search gives it, the replay that the code does.

The model counts ``index.interval.bytes`` in records; here every record stores
RECORD_BYTES (records format: its value) or every batch entry BATCH_BYTES per record
(batches format: padded to it), and the topic's interval is the model's times that.

Copies of the scripts with one rule broken must diverge. Each model is walked once; each
action's transitions are also a test of their own (``test_transition_replays[DenseLog-
AppendBatch]``), which fails when the action never fires in the model.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
import redis.asyncio as aioredis

from korvet.core import admin as admin_rules
from korvet.core import list_offsets as offset_rules
from korvet.core.epochs import Epochs
from korvet.core.errors import ErrorCode
from korvet.core.fetch import offset_error
from korvet.core.list_offsets import dense_epoch_end
from korvet.core.topics import TopicConfig, TopicInfo, trim_policy
from korvet.protocol.records import build_batch, decode_batches, scan_batches
from korvet.server.handlers.offsets import _read as list_offsets_read
from korvet.server.handlers.produce import _pack_records, _pack_stored
from korvet.server.services import Services
from korvet.storage import entries
from korvet.storage.admin_store import AdminStore
from korvet.storage.pipe import EPOCH_BASE_S, Life
from korvet.storage.redis_store import ProducerBatch, RedisStore, _lua
from korvet.verification import tlc
from korvet.verification.values import Record, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import (
    Command,
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

pytestmark = pytest.mark.tlc

CI_MODELS = ["DenseLog", "DenseLog-batches", "DenseLog-consumer"]
KEYSPACE, TOPIC, TOPIC_ID = "dl", "t", "topic-id-dl"
STREAM, META, TIMES = "dl:{t:0}:stream", "dl:{t:0}:partition", "dl:{t:0}:times"
LIVE = (STREAM, META, TIMES)
DISK = ("dl:{t:0}:disk:stream", "dl:{t:0}:disk:partition", "dl:{t:0}:disk:times")
RECORD_BYTES = 4  # records format: a record's value, its id in 4 digits
BATCH_BYTES = 160  # batches format: an entry's stored bytes per record (the batch padded)
RETENTION_MS = 1000  # retention.ms: an append at now = RETENTION_MS + cutoff cuts below cutoff
LOOKUPS = {offset_rules.EARLIEST: offset_rules.Lookup.EARLIEST,
           offset_rules.LATEST: offset_rules.Lookup.LATEST}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Constants:
    format: str
    max_batch: int
    stamps: tuple[int, ...]
    interval: int
    cutoffs: tuple[int, ...]
    max_len: int
    delete_to: tuple[int, ...]
    max_appends: int
    max_restarts: int
    max_clock: int
    fetch_count: int
    times: tuple[int, ...]
    consumer: bool

    @classmethod
    def read(cls, cfg: Path) -> Constants:
        v = tlc.read_constants(cfg)

        fmt = v["Format"]
        assert isinstance(fmt, str)
        return cls(fmt, _int(v["MaxBatch"]), tla_ints(v, "Stamps"), _int(v["Interval"]),
                   tla_ints(v, "Cutoffs"),
                   _int(v["MaxLen"]), tla_ints(v, "DeleteTo"), _int(v["MaxAppends"]),
                   _int(v["MaxRestarts"]), _int(v["MaxClock"]), _int(v["FetchCount"]),
                   tla_ints(v, "Times"), v["Consumer"] is True)

    @property
    def unit(self) -> int:
        """A record's bytes, as the append script counts them for the time index."""
        return RECORD_BYTES if self.format == "records" else BATCH_BYTES


_int = tla_int


def _rec(value: TlaValue) -> Record:
    assert isinstance(value, Record), value
    return value


def _tla(value: object) -> TlaValue:
    """A record's field, a TLA+ value."""
    return cast(TlaValue, value)


def _seq(value: TlaValue) -> tuple[Any, ...]:
    assert isinstance(value, tuple), value
    return value


def _offset(raw: bytes) -> int | str:
    """The offset of a dense stream's id ``<o>-1``; another id as text (TLC has no such
    state, so it shows as a divergence)."""
    ms, _, seq = raw.partition(b"-")
    return int(ms) if seq == b"1" else f"id {raw.decode()}"


def _copies(source: Sequence[str], target: Sequence[str]) -> list[Command]:
    """The keys ``source`` copied over ``target``."""
    return [("DEL", *target), *(("COPY", a, b) for a, b in zip(source, target, strict=True))]


def _checkpoint_end(raw: bytes) -> int | str:
    """The end of a time index checkpoint, its id ``<end>-0``."""
    ms, _, seq = raw.partition(b"-")
    return int(ms) if seq == b"0" else f"id {raw.decode()}"


def _hash(reply: Sequence[bytes] | dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A hash's fields as HGETALL replies them (a map in RESP3, a flat list in RESP2)."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _reads(keys: Sequence[str]) -> list[Command]:
    """The reads of a partition's three keys (live or disk)."""
    stream, meta, times = keys
    return [("XRANGE", stream, "-", "+"), ("HGETALL", meta), ("XRANGE", times, "-", "+")]


READS = _reads(LIVE) + _reads(DISK)  # what every write reads back: the live and the disk keys


class DenseReplay:
    def __init__(self, c: Constants, store: ScriptRedis, url: str,
                 mutate: tuple[str, str, str] | None) -> None:
        self.c = c
        self.store = store
        self.loop = asyncio.new_event_loop()
        self.config = TopicConfig(explicit={
            "korvet.offset.scheme": "dense", "korvet.storage.format": c.format,
            "index.interval.bytes": str(c.interval * c.unit), "retention.ms": str(RETENTION_MS)})
        assert c.max_len == 0, "no retention by size in the CI models (MaxLen 0)"
        self.topic = TopicInfo(TOPIC, TOPIC_ID, 1, self.config)
        self.redis: RedisStore = self.run(self._open(url, mutate))
        self.admin = AdminStore(self.redis)
        if mutate and mutate[0] == "delete_records.lua":
            self.admin._delete = self.redis.redis.register_script(
                script_text(mutate[0], mutate=(mutate[1], mutate[2])))
        self.checked: dict[tuple[object, ...], None] = {}  # the logs whose answers were checked
        self.problems: list[str] = []  # ListOffsets answers that are not Kafka's
        self.packed: dict[tuple[tuple[tuple[int, int], ...], int], entries.PackedRecords] = {}

    async def _open(self, url: str, mutate: tuple[str, str, str] | None) -> RedisStore:
        store = RedisStore(aioredis.Redis.from_url(url), keyspace=KEYSPACE)
        if mutate and mutate[0] in ("append.lua", "time_search.lua"):
            script = store.redis.register_script(
                script_text(mutate[0], mutate=(mutate[1], mutate[2])))
            if mutate[0] == "append.lua":
                store._append = script  # the mutant: its sha goes in the packed command
            else:
                store._time_search = script  # the mutant
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

    def initial(self, state: dict[str, TlaValue]) -> Snapshot:
        # The topic's stamp lives in the meta hash (ScriptRedis.reset): Redis persisted it
        # long before, so the disk copy has it too.
        self.store.client.copy(META, DISK[1], replace=True)
        got = self.log_vars(self.read_keys(LIVE))
        assert got == {n: state[n] for n in ("stream", "meta", "times")}, got
        assert self.disk_var(self.read_keys(DISK)) == state["disk"]
        return self.store.snapshot()

    def read_keys(self, keys: Sequence[str]) -> list[Any]:
        return self.store.raw(_reads(keys))

    def log_vars(self, replies: Sequence[Any]) -> dict[str, TlaValue]:
        entries_, meta, times = replies
        return {"stream": self.stream_of(entries_), "meta": self.meta_of(_hash(meta)),
                "times": tuple(Record({"end": _checkpoint_end(i), "t": int(_hash(f)[b"t"])})
                               for i, f in times)}

    def disk_var(self, replies: Sequence[Any]) -> Record:
        return Record(dict(self.log_vars(replies).items()))

    def stream_of(self, raw: Sequence[Any]) -> tuple[Record, ...]:
        """Each entry's offset and records (their ids and timestamps)."""
        found = []
        for entry_id, fields in raw:
            if self.c.format == "records":
                stamp, _key, value, _headers = entries.decode_fields(fields)
                records: list[tuple[int, bytes | None]] = [(stamp, value)]
            else:
                stored = entries.batch_fields(fields)
                assert stored is not None, fields
                count, _max, blob = stored
                records = [(r[0], r[2]) for r in decode_batches(blob)[0].records]
                assert len(records) == count
            found.append(Record({"base": _offset(entry_id), "recs": tuple(
                Record({"rid": int((value or b"")[:4]), "ts": stamp}) for stamp, value in records)}))
        return tuple(found)

    def meta_of(self, h: dict[bytes, bytes]) -> Record:
        since = int(h.get(b"since", b"0"))
        inc = h.get(b"inc")
        return Record({
            "last": _offset(h[b"last"]) if b"last" in h else -1,
            "start": _offset(h[b"start"]) if b"start" in h else 0,
            "epoch": int(h[b"epoch"]) if b"epoch" in h else -1,
            "inc": int(inc.removeprefix(b"life-")) if inc is not None else -1,
            "epochs": Epochs.parse(h.get(b"epochs")).history,
            "tmax": int(h[b"tmax"]) if b"tmax" in h else -1,
            # bytes since the last checkpoint, in records as the model counts them
            "since": since // self.c.unit if since % self.c.unit == 0 else f"{since} bytes"})

    # --- the actions --------------------------------------------------------------------

    def pack(self, recs: Sequence[tuple[int, int]], now: int) -> entries.PackedRecords:
        """The records (id, timestamp) as Produce packs a producer's batch of them (the same
        records are packed once)."""
        key = (tuple(recs), now)
        if key not in self.packed:
            self.packed[key] = self._pack(recs, now)
        return self.packed[key]

    def _pack(self, recs: Sequence[tuple[int, int]], now: int) -> entries.PackedRecords:
        if self.c.format == "records":
            raw = build_batch([(ts, None, b"%04d" % rid, []) for rid, ts in recs])
            return _pack_records(decode_batches(raw)[0], self.topic, now)
        # One entry of BATCH_BYTES per record: the stored batch is padded to it (the
        # count and the max timestamp count too, as append.lua counts a batch entry).
        target = len(recs) * BATCH_BYTES - len(b"%d" % len(recs)) - len(b"%d" % max(
            ts for _, ts in recs))
        for first_pad, last_pad in itertools.product(range(3), range(target)):
            values = [b"%04d" % rid for rid, _ in recs]
            values[0] += b"." * first_pad
            values[-1] += b"." * last_pad
            raw = build_batch([(ts, None, v, []) for (_, ts), v in zip(recs, values, strict=True)])
            if len(raw) == target:
                return _pack_stored(scan_batches(raw)[0], self.topic, now)
        raise AssertionError(f"no padding makes a batch of {len(recs)} {BATCH_BYTES} bytes")

    def append_command(self, s: dict[str, TlaValue], recs: Sequence[tuple[int, int]],
                       cutoff: int) -> bytes:
        """The append of these records, as the broker sends it in state ``s`` (its Redis
        life and clock): RedisStore.append_command's RESP."""
        now = RETENTION_MS + cutoff
        packed = self.pack(recs, now)
        n = len(recs)
        trim = trim_policy(self.config, now, packed.size, n,
                           entries=None if self.c.format == "records" else 1)
        life = _int(s["life"])
        return self.redis.append_command(
            self.topic, 0, packed, n, now, trim, ProducerBatch(),
            Life(f"life-{life}", life, EPOCH_BASE_S + _int(s["clock"])))[1]

    def writes(self, s: dict[str, TlaValue]) -> Iterator[tuple[list[Command], Callable[
            [list[Any], Snapshot, list[Any]], Successor]]]:
        """The actions that write to Redis by commands alone, each as (its commands, what
        makes its successor of their replies, the keys after them and the reads'): the
        appends, an fsync (the partition's keys copied to the disk keys), a restart (the
        disk keys copied back; the broker's next append names a new Redis life)."""
        c = self.c
        appends = _int(s["appends"])
        if appends < c.max_appends:
            for n in range(1, c.max_batch + 1):
                for stamps in itertools.product(c.stamps, repeat=n):
                    recs = [(appends * c.max_batch + i + 1, ts) for i, ts in enumerate(stamps)]
                    for cutoff in c.cutoffs:
                        yield [self.append_command(s, recs, cutoff)], self.appended(s)
        live = Record({n: s[n] for n in ("stream", "meta", "times")})
        if s["disk"] != live:
            yield _copies(LIVE, DISK), lambda _r, after, reads: Successor(
                "Fsync", {**s, **self.all_vars(reads)}, after)
        clock = _int(s["clock"])
        if _int(s["restarts"]) < c.max_restarts and clock < c.max_clock:
            yield _copies(DISK, LIVE), lambda _r, after, reads: Successor("RedisRestart", {
                **s, **self.all_vars(reads), "life": _int(s["life"]) + 1,
                "restarts": _int(s["restarts"]) + 1, "clock": clock + 1,
                "restartedAt": clock + 1}, after)

    def appended(self, s: dict[str, TlaValue]) -> Callable[[list[Any], Snapshot, list[Any]],
                                                            Successor]:
        def make(replies: list[Any], after: Snapshot, reads: list[Any]) -> Successor:
            assert replies[0][0] == b"OK", replies
            return Successor("AppendBatch", {**s, **self.all_vars(reads),
                                             "appends": _int(s["appends"]) + 1}, after)
        return make

    def all_vars(self, reads: Sequence[Any]) -> dict[str, TlaValue]:
        return {**self.log_vars(reads[:3]), "disk": self.disk_var(reads[3:])}

    def unsure(self, s: dict[str, TlaValue]) -> None:
        """After the broker's reads: the first read of a partition never written gives it
        its start (bounds.lua), so Redis may no longer hold the state's snapshot."""
        if _rec(s["meta"])["last"] == -1:
            self.store.loaded = None

    async def delete_records(self, offset: int) -> bool:
        """The DeleteRecords handler's steps (handlers/admin.py ``_delete``): whether the
        log start moved."""
        start, high_watermark = await self.redis.offsets(self.topic, 0)
        outcome = admin_rules.delete_records(offset, start, high_watermark)
        if not outcome.ok or outcome.low_watermark <= start:
            return False
        await self.admin.raise_log_start(self.topic, 0, outcome.low_watermark)
        return True

    def successors(self, s: dict[str, TlaValue], snapshot: Snapshot) -> Iterator[Successor]:
        c = self.c
        self.check_list_offsets(s, snapshot)
        for offset in c.delete_to:
            self.store.restore(snapshot)
            moved = self.run(self.delete_records(offset))
            self.unsure(s)
            if moved:
                after, replies = self.store.snapshot_and(_reads(LIVE))
                yield Successor("DeleteRecords", {**s, **self.log_vars(replies)}, after)
        # Every write from this state in one round trip, each from the state's keys.
        writes = list(self.writes(s))
        sent = self.store.send_all_from(snapshot, [(commands, READS) for commands, _ in writes])
        for (_, make), (replies, after, reads) in zip(writes, sent, strict=True):
            yield make(replies, after, reads)
        clock = _int(s["clock"])
        if clock < c.max_clock:
            yield Successor("Tick", {**s, "clock": clock + 1}, snapshot)
        if c.consumer:
            yield from self.consumer(s, snapshot)

    # --- the consumer (Kafka's, KIP-320) ------------------------------------------------

    def epochs_now(self, snapshot: Snapshot) -> Epochs:
        """The partition's epoch history as the broker reads it (``Epochs.parse``): before
        its first write, or once Redis lost all of it, none, whose current epoch is 0,
        Kafka's first (the spec's ``Hist``). Real epochs are seconds since 2024; the model's
        clock starting at 0 is what lets a real first epoch be 0 here too."""
        self.store.restore(snapshot)
        raw: bytes | None = self.store.client.hget(META, "epochs")  # type: ignore[assignment]
        return Epochs.parse(raw)

    def consumer(self, s: dict[str, TlaValue], snapshot: Snapshot) -> Iterator[Successor]:
        known, fenced, last_epoch = _int(s["known"]), s["fenced"] is True, _int(s["lastEpoch"])
        epochs = self.epochs_now(snapshot)
        if (not fenced and known == epochs.current and not _seq(s["got"]) and last_epoch == -1
                and s["pos"] == s["base"]):
            yield Successor("ListLatest", self.list_latest(s, snapshot), snapshot)
        if epochs.current > known:  # clients take no metadata that goes back
            yield Successor("Metadata", {**s, "known": epochs.current,
                                         "fenced": fenced or last_epoch != -1}, snapshot)
        if not fenced and known != -1:
            verdict = epochs.fence(known)
            if verdict is ErrorCode.FENCED_LEADER_EPOCH:
                yield Successor("FetchFenced", {**s, "fenced": True}, snapshot)
            elif verdict is ErrorCode.NONE:
                fetched = self.fetch(s, snapshot)
                if fetched is not None:
                    yield Successor("Fetch", fetched, snapshot)
        if fenced and epochs.fence(known) is ErrorCode.NONE:
            yield Successor("Validate", self.validate(s, snapshot, epochs, known, last_epoch),
                            snapshot)

    def fetch(self, s: dict[str, TlaValue], snapshot: Snapshot) -> dict[str, TlaValue] | None:
        """A fetch at the consumer's position: the records it reads, or its reset; None when
        there is nothing to read (at the high watermark)."""
        pos = _int(s["pos"])
        self.store.restore(snapshot)
        read = self.run(self.redis.read([(self.topic, 0, pos, self.c.fetch_count)]))[0]
        if offset_error(pos, read.log_start_offset, read.high_watermark) is not ErrorCode.NONE:
            start = read.log_start_offset  # auto.offset.reset=earliest
            return {**s, "pos": start, "base": start, "got": (), "lastEpoch": -1}
        got = [(offset, int(entries.decode_fields(fields)[2] or b"")) for offset, fields
               in read.entries(0)]
        if not got:
            return None
        return {**s, "pos": got[-1][0] + 1, "got": _seq(s["got"]) + tuple(got),
                "lastEpoch": read.epochs.epoch_of(got[-1][0])}

    def list_latest(self, s: dict[str, TlaValue], snapshot: Snapshot) -> dict[str, TlaValue]:
        """The consumer positions at the end: the ListOffsets handler's LATEST answer, its
        offset and leader epoch kept as the position and its epoch (Kafka's consumer)."""
        self.store.restore(snapshot)
        services = cast(Services, SimpleNamespace(store=self.redis))
        answer = self.run(_answers(services, self.topic, [offset_rules.LATEST]))[0]
        assert answer.error is ErrorCode.NONE, answer.error
        return {**s, "pos": answer.offset, "base": answer.offset,
                "lastEpoch": answer.leader_epoch}

    def validate(self, s: dict[str, TlaValue], snapshot: Snapshot, epochs: Epochs, known: int,
                 last_epoch: int) -> dict[str, TlaValue]:
        """After a fence and a metadata refresh: OffsetForLeaderEpoch of the last epoch read,
        and the consumer's reaction (Kafka's, with a reset policy)."""
        unfenced = {**s, "fenced": False}
        if last_epoch == -1:
            return unfenced
        self.store.restore(snapshot)
        start, high_watermark = self.run(self.redis.offsets(self.topic, 0))
        error, _epoch, end = dense_epoch_end(
            offset_rules.EpochPartition(0, known, last_epoch), epochs, start, high_watermark)
        assert error is ErrorCode.NONE, error
        if end == -1:
            return {**unfenced, "pos": start, "base": start, "got": (), "lastEpoch": -1}
        if end < _int(s["pos"]):
            return {**unfenced, "pos": end, "base": end, "got": (), "lastEpoch": -1}
        return unfenced

    # --- ListOffsets -------------------------------------------------------------------

    def check_list_offsets(self, s: dict[str, TlaValue], snapshot: Snapshot) -> None:
        """The ListOffsets handler's answers in this state's log against Kafka's: once per
        distinct log (the other variables do not change them)."""
        meta = _rec(s["meta"])  # the life that set the epoch and the bytes since the last
        log = (s["stream"], s["times"], *(meta[n] for n in ("last", "start", "epochs", "tmax")))
        if log in self.checked:  # checkpoint play no part in the answers
            return
        self.checked[log] = None
        self.store.restore(snapshot)
        services = cast(Services, SimpleNamespace(store=self.redis))
        wanted = [*LOOKUPS, *self.c.times]
        got = self.run(_answers(services, self.topic, wanted))
        self.unsure(s)
        expected = kafka_answers(s, self.c.times)
        for stamp, answer, want in zip(wanted, got, expected, strict=True):
            if (answer.error, answer.offset, answer.timestamp, answer.leader_epoch) != want:
                self.problems.append(
                    f"ListOffsets({stamp}) in stream = {s['stream']}, meta = {s['meta']}, "
                    f"times = {s['times']}: answered (error, offset, timestamp, leader epoch) "
                    f"{(answer.error, answer.offset, answer.timestamp, answer.leader_epoch)}, "
                    f"Kafka's {want}")


async def _answers(services: Services, topic: TopicInfo,
                   stamps: Sequence[int]) -> list[offset_rules.OffsetAnswer]:
    """The handler's answers to the lookups, asked at once (as a request with several)."""
    return list(await asyncio.gather(*(
        list_offsets_read(services, topic, offset_rules.ListOffsetsPartition(0, stamp, -1),
                          LOOKUPS.get(stamp, offset_rules.Lookup.BY_TIMESTAMP))
        for stamp in stamps)))


def kafka_answers(s: dict[str, TlaValue], times: Sequence[int]
                  ) -> list[tuple[ErrorCode, int, int, int]]:
    """Kafka's answers to EARLIEST, LATEST and each time, from the spec's state: the log
    start, the high watermark (no timestamp; the epoch of the offset), and ``KafkaAnswer``:
    the first record at or after the log start whose timestamp is at or after the time, its
    timestamp and epoch (``EpochOf``), or -1."""
    meta = _rec(s["meta"])
    start, hw = _int(meta["start"]), _int(meta["last"]) + 1
    history = Epochs(tuple((_int(e), _int(o)) for e, o in _seq(_tla(meta["epochs"]))))
    present: list[tuple[int, int]] = []
    for entry in _seq(s["stream"]):
        base = _int(_rec(entry)["base"])
        for i, record in enumerate(_seq(_tla(_rec(entry)["recs"]))):
            if start <= base + i < hw:
                present.append((base + i, _int(_rec(record)["ts"])))

    def at(offset: int, timestamp: int = -1) -> tuple[ErrorCode, int, int, int]:
        return ErrorCode.NONE, offset, timestamp, history.epoch_of(offset) if offset >= 0 else -1

    found = [at(start), at(hw)]
    for t in times:
        hit = next(((o, ts) for o, ts in present if ts >= t), None)
        found.append(at(*hit) if hit else at(-1))
    return found


def actions_of(c: Constants) -> tuple[str, ...]:
    actions = ["AppendBatch", "Fsync", "RedisRestart", "Tick"]
    if c.delete_to:
        actions.append("DeleteRecords")
    if c.consumer:
        actions += ["Metadata", "Fetch", "FetchFenced", "Validate", "ListLatest"]
    return tuple(actions)


CONSTANTS = {name: Constants.read(tlc.spec_dir() / tlc_runs.model(name).config)
             for name in CI_MODELS}
_graph = tlc_runs.passing_graph


def _replay(redis_url: str, graph: tlc.StateGraph, c: Constants,
            mutate: tuple[str, str, str] | None = None) -> WalkReport:
    """Walk the graph; a mutated script stops at its first divergence."""
    texts = {name: script_text(f"{name}.lua", mutate=(mutate[1], mutate[2])
                               if mutate and mutate[0] == f"{name}.lua" else None)
             for name in ("append", "time_search", "delete_records", "bounds")}
    assert texts["append"] == _lua("append.lua") or mutate, "the replay runs the broker's script"
    store = ScriptRedis(redis_url, texts, [*LIVE, *DISK], META, TOPIC_ID)
    replay = DenseReplay(c, store, redis_url, mutate)
    try:
        report = walk(graph, store, replay.initial, replay.successors,
                      max_divergences=1 if mutate else 10, found=replay.problems)
    finally:
        replay.close()
        store.close()
    for problem in replay.problems[:3]:
        report.tally.note("ListOffsets", problem)
    return report


@pytest.fixture(scope="module")
def walked(redis_url: str) -> Callable[[str], WalkReport]:
    """The real scripts' walk of a model's whole graph, once per model and module."""
    reports: dict[str, WalkReport] = {}

    def of(name: str) -> WalkReport:
        if name not in reports:
            graph = _graph(name)
            reports[name] = _replay(redis_url, graph, CONSTANTS[name])
            print(f"\n{name}: " + reports[name].summary(graph))
        return reports[name]
    return of


@pytest.mark.spec("DenseLog", "Spec", "Format", "MaxBatch", "Stamps", "Interval", "Cutoffs",
                  "DeleteTo", "MaxAppends", "MaxRestarts", "MaxClock", "Times", "stream", "meta",
                  "times", "disk", "life", "clock", "restartedAt", "KafkaAnswer", "IndexAnswer")
@pytest.mark.parametrize("name", [
    "DenseLog", "DenseLog-batches",
    pytest.param("DenseLog-consumer", marks=pytest.mark.spec(
        "DenseLog", "FetchCount", "Consumer", "pos", "base", "got", "lastEpoch", "known", "fenced",
        "EpochOf", "EndOffset", "Hist", "CurEpoch",
        note="the consumer's fetches, fences, positioning at the end and validation"))])
def test_every_transition_replays_through_the_scripts(walked: Callable[[str], WalkReport],
                                                      name: str) -> None:
    graph, c = _graph(name), CONSTANTS[name]
    report = walked(name)
    assert not report.divergences, "the scripts diverge from DenseLog:\n" + "\n".join(
        report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    assert set(report.actions) == set(actions_of(c))


@pytest.mark.parametrize(("name", "action"), [
    case for name in CI_MODELS
    for case in action_cases("DenseLog", name, actions_of(CONSTANTS[name]), with_model=True)])
def test_transition_replays(walked: Callable[[str], WalkReport], name: str, action: str) -> None:
    """Every transition of one action of a model, replayed through the scripts."""
    assert_action_replays(walked(name).tally, action)


@pytest.mark.parametrize("name,script,rule,broken", [
    # The first offset of a new partition is 1, not 0.
    pytest.param("DenseLog", "append.lua", "if dense then\n  last_ms = -1\nend",
                 "if dense then\n  last_ms = 0\nend", id="first-offset-1",
                 marks=pytest.mark.spec("DenseLog", "AppendBatch")),
    # A stored batch reserves one offset more than it holds.
    pytest.param("DenseLog-batches", "append.lua", "last_ms, last_seq_id = advance(ms, seq, n - 1)",
                 "last_ms, last_seq_id = advance(ms, seq, n)", id="batch-reserves-one-more",
                 marks=pytest.mark.spec("DenseLog", "AppendBatch")),
    # A checkpoint once more than the interval was appended, not once it was reached.
    pytest.param("DenseLog", "append.lua", "if since >= interval then",
                 "if since > interval then", id="checkpoint-late",
                 marks=pytest.mark.spec("DenseLog", "AppendBatch", "Interval")),
    # Retention by time trims the stream and forgets to move the log start.
    pytest.param("DenseLog", "append.lua",
                 "      start_ms, start_seq = boundary, 0\n", "", id="retention-keeps-start",
                 marks=pytest.mark.spec("DenseLog", "AppendBatch", "Cutoffs")),
    # A new Redis life does not bump the epoch: a consumer past a cut would read on.
    pytest.param("DenseLog-consumer", "append.lua",
                 "if epoch == nil or known[2] ~= life then", "if epoch == nil then",
                 id="no-epoch-bump", marks=pytest.mark.spec("DenseLog", "RedisRestart")),
    # The time search reads from the end of the checkpoint that reaches the time, not of
    # the one before: it answers a later record than the first at or after the time.
    pytest.param("DenseLog", "time_search.lua",
                 "local bound = found and string.format('(%d-0', found) or '+'",
                 "local bound = found and string.format('%d-0', found) or '+'",
                 id="time-search-skips-bracket",
                 marks=pytest.mark.spec("DenseLog", "IndexAnswer", "KafkaAnswer")),
    # DeleteRecords moves the log start one past the offset asked (past the high
    # watermark when asked for it).
    pytest.param("DenseLog", "delete_records.lua", "redis.call('HSET', KEYS[2], 'start', new_id)",
                 "redis.call('HSET', KEYS[2], 'start', string.format('%d-%d', new_ms + 1, new_seq))",
                 id="delete-records-past-offset",
                 marks=pytest.mark.spec("DenseLog", "DeleteRecords")),
    # DeleteRecords removes the stored batch that holds the new log start.
    pytest.param("DenseLog-batches", "delete_records.lua",
                 "  if ms > new_ms or (ms == new_ms and seq >= new_seq) then\n    return holder[1][1]",
                 "  if false then\n    return holder[1][1]", id="delete-records-drops-holder",
                 marks=pytest.mark.spec("DenseLog", "DeleteRecords", "Format")),
])
def test_a_broken_rule_is_caught(redis_url: str, name: str, script: str, rule: str,
                                 broken: str) -> None:
    """A copy of a script with one rule broken diverges from the spec."""
    report = _replay(redis_url, _graph(name), CONSTANTS[name], mutate=(script, rule, broken))
    assert report.divergences, f"the replay accepted {script} with {rule!r} -> {broken!r}"
