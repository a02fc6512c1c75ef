"""Administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
DescribeConfigs (32), IncrementalAlterConfigs (44), DescribeCluster (60), ListTransactions (66)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, wait_until
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

CREATE = "CreateTopics (19)"
DELETE = "DeleteTopics (20)"
PARTITIONS = "CreatePartitions (37)"
CONFIGS = "DescribeConfigs (32) / IncrementalAlterConfigs (44)"
CLUSTER = "DescribeCluster (60)"
TRANSACTIONS = "ListTransactions (66)"
KIP4 = "KIP-4 (admin APIs)"



def _create_one(ops: Ops, spec: dict[str, Any], **kw: Any) -> Any:
    response = ops.create_topics_raw([spec], **kw)
    return response.topics[0]


@check("create_topics.creates_with_partitions", api=CREATE,
       asserts="CreateTopics answers NONE and the topic then has the requested number of partitions.",
       source=f"{KIP4}; CreateTopicsRequest.json")
def creates(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("t")
    result = _create_one(ops, {"name": name, "num_partitions": 4})
    expect_error(result.error_code, ErrorCode.NONE, "CreateTopics")
    meta = ops.wait_topic_ready(name, 4)
    expect_eq(len(meta.partitions), 4, "partitions of the created topic")


@check("create_topics.already_exists", api=CREATE,
       asserts="Creating a topic that exists answers TOPIC_ALREADY_EXISTS (36) and leaves it unchanged.",
       source=f"{KIP4}; Errors.TOPIC_ALREADY_EXISTS")
def already_exists(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    result = _create_one(ops, {"name": topic.name, "num_partitions": 5})
    expect_error(result.error_code, ErrorCode.TOPIC_ALREADY_EXISTS, "CreateTopics of an existing topic")
    expect_eq(len(ops.topic_metadata(topic.name).partitions), 2, "partitions after the refused create")


@check("create_topics.already_exists_before_configs_and_partitions", api=CREATE,
       asserts="Creating a topic that exists answers TOPIC_ALREADY_EXISTS (36) even when the "
               "request also carries a config value or a partition count Kafka would refuse: "
               "the topic's existence is checked first, so a create-if-missing tool (Kafka "
               "Connect's, Kafka Streams') can tell that the topic is there.",
       source="Kafka ReplicationControlManager.createTopics (existing topics are marked before "
              "configs and partitions are validated)")
def already_exists_first(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    for label, request in (("retention.ms=abc", {"configs": {"retention.ms": "abc"}}),
                           ("num_partitions=0", {"num_partitions": 0})):
        result = _create_one(ops, {"name": topic.name, **request})
        expect_error(result.error_code, ErrorCode.TOPIC_ALREADY_EXISTS,
                     f"CreateTopics of an existing topic with {label}")


@check("create_topics.validate_only_creates_nothing", api=CREATE,
       asserts="CreateTopics with validate_only=true answers NONE for a valid topic but does not "
               "create it.",
       source="KIP-108 (validate_only)")
def validate_only(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("t")
    result = _create_one(ops, {"name": name, "num_partitions": 3}, validate_only=True)
    expect_error(result.error_code, ErrorCode.NONE, "CreateTopics validate_only")
    time.sleep(0.5)
    expect_error(ops.topic_metadata(name).error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "Metadata after a validate-only create")


@check("create_topics.zero_partitions_refused", api=CREATE,
       asserts="CreateTopics with num_partitions=0 answers INVALID_PARTITIONS (37).",
       source="Kafka ReplicationControlManager.createTopic: 'Number of partitions was set to an "
              "invalid non-positive value'")
def zero_partitions(ctx: CheckContext) -> None:
    result = _create_one(Ops(ctx), {"name": ctx.name("t"), "num_partitions": 0})
    expect_error(result.error_code, ErrorCode.INVALID_PARTITIONS, "CreateTopics with 0 partitions")


@check("create_topics.replication_factor_above_brokers", api=CREATE,
       asserts="CreateTopics with a replication factor larger than the number of brokers answers "
               "INVALID_REPLICATION_FACTOR (38).",
       source="Kafka ReplicationControlManager (replica placement: 'target replication factor of N "
              "cannot be reached because only M broker(s) are registered')")
def replication_factor(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    brokers = len(ops.metadata([]).brokers)
    result = _create_one(ops, {"name": ctx.name("t"), "replication_factor": brokers + 1})
    expect_error(result.error_code, ErrorCode.INVALID_REPLICATION_FACTOR,
                 f"CreateTopics with replication factor {brokers + 1} on {brokers} broker(s)")


@check("create_topics.invalid_names_refused", api=CREATE,
       asserts="CreateTopics refuses names that are empty, '.', '..', longer than 249 characters or "
               "hold characters outside [a-zA-Z0-9._-] with INVALID_TOPIC_EXCEPTION (17).",
       source="Kafka org.apache.kafka.common.internals.Topic.validate")
def invalid_names(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    for name in ("", ".", "..", "x" * 250, f"has space{ctx.run_id}", f"slash/{ctx.run_id}"):
        result = _create_one(ops, {"name": name})
        expect_error(result.error_code, ErrorCode.INVALID_TOPIC_EXCEPTION, f"CreateTopics {name[:20]!r}")


@check("create_topics.broker_defaults", api=CREATE,
       asserts="CreateTopics v4+ with num_partitions=-1 and replication_factor=-1 creates the topic with "
               "the broker's defaults, and v5+ answers the partition count and replication factor used.",
       source="KIP-464 (defaults for CreateTopics); KIP-525 (v5 returns configs)")
def broker_defaults(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.CREATE_TOPICS, lo=5)
    name = ctx.name("t")
    result = _create_one(ops, {"name": name, "num_partitions": -1, "replication_factor": -1}, version=version)
    expect_error(result.error_code, ErrorCode.NONE, "CreateTopics with broker defaults")
    partitions = int(result.num_partitions)
    expect(partitions >= 1, f"v{version} answered num_partitions {partitions}")
    expect(int(result.replication_factor) >= 1, "v5+ answered replication_factor < 1")
    meta = ops.wait_topic_ready(name, partitions)
    expect_eq(len(meta.partitions), partitions, "partitions vs the count CreateTopics answered")


@check("create_topics.bad_config_value_refused", api=CREATE,
       asserts="CreateTopics with a config value of the wrong type (retention.ms=abc) answers "
               "INVALID_CONFIG (40) and creates nothing.",
       source="Kafka ConfigDef.parse -> ConfigException -> INVALID_CONFIG")
def bad_config(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("t")
    result = _create_one(ops, {"name": name, "configs": {"retention.ms": "abc"}})
    expect_error(result.error_code, ErrorCode.INVALID_CONFIG, "CreateTopics with retention.ms=abc")
    expect_error(ops.topic_metadata(name).error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "Metadata afterwards")


@check("create_topics.unknown_config_refused", api=CREATE,
       asserts="CreateTopics with a config name Kafka does not know answers INVALID_CONFIG (40).",
       source="Kafka ControllerConfigurationValidator / LogConfig.validateNames "
              "('Unknown topic config name')")
def unknown_config(ctx: CheckContext) -> None:
    result = _create_one(Ops(ctx), {"name": ctx.name("t"), "configs": {"no.such.setting": "1"}})
    expect_error(result.error_code, ErrorCode.INVALID_CONFIG, "CreateTopics with an unknown config")


@check("create_topics.duplicate_in_request_refused", api=CREATE,
       asserts="A CreateTopics request that names the same topic twice answers INVALID_REQUEST (42) for "
               "it and creates nothing.",
       source="Kafka ControllerApis.handleCreateTopics ('Duplicate topic name')")
def duplicate_in_request(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("t")
    response = ops.create_topics_raw([{"name": name}, {"name": name}])
    codes = [int(t.error_code) for t in response.topics]
    ctx.note("codes", codes)
    expect(bool(codes) and all(c == ErrorCode.INVALID_REQUEST for c in codes),
           f"expected INVALID_REQUEST (42) for the duplicated topic, got {codes}")
    expect_error(ops.topic_metadata(name).error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "Metadata afterwards")


@check("create_topics.compact_policy_accepted", api=CREATE,
       asserts="CreateTopics with cleanup.policy=compact creates a compacted topic and DescribeConfigs "
               "reports the policy.",
       source="Kafka log compaction (broker docs 'Log Compaction'); TopicConfig.CLEANUP_POLICY_CONFIG")
def compact_policy(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"cleanup.policy": "compact"})
    expect_eq(ops.topic_config(topic.name, "cleanup.policy"), "compact", "cleanup.policy")


@check("create_topics.configs_reported_by_describe", api=CREATE,
       asserts="A config given at creation (retention.ms) is reported by DescribeConfigs with its "
               "value and source DYNAMIC_TOPIC_CONFIG (1).",
       source="KIP-226 (config sources); DescribeConfigsResponse.json")
def configs_reported(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"retention.ms": "123456789"})
    result = ops.describe_topic_configs(topic.name, ["retention.ms"])
    expect_error(result.error_code, ErrorCode.NONE, "DescribeConfigs")
    entry = {c.name: c for c in result.configs}.get("retention.ms")
    expect(entry is not None, "DescribeConfigs does not list retention.ms")
    assert entry is not None
    expect_eq(entry.value, "123456789", "retention.ms")
    source = int(getattr(entry, "config_source", getattr(entry, "source", -1)))
    expect_eq(source, 1, "config source of a topic override (1 = DYNAMIC_TOPIC_CONFIG)")


@check("delete_topics.deletes", api=DELETE,
       asserts="DeleteTopics answers NONE for an existing topic, and creating it again then works.",
       source=f"{KIP4}; DeleteTopicsRequest.json")
def deletes(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expect_error(ops.delete_topic(topic.name), ErrorCode.NONE, "DeleteTopics")
    deadline = time.monotonic() + 20
    while True:
        result = _create_one(ops, {"name": topic.name})
        code = int(result.error_code)
        if code == ErrorCode.NONE:
            break
        if code != ErrorCode.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
            raise CheckFailed(f"re-creating a deleted topic answered {code}")
        time.sleep(0.2)


@check("delete_topics.unknown_topic", api=DELETE,
       asserts="DeleteTopics for a missing topic answers UNKNOWN_TOPIC_OR_PARTITION (3).",
       source=f"{KIP4}; Errors.UNKNOWN_TOPIC_OR_PARTITION")
def delete_unknown(ctx: CheckContext) -> None:
    expect_error(Ops(ctx).delete_topic(ctx.name("missing")), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "DeleteTopics of a missing topic")


@check("delete_topics.by_topic_id", api=DELETE,
       asserts="DeleteTopics v6+ deletes a topic named by its topic id, and answers UNKNOWN_TOPIC_ID "
               "(100) for an id no topic has.",
       source="KIP-516 (topic ids in DeleteTopics v6)")
def delete_by_id(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.DELETE_TOPICS, lo=6)
    topic = ops.create_topic()
    tid = ops.topic_id_of(topic.name)
    response = ops.call(ApiKey.DELETE_TOPICS, version, topics=[{"name": None, "topic_id": tid}],
                        timeout=30_000)
    expect_error(response.responses[0].error_code, ErrorCode.NONE, "DeleteTopics by id")
    missing = ops.call(ApiKey.DELETE_TOPICS, version, topics=[{"name": None, "topic_id": uuid.uuid4()}],
                       timeout=30_000)
    expect_error(missing.responses[0].error_code, ErrorCode.UNKNOWN_TOPIC_ID, "DeleteTopics of an unknown id")


def _create_partitions(ops: Ops, name: str, count: int, validate_only: bool = False) -> int:
    response = ops.call(ApiKey.CREATE_PARTITIONS, None,
                        topics=[{"name": name, "count": count, "assignments": None}],
                        timeout=30_000, validate_only=validate_only)
    return int(response.results[0].error_code)


@check("create_partitions.increase", api=PARTITIONS,
       asserts="CreatePartitions raises a topic's partition count; Metadata then lists the new "
               "partitions with leaders.",
       source="KIP-195 (CreatePartitions)")
def increase(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=1)
    expect_error(_create_partitions(ops, topic.name, 3), ErrorCode.NONE, "CreatePartitions to 3")
    ops.wait_topic_ready(topic.name, 3)


@check("create_partitions.decrease_refused", api=PARTITIONS,
       asserts="CreatePartitions to fewer partitions than the topic has answers INVALID_PARTITIONS (37).",
       source="KIP-195: 'the number of partitions can only be increased'")
def decrease(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=3)
    expect_error(_create_partitions(ops, topic.name, 2), ErrorCode.INVALID_PARTITIONS,
                 "CreatePartitions 3 -> 2")
    expect_eq(len(ops.topic_metadata(topic.name).partitions), 3, "partitions afterwards")


@check("create_partitions.unknown_topic", api=PARTITIONS,
       asserts="CreatePartitions for a missing topic answers UNKNOWN_TOPIC_OR_PARTITION (3).",
       source="KIP-195; Errors.UNKNOWN_TOPIC_OR_PARTITION")
def partitions_unknown(ctx: CheckContext) -> None:
    expect_error(_create_partitions(Ops(ctx), ctx.name("missing"), 2), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "CreatePartitions of a missing topic")


@check("create_partitions.validate_only", api=PARTITIONS,
       asserts="CreatePartitions with validate_only=true answers NONE but leaves the count unchanged.",
       source="KIP-195 (validate_only)")
def partitions_validate_only(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=1)
    expect_error(_create_partitions(ops, topic.name, 4, validate_only=True), ErrorCode.NONE,
                 "validate-only CreatePartitions")
    time.sleep(0.5)
    expect_eq(len(ops.topic_metadata(topic.name).partitions), 1, "partitions after a validate-only call")


@check("describe_configs.topic_defaults_listed", api=CONFIGS,
       asserts="DescribeConfigs for a topic with all keys (null) answers NONE and lists retention.ms, "
               "cleanup.policy and max.message.bytes with values.",
       source="KIP-133 (DescribeConfigs); TopicConfig")
def topic_defaults(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    result = ops.describe_topic_configs(topic.name, None)
    expect_error(result.error_code, ErrorCode.NONE, "DescribeConfigs")
    values = {c.name: c.value for c in result.configs}
    for key in ("retention.ms", "cleanup.policy", "max.message.bytes"):
        expect(values.get(key) not in (None, ""), f"DescribeConfigs has no value for {key}")
    expect_eq(values["cleanup.policy"], "delete", "default cleanup.policy")


@check("describe_configs.unknown_topic", api=CONFIGS,
       asserts="DescribeConfigs for a missing topic answers UNKNOWN_TOPIC_OR_PARTITION (3).",
       source="KIP-133; Kafka ConfigHelper.describeConfigs")
def describe_unknown(ctx: CheckContext) -> None:
    result = Ops(ctx).describe_topic_configs(ctx.name("missing"), None)
    expect_error(result.error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "DescribeConfigs of a missing topic")


@check("describe_configs.invalid_topic_names", api=CONFIGS,
       asserts="DescribeConfigs of a topic whose name is empty, '..', or holds an illegal character "
               "answers INVALID_TOPIC_EXCEPTION (17): the name is validated before it is looked up.",
       source="Kafka ConfigHelper.describeConfigs (Topic.validate on topic resources)")
def describe_invalid_name(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    for name in ("", "..", "no spaces allowed"):
        result = ops.describe_topic_configs(name, None)
        expect_error(result.error_code, ErrorCode.INVALID_TOPIC_EXCEPTION,
                     f"DescribeConfigs of topic {name!r}")


@check("describe_configs.unknown_resource_type_fails_request", api=CONFIGS,
       asserts="A DescribeConfigs naming a resource type Kafka does not know (0, 99) beside a valid "
               "broker resource answers INVALID_REQUEST (42) for every resource, the valid one too.",
       source="Kafka KafkaApis.handleDescribeConfigsRequest ('Unexpected resource type') -> "
              "DescribeConfigsRequest.getErrorResponse; ConfigResource.Type")
def describe_unknown_type(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    for unknown in (0, 99):
        response = ops.call(ApiKey.DESCRIBE_CONFIGS, None, include_synonyms=False,
                            include_documentation=False,
                            resources=[{"resource_type": 4, "resource_name": "", "configuration_keys": None},
                                       {"resource_type": unknown, "resource_name": "x",
                                        "configuration_keys": None}])
        expect_eq([int(r.error_code) for r in response.results], [ErrorCode.INVALID_REQUEST] * 2,
                  f"DescribeConfigs of the broker and of resource type {unknown}: error codes")


def _incremental(ops: Ops, name: str, key: str, value: str | None, op: int = 0,
                 validate_only: bool = False) -> int:
    response = ops.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, None, validate_only=validate_only, resources=[
        {"resource_type": 2, "resource_name": name,
         "configs": [{"name": key, "config_operation": op, "value": value}]}])
    return int(response.responses[0].error_code)


@check("incremental_alter_configs.set_and_delete", api=CONFIGS,
       asserts="IncrementalAlterConfigs SET changes a topic's retention.ms (DescribeConfigs shows it) "
               "and DELETE restores the default.",
       source="KIP-339 (IncrementalAlterConfigs)")
def set_and_delete(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    default = ops.topic_config(topic.name, "retention.ms")
    expect_error(_incremental(ops, topic.name, "retention.ms", "7777777"), ErrorCode.NONE, "SET retention.ms")
    # The change is committed by the controller and reaches the broker's cache shortly after.
    wait_until(lambda: ops.topic_config(topic.name, "retention.ms") == "7777777", 10,
               "DescribeConfigs showing retention.ms=7777777 after SET")
    expect_error(_incremental(ops, topic.name, "retention.ms", None, op=1), ErrorCode.NONE,
                 "DELETE retention.ms")
    wait_until(lambda: ops.topic_config(topic.name, "retention.ms") == default, 10,
               f"DescribeConfigs showing the default retention.ms={default} after DELETE")


@check("incremental_alter_configs.invalid_value_refused", api=CONFIGS,
       asserts="IncrementalAlterConfigs SET with a value of the wrong type answers INVALID_CONFIG (40) "
               "and keeps the old value.",
       source="KIP-339; ConfigDef.parse")
def invalid_value(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    before = ops.topic_config(topic.name, "retention.ms")
    expect_error(_incremental(ops, topic.name, "retention.ms", "soon"), ErrorCode.INVALID_CONFIG,
                 "SET retention.ms=soon")
    expect_eq(ops.topic_config(topic.name, "retention.ms"), before, "retention.ms afterwards")


@check("describe_cluster.matches_metadata", api=CLUSTER,
       asserts="DescribeCluster answers NONE with the same cluster id and brokers as Metadata.",
       source="KIP-700 (DescribeCluster)")
def describe_cluster(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    response = ops.call(ApiKey.DESCRIBE_CLUSTER, None, include_cluster_authorized_operations=False,
                        endpoint_type=1, include_fenced_brokers=False)
    expect_error(response.error_code, ErrorCode.NONE, "DescribeCluster")
    meta = ops.metadata([], version=ops.v(ApiKey.METADATA, lo=2))
    expect_eq(response.cluster_id, meta.cluster_id, "cluster id (DescribeCluster vs Metadata)")
    ours = sorted((int(b.broker_id), b.host, int(b.port)) for b in response.brokers)
    theirs = sorted((int(b.node_id), b.host, int(b.port)) for b in meta.brokers)
    expect_eq(ours, theirs, "brokers (DescribeCluster vs Metadata)")



@check("list_transactions.duration_filter_counts_from_the_last_start", api=TRANSACTIONS,
       asserts="ListTransactions v1's duration filter lists the ids whose last transaction started "
               "longer ago than it: a committed or aborted transaction keeps its start after it "
               "completes (listed under a filter shorter than its age, not under a longer one, "
               "like the open one), and an id with no transaction since InitProducerId "
               "(Empty) passes every filter.",
       source="KIP-994 (ListTransactions DurationFilter); measured on Kafka 4.3.1")
def duration_filter(ctx: CheckContext) -> None:
    from korvet.conformance.harness.drivers import confluent_producer

    ops = Ops(ctx)
    topic = ops.create_topic()
    ids: dict[str, str] = {}
    for kind in ("committed", "aborted", "empty", "open"):
        ids[kind] = ctx.name(kind)
        producer = confluent_producer(ctx, transactional_id=ids[kind], acks="all",
                                      transaction_timeout_ms=60_000)
        producer.init_transactions(30)
        if kind == "empty":
            continue
        producer.begin_transaction()
        producer.produce(topic.name, value=kind.encode(), partition=0)
        producer.flush(30)
        if kind == "committed":
            producer.commit_transaction(30)
        elif kind == "aborted":
            producer.abort_transaction(30)
    time.sleep(2.5)

    def listed(duration_ms: int) -> dict[str, str]:
        answer = ops.call(ApiKey.LIST_TRANSACTIONS, ops.v(ApiKey.LIST_TRANSACTIONS, lo=1),
                          state_filters=[], producer_id_filters=[], duration_filter=duration_ms)
        expect_error(answer.error_code, ErrorCode.NONE, f"ListTransactions duration {duration_ms}")
        states = {str(s.transactional_id): str(s.transaction_state)
                  for s in answer.transaction_states}
        return {kind: states[name] for kind, name in ids.items() if name in states}

    expect_eq(listed(1500), {"committed": "CompleteCommit", "aborted": "CompleteAbort",
                             "empty": "Empty", "open": "Ongoing"},
              "ids listed under a 1.5 s filter, each transaction started 2.5 s ago or more")
    expect_eq(listed(600_000), {"empty": "Empty"},
              "ids listed under a 10 min filter")
