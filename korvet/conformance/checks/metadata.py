"""Metadata (key 3): brokers, topics, partitions and leaders."""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import error_name
from korvet.conformance.kafka.ops import ZERO_UUID, Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "Metadata (3)"
JSON = "MetadataRequest.json / MetadataResponse.json"



@check("metadata.brokers.bootstrap_listed", api=API,
       asserts="Metadata lists at least one broker, and the address the client bootstrapped from is "
               "one of the advertised brokers (or clients could not reconnect to it).",
       source=f"Kafka protocol guide, 'Metadata API'; {JSON}")
def bootstrap_listed(ctx: CheckContext) -> None:
    response = Ops(ctx).metadata([])
    brokers = {(b.host, int(b.port)) for b in response.brokers}
    ctx.note("brokers", sorted(f"{h}:{p}" for h, p in brokers))
    expect(bool(brokers), "Metadata lists no broker")
    expect(any(p == ctx.port for _, p in brokers),
           f"no advertised broker has the bootstrap port {ctx.port}")


@check("metadata.cluster_id_and_controller", api=API,
       asserts="Metadata v2+ carries a non-empty cluster id and a controller id that is one of the "
               "listed brokers (KRaft brokers name a live broker there).",
       source=f"KIP-78 (cluster id); {JSON}")
def cluster_id(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    response = ops.metadata([], version=ops.v(ApiKey.METADATA, lo=2))
    ctx.note("cluster_id", response.cluster_id)
    expect(bool(response.cluster_id), "Metadata has no cluster id")
    ids = {int(b.node_id) for b in response.brokers}
    expect(int(response.controller_id) in ids,
           f"controller id {int(response.controller_id)} is not a listed broker {sorted(ids)}")


@check("metadata.topics.null_lists_all", api=API,
       asserts="Metadata with a null topic list returns every topic, including one just created.",
       source=f"{JSON}: 'null for all topics'")
def null_lists_all(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    response = ops.metadata(None, version=ops.v(ApiKey.METADATA, lo=1))
    names = {t.name: t for t in response.topics}
    expect(topic.name in names, f"the created topic {topic.name} is missing from the full listing")
    expect_eq(len(names[topic.name].partitions), 2, "partitions listed for the new topic")


@check("metadata.topics.empty_list_returns_none", api=API,
       asserts="Metadata v1+ with an empty topic list returns brokers but no topics.",
       source=f"{JSON}: an empty array asks for no topics (null asks for all)")
def empty_list(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    ops.create_topic()
    response = ops.metadata([], version=ops.v(ApiKey.METADATA, lo=1))
    expect_eq(len(response.topics), 0, "topics in a Metadata answer for no topics")


@check("metadata.unknown_topic_without_auto_create", api=API,
       asserts="Metadata for a missing topic with allow_auto_topic_creation=false answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3) and does not create it.",
       source=f"KIP-204 (allow_auto_topic_creation, v4+); {JSON}")
def unknown_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("missing")
    version = ops.v(ApiKey.METADATA, lo=4)
    topic = ops.topic_metadata(name, version=version)
    expect_error(topic.error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Metadata for a missing topic")
    again = ops.topic_metadata(name, version=version)
    expect_error(again.error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "the topic exists after asking for it")


@check("metadata.auto_create_topic", api=API,
       asserts="Metadata for a missing topic with allow_auto_topic_creation=true creates it: within "
               "seconds it is listed with NONE and a leader for each of its default partitions "
               "(the first answer may be LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION).",
       source="Kafka broker config auto.create.topics.enable; KafkaApis.handleTopicMetadataRequest",
       requires="auto.create.topics.enable=true (Kafka's default)")
def auto_create(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("auto")
    first = ops.topic_metadata(name, auto_create=True)
    ctx.note("first_answer", error_name(int(first.error_code)))
    expect_error(first.error_code,
                 (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                 "first Metadata answer for an auto-created topic")
    deadline = time.monotonic() + 15
    while True:
        topic = ops.topic_metadata(name, auto_create=True)
        led = bool(topic.partitions) and all(p.leader_id >= 0 for p in topic.partitions)
        if int(topic.error_code) == ErrorCode.NONE and led:
            break
        if time.monotonic() > deadline:
            raise CheckFailed(f"auto-created topic not ready after 15 s: {error_name(int(topic.error_code))}")
        time.sleep(0.2)
    ctx.note("partitions", len(topic.partitions))


@check("metadata.invalid_topic_name", api=API,
       asserts="Metadata asking to auto-create a topic with an illegal name (a space, '!') answers "
               "INVALID_TOPIC_EXCEPTION (17) for it.",
       source="Kafka Topic.validate (legal characters [a-zA-Z0-9._-], at most 249); KafkaApis")
def invalid_name(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.topic_metadata(f"bad name!{ctx.run_id}", auto_create=True)
    expect_error(topic.error_code, ErrorCode.INVALID_TOPIC_EXCEPTION, "Metadata for an illegal topic name")


@check("metadata.partitions.leader_in_replicas_and_isr", api=API,
       asserts="Each partition of a topic names a leader that is a listed broker and is among its "
               "replicas and in-sync replicas.",
       source=f"{JSON}; Kafka replication design")
def leader_in_isr(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=3)
    response = ops.metadata([topic.name])
    brokers = {int(b.node_id) for b in response.brokers}
    meta = response.topics[0]
    expect_eq(sorted(int(p.partition_index) for p in meta.partitions), [0, 1, 2], "partition indexes")
    for p in meta.partitions:
        leader = int(p.leader_id)
        expect(leader in brokers, f"partition {p.partition_index} leader {leader} is not a listed broker")
        expect(leader in {int(r) for r in p.replica_nodes},
               f"partition {p.partition_index} leader {leader} is not among its replicas")
        expect(leader in {int(r) for r in p.isr_nodes},
               f"partition {p.partition_index} leader {leader} is not in its ISR")


@check("metadata.leader_epoch_reported", api=API,
       asserts="Metadata v7+ reports a leader epoch >= 0 for every partition of a live topic.",
       source="KIP-320; MetadataResponse.json LeaderEpoch (v7+)")
def leader_epoch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    meta = ops.topic_metadata(topic.name, version=ops.v(ApiKey.METADATA, lo=7))
    epochs = [int(p.leader_epoch) for p in meta.partitions]
    ctx.note("leader_epochs", epochs)
    expect(all(e >= 0 for e in epochs), f"leader epochs {epochs} include -1")


@check("metadata.topic_id_matches_create", api=API,
       asserts="Metadata v10+ gives a topic a non-zero topic id, the same one CreateTopics v7+ returned.",
       source="KIP-516 (topic ids)")
def topic_id(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    response = ops.create_topics_raw([{"name": ctx.name("t")}], version=ops.v(ApiKey.CREATE_TOPICS, lo=7))
    created = response.topics[0]
    expect_error(created.error_code, ErrorCode.NONE, "CreateTopics")
    expect(created.topic_id not in (None, ZERO_UUID), "CreateTopics v7 returned no topic id")
    ops.wait_topic_ready(created.name, 1)
    meta = ops.topic_metadata(created.name, version=ops.v(ApiKey.METADATA, lo=10))
    expect_eq(str(meta.topic_id), str(created.topic_id), "Metadata topic id vs CreateTopics topic id")


@check("metadata.every_version_lists_topic", api=API,
       asserts="Every Metadata version the broker advertises lists a named topic with NONE and its "
               "partitions.",
       source=f"{JSON} (all versions)")
def every_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    versions = ctx.apis.versions(ApiKey.METADATA)
    ctx.note("versions", versions)
    for version in versions:
        meta = ops.topic_metadata(topic.name, version=version)
        expect_error(meta.error_code, ErrorCode.NONE, f"Metadata v{version}")
        expect_eq(len(meta.partitions), 2, f"Metadata v{version} partitions")


@check("metadata.deleted_topic_disappears", api=API,
       asserts="After DeleteTopics, Metadata for the topic answers UNKNOWN_TOPIC_OR_PARTITION "
               "(within seconds) and the topic is no longer in the full listing.",
       source="KIP-4 (DeleteTopics); MetadataResponse.json")
def deleted_disappears(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expect_error(ops.delete_topic(topic.name), ErrorCode.NONE, "DeleteTopics")
    deadline = time.monotonic() + 15
    while True:
        meta = ops.topic_metadata(topic.name)
        if int(meta.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            break
        if time.monotonic() > deadline:
            raise CheckFailed(f"deleted topic still answers {error_name(int(meta.error_code))} after 15 s")
        time.sleep(0.2)
    listing = {t.name for t in ops.metadata(None).topics}
    expect(topic.name not in listing, "the deleted topic is still in the full listing")
