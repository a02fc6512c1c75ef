"""Jepsen-style histories: concurrent producers and consumers, checked for anomalies.

Each check runs a small concurrent workload, records every acknowledged send and every
polled record in a ``History`` and runs ``history.analyse`` on it (lost writes,
duplicates, inconsistent offsets, non-monotonic sends and polls, poll skips; after
draining, unseen writes). Values are unique, so a value seen twice at different
offsets is a duplicate write, not a redelivery.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import error_name
from korvet.conformance.kafka.ops import EARLIEST, Ops, Topic
from korvet.conformance.kafka.records import Rec, build_batch
from korvet.conformance.modes.history import History, Send, analyse
from korvet.core.errors import ErrorCode

API = "Jepsen-style histories"
JEPSEN = "Jepsen Kafka workload (jepsen.tests.kafka: lost-write, duplicate, inconsistent-offsets, " \
         "nonmonotonic-send/poll, poll-skip, unseen); anchors §5.1"


def _run_threads(targets: list[Callable[[], None]], timeout: float = 60.0) -> None:
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported after join
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise CheckFailed(f"workload threads still running after {timeout:.0f} s")
    if errors:
        raise CheckFailed(f"a workload thread failed: {type(errors[0]).__name__}: {errors[0]}")


def _verdict(ctx: CheckContext, history: History, *, drained: bool, allowed: tuple[str, ...] = ()) -> None:
    analysis = analyse(history, drained=drained)
    ctx.note("stats", analysis.stats)
    found = analysis.found(allowed)
    if found:
        raise CheckFailed(f"anomalies: {analysis.summary(allowed)}", anomalies=found)
    expect(analysis.stats["acknowledged"] > 0, "no send was acknowledged")


class _RawReader:
    """A consumer in assign mode on the raw wire: fetches every partition from EARLIEST."""

    def __init__(self, ctx: CheckContext, topic: Topic, name: str, history: History) -> None:
        self.ops = Ops(ctx)
        self.topic = topic
        self.name = name
        self.history = history
        self.positions = {p: self.ops.offset_of(topic, p, EARLIEST) for p in range(topic.partitions)}
        history.assign(name)
        self.seen: set[str] = set()

    def poll_once(self) -> None:
        parts = [(self.topic, p, o) for p, o in self.positions.items()]
        _, results = self.ops.fetch_many(parts, max_wait_ms=200, min_bytes=1)
        for partition, result in enumerate(results):
            if result.error != ErrorCode.NONE:
                raise CheckFailed(f"{self.name}: Fetch of partition {partition} at offset "
                                  f"{self.positions[partition]} (after reading "
                                  f"{len(self.seen)} records) answered {error_name(result.error)}; "
                                  f"high watermark {result.high_watermark}")
            fresh = [r for r in result.records if r.offset >= self.positions[partition]]
            if fresh:
                where = (self.topic.name, partition)
                self.history.poll(self.name, [(where, r.offset, (r.value or b"").decode()) for r in fresh])
                self.seen.update((r.value or b"").decode() for r in fresh)
                self.positions[partition] = fresh[-1].offset + 1


@check("history.raw_producers_and_readers", api=API, timeout=120,
       asserts="Three producers appending concurrently (acks=all, one record per request) to two "
               "partitions while two readers fetch them: no lost, duplicated or inconsistent writes, "
               "each producer's offsets increase, readers never go backwards or skip, and after "
               "draining every acknowledged record was read by both readers.",
       source=JEPSEN)
def raw_producers(ctx: CheckContext) -> None:
    setup = Ops(ctx)
    topic = setup.create_topic(partitions=2)
    history = History()
    per_producer = 40
    done = threading.Event()
    readers = [_RawReader(ctx, topic, f"reader-{i}", history) for i in range(2)]

    def producer(index: int) -> Callable[[], None]:
        def run() -> None:
            ops = Ops(ctx)
            for n in range(per_producer):
                value = f"p{index}-{n}"
                partition = n % 2
                result = ops.produce(topic, partition, [Rec(value.encode())])
                history.send(f"producer-{index}", (topic.name, partition), value,
                             result.base_offset if result.error == ErrorCode.NONE else None)
        return run

    def reader(r: _RawReader) -> Callable[[], None]:
        def run() -> None:
            deadline = None
            while True:
                r.poll_once()
                if done.is_set():
                    deadline = deadline or time.monotonic() + 20
                    acked = {s.value for s in history.ops if isinstance(s, Send) and s.offset is not None}
                    if acked <= r.seen or time.monotonic() > deadline:
                        return
        return run

    producers = [producer(i) for i in range(3)]

    def all_producers() -> None:
        try:
            _run_threads(producers)
        finally:
            done.set()

    _run_threads([all_producers, *[reader(r) for r in readers]], timeout=100)
    _verdict(ctx, history, drained=True)


@check("history.idempotent_retries_not_duplicated", slow=True, api=API, timeout=120,
       asserts="Two idempotent producers that send every batch twice (a retry after a lost answer, "
               "same producer id and sequence) concurrently: each value is stored once, at the offset "
               "the first send got, with no other anomaly.",
       source=f"{JEPSEN}; KIP-98 (idempotent producer)")
def idempotent_retries(ctx: CheckContext) -> None:
    setup = Ops(ctx)
    topic = setup.create_topic(partitions=2)
    history = History()

    def producer(index: int) -> Callable[[], None]:
        def run() -> None:
            ops = Ops(ctx)
            response = ops.init_producer_id()
            if int(response.error_code) != ErrorCode.NONE:
                raise CheckFailed(f"InitProducerId answered {int(response.error_code)}")
            pid, epoch = int(response.producer_id), int(response.producer_epoch)
            sequences = {0: 0, 1: 0}
            for n in range(30):
                partition = n % 2
                value = f"i{index}-{n}"
                batch = build_batch([Rec(value.encode())], producer_id=pid, producer_epoch=epoch,
                                    base_sequence=sequences[partition])
                sequences[partition] += 1
                first = ops.produce(topic, partition, batch)
                retry = ops.produce(topic, partition, batch)
                for result in (first, retry):
                    history.send(f"idempotent-{index}", (topic.name, partition), value,
                                 result.base_offset if result.error == ErrorCode.NONE else None)
        return run

    _run_threads([producer(0), producer(1)])
    reader = _RawReader(ctx, topic, "reader", history)
    for _ in range(20):
        reader.poll_once()
    # A retry acknowledged with the original offset is the same write, not a non-monotonic send.
    _verdict(ctx, history, drained=True, allowed=("nonmonotonic_send",))
    analysis = analyse(history)
    repeated = [c for c in analysis.anomalies["nonmonotonic_send"] if c["earlier"] != c["later"]]
    expect(not repeated, f"a retry was acknowledged at another offset: {repeated[:3]}")


@check("history.confluent_group_consumers", slow=True, api=API, group_protocol=True, timeout=150,
       asserts="Two idempotent librdkafka producers and two consumers in one group (the second joins "
               "mid-run, forcing a rebalance; commits after every poll): no lost, duplicated or "
               "inconsistent writes, no non-monotonic sends, consumers never go backwards or skip "
               "within an assignment, and every acknowledged record is consumed by the end.",
       source=f"{JEPSEN} (subscribe mode: order is only checked within an assignment)")
def confluent_group(ctx: CheckContext) -> None:  # noqa: C901, PLR0915 -- one scripted scenario, step by step
    from korvet.conformance.harness.drivers import confluent_consumer, confluent_producer

    setup = Ops(ctx)
    topic = setup.create_topic(partitions=3)
    group = ctx.name("g")
    history = History()
    done = threading.Event()
    seen: set[str] = set()
    lock = threading.Lock()

    def producer(index: int) -> Callable[[], None]:
        def run() -> None:
            p = confluent_producer(ctx, enable_idempotence=True, acks="all", linger_ms=5)
            for n in range(60):
                value = f"c{index}-{n}"

                def report(err: Any, msg: Any, value: str = value) -> None:
                    offset = None if err is not None else int(msg.offset())
                    partition = int(msg.partition()) if err is None else -1
                    history.send(f"producer-{index}", (topic.name, partition), value, offset)

                p.produce(topic.name, value=value.encode(), key=f"k{n % 7}".encode(), on_delivery=report)
                p.poll(0)
                time.sleep(0.01)
            if p.flush(30):
                raise CheckFailed("librdkafka producer did not deliver everything in 30 s")
        return run

    def consumer(name: str, delay: float) -> Callable[[], None]:
        def run() -> None:
            time.sleep(delay)
            c = confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False, session_timeout_ms=10_000,
                                   heartbeat_interval_ms=500)

            def on_assign(_: Any, partitions: Any) -> None:
                history.assign(name, [(tp.topic, tp.partition) for tp in partitions])

            c.subscribe([topic.name], on_assign=on_assign, on_revoke=on_assign)
            deadline = None
            while True:
                msgs = c.consume(num_messages=50, timeout=0.5)
                records = [((m.topic(), m.partition()), m.offset(), (m.value() or b"").decode())
                           for m in msgs if not m.error()]
                if records:
                    history.poll(name, records)
                    with lock:
                        seen.update(r[2] for r in records)
                    c.commit(asynchronous=False)
                if done.is_set():
                    deadline = deadline or time.monotonic() + 30
                    acked = {s.value for s in history.ops if isinstance(s, Send) and s.offset is not None}
                    with lock:
                        complete = acked <= seen
                    if complete or time.monotonic() > deadline:
                        return
        return run

    def producers() -> None:
        try:
            _run_threads([producer(0), producer(1)])
        finally:
            done.set()

    _run_threads([producers, consumer("consumer-a", 0.0), consumer("consumer-b", 2.0)], timeout=130)
    _verdict(ctx, history, drained=True)


@check("history.consumer_crash_resumes_from_commit", api=API, group_protocol=True, timeout=120,
       asserts="A group consumer (kafka-python) that reads part of a partition, commits, reads more and "
               "then crashes without committing is replaced by a new consumer in the same group that "
               "starts exactly at the last committed offset: records after the commit are read again, "
               "none is lost.",
       source=f"{JEPSEN} (the committed offset is for the next owner of the partition)")
def crash_resume(ctx: CheckContext) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    from korvet.conformance.harness.drivers import kafka_python_consumer, kafka_python_poll

    ops = Ops(ctx)
    topic = ops.create_topic()
    history = History()
    for n in range(40):
        value = f"v{n}"
        history.send("producer", (topic.name, 0), value, ops.produce_ok(topic, 0, [Rec(value.encode())]))
    group = ctx.name("g")
    tp = TopicPartition(topic.name, 0)
    first = kafka_python_consumer(ctx, topic.name, group_id=group, auto_offset_reset="earliest",
                                  enable_auto_commit=False, max_poll_records=10)
    records = kafka_python_poll(first, 25)
    expect(len(records) >= 25, f"the first consumer read only {len(records)} records")
    history.poll("consumer-1", [((topic.name, 0), r.offset, r.value.decode()) for r in records[:25]])
    commit_at = records[15].offset
    first.commit({tp: OffsetAndMetadata(commit_at, "", -1)})
    first.close(autocommit=False)  # the crash: what it read after the commit is not committed
    second = kafka_python_consumer(ctx, topic.name, group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False)
    history.assign("consumer-2")
    rest = kafka_python_poll(second, 40 - 15)
    expect(bool(rest), "the second consumer read nothing")
    ctx.note("committed_at", commit_at)
    ctx.note("second_consumer_starts_at", rest[0].offset)
    expect(rest[0].offset == commit_at, f"the second consumer started at {rest[0].offset}, not at the "
                                        f"committed offset {commit_at}")
    history.poll("consumer-2", [((topic.name, 0), r.offset, r.value.decode()) for r in rest])
    _verdict(ctx, history, drained=True)


@check("history.aiokafka_concurrent_sends", api=API, timeout=120,
       asserts="An aiokafka producer with many sends in flight to two partitions and an aiokafka "
               "consumer reading them (no group): no lost, duplicated or inconsistent writes, "
               "per-partition send order kept, and everything acknowledged is read.",
       source=JEPSEN)
def aiokafka_sends(ctx: CheckContext) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    from korvet.conformance.harness.drivers import run_async

    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    history = History()

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, acks="all", linger_ms=2)
        try:
            await producer.start()
            futures = []
            for n in range(200):
                value = f"a{n}"
                future = await producer.send(topic.name, value.encode(), partition=n % 2)
                futures.append((value, n % 2, future))
            for value, partition, future in futures:
                try:
                    meta = await future
                    history.send("aio-producer", (topic.name, partition), value, int(meta.offset))
                except Exception:
                    history.send("aio-producer", (topic.name, partition), value, None)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=ctx.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        try:
            await consumer.start()
            parts = [TopicPartition(topic.name, p) for p in range(2)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            history.assign("aio-consumer")
            got = 0
            deadline = asyncio.get_running_loop().time() + 30
            while got < 200 and asyncio.get_running_loop().time() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, msgs in batch.items():
                    history.poll("aio-consumer", [((tp.topic, tp.partition), m.offset, m.value.decode())
                                                  for m in msgs])
                    got += len(msgs)
        finally:
            await consumer.stop()

    run_async(ctx, scenario, timeout=90)
    _verdict(ctx, history, drained=True)
