"""Share-group membership on a running broker (issue 33): ShareGroupHeartbeat and
ShareGroupDescribe sent raw, share groups in ListGroups, DescribeGroups and DeleteGroups,
their collision with classic groups, session expiry, a restart, and Kafka's own
``kafka-share-groups`` tool (ShareGroupCommand from the pinned kafka-tools jar).

The share consumer's fetches and acknowledgements are the partition side's (ShareFetch,
ShareAcknowledge); nothing here needs them.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.describe_share_group_offsets.v0.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.share_fetch.v1.request import ShareFetchRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from korvet.bench.clients import alter_group_configs
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from korvet.jvm.java_clients import KafkaJavaTools
from korvet.protocol.kbuild import make
from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.security import AclStore
from tests.conftest import KorvetProcess
from tests.support.wire import WireClient

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
SESSION_MS = 1500


@pytest.fixture
def short_sessions(tmp_path: Path) -> Any:
    broker = KorvetProcess(tmp_path / "korvet", extra_args=[
        "--groups-share-session-timeout-ms", str(SESSION_MS),
        "--groups-share-heartbeat-interval-ms", "500"])
    broker.start()
    yield broker
    broker.stop()


def create_topic(client: WireClient, name: str, partitions: int) -> uuid.UUID:
    response = client.request(make(
        CreateTopicsRequest, topics=(make(CreatableTopic, name=name, num_partitions=partitions,
                                          replication_factor=1, assignments=(), configs=()),),
        timeout=30_000, validate_only=False))
    assert response.topics[0].error_code == ErrorCode.NONE, response
    metadata = client.request(make(MetadataRequest,
        topics=(make(MetadataRequestTopic, topic_id=None, name=name),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    topic_id: uuid.UUID = metadata.topics[0].topic_id
    return topic_id


def beat(client: WireClient, group: str, member: str, epoch: int,
         topics: tuple[str, ...] | None = None) -> Any:
    return client.request(make(ShareGroupHeartbeatRequest,
        group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
        subscribed_topic_names=topics))


def partitions_of(response: Any, topic_id: uuid.UUID) -> set[int]:
    assert response.assignment is not None, response
    return {p for t in response.assignment.topic_partitions if t.topic_id == topic_id
            for p in t.partitions}


def describe(client: WireClient, group: str) -> Any:
    return client.request(make(ShareGroupDescribeRequest,
        group_ids=(group,), include_authorized_operations=False)).groups[0]


def listed(client: WireClient, types: tuple[str, ...] = ()) -> dict[str, tuple[str, str, str]]:
    response = client.request(make(ListGroupsRequest, states_filter=(), types_filter=types))
    assert response.error_code == ErrorCode.NONE
    return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in response.groups}


def join_three(client: WireClient, group: str, topic: str
               ) -> tuple[list[str], dict[str, int], dict[str, set[int]], uuid.UUID]:
    """Three members join a group on a 4-partition topic and heartbeat until each has the
    group's epoch; their ids, epochs and assignments."""
    topic_id = create_topic(client, topic, 4)
    members = [str(uuid.uuid4()) for _ in range(3)]
    epochs: dict[str, int] = {}
    assigned: dict[str, set[int]] = {}
    for member in members:
        joined = beat(client, group, member, 0, (topic,))
        assert joined.error_code == ErrorCode.NONE, joined
        epochs[member] = joined.member_epoch
        assigned[member] = partitions_of(joined, topic_id)
    for member in members:  # the earlier joiners learn of the later ones
        again = beat(client, group, member, epochs[member])
        assert again.error_code == ErrorCode.NONE, again
        if again.assignment is not None:
            assigned[member] = partitions_of(again, topic_id)
        epochs[member] = again.member_epoch
    return members, epochs, assigned, topic_id


def test_three_members_share_four_partitions_then_one_leaves(korvet: KorvetProcess,
                                                             unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        members, epochs, assigned, topic_id = join_three(client, group, topic)
        # every partition to someone, every member something, one epoch for all
        assert set().union(*assigned.values()) == {0, 1, 2, 3}
        assert all(assigned[m] for m in members), assigned
        assert len(set(epochs.values())) == 1, epochs
        described = describe(client, group)
        assert described.error_code == ErrorCode.NONE
        assert (described.group_state, described.assignor_name) == ("Stable", "simple")
        assert described.group_epoch == described.assignment_epoch == epochs[members[0]]
        assert {m.member_id for m in described.members} == set(members)
        assert all(m.subscribed_topic_names == (topic,) for m in described.members)
        assert listed(client)[group] == ("share", "Stable", "share")

        left = beat(client, group, members[0], -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
        rest: dict[str, set[int]] = {}
        for member in members[1:]:
            again = beat(client, group, member, epochs[member])
            assert again.error_code == ErrorCode.NONE
            assert again.member_epoch > epochs[member]  # the group moved on
            rest[member] = partitions_of(again, topic_id)
        assert set().union(*rest.values()) == {0, 1, 2, 3}
        gone = beat(client, group, members[0], epochs[members[0]])
        assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_fenced_and_invalid_heartbeats(korvet: KorvetProcess, unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 1)
        member = str(uuid.uuid4())
        joined = beat(client, group, member, 0, (topic,))
        assert joined.heartbeat_interval.total_seconds() == 5  # Kafka's group.share.heartbeat.interval.ms
        assert beat(client, group, member, joined.member_epoch + 1).error_code == \
            ErrorCode.FENCED_MEMBER_EPOCH
        assert beat(client, group, str(uuid.uuid4()), 5).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert beat(client, group, "", 0, (topic,)).error_code == ErrorCode.INVALID_REQUEST
        assert beat(client, group, str(uuid.uuid4()), 0).error_code == ErrorCode.INVALID_REQUEST
        assert beat(client, f"none-{unique_name}", member, 3).error_code == \
            ErrorCode.GROUP_ID_NOT_FOUND


def test_session_expiry_removes_a_silent_member(short_sessions: KorvetProcess,
                                                unique_name: str) -> None:
    assert_silent_member_expires(short_sessions.bootstrap, unique_name)


def test_a_groups_own_session_timeout_expires_its_silent_member(korvet: KorvetProcess,
                                                                unique_name: str) -> None:
    """share.session.timeout.ms and share.heartbeat.interval.ms set on the group (Kafka's
    group configs, IncrementalAlterConfigs) override the broker's 45 s and 5 s."""
    alter_group_configs(korvet.bootstrap, f"share-{unique_name}", {
        "share.session.timeout.ms": str(SESSION_MS), "share.heartbeat.interval.ms": "500"})
    assert_silent_member_expires(korvet.bootstrap, unique_name)


def assert_silent_member_expires(bootstrap: str, unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(bootstrap) as client:
        topic_id = create_topic(client, topic, 2)
        quiet, alive = str(uuid.uuid4()), str(uuid.uuid4())
        first = beat(client, group, quiet, 0, (topic,))
        assert first.heartbeat_interval.total_seconds() == 0.5
        epoch = beat(client, group, alive, 0, (topic,)).member_epoch
        deadline = time.monotonic() + 4 * SESSION_MS / 1000
        while time.monotonic() < deadline:  # only one member keeps heartbeating
            answer = beat(client, group, alive, epoch)
            assert answer.error_code == ErrorCode.NONE
            epoch = answer.member_epoch
            if answer.assignment is not None and partitions_of(answer, topic_id) == {0, 1}:
                break
            time.sleep(0.2)
        assert partitions_of(answer, topic_id) == {0, 1}  # the silent member's share too
        assert [m.member_id for m in describe(client, group).members] == [alive]
        assert beat(client, group, quiet, first.member_epoch).error_code == \
            ErrorCode.UNKNOWN_MEMBER_ID


def test_a_restart_keeps_the_group_and_its_epoch(fresh_korvet: KorvetProcess,
                                                 unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    member, other = str(uuid.uuid4()), str(uuid.uuid4())
    with WireClient(fresh_korvet.bootstrap) as client:
        create_topic(client, topic, 1)
        beat(client, group, member, 0, (topic,))
        beat(client, group, other, 0, (topic,))
        assert beat(client, group, other, -1).error_code == ErrorCode.NONE
        epoch = beat(client, group, member, 1).member_epoch
        assert epoch == 3  # two joins and a leave
    fresh_korvet.restart()
    with WireClient(fresh_korvet.bootstrap) as client:
        assert listed(client, ("share",))[group] == ("share", "Empty", "share")
        described = describe(client, group)
        assert (described.error_code, described.group_epoch) == (ErrorCode.NONE, epoch)
        # the member is gone with the broker's memory: it is told so, and joins again above
        assert beat(client, group, member, epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        again = beat(client, group, member, 0, (topic,))
        assert again.error_code == ErrorCode.NONE and again.member_epoch > epoch


def test_classic_and_share_groups_do_not_share_an_id(korvet: KorvetProcess,
                                                     unique_name: str) -> None:
    share, classic, topic = f"share-{unique_name}", f"classic-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 1)
        committed = client.request(make(OffsetCommitRequest,
            group_id=classic, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(make(OffsetCommitRequestTopic, name=topic, partitions=(
                make(OffsetCommitRequestPartition, partition_index=0, committed_offset=0,
                                             committed_leader_epoch=-1,
                                             committed_metadata=None),)),)))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        refused = beat(client, classic, str(uuid.uuid4()), 0, (topic,))
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert refused.error_message == f"Group {classic} is not a share group."
        assert describe(client, classic).error_message == f"Group {classic} is not a share group."

        assert beat(client, share, str(uuid.uuid4()), 0, (topic,)).error_code == ErrorCode.NONE
        joined = client.request(make(
            JoinGroupRequest, group_id=share, session_timeout=10_000, rebalance_timeout=10_000,
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=(make(JoinGroupRequestProtocol, name="range", metadata=b""),),
            reason=None))
        assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        old = client.request(make(DescribeGroupsV5, groups=(share,),
                                              include_authorized_operations=False)).groups[0]
        assert (old.error_code, old.group_state) == (ErrorCode.NONE, "Dead")
        new = client.request(make(DescribeGroupsV6, groups=(share,),
                                              include_authorized_operations=False)).groups[0]
        assert new.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert new.error_message == f"Group {share} is not a classic group."
        kinds = listed(client)
        assert kinds[share][0] == "share" and kinds[classic][0] == "classic"
        assert classic not in listed(client, ("share",))
        coordinator = client.request(make(FindCoordinatorRequest,
            key_type=0, coordinator_keys=(share,)))
        assert coordinator.coordinators[0].error_code == ErrorCode.NONE


def test_delete_a_share_group_only_once_empty(korvet: KorvetProcess, unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 1)
        member = str(uuid.uuid4())
        epoch = beat(client, group, member, 0, (topic,)).member_epoch

        def delete() -> int:
            response = client.request(make(DeleteGroupsRequest, groups_names=(group,)))
            code: int = response.results[0].error_code
            return code

        assert delete() == ErrorCode.NON_EMPTY_GROUP
        assert beat(client, group, member, -1).error_code == ErrorCode.NONE
        assert listed(client)[group][1] == "Empty"
        assert epoch >= 1
        assert delete() == ErrorCode.NONE
        assert group not in listed(client)
        assert describe(client, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_kafka_share_groups_tool_lists_and_describes_members(korvet: KorvetProcess,
                                                             unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 2)
        member = str(uuid.uuid4())
        beat(client, group, member, 0, (topic,))
        tools = KafkaJavaTools(korvet.bootstrap, timeout=120)
        listing = tools.run(SHARE_GROUP_COMMAND, ["--bootstrap-server", korvet.bootstrap,
                                                  "--list"])
        assert group in listing.stdout.split()
        members = tools.run(SHARE_GROUP_COMMAND, [
            "--bootstrap-server", korvet.bootstrap, "--describe", "--group", group,
            "--members"])
        row = next(line for line in members.stdout.splitlines() if member in line)
        assert group in row and f"{topic}:0,1" in row.replace(" ", ""), members.stdout
        state = tools.run(SHARE_GROUP_COMMAND, [
            "--bootstrap-server", korvet.bootstrap, "--describe", "--group", group, "--state"])
        row = next(line for line in state.stdout.splitlines() if group in line)
        assert row.split()[-2:] == ["Stable", "1"], state.stdout  # state, #members
        assert beat(client, group, member, -1).error_code == ErrorCode.NONE
        deleted = tools.run(SHARE_GROUP_COMMAND, ["--bootstrap-server", korvet.bootstrap,
                                                  "--delete", "--group", group])
        assert "was successful" in deleted.stdout, deleted.stdout
        assert group not in listed(client)


@pytest.fixture
def two_brokers(tmp_path: Path, fresh_redis_url: str) -> Any:
    brokers = [KorvetProcess(tmp_path / f"b{i}", extra_args=[
        "--redis-url", fresh_redis_url, "--multi-broker", "--broker-id", str(i),
        "--cluster-broker-ttl-ms", "1500"]) for i in (1, 2)]
    for broker in brokers:
        broker.start()
    yield brokers
    for broker in brokers:
        broker.stop()


def test_two_brokers_the_lease_holder_coordinates_lists_once_and_hands_over(two_brokers: list[KorvetProcess],
                                                                unique_name: str) -> None:
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    deadline = time.monotonic() + 15
    while True:  # both brokers registered and each knows the other
        with WireClient(two_brokers[0].bootstrap) as client:
            found = client.request(make(MetadataRequest, topics=(), allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
        if len(found.brokers) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    owners = set()
    for broker in two_brokers:
        with WireClient(broker.bootstrap) as client:
            answer = client.request(make(FindCoordinatorRequest,
                key_type=0, coordinator_keys=(group,))).coordinators[0]
            assert answer.error_code == ErrorCode.NONE
            owners.add(answer.node_id)
    assert len(owners) == 1
    owner = two_brokers[owners.pop() - 1]
    other = next(b for b in two_brokers if b is not owner)
    member = str(uuid.uuid4())
    with WireClient(other.bootstrap) as client:
        create_topic(client, topic, 2)
        assert beat(client, group, member, 0, (topic,)).error_code == ErrorCode.NOT_COORDINATOR
    with WireClient(owner.bootstrap) as client:
        assert beat(client, group, member, 0, (topic,)).error_code == ErrorCode.NONE
    listings = []
    for broker in two_brokers:
        with WireClient(broker.bootstrap) as client:
            listings.append(listed(client, ("share",)))
    # Kafka's AdminClient asks every broker and merges: the group is listed exactly once
    assert [group in found for found in listings].count(True) == 1, listings
    assert any(found.get(group) == ("share", "Stable", "share") for found in listings)
    with WireClient(owner.bootstrap) as client:
        epoch = describe(client, group).group_epoch
    owner.stop()  # a clean stop gives the lease back: the other broker takes the group over
    with WireClient(other.bootstrap) as client:
        answer = client.request(make(FindCoordinatorRequest, key_type=0,
                                     coordinator_keys=(group,))).coordinators[0]
        assert (answer.error_code, answer.node_id) == (ErrorCode.NONE, two_brokers.index(other) + 1)
        assert describe(client, group).group_epoch == epoch  # from Redis, not from zero
        assert beat(client, group, member, epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert beat(client, group, member, 0, (topic,)).member_epoch == epoch + 1


def _grant(redis_url: str, *bindings: tuple[ResourceType, str, Operation]) -> None:
    async def add() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await AclStore(client, "korvet").add(AclBinding(
                kind, name, PatternType.LITERAL, "User:ANONYMOUS", "*", operation,
                Permission.ALLOW) for kind, name, operation in bindings)
        finally:
            await client.aclose()
    asyncio.run(add())
    time.sleep(1)  # the brokers reload their ACLs on the change's message


def test_acls_read_to_heartbeat_describe_to_describe(tmp_path: Path, unique_name: str) -> None:
    group, other, topic = f"share-{unique_name}", f"other-{unique_name}", f"t-{unique_name}"
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--authorizer-enabled"]).start()
    try:
        _grant(broker.redis_url, (ResourceType.TOPIC, topic, Operation.ALL),
               (ResourceType.GROUP, group, Operation.DESCRIBE))
        member = str(uuid.uuid4())
        with WireClient(broker.bootstrap) as client:
            create_topic(client, topic, 1)
            assert beat(client, group, member, 0, (topic,)).error_code == \
                ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert describe(client, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert describe(client, other).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        _grant(broker.redis_url, (ResourceType.GROUP, group, Operation.READ))
        with WireClient(broker.bootstrap) as client:
            assert beat(client, group, member, 0, (topic,)).error_code == ErrorCode.NONE
            assert [m.member_id for m in describe(client, group).members] == [member]
    finally:
        broker.stop()


def test_kafkas_console_share_consumer_joins(korvet: KorvetProcess, unique_name: str) -> None:
    """Kafka's own share consumer (kafka-console-share-consumer, KafkaShareConsumer 4.3.1)
    finds the coordinator, joins and is assigned the topic's partitions: it speaks this
    broker's ShareGroupHeartbeat. It cannot read yet (ShareFetch is the partition side's)."""
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 3)
    tools = KafkaJavaTools(korvet.bootstrap)
    process = subprocess.Popen(
        tools.command(CONSOLE_SHARE_CONSUMER, ["--bootstrap-server", korvet.bootstrap,
                                               "--topic", topic, "--group", group]),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        with WireClient(korvet.bootstrap) as client:
            while time.monotonic() < deadline:
                found = describe(client, group)
                if found.error_code == ErrorCode.NONE and found.members:
                    break
                time.sleep(0.5)
            assert found.members, f"no member joined; the consumer said:\n{_output(process)}"
            (member,) = found.members
            assert member.subscribed_topic_names == (topic,)
            assert [(t.topic_name, t.partitions) for t in member.assignment.topic_partitions] \
                == [(topic, (0, 1, 2))]
            assert member.client_id  # the consumer's client.id, as Kafka describes it
    finally:
        process.kill()
        process.wait(timeout=30)


def _output(process: subprocess.Popen[str]) -> str:
    process.kill()
    out, _ = process.communicate(timeout=30)
    return out[-3000:]


def test_while_redis_is_away_list_groups_still_lists_share_groups(tmp_path: Path,
                                                                  unique_name: str) -> None:
    """One broker lists its classic groups from memory when Redis does not answer; the share
    groups it holds are listed with them, not turned into an error."""
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="off")
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--redis-url", server.start()])
    broker.start()
    try:
        with WireClient(broker.bootstrap) as client:
            create_topic(client, topic, 1)
            assert beat(client, group, str(uuid.uuid4()), 0, (topic,)).error_code == \
                ErrorCode.NONE
            server.stop()
            response = client.request(make(ListGroupsRequest, states_filter=(),
                                           types_filter=()))
            assert response.error_code == ErrorCode.NONE
            assert [(g.group_id, g.group_type) for g in response.groups] == [(group, "share")]
    finally:
        broker.stop()
        server.stop()


def test_unknown_groups_and_refusals_are_answered_as_kafka_answers_them(
        korvet: KorvetProcess, unique_name: str) -> None:
    """What the differential mode found against Kafka 4.3.1 (tests/conformance/
    test_kafka_conformance.py): offsets of an id no group has are described as having no
    state (no error); altering them creates the share group (empty, epoch 0); a described
    unknown group has epochs 0; a refused heartbeat names no member; a refused ShareFetch
    gives no lock duration."""
    group, topic = f"share-{unique_name}", f"t-{unique_name}"
    with WireClient(korvet.bootstrap) as client:
        create_topic(client, topic, 2)

        def offsets(topics: tuple[str, ...] | None) -> Any:
            return client.request(make(DescribeShareGroupOffsetsRequest, groups=(make(
                DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=None if topics is None
                else tuple(make(DescribeShareGroupOffsetsRequestTopic, topic_name=t,
                                partitions=(0, 1)) for t in topics)),))).groups[0]

        unknown = client.request(make(ShareGroupDescribeRequest, group_ids=(group,),
                                      include_authorized_operations=False)).groups[0]
        assert (unknown.error_code, unknown.group_epoch, unknown.assignment_epoch) == (
            ErrorCode.GROUP_ID_NOT_FOUND, 0, 0)
        everything = offsets(None)
        assert (everything.error_code, everything.topics) == (ErrorCode.NONE, ())
        (named,) = offsets((topic,)).topics
        assert [(p.partition_index, p.start_offset, p.error_code) for p in named.partitions] == [
            (0, -1, ErrorCode.NONE), (1, -1, ErrorCode.NONE)]

        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": korvet.bootstrap})
        for value in (b"a", b"b", b"c"):
            producer.produce(topic, value=value, partition=1)
        assert producer.flush(30) == 0
        altered = client.request(make(AlterShareGroupOffsetsRequest, group_id=group, topics=(make(
            AlterShareGroupOffsetsRequestTopic, topic_name=topic, partitions=(
                make(AlterShareGroupOffsetsRequestPartition, partition_index=0, start_offset=0),
                make(AlterShareGroupOffsetsRequestPartition, partition_index=1, start_offset=1),
            )),)))
        assert altered.error_code == ErrorCode.NONE
        assert [p.error_code for t in altered.responses for p in t.partitions] == [
            ErrorCode.NONE, ErrorCode.NONE]
        created = describe(client, group)
        assert (created.error_code, created.group_state, created.group_epoch) == (
            ErrorCode.NONE, "Empty", 0)
        (after,) = offsets((topic,)).topics
        # partition 0 has no record yet: the offset set is kept for the group's first fetch
        assert [(p.partition_index, p.start_offset) for p in after.partitions] == [(0, 0), (1, 1)]
        assert listed(client, ("share",))[group][0] == "share"

        refused = beat(client, group, "", 0, (topic,))  # a member id is the client's to make
        assert refused.error_code == ErrorCode.INVALID_REQUEST
        assert (refused.member_id, refused.member_epoch) == (None, 0)
        fetched = client.request(make(ShareFetchRequest, group_id=group, member_id=None,
                                      share_session_epoch=0, max_wait=0, min_bytes=0, max_bytes=0,
                                      max_records=0, batch_size=0, topics=(),
                                      forgotten_topics_data=()))
        assert fetched.error_code == ErrorCode.INVALID_REQUEST
        assert fetched.acquisition_lock_timeout.total_seconds() == 0

