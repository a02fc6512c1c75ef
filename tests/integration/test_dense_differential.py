"""Dense offsets against Apache Kafka (issue 31, item 5): Hypothesis sequences of requests run
on a Kafka topic and on dense Korvet topics (both storage formats) must get the same answers,
and on a time Korvet topic the same records in the same order.

A sequence mixes produces (records of several sizes, keys or none, timestamps out of order and
tied, every compression, batches from a plain producer and from two idempotent ones, each
batch maybe sent twice: an idempotent producer's retry is answered with the first append's
offset, a plain producer's duplicates), fetches at any offset (below the log start, inside a
stored batch, at and past the high watermark), ListOffsets (EARLIEST, LATEST, MAX_TIMESTAMP
and by each timestamp around the records') and DeleteRecords (at any offset, the high
watermark's -1 among them). Requests go through the wire (tests/support/wire.py) with exact
batches, and every answer is compared as a client sees it:

- Produce: error, base offset, log start offset;
- Fetch from offset o: the error, the high watermark, the log start, and the records at or
  after o (offset, key, value, timestamp), fetched on until the high watermark (Kafka sends
  a stored batch whole from its first offset: a client skips the records before o);
- ListOffsets: error, offset, timestamp (not the leader epoch: a dense topic's epochs count
  seconds since 2024, Kafka's count leader elections, docs/spec/dense-offsets.md);
- DeleteRecords: error, low watermark.

On the time topic the offsets differ by design: an operation at dense offset o goes to the
time offset of the record that has o on the dense topic (past the end: as far past the time
topic's high watermark), and its answers must name the same records.

The number of sequences is the Hypothesis profile's (tests/support/examples.py:
``KORVET_HYPOTHESIS_PROFILE=deep`` runs 20 times the suite's); docs/conformance.md says what it
covers.
"""

from __future__ import annotations

import bisect
import datetime
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from korvet.jvm.kafka_server import KafkaServer
from korvet.protocol.kbuild import make, nested
from korvet.protocol.records import Record, build_batch
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import fetch_request, produce_request
from tests.support.examples import examples
from tests.support.wire import WireClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEP_MS = 1000  # timestamps are base + k * STEP_MS, k in -3..3: ties and disorder
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
RETRIABLE = {14, 15}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    with KafkaServer(tmp_path_factory.mktemp("kafka-dense")) as server:
        yield server


# --- the operations -------------------------------------------------------------------


@dataclass(frozen=True)
class Produce:
    producer: int  # 0: a plain producer; 1, 2: idempotent producers
    records: tuple[tuple[bytes | None, int, int], ...]  # key, value size, timestamp step
    compression: int
    twice: bool  # sent again as it was (a retry)


@dataclass(frozen=True)
class Fetch:
    pick: int  # the offset, from below the log start to past the high watermark


@dataclass(frozen=True)
class ListOffsets:
    stamp: int  # EARLIEST, LATEST, MAX_TIMESTAMP, or a timestamp step (-4..4)


@dataclass(frozen=True)
class DeleteRecords:
    pick: int  # the offset (0: the high watermark's -1)


Op = Produce | Fetch | ListOffsets | DeleteRecords

records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=6)),
                             st.sampled_from([0, 1, 10, 200]), st.integers(-3, 3)),
                   min_size=1, max_size=5).map(tuple)
operations = st.lists(st.one_of(
    st.builds(Produce, st.integers(0, 2), records, st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
              st.booleans()),
    st.builds(Fetch, st.integers(0, 1000)),
    st.builds(ListOffsets, st.one_of(st.sampled_from([EARLIEST, LATEST, MAX_TIMESTAMP]),
                                     st.integers(-4, 4).map(lambda k: 100 + k))),
    st.builds(DeleteRecords, st.integers(0, 1000)),
), min_size=1, max_size=12).filter(lambda ops: any(isinstance(o, Produce) for o in ops))


# --- one topic on one broker --------------------------------------------------------------


Seen = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


@dataclass
class Target:
    """A topic on a broker, with the producers' state there."""

    client: WireClient
    topic: str
    producers: dict[int, tuple[int, int]] = field(default_factory=dict)  # id, epoch
    sequences: dict[int, int] = field(default_factory=dict)  # next base sequence

    def init_producer(self, index: int) -> None:
        cls = load_request_schema(22, 4)
        for _ in range(120):  # Kafka's coordinators load for a while after it starts
            response = self.client.request(make(cls, transactional_id=None,
                                                transaction_timeout=datetime.timedelta(seconds=60),
                                                producer_id=-1, producer_epoch=-1))
            if response.error_code.value not in RETRIABLE:
                break
            time.sleep(0.5)
        assert response.error_code.value == 0, response
        self.producers[index] = int(response.producer_id), int(response.producer_epoch)
        self.sequences[index] = 0

    def produce(self, op: Produce, base_ms: int) -> list[tuple[int, int, int]]:
        """The batch (once, or twice): per send, (error, base offset, log start)."""
        batch = [Record(base_ms + step * STEP_MS, key, bytes([65 + i % 26]) * size, [])
                 for i, (key, size, step) in enumerate(op.records)]
        if op.producer:
            if op.producer not in self.producers:
                self.init_producer(op.producer)
            pid, epoch = self.producers[op.producer]
            raw = build_batch(batch, compression=op.compression, producer_id=pid,
                              producer_epoch=epoch, base_sequence=self.sequences[op.producer])
            self.sequences[op.producer] += len(batch)
        else:
            raw = build_batch(batch, compression=op.compression)
        answers = []
        for _ in range(2 if op.twice else 1):
            response = self.client.request(produce_request(self.topic, {0: raw}))
            part = response.responses[0].partition_responses[0]
            answers.append((part.error_code.value, int(part.base_offset),
                            int(part.log_start_offset)))
        return answers

    def fetch(self, offset: int) -> tuple[int, int, int, list[Seen]]:
        """A consumer's view of a fetch from ``offset``: (error, high watermark, log start,
        the records from ``offset`` on, fetched on until the high watermark)."""
        seen: list[Seen] = []
        first: tuple[int, int, int] | None = None
        position = offset
        for _ in range(50):
            part = self.client.request(fetch_request(self.topic, 0, position)).responses[0] \
                .partitions[0]
            error = part.error_code.value
            # With an error Kafka answers -1 for both bounds, Korvet the partition's bounds
            # (a deliberate difference: docs/conformance.md); the error is compared.
            answer = (error, -1, -1) if error else (error, int(part.high_watermark),
                                                    int(part.log_start_offset))
            first = first or answer
            got = [r for r in _records(part.records) if r[0] >= position]
            seen.extend(got)
            if answer[0] or not got or got[-1][0] + 1 >= answer[1]:
                break
            position = got[-1][0] + 1
        assert first is not None
        return (*first, seen)

    def list_offsets(self, stamp: int) -> tuple[int, int, int]:
        cls = load_request_schema(2, 7)
        part = make(nested(cls, "ListOffsetsPartition"), partition_index=0,
                    current_leader_epoch=-1, timestamp=stamp)
        response = self.client.request(make(cls, replica_id=-1, isolation_level=0, topics=(
            make(nested(cls, "ListOffsetsTopic"), name=self.topic, partitions=(part,)),)))
        result = response.topics[0].partitions[0]
        return result.error_code.value, int(result.offset), int(result.timestamp)

    def delete_records(self, offset: int) -> tuple[int, int]:
        cls = load_request_schema(21, 2)
        response = self.client.request(make(cls, timeout=30_000, topics=(make(
            nested(cls, "DeleteRecordsTopic"), name=self.topic, partitions=(
                make(nested(cls, "DeleteRecordsPartition"), partition_index=0, offset=offset),)),)))
        result = response.topics[0].partitions[0]
        return result.error_code.value, int(result.low_watermark)


def _records(data: bytes | None) -> list[Seen]:
    from aiokafka.record._crecords import DefaultRecordBatch

    raw = bytes(data or b"")
    found: list[Seen] = []
    while len(raw) >= 12:
        length = int.from_bytes(raw[8:12], "big")
        if len(raw) < 12 + length:
            break  # a partial batch at the end of the response
        found.extend((r.offset, r.key, r.value, r.timestamp)
                     for r in DefaultRecordBatch(raw[:12 + length]))
        raw = raw[12 + length:]
    return found


def _create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, config=configs)])[topic].result(30)


# --- running a sequence -----------------------------------------------------------------


def _offset(pick: int, start: int, hw: int) -> int:
    """An offset from one below the log start to one past the high watermark."""
    return start - 1 + pick % (hw - start + 3)


class Run:
    """One sequence on Kafka (the oracle), on dense Korvet topics of both formats, and on a
    time Korvet topic."""

    def __init__(self, kafka: KafkaServer, korvet: KorvetProcess, name: str) -> None:
        self.kafka = Target(WireClient(kafka.bootstrap), name)
        self.dense = [Target(WireClient(korvet.bootstrap), f"{name}-{f}") for f in ("r", "b")]
        self.time = Target(WireClient(korvet.bootstrap), f"{name}-t")
        _create(kafka.bootstrap, name, {})
        for target, storage in zip(self.dense, ("records", "batches"), strict=True):
            _create(korvet.bootstrap, target.topic, {"korvet.offset.scheme": "dense",
                                                     "korvet.storage.format": storage})
        _create(korvet.bootstrap, self.time.topic, {"korvet.offset.scheme": "time"})
        self.base_ms = int(time.time() * 1000)
        self.time_offsets: list[int] = []  # the time topic's offset of each dense offset
        self.log: list[str] = []

    def close(self) -> None:
        for target in (self.kafka, *self.dense, self.time):
            target.client.close()

    def bounds(self) -> tuple[int, int]:
        start, hw = self.kafka.list_offsets(EARLIEST)[1], self.kafka.list_offsets(LATEST)[1]
        return start, hw

    def time_offset(self, offset: int) -> int:
        """The time topic's offset for a dense offset (past the end as far past its end)."""
        if 0 <= offset < len(self.time_offsets):
            return self.time_offsets[offset]
        end = self.time.list_offsets(LATEST)[1]
        return end + (offset - len(self.time_offsets)) if offset >= 0 else offset

    def dense_offset(self, offset: int) -> int:
        """The dense offset of a time topic's offset: the dense offset of the first record at
        or after it (a time topic's log start may lie below its first record)."""
        return bisect.bisect_left(self.time_offsets, offset) if offset >= 0 else offset

    def max_timestamp_from(self, start: int) -> tuple[int, int, int]:
        """MAX_TIMESTAMP among the records at or after the log start: Kafka answers from its
        segment's largest timestamp, which DeleteRecords leaves in place, so it may name a
        record below the log start; Korvet names the first record still in the log with the
        largest timestamp (a deliberate difference: docs/conformance.md)."""
        left = self.kafka.fetch(start)[3]
        if not left:
            return 0, -1, -1
        best = max(r[3] for r in left)
        return 0, next(r[0] for r in left if r[3] == best), best

    def same(self, what: str, kafka: object, korvet: object) -> None:
        assert korvet == kafka, (f"{what}: Korvet answered {korvet!r}, Kafka {kafka!r}; the "
                                 "sequence so far:\n" + "\n".join(self.log))

    def apply(self, op: Op) -> None:
        start, hw = self.bounds()
        self.log.append(f"{op} (log start {start}, high watermark {hw})")
        if isinstance(op, Produce):
            want = self.kafka.produce(op, self.base_ms)
            for target in self.dense:
                self.same(f"Produce on {target.topic}", want, target.produce(op, self.base_ms))
            timed = self.time.produce(op, self.base_ms)
            self.same("Produce's errors on the time topic", [w[0] for w in want],
                      [t[0] for t in timed])
            for (error, base, _), (_, time_base, _) in zip(want, timed, strict=True):
                if error == 0 and base == len(self.time_offsets):  # not a duplicate
                    self.time_offsets.extend(time_base + i for i in range(len(op.records)))
        elif isinstance(op, Fetch):
            offset = _offset(op.pick, start, hw)
            fetched = self.kafka.fetch(offset)
            for target in self.dense:
                self.same(f"Fetch at {offset} on {target.topic}", fetched, target.fetch(offset))
            error, _, _, seen = self.time.fetch(self.time_offset(offset))
            self.same(f"Fetch at {offset} on the time topic (error, records)",
                      (fetched[0], [r[1:] for r in fetched[3]]), (error, [r[1:] for r in seen]))
        elif isinstance(op, ListOffsets):
            stamp = op.stamp if op.stamp < 0 else self.base_ms + (op.stamp - 100) * STEP_MS
            answer = self.kafka.list_offsets(stamp)
            if stamp == MAX_TIMESTAMP and 0 <= answer[1] < start:
                answer = self.max_timestamp_from(start)
            for target in self.dense:
                self.same(f"ListOffsets({stamp}) on {target.topic}", answer,
                          target.list_offsets(stamp))
            error, found, found_ms = self.time.list_offsets(stamp)
            self.same(f"ListOffsets({stamp}) on the time topic", answer,
                      (error, self.dense_offset(found), found_ms))
        else:
            offset = -1 if op.pick == 0 else _offset(op.pick, start, hw)
            deleted = self.kafka.delete_records(offset)
            for target in self.dense:
                self.same(f"DeleteRecords({offset}) on {target.topic}", deleted,
                          target.delete_records(offset))
            error, low = self.time.delete_records(offset if offset == -1
                                                  else self.time_offset(offset))
            self.same(f"DeleteRecords({offset}) on the time topic", deleted,
                      (error, self.dense_offset(low) if low >= 0 else low))

    def finish(self) -> None:
        """Every topic holds the same records, in the same order, from its log start."""
        start, _ = self.bounds()
        whole = self.kafka.fetch(start)
        for target in self.dense:
            self.same(f"the records of {target.topic}", whole, target.fetch(start))
        self.same("the records of the time topic", [r[1:] for r in whole[3]],
                  [r[1:] for r in self.time.fetch(self.time_offset(start))[3]])


_count = iter(range(1_000_000))


@settings(max_examples=examples(0.5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=operations)
def test_dense_topics_answer_as_kafka(kafka: KafkaServer, korvet: KorvetProcess,
                                      unique_name: str, ops: Sequence[Op]) -> None:
    run = Run(kafka, korvet, f"{unique_name[:40]}-{next(_count)}")
    try:
        for op in ops:
            run.apply(op)
        run.finish()
    finally:
        run.close()
