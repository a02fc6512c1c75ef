"""Real clients end to end: librdkafka (confluent-kafka), kafka-python, aiokafka, kcat, Java tools."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, wait_until
from korvet.conformance.harness.drivers import (
    confluent_config,
    confluent_consumer,
    confluent_poll,
    confluent_produce,
    confluent_transaction,
    java_tools,
    kafka_python_consumer,
    kafka_python_poll,
    kafka_python_producer,
    kcat,
    run_async,
)
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import committed, describe_group
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.records import Rec, now_ms

API = "Clients"
LIBRDKAFKA = "librdkafka (confluent-kafka 2.16) against the Kafka protocol"


def _assigned(ctx: CheckContext, topic: str, partitions: int = 1, **extra: object) -> object:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = confluent_consumer(ctx, group_id=ctx.name("g"), enable_auto_commit=False, **extra)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer


@check("clients.librdkafka.produce_consume_keys_headers", api=API,
       asserts="confluent-kafka produces 20 keyed records with headers (acks=all) and an assigned "
               "consumer reads them back with the same keys, values, headers and the offsets the "
               "delivery reports gave.",
       source=LIBRDKAFKA)
def librdkafka_roundtrip(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    items = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    reports = confluent_produce(ctx, topic.name, items, headers=[("h", b"1"), ("trace", b"x")], acks="all")
    consumer = _assigned(ctx, topic.name)
    got = confluent_poll(consumer, 20)
    expect_eq([(m.key(), m.value()) for m in got], items, "(key, value) read back")
    expect_eq([m.offset() for m in got], [o for _, o in reports], "offsets vs delivery reports")
    expect_eq({tuple(m.headers() or []) for m in got}, {(("h", b"1"), ("trace", b"x"))}, "headers")


@check("clients.librdkafka.compression_codecs", api=API,
       asserts="confluent-kafka producers with compression.type gzip, snappy, lz4 and zstd each deliver "
               "records that a consumer reads back unchanged.",
       source=f"{LIBRDKAFKA}; KIP-110")
def librdkafka_compression(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expected = []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        items = [(None, f"{codec}-{i}-{'y' * 300}".encode()) for i in range(10)]
        confluent_produce(ctx, topic.name, items, compression_type=codec, linger_ms=20)
        expected += [v for _, v in items]
    got = confluent_poll(_assigned(ctx, topic.name), len(expected))
    expect_eq([m.value() for m in got], expected, "values read back")


@check("clients.librdkafka.idempotent_order", api=API,
       asserts="An idempotent confluent-kafka producer (enable.idempotence, 5 requests in flight) "
               "delivers 500 records to one partition in order, each exactly once.",
       source=f"{LIBRDKAFKA}; KIP-98")
def librdkafka_idempotent(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    items = [(None, f"{i:04d}".encode()) for i in range(500)]
    confluent_produce(ctx, topic.name, items, partition=0, enable_idempotence=True,
                      max_in_flight_requests_per_connection=5, linger_ms=1, batch_num_messages=20)
    got = confluent_poll(_assigned(ctx, topic.name), 500)
    expect_eq([m.value() for m in got], [v for _, v in items], "values in order")


@check("clients.librdkafka.admin_topics", api=API,
       asserts="confluent-kafka's AdminClient creates a 3-partition topic, lists it, describes its "
               "configs, adds partitions and deletes it, each call succeeding.",
       source=f"{LIBRDKAFKA}; KIP-4, KIP-195")
def librdkafka_admin(ctx: CheckContext) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    admin = AdminClient(confluent_config(ctx))
    name = ctx.name("t")
    for future in admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)]).values():
        future.result(30)
    wait_until(lambda: name in admin.list_topics(timeout=10).topics, 15, "the new topic listed")
    expect_eq(len(admin.list_topics(topic=name, timeout=10).topics[name].partitions), 3, "partitions listed")
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(30)
    expect("retention.ms" in configs, "describe_configs has no retention.ms")
    for future in admin.create_partitions([NewPartitions(name, 5)]).values():
        future.result(30)
    wait_until(lambda: len(admin.list_topics(topic=name, timeout=10).topics[name].partitions) == 5, 15,
               "5 partitions listed")
    for future in admin.delete_topics([name]).values():
        future.result(30)


@check("clients.librdkafka.offsets_for_times", api=API,
       asserts="confluent-kafka's offsets_for_times returns, for a timestamp between two records, the "
               "offset of the later one.",
       source=f"{LIBRDKAFKA}; KIP-79")
def librdkafka_offsets_for_times(ctx: CheckContext) -> None:
    from confluent_kafka import TopicPartition

    ops = Ops(ctx)
    topic = ops.create_topic()
    base = now_ms() - 100_000
    offsets = [ops.produce_ok(topic, 0, [Rec(f"t{i}".encode(), timestamp=base + i * 1000)]) for i in range(4)]
    consumer = confluent_consumer(ctx, group_id=ctx.name("g"))
    found = consumer.offsets_for_times([TopicPartition(topic.name, 0, base + 1500)], timeout=20)
    expect_eq(found[0].offset, offsets[2], "offset for a timestamp between records 1 and 2")


@check("clients.librdkafka.transactions_read_committed", api=API,
       asserts="With a transactional confluent-kafka producer, a read_committed consumer sees the "
               "committed transaction's records and not the aborted one's.",
       source=f"{LIBRDKAFKA}; KIP-98")
def librdkafka_transactions(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    confluent_transaction(ctx, topic.name, [b"kept-1", b"kept-2"], commit=True)
    confluent_transaction(ctx, topic.name, [b"dropped"], commit=False)
    confluent_transaction(ctx, topic.name, [b"kept-3"], commit=True)
    got = confluent_poll(_assigned(ctx, topic.name, isolation_level="read_committed"), 3)
    expect_eq([m.value() for m in got], [b"kept-1", b"kept-2", b"kept-3"], "read_committed values")


@check("clients.librdkafka.cooperative_sticky_group", slow=True, api=API, group_protocol=True, timeout=120,
       asserts="Two confluent-kafka consumers with partition.assignment.strategy=cooperative-sticky "
               "share a 4-partition topic (each gets partitions, no partition twice) and together read "
               "every record.",
       source=f"{LIBRDKAFKA}; KIP-429 (incremental cooperative rebalancing over the classic protocol)")
def cooperative(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=4)
    for p in range(4):
        ops.produce_ok(topic, p, [Rec(f"p{p}-{i}".encode()) for i in range(5)])
    group = ctx.name("g")
    consumers = [confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest",
                                    partition_assignment_strategy="cooperative-sticky",
                                    enable_auto_commit=False) for _ in range(2)]
    for c in consumers:
        c.subscribe([topic.name])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(num_messages=50, timeout=0.3):
                if not m.error():
                    values.append(m.value())
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        if len(set(values)) == 20 and all(owned) and not owned[0] & owned[1]:
            break
    owned = [{tp.partition for tp in c.assignment()} for c in consumers]
    ctx.note("assignments", [sorted(o) for o in owned])
    expect(all(owned) and not owned[0] & owned[1], f"assignments {owned} are not a split")
    expect_eq(len(set(values)), 20, "distinct records read")


@check("clients.kafka_python.produce_consume", api=API,
       asserts="kafka-python produces 20 records (acks=all) and an assigned consumer reads them back in "
               "order with the offsets the producer was told.",
       source="kafka-python 3.0 against the Kafka protocol")
def kafka_python_roundtrip(ctx: CheckContext) -> None:
    from kafka import TopicPartition

    ops = Ops(ctx)
    topic = ops.create_topic()
    producer = kafka_python_producer(ctx, acks="all")
    futures = [producer.send(topic.name, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
               for i in range(20)]
    metas = [f.get(timeout=30) for f in futures]
    consumer = kafka_python_consumer(ctx, enable_auto_commit=False)
    tp = TopicPartition(topic.name, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = kafka_python_poll(consumer, 20)
    expect_eq([(r.key, r.value) for r in got], [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)],
              "records read back")
    expect_eq([r.offset for r in got], [m.offset for m in metas], "offsets vs producer metadata")


@check("clients.kafka_python.group_splits_partitions", api=API, group_protocol=True, timeout=120,
       asserts="Two kafka-python consumers in one group on a 2-partition topic end up with one partition "
               "each and together read every record once.",
       source="kafka-python 3.0 (range assignor over the classic group protocol)")
def kafka_python_group(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    for p in range(2):
        ops.produce_ok(topic, p, [Rec(f"p{p}-{i}".encode()) for i in range(10)])
    group = ctx.name("g")
    consumers = [kafka_python_consumer(ctx, topic.name, group_id=group, auto_offset_reset="earliest",
                                       enable_auto_commit=True, auto_commit_interval_ms=500,
                                       heartbeat_interval_ms=500) for _ in range(2)]
    values: list[bytes] = []
    errors: list[BaseException] = []
    settled = threading.Event()
    lock = threading.Lock()

    def drive(consumer: Any) -> None:
        # Each consumer polls in its own thread, as applications do: a poll blocks while its
        # consumer re-joins, and the other must keep polling to re-join the same rebalance.
        deadline = time.monotonic() + 60
        try:
            while not settled.is_set() and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    with lock:
                        values.extend(r.value for r in records)
                with lock:
                    sizes = [len(c.assignment()) for c in consumers]
                    if len(values) >= 20 and sizes == [1, 1]:
                        settled.set()
        except Exception as exc:  # reported by the check
            errors.append(exc)
            settled.set()

    threads = [threading.Thread(target=drive, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(70)
    if errors:
        raise CheckFailed(f"a kafka-python consumer failed: {type(errors[0]).__name__}: {errors[0]}")
    ctx.note("assignment_sizes", [len(c.assignment()) for c in consumers])
    described = describe_group(ops, group)
    ctx.note("group", {"state": described.group_state,
                       "members": [(m.client_id, m.member_id) for m in described.members]})
    expect_eq(sorted(len(c.assignment()) for c in consumers), [1, 1], "partitions per consumer")
    expect_eq(sorted(set(values)), sorted(f"p{p}-{i}".encode() for p in range(2) for i in range(10)),
              "records read by the group")


@check("clients.kafka_python.admin", api=API,
       asserts="kafka-python's KafkaAdminClient creates a topic with a config, describes the config "
               "back and lists the topic.",
       source="kafka-python 3.0 KafkaAdminClient (CreateTopics, DescribeConfigs, Metadata)")
def kafka_python_admin(ctx: CheckContext) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=ctx.bootstrap, client_id=f"korvet-conformance-{ctx.run_id}")
    ctx.on_close(admin.close)
    name = ctx.name("t")
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1,
                                  topic_configs={"retention.ms": "86400000"})])
    wait_until(lambda: name in admin.list_topics(), 15, "the new topic listed")
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name, ["retention.ms"])])
    text = json.dumps(described, default=str)
    ctx.note("describe_configs", text[:500])
    expect("86400000" in text, "describe_configs does not show retention.ms=86400000")


@check("clients.aiokafka.group_commit", api=API, group_protocol=True, timeout=120,
       asserts="An aiokafka consumer in a group reads 15 records and commits; OffsetFetch then returns "
               "the offset after the last record.",
       source="aiokafka 0.14 (classic group protocol, OffsetCommit)")
def aiokafka_group(ctx: CheckContext) -> None:
    from aiokafka import AIOKafkaConsumer

    ops = Ops(ctx)
    topic = ops.create_topic()
    offsets = [ops.produce_ok(topic, 0, [Rec(f"a{i}".encode())]) for i in range(15)]
    group = ctx.name("g")

    async def scenario() -> list[int]:
        consumer = AIOKafkaConsumer(topic.name, bootstrap_servers=ctx.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            await consumer.start()
            seen: list[int] = []
            while len(seen) < 15:
                batch = await consumer.getmany(timeout_ms=1000)
                for msgs in batch.values():
                    seen.extend(m.offset for m in msgs)
            await consumer.commit()
            return seen
        finally:
            await consumer.stop()

    seen = run_async(ctx, scenario, timeout=90)
    expect_eq(seen[:15], offsets, "offsets read")
    expect_eq(committed(ops, group, topic.name, 0).offset, offsets[-1] + 1, "committed offset")


@check("clients.kcat.produce_consume", api=API,
       asserts="kcat -P produces keyed lines and kcat -C -e reads them back (key, value, partition and "
               "offsets in its JSON envelope).",
       source="kcat (librdkafka) producer and consumer modes",
       requires="kcat on PATH; skipped otherwise")
def kcat_roundtrip(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    lines = b"".join(f"k{i}:v{i}\n".encode() for i in range(5))
    kcat(ctx, ["-P", "-t", topic.name, "-p", "0", "-K", ":"], input_bytes=lines)
    out = kcat(ctx, ["-C", "-t", topic.name, "-p", "0", "-o", "beginning", "-e", "-J"]).stdout
    records = [json.loads(line) for line in out.decode().splitlines() if line.strip().startswith("{")]
    expect_eq([(r["key"], r["payload"]) for r in records], [(f"k{i}", f"v{i}") for i in range(5)],
              "(key, value) read by kcat")
    expect_eq([r["offset"] for r in records], sorted(r["offset"] for r in records), "offset order")


@check("clients.kcat.metadata_lists_topic", api=API,
       asserts="kcat -L -J lists the broker and a topic with its partitions and leaders.",
       source="kcat metadata mode", requires="kcat on PATH; skipped otherwise")
def kcat_metadata(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=3)
    out = kcat(ctx, ["-L", "-J", "-t", topic.name]).stdout
    meta = json.loads(out)
    topics = {t["topic"]: t for t in meta.get("topics", [])}
    expect(topic.name in topics, "kcat does not list the topic")
    expect_eq(len(topics[topic.name]["partitions"]), 3, "partitions listed by kcat")
    expect(bool(meta.get("brokers")), "kcat lists no broker")


@check("clients.java.console_roundtrip", slow=True, api=API, group_protocol=True, timeout=150,
       asserts="Kafka's Java console producer (idempotent, acks=all) writes keyed records with headers "
               "and the Java console consumer (in a group) prints them back.",
       source="Apache Kafka 4.3 ConsoleProducer / ConsoleConsumer (the Java client)",
       requires="Java 17+ and the pinned Kafka jars (korvet jars fetch kafka); skipped otherwise")
def java_console(ctx: CheckContext) -> None:
    from korvet.jvm.java_clients import ProduceRecord

    tools = java_tools(ctx)
    ops = Ops(ctx)
    topic = ops.create_topic()
    sent = [ProduceRecord(value=f"value-{i}", key=f"key-{i}", headers=(("n", str(i)),)) for i in range(5)]
    tools.console_produce(topic.name, sent, properties={"acks": "all", "enable.idempotence": "true"})
    result = tools.console_consume(topic.name, max_messages=5, group=ctx.name("g"), idle_timeout_ms=20_000)
    got = [(r.key, r.value, r.headers) for r in result.records]
    expect_eq(got, [(r.key, r.value, r.headers) for r in sent], "records printed by the console consumer")


@check("clients.java.perf_roundtrip", slow=True, api=API, timeout=150,
       asserts="kafka-producer-perf-test sends 2000 records with acks=all and every record is then "
               "readable (LATEST - EARLIEST covers them and a fetch loop reads 2000).",
       source="Apache Kafka 4.3 ProducerPerformance",
       requires="Java 17+ and the pinned Kafka jars (korvet jars fetch kafka); skipped otherwise")
def java_perf(ctx: CheckContext) -> None:
    tools = java_tools(ctx)
    ops = Ops(ctx)
    topic = ops.create_topic()
    result = tools.producer_performance(topic.name, num_records=2000, record_size=100,
                                        properties={"acks": "all", "linger.ms": "5"})
    expect_eq(result.records, 2000, "records the perf tool reports sent")
    from korvet.conformance.kafka.ops import EARLIEST

    records = ops.read_all(topic, 0, ops.offset_of(topic, 0, EARLIEST), max_rounds=200)
    expect_eq(len(records), 2000, "records read back")


