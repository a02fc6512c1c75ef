"""The decoders of the topic, config, admin, cluster, group and SASL APIs
(korvet/protocol/decoders/): each reads every version the broker serves of its API, and gives
a field a version lacks Kafka's meaning of its absence.

Requests are drawn from kio's schemas (korvet/conformance/kafka/schemas.py, as the request
guard's tests draw them) and built into kio's classes, so a decoder that read a field some
version lacks would fail here, not on a client's request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.schemas import kio_request_versions, request_schema
from korvet.conformance.modes.fuzz import request_strategy
from korvet.core.api_keys import ApiKey
from korvet.core.coordinator import new_member_id
from korvet.protocol.decoders import admin, cluster, configs, groups, metadata, security, topics
from korvet.server.api import declared
from tests.support.examples import examples

DECODERS: dict[ApiKey, Callable[[Any], object]] = {
    ApiKey.CREATE_TOPICS: topics.decode_create_topics,
    ApiKey.DELETE_TOPICS: topics.decode_delete_topics,
    ApiKey.CREATE_PARTITIONS: topics.decode_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: configs.decode_describe_configs,
    ApiKey.ALTER_CONFIGS: configs.decode_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.decode_incremental_alter_configs,
    ApiKey.METADATA: metadata.decode_metadata,
    ApiKey.INIT_PRODUCER_ID: cluster.decode_init_producer_id,
    ApiKey.DESCRIBE_CLUSTER: cluster.decode_describe_cluster,
    ApiKey.ELECT_LEADERS: admin.decode_elect_leaders,
    ApiKey.FIND_COORDINATOR: groups.decode_find_coordinator,
    ApiKey.JOIN_GROUP: lambda r: groups.decode_join_group(
        r, request_id=1, client_id="c", client_host="/127.0.0.1", member_uuid="u"),
    ApiKey.SYNC_GROUP: lambda r: (groups.mandatory_protocol_present(r),
                                  groups.decode_sync_group(r, request_id=1)),
    ApiKey.HEARTBEAT: lambda r: groups.decode_heartbeat(r, request_id=1),
    ApiKey.LEAVE_GROUP: lambda r: groups.decode_leave_group(r, request_id=1),
    ApiKey.OFFSET_COMMIT: groups.decode_offset_commit,
    ApiKey.OFFSET_FETCH: groups.decode_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.decode_describe_groups,
    ApiKey.LIST_GROUPS: groups.decode_list_groups,
    ApiKey.SASL_HANDSHAKE: security.decode_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: security.decode_sasl_authenticate,
}

SERVED = sorted((key, version) for key in DECODERS for version in kio_request_versions(key)
                if version in declared(key).versions)


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k.kafka_name}-v{v}" for k, v in SERVED])
def test_a_decoder_reads_every_version_the_broker_serves(key: ApiKey, version: int) -> None:
    schema = request_schema(key, version, max_string=8, max_bytes=8, max_items=3)
    decode = DECODERS[key]

    @settings(max_examples=examples(0.1), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request_strategy(schema))
    def prop(document: dict[str, Any]) -> None:
        decode(build_request(key, version, **document))

    prop()


def test_every_api_with_a_decoder_is_served() -> None:
    for key in DECODERS:
        assert any(k is key for k, _ in SERVED), key.kafka_name


def _request(api: ApiKey, version: int, /, **values: Any) -> Any:
    return build_request(api, version, **values)


def test_find_coordinator_before_v1_finds_a_groups_one_key() -> None:
    old = groups.decode_find_coordinator(_request(ApiKey.FIND_COORDINATOR, 0, key="g"))
    assert old == groups.FindCoordinatorCall(groups.GROUP_KEY, ("g",), several=False)
    new = groups.decode_find_coordinator(_request(ApiKey.FIND_COORDINATOR, 4, key_type=1,
                                                  coordinator_keys=["a", "b"]))
    assert new == groups.FindCoordinatorCall(groups.TRANSACTION_KEY, ("a", "b"), several=True)
    assert groups.fetches_several_keys(_request(ApiKey.FIND_COORDINATOR, 4, key_type=0,
                                                coordinator_keys=[]))


JOIN = {"group_id": "g", "session_timeout": 10_000, "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]}


def test_join_group_versions_become_plain_fields() -> None:
    def join(version: int, **extra: Any) -> Any:
        return groups.decode_join_group(_request(ApiKey.JOIN_GROUP, version, **JOIN, **extra),
                                        request_id=7, client_id="c", client_host="/h",
                                        member_uuid="u")

    v0 = join(0)  # no rebalance timeout: the session timeout serves for both
    assert (v0.rebalance_timeout_ms, v0.group_instance_id) == (10_000, None)
    assert not v0.requires_known_member_id and not v0.supports_skip_assignment
    assert v0.new_member_id == new_member_id("c", None, "u")
    v5 = join(5, rebalance_timeout=30_000, group_instance_id="i")
    assert (v5.rebalance_timeout_ms, v5.group_instance_id) == (30_000, "i")
    assert v5.requires_known_member_id and not v5.supports_skip_assignment
    assert join(9, rebalance_timeout=1).supports_skip_assignment


def test_sync_group_needs_its_protocol_from_v5_only() -> None:
    sync = {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []}
    assert groups.mandatory_protocol_present(_request(ApiKey.SYNC_GROUP, 4, **sync))
    assert not groups.mandatory_protocol_present(_request(ApiKey.SYNC_GROUP, 5, **sync,
                                                          protocol_type="consumer"))
    assert groups.mandatory_protocol_present(_request(ApiKey.SYNC_GROUP, 5, **sync,
                                                      protocol_type="consumer",
                                                      protocol_name="range"))


def test_leave_group_before_v3_is_a_batch_of_one() -> None:
    old = groups.decode_leave_group(_request(ApiKey.LEAVE_GROUP, 2, group_id="g", member_id="m"),
                                    request_id=1)
    assert [(m.member_id, m.group_instance_id) for m in old.members] == [("m", None)]
    new = groups.decode_leave_group(_request(ApiKey.LEAVE_GROUP, 3, group_id="g", members=[
        {"member_id": "", "group_instance_id": "i"}, {"member_id": "m", "group_instance_id": None}]),
        request_id=1)
    assert [(m.member_id, m.group_instance_id) for m in new.members] == [("", "i"), ("m", None)]


def test_offset_commit_versions_become_plain_fields() -> None:
    def commit(version: int, partition: dict[str, Any]) -> groups.OffsetCommitCall:
        return groups.decode_offset_commit(_request(
            ApiKey.OFFSET_COMMIT, version, group_id="g", generation_id_or_member_epoch=3,
            member_id="m", group_instance_id="i",
            topics=[{"name": "t", "partitions": [{"partition_index": 0, **partition}]}]))

    v5 = commit(5, {"committed_offset": 9, "committed_metadata": None})
    (offset,) = v5.topics[0].offsets
    assert (offset.leader_epoch, offset.metadata, v5.group_instance_id) == (-1, "", None)
    assert not v5.unknown_group_is_not_found
    v9 = commit(9, {"committed_offset": 9, "committed_leader_epoch": 4, "committed_metadata": "x"})
    assert (v9.topics[0].offsets[0].leader_epoch, v9.group_instance_id) == (4, "i")
    assert v9.unknown_group_is_not_found and v9.generation_id == 3


def test_offset_fetch_before_v8_asks_for_one_group() -> None:
    old = groups.decode_offset_fetch(_request(ApiKey.OFFSET_FETCH, 7, group_id="g", topics=None))
    assert old == (groups.FetchedGroup("g", None),)
    new = _request(ApiKey.OFFSET_FETCH, 8, groups=[
        {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0, 2]}]},
        {"group_id": "b", "topics": None}])
    assert groups.fetches_several_groups(new)
    assert groups.decode_offset_fetch(new) == (
        groups.FetchedGroup("a", (groups.FetchedTopic("t", (0, 2)),)), groups.FetchedGroup("b", None))


def test_describe_and_list_groups_versions_become_plain_fields() -> None:
    v2 = groups.decode_describe_groups(_request(ApiKey.DESCRIBE_GROUPS, 2, groups=["g"]))
    assert v2 == groups.DescribeGroupsCall(("g",), False, unknown_group_is_error=False)
    v6 = groups.decode_describe_groups(_request(ApiKey.DESCRIBE_GROUPS, 6, groups=["g"],
                                                include_authorized_operations=True))
    assert v6 == groups.DescribeGroupsCall(("g",), True, unknown_group_is_error=True)
    assert groups.decode_list_groups(_request(ApiKey.LIST_GROUPS, 3)) == groups.ListGroupsCall((), ())
    assert groups.decode_list_groups(_request(ApiKey.LIST_GROUPS, 5, states_filter=["Stable"],
                                              types_filter=["classic"])) == groups.ListGroupsCall(
        ("Stable",), ("classic",))


def test_metadata_versions_become_plain_fields() -> None:
    assert metadata.decode_metadata(_request(ApiKey.METADATA, 0, topics=[])).topics is None  # all
    v1 = metadata.decode_metadata(_request(ApiKey.METADATA, 1, topics=[]))
    assert v1.topics == () and v1.allow_auto_topic_creation  # none; auto-creation before v4
    assert not v1.include_cluster_authorized_operations
    v4 = metadata.decode_metadata(_request(ApiKey.METADATA, 4, topics=[{"name": "t"}],
                                           allow_auto_topic_creation=False))
    assert v4.topics == (metadata.MetadataTopic("t", None),) and not v4.allow_auto_topic_creation
    v12 = metadata.decode_metadata(_request(
        ApiKey.METADATA, 12, allow_auto_topic_creation=True, include_topic_authorized_operations=True,
        topics=[{"name": None, "topic_id": "00000000-0000-0000-0000-000000000007"},
                {"name": None, "topic_id": "00000000-0000-0000-0000-000000000000"}]))
    assert [(t.name, t.topic_id.int if t.topic_id else None) for t in v12.topics or ()] == [
        (None, 7), (None, None)]  # the zero id names no topic
    assert v12.include_topic_authorized_operations


def test_cluster_and_admin_versions_become_plain_fields() -> None:
    assert cluster.decode_init_producer_id(_request(
        ApiKey.INIT_PRODUCER_ID, 2, transactional_id=None, transaction_timeout=1)) == (
        cluster.InitProducerIdCall(None, -1, -1, 1))
    assert cluster.decode_init_producer_id(_request(
        ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t", transaction_timeout=30_000,
        producer_id=5, producer_epoch=2)) == cluster.InitProducerIdCall("t", 5, 2, 30_000)
    assert cluster.decode_describe_cluster(_request(
        ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=True)) == (
        cluster.DescribeClusterCall(True, cluster.BROKERS_ENDPOINT))
    assert admin.decode_elect_leaders(_request(
        ApiKey.ELECT_LEADERS, 0, topic_partitions=None, timeout=1)) == admin.ElectLeadersCall(
        admin.PREFERRED, None)
    assert admin.decode_elect_leaders(_request(
        ApiKey.ELECT_LEADERS, 1, election_type=1, timeout=1,
        topic_partitions=[{"topic": "t", "partitions": [0, 1]}])) == admin.ElectLeadersCall(
        admin.UNCLEAN, (("t", (0, 1)),))


def test_topic_and_config_versions_become_plain_fields() -> None:
    assert topics.decode_delete_topics(_request(ApiKey.DELETE_TOPICS, 5, topic_names=["a"],
                                                timeout=1)) == (topics.TopicToDelete("a", None),)
    by_id = _request(ApiKey.DELETE_TOPICS, 6, timeout=1, topics=[
        {"name": None, "topic_id": "00000000-0000-0000-0000-000000000007"}])
    assert [(t.name, t.topic_id.int if t.topic_id else None)
            for t in topics.decode_delete_topics(by_id)] == [(None, 7)]
    assert topics.deleted_topics_field(by_id) == "topics"
    described = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
                 "include_synonyms": True}
    assert not configs.decode_describe_configs(_request(ApiKey.DESCRIBE_CONFIGS, 2, **described)
                                               ).include_documentation
    assert configs.decode_describe_configs(_request(ApiKey.DESCRIBE_CONFIGS, 3, **described,
                                                    include_documentation=True)
                                           ).include_documentation


def test_sasl_events_carry_the_version_the_machine_needs() -> None:
    assert security.decode_sasl_handshake(_request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")
                                          ).version == 0
    assert security.decode_sasl_authenticate(_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"x")
                                             ).version == 2

