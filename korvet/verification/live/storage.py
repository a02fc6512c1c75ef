"""The storage path live: produce, fetch, list-offsets and delete-records sequences checked
against the rules of spec/ProducerState.tla and spec/PartitionLog.tla.

One partition, idempotent producers (with retries, sequence gaps, epoch bumps and stale
epochs), a plain producer, a consumer that fetches at its position or seeks (the log
start, the high watermark, past it, below the log start, a record, the gap after a batch),
ListOffsets (earliest, latest, by timestamp) and DeleteRecords. ``PartitionModel``
predicts every answer:

- a produced batch's outcome is ProducerState's ``Decide`` (Kafka's ProducerStateManager
  rules, ``CacheSize`` 5): OK, DUP (NONE with the offset the batch was first stored at),
  BAD_EPOCH (INVALID_PRODUCER_EPOCH) or OUT_OF_ORDER (OUT_OF_ORDER_SEQUENCE_NUMBER);
- offsets are compared through the models' abstraction: the broker picks an OK batch's
  base offset, which must be past every offset handed out before (and, where offsets are
  dense, as on Kafka and on a Korvet topic of the ``dense`` scheme, the default, exactly the
  high watermark); the records get consecutive offsets
  from it (OffsetCodec ``BatchConsecutive``, ``StrictlyIncreasing``);
- a fetch at an offset below the log start or above the high watermark is
  OFFSET_OUT_OF_RANGE; otherwise it returns the log's records from that offset on, in
  order, none skipped (a prefix of them: ``NoRecordSkipped``, ``FetchWithinBounds``; records
  before the fetch offset that Kafka returns as part of a whole batch are dropped, as
  clients drop them), with the high watermark and log start the model has;
- DeleteRecords follows ``korvet.core.admin.delete_records`` (Kafka's rule); Korvet's
  size retention (``korvet.retention.records``, exact MAXLEN) moves the log start past
  the last record it removes (PartitionLog ``AppendAt``); producer state outlives the
  records (``SurvivesRetention``), so a retry after its records went is still a DUP.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.ops import EARLIEST, LATEST
from korvet.conformance.kafka.records import Rec, build_batch, decode_records
from korvet.conformance.kafka.wire import WireClient, WireError
from korvet.core.admin import delete_records
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.verification.live import actions as act
from korvet.verification.live.env import Divergence, Environment, create_topic
from korvet.verification.live.oracle import Flavour

CACHE_SIZE = 5  # ProducerState CacheSize: append.lua CACHED_BATCHES, Kafka's NUM_BATCHES_TO_RETAIN
OK, DUP, BAD_EPOCH, OUT_OF_ORDER = "OK", "DUP", "BAD_EPOCH", "OUT_OF_ORDER"
ERRORS = {OK: ErrorCode.NONE, DUP: ErrorCode.NONE, BAD_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
          OUT_OF_ORDER: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}
MIN_PRODUCE = 3  # record batches (magic 2): v3+; Kafka 4 advertises older versions it refuses
RETRIABLE = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)
# What a partition answers until it has a leader
NOT_LED_YET = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
               ErrorCode.NOT_LEADER_OR_FOLLOWER)
PRODUCERS = 2  # idempotent producer slots; slot PRODUCERS is a plain producer
KORVET_RETENTION_RECORDS = 6  # Korvet's run keeps the last 6 records (korvet.retention.records)


# --- the model ----------------------------------------------------------------------------

@dataclass
class PState:
    """ProducerState's ``pstate[p]``: epoch, last sequence, cached batches (newest first)."""

    epoch: int
    last: int
    cache: list[tuple[int, int, int]] = field(default_factory=list)  # first, last, base offset


def decide(state: PState | None, epoch: int, first: int, last: int) -> str:
    """ProducerState ``Decide``."""
    if state is None:
        return OK
    if epoch < state.epoch:
        return BAD_EPOCH
    if epoch == state.epoch and any(c[0] == first and c[1] == last for c in state.cache):
        return DUP
    if epoch == state.epoch:
        return OK if first == state.last + 1 else OUT_OF_ORDER
    return OK if first == 0 else OUT_OF_ORDER


@dataclass(frozen=True, slots=True)
class Stored:
    key: bytes
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Batch:
    pid: int
    epoch: int
    first: int  # base sequence (-1: not idempotent)
    keys: tuple[bytes, ...]
    timestamps: tuple[int, ...]


class PartitionModel:
    def __init__(self, *, dense: bool, retention: int, start: int, high_watermark: int) -> None:
        self.dense = dense  # Kafka: offsets 0, 1, 2, ... with no gaps
        self.retention = retention  # records kept after each append (-1: no size retention)
        self.log: list[Stored] = []
        self.start = start
        self.hw = high_watermark
        self.last: int | None = None
        self.pstate: dict[int, PState] = {}

    def outcome(self, batch: Batch) -> tuple[str, int | None]:
        """What the broker must answer, and for a DUP the offset it must give."""
        if batch.first < 0:
            return OK, None
        state = self.pstate.get(batch.pid)
        verdict = decide(state, batch.epoch, batch.first, batch.first + len(batch.keys) - 1)
        if verdict == DUP and state is not None:
            last = batch.first + len(batch.keys) - 1
            return DUP, next(c[2] for c in state.cache if c[0] == batch.first and c[1] == last)
        return verdict, None

    def check_base(self, base: int) -> str | None:
        """Why an OK batch may not start at ``base`` (None: it may)."""
        if self.dense and base != self.hw:
            return f"base offset {base}, not the high watermark {self.hw} (offsets are dense)"
        if base < self.hw or (self.last is not None and base <= self.last):
            return f"base offset {base} is not past the last offset handed out ({self.last})"
        return None

    def append(self, batch: Batch, base: int) -> None:
        """AppendAt, with exact size retention, and NewState for the producer."""
        for i, (key, stamp) in enumerate(zip(batch.keys, batch.timestamps, strict=True)):
            self.log.append(Stored(key, base + i, stamp))
        n = len(batch.keys)
        self.last = base + n - 1
        self.hw = base + n
        if self.retention >= 0 and len(self.log) > self.retention:
            removed = self.log[: len(self.log) - self.retention]
            self.log = self.log[len(removed):]
            self.start = max(self.start, removed[-1].offset + 1)
        if batch.first >= 0:
            old = self.pstate.get(batch.pid)
            kept = old.cache if old is not None and old.epoch == batch.epoch else []
            entry = (batch.first, batch.first + n - 1, base)
            self.pstate[batch.pid] = PState(batch.epoch, batch.first + n - 1,
                                            [entry, *kept][:CACHE_SIZE])

    def fetch(self, offset: int) -> tuple[int, list[Stored]]:
        if offset < self.start or offset > self.hw:
            return ErrorCode.OFFSET_OUT_OF_RANGE, []
        return ErrorCode.NONE, [r for r in self.log if r.offset >= offset]

    def list_offset(self, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) ListOffsets answers."""
        if timestamp == EARLIEST:
            return self.start, -1
        if timestamp == LATEST:
            return self.hw, -1
        found = next((r for r in self.log if r.timestamp >= timestamp), None)
        return (found.offset, found.timestamp) if found is not None else (-1, -1)

    def delete(self, offset: int) -> tuple[int, int]:
        deletion = delete_records(offset, self.start, self.hw)
        if deletion.ok:
            self.start = deletion.low_watermark
            self.log = [r for r in self.log if r.offset >= self.start]
        return int(deletion.error), deletion.low_watermark


# --- the run ------------------------------------------------------------------------------

@dataclass
class Slot:
    """A producer as its client knows itself."""

    pid: int = -1
    epoch: int = -1
    next_seq: int = 0
    sent: list[Batch] = field(default_factory=list)


class StorageRun:
    def __init__(self, env: Environment) -> None:
        self.env = env
        self.topic = f"live-s-{uuid.uuid4().hex[:10]}"
        korvet = env.flavour is Flavour.KORVET
        configs = {"korvet.retention.records": str(KORVET_RETENTION_RECORDS)} if korvet else {}
        create_topic(env.host, env.port, env.versions, self.topic, 1, configs)
        self.conn = WireClient(env.host, env.port, client_id="live-storage",
                               timeout=env.reply_timeout)
        self.slots = [Slot() for _ in range(PRODUCERS + 1)]
        self.stamp = (time.time_ns() // 1_000_000) - 60_000
        self.counter = itertools.count()
        self.stamps: list[int] = []
        self.position = 0
        self.done: list[act.Action] = []
        self._await_leader()
        start, _ = self._list(EARLIEST, 1)
        hw, _ = self._list(LATEST, 1)
        dense = not korvet or self._scheme() == "dense"
        self.model = PartitionModel(dense=dense, retention=KORVET_RETENTION_RECORDS
                                    if korvet else -1, start=start, high_watermark=hw)
        self.position = start
        if (start, hw) != ((0, 0) if dense else (start, start)):
            raise Divergence(f"a new partition has log start {start}, high watermark {hw}")
        for slot in self.slots[:PRODUCERS]:
            self._new_producer(slot)
        env.stats.sequences += 1

    def close(self) -> None:
        self.conn.close()

    def _scheme(self) -> str:
        """The Korvet topic's offset scheme (``korvet.offset.scheme``): ``dense``, Kafka's
        (new topics' default), or ``time``, sparse offsets (a broker set to it)."""
        response = self._call(build_request(
            ApiKey.DESCRIBE_CONFIGS, self._version(ApiKey.DESCRIBE_CONFIGS, 4, 4),
            resources=[{"resource_type": 2, "resource_name": self.topic,
                        "configuration_keys": ["korvet.offset.scheme"]}],
            include_synonyms=False, include_documentation=False))
        found = [c.value for c in response.results[0].configs
                 if c.name == "korvet.offset.scheme"]
        if int(response.results[0].error_code) != ErrorCode.NONE or not found:
            raise Divergence(f"DescribeConfigs of {self.topic} lists no korvet.offset.scheme")
        return str(found[0])

    def _version(self, api: int, wanted: int, cap: int) -> int:
        lo, hi = self.env.versions[api]
        return min(max(wanted, lo), hi, cap)

    def _call(self, request: Any) -> Any:
        try:
            response = self.conn.call(request, self.env.reply_timeout)
        except WireError as exc:
            raise Divergence(f"{type(request).__name__}: {exc}") from exc
        self.env.stats.requests += 1
        return response

    def _check(self, what: str, got: Any, expected: Any) -> None:
        if got != expected:
            raise Divergence(f"{what}: the broker answered\n    {got}\n  the model says\n"
                             f"    {expected}")
        self.env.stats.replies_compared += 1

    def perform(self, action: act.Action) -> bool:
        match action:
            case act.Produce():
                self._produce(action)
            case act.Bump():
                slot = self.slots[action.producer % PRODUCERS]
                slot.epoch, slot.next_seq = slot.epoch + 1, 0
            case act.NewProducer():
                self._new_producer(self.slots[action.producer % PRODUCERS])
            case act.Fetch():
                self._fetch(action)
            case act.ListOffsets():
                self._list_offsets(action)
            case act.DeleteRecords():
                self._delete(action)
            case _:
                return False
        self.done.append(action)
        self.env.stats.steps += 1
        return True

    # -- producers -----------------------------------------------------------------------

    def _new_producer(self, slot: Slot) -> None:
        version = self._version(ApiKey.INIT_PRODUCER_ID, 4, 4)
        deadline = time.monotonic() + 30
        while True:
            response = self._call(build_request(ApiKey.INIT_PRODUCER_ID, version,
                                                transactional_id=None, transaction_timeout=60_000,
                                                producer_id=-1, producer_epoch=-1))
            # Kafka: retriable while its transaction coordinator loads (a fresh broker)
            if int(response.error_code) not in RETRIABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if int(response.error_code) != ErrorCode.NONE:
            raise Divergence(f"InitProducerId: {error_name(int(response.error_code))}")
        slot.pid, slot.epoch, slot.next_seq, slot.sent = (int(response.producer_id),
                                                          int(response.producer_epoch), 0, [])

    def _records(self, n: int) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
        numbers = [next(self.counter) for _ in range(n)]
        stamps = tuple(self.stamp + 10 * k for k in numbers)
        self.stamps.extend(stamps)
        return tuple(f"r{k}".encode() for k in numbers), stamps

    def _batch(self, a: act.Produce) -> Batch:
        if a.producer % (PRODUCERS + 1) == PRODUCERS:
            keys, stamps = self._records(a.records)
            return Batch(-1, -1, -1, keys, stamps)
        slot = self.slots[a.producer % (PRODUCERS + 1)]
        if a.kind == "retry" and slot.sent:
            return slot.sent[-1 - a.which % len(slot.sent)]
        keys, stamps = self._records(a.records)
        if a.kind == "gap":
            return Batch(slot.pid, slot.epoch, slot.next_seq + 1, keys, stamps)
        if a.kind == "old-epoch" and slot.epoch > 0:
            return Batch(slot.pid, slot.epoch - 1, 0, keys, stamps)
        batch = Batch(slot.pid, slot.epoch, slot.next_seq, keys, stamps)
        slot.next_seq += len(keys)
        slot.sent = [*slot.sent, batch][-8:]
        return batch

    def _produce(self, a: act.Produce) -> None:
        version = max(self._version(ApiKey.PRODUCE, a.version, 12), MIN_PRODUCE)
        batch = self._batch(a)
        records = build_batch([Rec(k, k, (), t) for k, t in zip(batch.keys, batch.timestamps,
                                                                 strict=True)],
                              producer_id=batch.pid, producer_epoch=batch.epoch,
                              base_sequence=batch.first)
        response = self._call(build_request(ApiKey.PRODUCE, version, transactional_id=None, acks=-1,
                                            timeout=30_000, topic_data=[{
                                                "name": self.topic, "partition_data": [
                                                    {"index": 0, "records": records}]}]))
        part = response.responses[0].partition_responses[0]
        error, base = int(part.error_code), int(part.base_offset)
        verdict, dup_offset = self.model.outcome(batch)
        what = f"Produce v{version} of {len(batch.keys)} records (producer {batch.pid} epoch " \
               f"{batch.epoch} sequence {batch.first})"
        self._check(what + ": error", error_name(error), error_name(ERRORS[verdict]))
        if verdict == OK:
            problem = self.model.check_base(base)
            if problem is not None:
                raise Divergence(f"{what}: {problem}")
            self.model.append(batch, base)
        elif verdict == DUP:
            self._check(what + ": a duplicate's offset", base, dup_offset)
            self.env.stats.note_rule("duplicate answered with its first offset")
        if verdict in (OK, DUP) and version >= 5:
            self._check(what + ": log start", int(part.log_start_offset), self.model.start)

    # -- reading -------------------------------------------------------------------------

    def _fetch_offset(self, a: act.Fetch) -> int:
        m = self.model
        if a.at == "start":
            return m.start
        if a.at == "end":
            return m.hw
        if a.at == "beyond":
            return m.hw + 1
        if a.at == "below":
            return m.start - 1
        if a.at in ("record", "gap") and m.log:
            record = m.log[a.which % len(m.log)]
            return record.offset + (1 if a.at == "gap" else 0)
        return self.position

    def _fetch(self, a: act.Fetch) -> None:
        version = self._version(ApiKey.FETCH, a.version, 12)
        offset = self._fetch_offset(a)
        response = self._call(build_request(
            ApiKey.FETCH, version, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[],
            rack_id="", topics=[{"topic": self.topic, "partitions": [{
                "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}]))
        part = response.responses[0].partitions[0]
        error, expected = self.model.fetch(offset)
        what = f"Fetch v{version} at {offset} (log {self.model.start}..{self.model.hw})"
        self._check(what + ": error", error_name(int(part.error_code)), error_name(error))
        if error:
            return
        _, fetched, _ = decode_records(part.records)
        got = [(r.offset, r.key, r.timestamp) for r in fetched if r.offset >= offset]
        want = [(r.offset, r.key, r.timestamp) for r in expected]
        if (want and not got) or got != want[: len(got)]:
            raise Divergence(f"{what}: records {got}, the model has {want} from there on")
        self.env.stats.replies_compared += 1
        bounds = [int(part.high_watermark)] + ([int(part.log_start_offset)] if version >= 5 else [])
        self._check(what + ": high watermark and log start", bounds,
                    [self.model.hw] + ([self.model.start] if version >= 5 else []))
        if got:
            self.position = got[-1][0] + 1

    def _await_leader(self, timeout: float = 30.0) -> None:
        """A topic just created has no leader in Kafka's metadata cache for a moment: ListOffsets
        answers NOT_LEADER_OR_FOLLOWER (or LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION) until
        it has, and a client waits, as Kafka's own do. Only here, before the run: once it starts,
        every error is compared with the model."""
        deadline = time.monotonic() + timeout
        while True:
            response = self._call(build_request(
                ApiKey.LIST_OFFSETS, 1, replica_id=-1, isolation_level=0, timeout=30_000,
                topics=[{"name": self.topic, "partitions": [{
                    "partition_index": 0, "timestamp": EARLIEST, "current_leader_epoch": -1,
                    "max_num_offsets": 1}]}]))
            code = int(response.topics[0].partitions[0].error_code)
            if code not in NOT_LED_YET or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def _list(self, timestamp: int, version: int) -> tuple[int, int]:
        response = self._call(build_request(
            ApiKey.LIST_OFFSETS, version, replica_id=-1, isolation_level=0, timeout=30_000,
            topics=[{"name": self.topic, "partitions": [{
                "partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1,
                "max_num_offsets": 1}]}]))
        part = response.topics[0].partitions[0]
        if int(part.error_code) != ErrorCode.NONE:
            raise Divergence(f"ListOffsets({timestamp}): {error_name(int(part.error_code))}")
        return int(part.offset), int(part.timestamp)

    def _list_offsets(self, a: act.ListOffsets) -> None:
        version = self._version(ApiKey.LIST_OFFSETS, max(a.version, 1), 7)
        timestamp = {"earliest": EARLIEST, "latest": LATEST}.get(a.which)
        if timestamp is None:
            stamps = self.stamps or [self.stamp]
            timestamp = stamps[a.k % len(stamps)] + (a.k % 2)
        got = self._list(timestamp, version)
        self._check(f"ListOffsets v{version} for {timestamp}", got,
                    self.model.list_offset(timestamp))

    def _delete(self, a: act.DeleteRecords) -> None:
        version = self._version(ApiKey.DELETE_RECORDS, a.version, 2)
        m = self.model
        offset = {"end": -1, "beyond": m.hw + 1}.get(a.at)
        if offset is None:
            offset = m.log[a.which % len(m.log)].offset if m.log else m.hw
        response = self._call(build_request(
            ApiKey.DELETE_RECORDS, version, timeout=30_000, topics=[{
                "name": self.topic, "partitions": [{"partition_index": 0, "offset": offset}]}]))
        part = response.topics[0].partitions[0]
        got = (error_name(int(part.error_code)), int(part.low_watermark))
        error, low = m.delete(offset)
        self._check(f"DeleteRecords v{version} before {offset}", got, (error_name(error), low))


# --- the Hypothesis machine ------------------------------------------------------------------

def storage_machine(env: Environment, recorder: Any) -> type[Any]:
    from hypothesis import strategies as st
    from hypothesis.stateful import rule

    from korvet.verification.live.machine import part_machine

    def versions(api: int, cap: int, floor: int = 0) -> Any:
        lo, hi = env.versions[api]
        return st.integers(max(lo, floor), max(lo, floor, min(hi, cap)))

    slots = st.integers(0, PRODUCERS)
    index = st.integers(0, 20)

    class LiveStorage(part_machine(env, recorder, "storage", StorageRun)):  # type: ignore[misc]
        @rule(producer=slots, version=versions(ApiKey.PRODUCE, 12, MIN_PRODUCE), records=st.integers(1, 3),
              kind=st.sampled_from(["next"] * 5 + ["retry"] * 3 + ["gap", "old-epoch"]),
              which=index)
        def produce(self, **kw: Any) -> None:
            self.do(act.Produce(**kw))

        @rule(producer=st.integers(0, PRODUCERS - 1))
        def bump(self, producer: int) -> None:
            self.do(act.Bump(producer))

        @rule(producer=st.integers(0, PRODUCERS - 1))
        def new_producer(self, producer: int) -> None:
            self.do(act.NewProducer(producer))

        @rule(version=versions(ApiKey.FETCH, 12), at=st.sampled_from(
            ["next"] * 3 + ["start", "end", "beyond", "below", "record", "gap"]), which=index)
        def fetch(self, **kw: Any) -> None:
            self.do(act.Fetch(**kw))

        @rule(version=versions(ApiKey.LIST_OFFSETS, 7, 1),
              which=st.sampled_from(["earliest", "latest", "time", "time"]), k=index)
        def list_offsets(self, **kw: Any) -> None:
            self.do(act.ListOffsets(**kw))

        @rule(version=versions(ApiKey.DELETE_RECORDS, 2), at=st.sampled_from(["record"] * 3 + [
            "end", "beyond"]), which=index)
        def delete_records(self, **kw: Any) -> None:
            self.do(act.DeleteRecords(**kw))

    return LiveStorage


def run_storage(env: Environment, *, examples: int = 25, steps: int = 30,
                seed: int | None = None, database: Any = None,
                shrink_seconds: float = 60.0) -> None:
    from korvet.verification.live.machine import run_part

    run_part(env, storage_machine, replay_storage, part="storage", examples=examples, steps=steps,
             seed=seed, database=database, shrink_seconds=shrink_seconds)


def replay_storage(env: Environment, script: act.Script) -> StorageRun:
    from korvet.verification.live.machine import play

    return play(StorageRun(env), script)


def actions_of(run: StorageRun) -> Sequence[act.Action]:
    return run.done
