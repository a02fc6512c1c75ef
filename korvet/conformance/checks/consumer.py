"""Consumer behaviour through real clients: positions, commits, resets."""

from __future__ import annotations

import time
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq
from korvet.conformance.harness.drivers import (
    confluent_consumer,
    confluent_poll,
    java_tools,
    kafka_python_consumer,
    kafka_python_poll,
)
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import committed
from korvet.conformance.kafka.ops import LATEST, Ops
from korvet.conformance.kafka.records import Rec

API = "Consumer (real clients)"
SEED = "Seed 004 (KafkaConsumer keeps its position in SubscriptionState; a failed commit does not move it)"


def _topic(ops: Ops, n: int, partitions: int = 1) -> tuple[str, list[int]]:
    topic = ops.create_topic(partitions=partitions)
    offsets = [ops.produce_ok(topic, 0, [Rec(f"m{i}".encode(), key=f"k{i}".encode())]) for i in range(n)]
    return topic.name, offsets


@check("consumer.librdkafka.failed_commit_does_not_rewind", api=API, group_protocol=True,
       asserts="A librdkafka consumer reads 5 records, its commit fails (metadata above "
               "offset.metadata.max.bytes), and its next poll returns records 5..9, not 0..4; the group "
               "has no committed offset, so a new consumer in the group starts over at 'earliest'.",
       source=SEED, requires="offset.metadata.max.bytes < 10000 (Kafka's default is 4096)")
def librdkafka_failed_commit(ctx: CheckContext) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    ops = Ops(ctx)
    topic, offsets = _topic(ops, 10)
    group = ctx.name("g")
    consumer = confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0, offsets[0])])
    first = confluent_poll(consumer, 5)
    expect_eq([m.value() for m in first[:5]], [f"m{i}".encode() for i in range(5)], "first five records")
    failed = False
    try:
        results = consumer.commit(offsets=[TopicPartition(topic, 0, offsets[5], metadata="x" * 10_000)],
                                  asynchronous=False)
        failed = any(tp.error is not None for tp in results or [])
    except KafkaException:
        failed = True
    expect(failed, "the commit with 10000 bytes of metadata did not fail")
    following = confluent_poll(consumer, 5)
    expect_eq([m.value() for m in following[:5]], [f"m{i}".encode() for i in range(5, 10)],
              "records polled after the failed commit")
    expect_eq(committed(ops, group, topic, 0).offset, -1, "committed offset after the failed commit")
    restarted = confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False)
    restarted.subscribe([topic])
    again = confluent_poll(restarted, 1)
    expect_eq([m.offset() for m in again[:1]], [offsets[0]], "first offset read by the next consumer")


@check("consumer.kafka_python.failed_commit_does_not_rewind", api=API, group_protocol=True,
       asserts="A kafka-python group consumer whose commit fails keeps its position: the next poll "
               "continues after the records it already returned, and the committed offset is the last "
               "successful one.",
       source=SEED, requires="offset.metadata.max.bytes < 10000 (Kafka's default is 4096)")
def kafka_python_failed_commit(ctx: CheckContext) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    ops = Ops(ctx)
    topic, offsets = _topic(ops, 12)
    group = ctx.name("g")
    consumer = kafka_python_consumer(ctx, topic, group_id=group, auto_offset_reset="earliest",
                                     enable_auto_commit=False, max_poll_records=4)
    tp = TopicPartition(topic, 0)
    batch = kafka_python_poll(consumer, 4)
    expect_eq([r.offset for r in batch[:4]], offsets[:4], "first four offsets")
    consumer.commit({tp: OffsetAndMetadata(offsets[4], "", -1)})
    try:
        consumer.commit({tp: OffsetAndMetadata(offsets[8], "x" * 10_000, -1)})
        failed = False
    except Exception:  # kafka-python raises its own error types for a refused commit
        failed = True
    expect(failed, "the commit with 10000 bytes of metadata did not fail")
    nxt = kafka_python_poll(consumer, 4)
    expect_eq([r.offset for r in nxt[:4]], offsets[4:8], "offsets polled after the failed commit")
    expect_eq(committed(ops, group, topic, 0).offset, offsets[4], "committed offset (last successful commit)")


@check("consumer.restart_resumes_at_commit", api=API, group_protocol=True,
       asserts="A librdkafka group consumer that commits after 7 of 10 records and closes is followed by "
               "a new consumer in the same group that reads exactly records 7, 8, 9.",
       source="Kafka consumer docs (committed position); KIP-62")
def restart_resumes(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _topic(ops, 10)
    group = ctx.name("g")
    first = confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    first.subscribe([topic])
    got = confluent_poll(first, 7)
    expect(len(got) >= 7, f"the first consumer read {len(got)} records")
    first.commit(message=got[6], asynchronous=False)
    first.close()
    second = confluent_consumer(ctx, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    second.subscribe([topic])
    rest = confluent_poll(second, 3)
    expect_eq([m.value() for m in rest], [b"m7", b"m8", b"m9"], "records read after the restart")


def _group_state(consumer: Any, topic: str) -> dict[str, str]:
    """What a kafka-python consumer without an assignment knows of its group (for the report)."""
    coordinator = getattr(consumer, "_coordinator", None)
    client = getattr(consumer, "_client", None)
    cluster = getattr(client, "cluster", None)
    return {
        "state": str(getattr(coordinator, "state", "?")),
        "coordinator_id": str(getattr(coordinator, "coordinator_id", "?")),
        "generation": str(getattr(coordinator, "_generation", "?")),
        "rejoin_needed": str(getattr(coordinator, "rejoin_needed", "?")),
        "partitions_known": str(cluster.partitions_for_topic(topic) if cluster is not None else "?"),
    }


@check("consumer.auto_offset_reset_latest", api=API, group_protocol=True,
       asserts="A new group consumer with auto.offset.reset=latest skips the records already in the "
               "partition and reads only those produced after it got its position.",
       source="Kafka consumer config auto.offset.reset; ListOffsets LATEST")
def reset_latest(ctx: CheckContext) -> None:
    from kafka import TopicPartition

    ops = Ops(ctx)
    topic, _ = _topic(ops, 5)
    consumer = kafka_python_consumer(ctx, topic, group_id=ctx.name("g"), auto_offset_reset="latest",
                                     enable_auto_commit=False)
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=200)
    if not consumer.assignment():
        ctx.note("kafka_python_group_state", _group_state(consumer, topic))
    expect(bool(consumer.assignment()), "the consumer got no assignment in 30 s")
    position = consumer.position(TopicPartition(topic, 0))
    expect_eq(position, ops.offset_of(topic, 0, LATEST), "position from auto.offset.reset=latest")
    ops.produce_ok(topic, 0, [Rec(b"new")])
    records = kafka_python_poll(consumer, 1)
    expect_eq([r.value for r in records], [b"new"], "records read")


@check("consumer.seek_back_rereads", api=API, group_protocol=True,
       asserts="A group consumer that has read and committed 10 records can seek back to the 3rd and "
               "reads records 3..10 again (the broker serves the position the client asks for, not the "
               "committed one).",
       source=f"{SEED}; Kafka consumer seek(); korvet.md §3.3 (seek after the first group fetch)")
def seek_back(ctx: CheckContext) -> None:
    from confluent_kafka import TopicPartition

    ops = Ops(ctx)
    topic, offsets = _topic(ops, 10)
    consumer = confluent_consumer(ctx, group_id=ctx.name("g"), auto_offset_reset="earliest",
                                  enable_auto_commit=False)
    consumer.subscribe([topic])
    got = confluent_poll(consumer, 10)
    expect_eq(len(got), 10, "records read")
    consumer.commit(message=got[-1], asynchronous=False)
    consumer.seek(TopicPartition(topic, 0, offsets[2]))
    again = confluent_poll(consumer, 8)
    expect_eq([m.offset() for m in again], offsets[2:], "offsets read after seeking back")


@check("consumer.group_tool_reports_committed_and_end", slow=True, api=API, group_protocol=True,
       asserts="kafka-consumer-groups --describe shows a group's committed offset as CURRENT-OFFSET "
               "and the partition's LATEST as LOG-END-OFFSET.",
       source="Kafka tool ConsumerGroupCommand (Admin listConsumerGroupOffsets + listOffsets)",
       requires="Java 17+ and the pinned Kafka jars (korvet jars fetch kafka); skipped otherwise")
def group_tool(ctx: CheckContext) -> None:
    tools = java_tools(ctx)
    ops = Ops(ctx)
    topic, offsets = _topic(ops, 10)
    group = ctx.name("g")
    from korvet.conformance.kafka.groups import commit_offset

    commit_offset(ops, group, topic, 0, offsets[4])
    rows = [r for r in tools.describe_group(group) if r.topic == topic]
    expect_eq(len(rows), 1, "rows for the topic")
    row = rows[0]
    expect_eq((row.current_offset, row.log_end_offset), (offsets[4], ops.offset_of(topic, 0, LATEST)),
              "(CURRENT-OFFSET, LOG-END-OFFSET)")


@check("consumer.lag_counts_records", slow=True, api=API, kafka_exact=True, group_protocol=True,
       asserts="After 10 records and a commit after the 4th, kafka-consumer-groups shows LAG 6 "
               "(LATEST - committed equals the number of unread records because offsets are dense).",
       source="Kafka tool ConsumerGroupCommand (lag = log end offset - committed offset)",
       requires="Java 17+ and the pinned Kafka jars (korvet jars fetch kafka); skipped otherwise")
def lag(ctx: CheckContext) -> None:
    tools = java_tools(ctx)
    ops = Ops(ctx)
    topic, offsets = _topic(ops, 10)
    group = ctx.name("g")
    from korvet.conformance.kafka.groups import commit_offset

    commit_offset(ops, group, topic, 0, offsets[4])
    rows = [r for r in tools.describe_group(group) if r.topic == topic]
    expect_eq([r.lag for r in rows], [6], "LAG")


