"""Topic administration and configs through a real admin client (librdkafka's AdminClient)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from tests.conftest import KorvetProcess
from tests.integration import clients
from tests.integration.test_broker_behaviour import batch, produce_request, xlen
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients


def admin(broker: KorvetProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def error_of(future: Any) -> str:
    with pytest.raises(KafkaException) as caught:
        future.result(30)
    return str(caught.value.args[0].name())


def test_create_topic_name_rules_and_duplicates(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    bad = ["", "a" * 250, "bad name", "bad/name", ".", ".."]
    futures = client.create_topics([NewTopic(name, 1) for name in bad if name])
    for name, future in futures.items():
        assert error_of(future) == "TOPIC_EXCEPTION", name
    client.create_topics([NewTopic(unique_name, 2)])[unique_name].result(30)
    assert error_of(client.create_topics([NewTopic(unique_name, 2)])[unique_name]) == (
        "TOPIC_ALREADY_EXISTS")
    collider = unique_name.replace("-", ".") + ".x"
    client.create_topics([NewTopic(collider.replace(".", "_"), 1)])[collider.replace(".", "_")].result(30)
    assert error_of(client.create_topics([NewTopic(collider, 1)])[collider]) == "TOPIC_EXCEPTION"


def test_create_topic_validate_only_creates_nothing(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 3)], validate_only=True)[unique_name].result(30)
    metadata = client.list_topics(timeout=10)
    assert unique_name not in metadata.topics


def test_replication_factor_and_partition_errors(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    assert error_of(client.create_topics([NewTopic(unique_name, 1, replication_factor=3)])
                    [unique_name]) == "INVALID_REPLICATION_FACTOR"
    assert error_of(client.create_topics([NewTopic(unique_name, 0)])[unique_name]) == (
        "INVALID_PARTITIONS")
    assert error_of(client.create_topics([NewTopic(unique_name, 1, config={"no.such": "1"})])
                    [unique_name]) == "INVALID_CONFIG"
    assert error_of(client.create_topics([NewTopic(unique_name, 1,
                                                   config={"cleanup.policy": "compacted"})])
                    [unique_name]) == "INVALID_CONFIG"


@pytest.mark.parametrize("storage_format", ["records", "batches"])
def test_retention_trims_only_with_the_delete_policy(korvet: KorvetProcess, unique_name: str,
                                                     storage_format: str) -> None:
    """Kafka's cleanup.policy: with delete, retention.ms drops old records; compact alone
    (or an empty policy) keeps them, as Kafka does for a compacted topic whose cleaner has
    not run: Kafka Connect's and Kafka Streams' topics need it. Korvet never compacts, so a
    reader sees every value of a key, the latest last."""
    client = admin(korvet)
    kept = {"delete": 2, "compact,delete": 2, "compact": 5, "": 5}
    topics = {policy: f"{unique_name}-{number}" for number, policy in enumerate(kept)}
    for policy, topic in topics.items():
        # Dense retention (the default scheme) removes whole stretches of the time index,
        # as Kafka removes whole segments: a checkpoint after every batch makes a stretch
        # of each produce.
        client.create_topics([NewTopic(topic, 1, config={
            "cleanup.policy": policy, "retention.ms": "300", "index.interval.bytes": "1",
            "korvet.storage.format": storage_format})])[topic].result(30)
        described = client.describe_configs([ConfigResource("topic", topic)])
        (entries,) = [future.result(30) for future in described.values()]
        assert entries["cleanup.policy"].value == policy
    # Stamped a minute in the past and in the future: a dense topic keeps records by their
    # timestamps (Kafka's rule), a time topic by when they were appended; either way the old
    # ones go and the new ones stay, however slow the machine.
    old = clients.make_records(3, 1, base_ts=int(time.time() * 1000) - 60_000)
    for topic in topics.values():
        clients.confluent_produce(korvet.bootstrap, topic, old)
    time.sleep(0.6)
    new = [clients.Rec(0, b"k0", f"new {i}".encode(), (), int(time.time() * 1000) + 60_000)
           for i in range(2)]
    for policy, topic in topics.items():
        clients.confluent_produce(korvet.bootstrap, topic, new)
        got = clients.confluent_consume(korvet.bootstrap, topic, 1, kept[policy], timeout=10)
        assert [g.value for g in got] == [r.value for r in (old + new)[-kept[policy]:]], policy


def test_delete_topic_removes_streams_and_metadata(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 2)])[unique_name].result(30)
    with WireClient(korvet.bootstrap) as wire:
        wire.request(produce_request(unique_name, {0: batch(3), 1: batch(2)}))
    assert xlen(korvet, unique_name, 0) == 3
    client.delete_topics([unique_name])[unique_name].result(30)
    keys = subprocess.run(["redis-cli", "-u", korvet.redis_url, "--scan", "--pattern",
                           f"*{unique_name}*"], capture_output=True, text=True, check=True).stdout
    assert keys.strip() == "", f"keys left behind: {keys.split()}"
    assert error_of(client.delete_topics([unique_name])[unique_name]) == (
        "UNKNOWN_TOPIC_OR_PART")


def test_create_partitions_grows_a_topic(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1)])[unique_name].result(30)
    client.create_partitions([NewPartitions(unique_name, 4)])[unique_name].result(30)
    assert len(client.list_topics(unique_name, timeout=10).topics[unique_name].partitions) == 4
    assert error_of(client.create_partitions([NewPartitions(unique_name, 2)])[unique_name]) == (
        "INVALID_PARTITIONS")
    records = [clients.Rec(3, b"k", b"in the new partition", (), int(time.time() * 1000))]
    told = clients.confluent_produce(korvet.bootstrap, unique_name, records)
    assert told[0][0] == 3


def _described(client: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource("topic", topic)
    return dict(client.describe_configs([resource])[resource].result(30))


def test_describe_and_alter_topic_configs(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1, config={"retention.ms": "3600000"})]
                         )[unique_name].result(30)
    configs = _described(client, unique_name)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["korvet.sequence.bits"].value == "10"
    assert configs["korvet.sequence.bits"].is_read_only
    assert configs["max.message.bytes"].is_default
    # Korvet's settings fixed at creation are not the topic's overrides when they are what a
    # new topic gets (kafka-topics --topics-with-overrides, GitOps tools comparing configs)
    for name, value in (("korvet.offset.scheme", "dense"), ("korvet.storage.format", "records")):
        assert (configs[name].value, configs[name].is_default) == (value, True), name
        assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value
    client.create_topics([NewTopic(unique_name + "-time", 1, config={
        "korvet.offset.scheme": "time"})])[unique_name + "-time"].result(30)
    resource = ConfigResource("topic", unique_name + "-time")
    timed = dict(client.describe_configs([resource])[resource].result(30))
    scheme = timed["korvet.offset.scheme"]
    assert (scheme.value, scheme.is_default) == ("time", False)
    assert scheme.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # its default synonym is what a new topic gets, not the built-in 'time' of old topics
    # (librdkafka keeps one synonym per name: the last, the default)
    defaults = [s.value for s in scheme.synonyms.values()
                if s.source == ConfigSource.DEFAULT_CONFIG.value]
    assert defaults == ["dense"], defaults
    resource = ConfigResource("topic", unique_name, incremental_configs=[
        ConfigEntry("korvet.retention.records", "2", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    client.incremental_alter_configs([resource])[resource].result(30)
    configs = _described(client, unique_name)
    assert configs["korvet.retention.records"].value == "2"
    assert configs["retention.ms"].value == "604800000"  # back to the default
    with WireClient(korvet.bootstrap) as wire:
        wire.request(produce_request(unique_name, {0: batch(6)}))
    assert xlen(korvet, unique_name) == 2, "the altered retention was not applied"


def test_config_changes_that_must_be_refused(korvet: KorvetProcess, unique_name: str) -> None:
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1)])[unique_name].result(30)
    for entry in (ConfigEntry("korvet.sequence.bits", "12",
                              incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)):
        resource = ConfigResource("topic", unique_name, incremental_configs=[entry])
        assert error_of(client.incremental_alter_configs([resource])[resource]) == "INVALID_CONFIG"
    missing = ConfigResource("topic", unique_name + "-missing")
    assert error_of(client.describe_configs([missing])[missing]) == "UNKNOWN_TOPIC_OR_PART"


def _redis(korvet: KorvetProcess, *command: str) -> str:
    return subprocess.run(["redis-cli", "-u", korvet.redis_url, *command], capture_output=True,
                          text=True, check=True).stdout.strip()


def _redis_calls(broker: KorvetProcess, command: str) -> int:
    """How many times Redis has run ``command`` (INFO commandstats)."""
    for line in _redis(broker, "INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def _first_record(broker: KorvetProcess, topic: str, group: str) -> tuple[Any, Any]:
    """A consumer of ``group`` subscribed to ``topic`` (no auto-commit, from the earliest)
    and the first record it polled."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = None
    deadline = time.monotonic() + 30
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
    assert message is not None and message.error() is None
    return consumer, message


def test_a_setting_fixed_at_creation_cannot_be_deleted(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    """Deleting korvet.sequence.bits would make the topic read its stored offsets with another
    width (its records gone from every fetch): refused, and the records still read back."""
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1, config={"korvet.sequence.bits": "12"})]
                         )[unique_name].result(30)
    with WireClient(korvet.bootstrap) as wire:
        wire.request(produce_request(unique_name, {0: batch(5)}))
    for name in ("korvet.sequence.bits", "korvet.storage.format"):
        resource = ConfigResource("topic", unique_name, incremental_configs=[
            ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)])
        with pytest.raises(KafkaException) as caught:
            client.incremental_alter_configs([resource])[resource].result(30)
        error = caught.value.args[0]
        assert error.name() == "INVALID_CONFIG"
        assert f"{name} cannot be deleted" in error.str()
    configs = _described(client, unique_name)
    assert configs["korvet.sequence.bits"].value == "12"
    assert configs["korvet.storage.format"].value == "records"
    assert _redis(korvet, "HGET", f"korvet:{{topics}}:topic:{unique_name}",
                  "config.korvet.sequence.bits") == "12"
    assert len(clients.confluent_consume(korvet.bootstrap, unique_name, 1, 5, timeout=30)) == 5


def test_a_setting_kafka_no_longer_has_does_not_block_changes(korvet: KorvetProcess,
                                                              unique_name: str) -> None:
    """message.downconversion.enable (removed in Kafka 4) stored with a topic by an earlier
    Korvet: the topic's settings can still be changed, and the old one goes with the change."""
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1)])[unique_name].result(30)
    key = f"korvet:{{topics}}:topic:{unique_name}"
    _redis(korvet, "HSET", key, "config.message.downconversion.enable", "true")
    _redis(korvet, "PUBLISH", "korvet:topic-changes", unique_name)  # brokers read it anew
    resource = ConfigResource("topic", unique_name, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(30)
    assert _described(client, unique_name)["retention.ms"].value == "3600000"
    assert _redis(korvet, "HEXISTS", key, "config.message.downconversion.enable") == "0"
    refused = ConfigResource("topic", unique_name, incremental_configs=[ConfigEntry(
        "message.downconversion.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    assert error_of(client.incremental_alter_configs([refused])[refused]) == "INVALID_CONFIG"


def test_broker_configs_are_readable(korvet: KorvetProcess) -> None:
    client = admin(korvet)
    resource = ConfigResource("broker", "0")
    configs = dict(client.describe_configs([resource])[resource].result(30))
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["num.partitions"].value == "1"


def test_describe_cluster_names_this_broker(korvet: KorvetProcess) -> None:
    client = admin(korvet)
    cluster = client.describe_cluster().result(30)
    assert cluster.cluster_id == "korvet-cluster"
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, korvet.port)]
    assert cluster.controller.id == 0


def test_approximate_trimming_is_per_topic(korvet: KorvetProcess, unique_name: str) -> None:
    """`~` trims whole listpack nodes: never more than asked, possibly fewer."""
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, 1, config={
        "korvet.retention.records": "100", "korvet.trim.approximate": "true"})])[unique_name].result(30)
    with WireClient(korvet.bootstrap) as wire:
        for round_ in range(10):
            wire.request(produce_request(unique_name, {0: batch(100, start=round_ * 100)}))
    kept = xlen(korvet, unique_name)
    assert 100 <= kept < 1000, f"approximate trimming kept {kept} of 1000 entries"


@pytest.mark.spec("GroupCoordinator", "DeleteGroups")
def test_empty_groups_without_offsets_are_cleaned_up(tmp_path: Any) -> None:
    """Kafka's periodic clean-up: a group whose consumer left without committing (a console
    consumer without --group) goes from ListGroups and Redis; a group whose consumer committed
    stays, with its offset."""
    from confluent_kafka import Producer

    broker = KorvetProcess(tmp_path / "broker",
                           extra_args=["--groups-retention-check-interval-ms", "1000"]).start()
    try:
        client = admin(broker)
        client.create_topics([NewTopic("cleaned", 1)])["cleaned"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("cleaned", b"one")
        assert producer.flush(30) == 0
        for group, commits in (("left-without-committing", False), ("committed", True)):
            consumer, message = _first_record(broker, "cleaned", group)
            if commits:
                consumer.commit(message=message, asynchronous=False)
            consumer.close()

        def listed() -> set[str]:
            return {g.group_id for g in client.list_consumer_groups().result(30).valid}

        deadline = time.monotonic() + 15
        while "left-without-committing" in listed() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert listed() == {"committed"}
        def keys(pattern: str) -> list[str]:
            return subprocess.run(["redis-cli", "-u", broker.redis_url, "--scan", "--pattern",
                                   pattern], capture_output=True, text=True,
                                  check=True).stdout.split()

        assert keys("*left-without-committing*") == []
        assert keys("*committed*") != []  # the kept group's snapshot and offsets
        log = broker.log_path.read_text() if broker.log_path else ""
        assert "deleted 1 empty group(s) without committed offsets: left-without-committing" in log
    finally:
        broker.stop()


@pytest.mark.spec("GroupCoordinator", "DeleteGroups")
def test_committed_offsets_expire_once_their_group_has_been_empty_for_the_retention(
        tmp_path: Any) -> None:
    """Kafka's offsets.retention.minutes (groups.offsets-retention-ms, 4 s here): a group
    whose consumer committed and left keeps its offset for the retention, while a tool
    reads it, then loses it with the group; a group whose consumer stays keeps its offset
    past the retention."""
    from confluent_kafka import (
        ConsumerGroupTopicPartitions,
        Producer,
        TopicPartition,
    )

    retention_s = 4.0
    broker = KorvetProcess(tmp_path / "broker", extra_args=[
        "--groups-retention-check-interval-ms", "300",
        "--groups-offsets-retention-ms", str(int(retention_s * 1000))]).start()
    try:
        client = admin(broker)
        client.create_topics([NewTopic("expiring", 1)])["expiring"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for value in (b"one", b"two"):
            producer.produce("expiring", value)
        assert producer.flush(30) == 0

        def consumer_of(group: str) -> tuple[Any, int]:
            consumer, message = _first_record(broker, "expiring", group)
            consumer.commit(message=message, asynchronous=False)
            offset = message.offset()
            assert offset is not None
            return consumer, offset + 1

        stays, position = consumer_of("stays")
        gone, gone_position = consumer_of("expires")
        gone.close()
        left_at = time.monotonic()

        def listed() -> set[str]:
            return {g.group_id for g in client.list_consumer_groups().result(30).valid}

        def committed(group: str) -> int:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition("expiring", 0)])
            result = client.list_consumer_group_offsets([request])[group].result(30)
            return int(result.topic_partitions[0].offset)

        while "expires" in listed():
            elapsed = time.monotonic() - left_at
            if elapsed < retention_s - 1:
                assert committed("expires") == gone_position  # read while waiting: reads keep nothing
            assert elapsed < retention_s + 15, "the expired group was never deleted"
            stays.poll(0.2)  # the member that stays keeps its session
            time.sleep(0.2)
        assert time.monotonic() - left_at >= retention_s - 0.5, "deleted before the retention"
        assert committed("expires") == -1001  # OFFSET_INVALID: no committed offset
        while time.monotonic() - left_at < retention_s + 1:
            stays.poll(0.2)
        assert "stays" in listed() and committed("stays") == position
        stays.close()
        log = broker.log_path.read_text() if broker.log_path else ""
        assert "deleted 1 empty group(s) whose committed offsets expired: expires" in log
        assert _redis(broker, "--scan", "--pattern", "*expires*").split() == []
    finally:
        broker.stop()


def test_groups_no_broker_coordinates_still_expire_and_deleted_groups_give_back_leases(
        tmp_path: Any) -> None:
    """With several brokers a group is coordinated by the broker holding its lease. A
    group whose consumers died while its broker restarted (or dropped its lease) was asked
    for by nobody again, so nobody expired it: 136 of 293 killed groups stayed for good in
    a new user's soak. Now each clean-up round takes such groups, and they expire like any
    other; and the lease of a group deleted is then given back, not renewed for ever."""
    from confluent_kafka import Consumer, TopicPartition

    args = ["--multi-broker", "--cluster-lease-ms", "1500", "--cluster-lease-margin-ms", "300",
            "--groups-offsets-retention-ms", "2000"]
    # no clean-up before the crash: the emptied group is still there when the broker dies
    broker = KorvetProcess(tmp_path / "broker", extra_args=[
        *args, "--groups-retention-check-interval-ms", "0"]).start()
    try:
        client = admin(broker)
        client.create_topics([NewTopic("orphans", 1)])["orphans"].result(30)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "orphan",
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("orphans", 0, 7)], asynchronous=False)
        consumer.close()
        # a group whose member joined and left without committing: Empty, nothing to keep
        clients.confluent_produce(broker.bootstrap, "orphans", clients.make_records(1, 1))
        consumer, _ = _first_record(broker, "orphans", "emptied")
        consumer.close()
        broker.kill()  # the orphans' leases lapse; after the restart nobody asks for them
        broker.extra_args = [*args, "--groups-retention-check-interval-ms", "300"]
        broker.start()

        def snapshot_of(group: str) -> str:
            return _redis(broker, "EXISTS", f"korvet:{{group:{group}}}:snapshot").strip()

        assert snapshot_of("orphan") == "1"
        deadline = time.monotonic() + 20
        while snapshot_of("orphan") != "0":
            assert time.monotonic() < deadline, "a group nobody coordinates never expired"
            time.sleep(0.2)
        assert _redis(broker, "--scan", "--pattern", "*{group:orphan}:commit*").split() == []

        # the leases taken for the clean-up are given back within a few renewal rounds, the
        # emptied group's too (taken and deleted by the same round)
        assert snapshot_of("emptied") == "0"
        for group in ("orphan", "emptied"):
            lease = f"korvet:{{group:{group}}}:lease"
            deadline = time.monotonic() + 10
            while _redis(broker, "HGET", lease, "expires").strip() != "0":
                assert time.monotonic() < deadline, f"{group}: a deleted group's lease renewed"
                time.sleep(0.2)
    finally:
        broker.stop()


def test_deleting_a_group_destroys_only_its_own_redis_groups(tmp_path: Any) -> None:
    """DeleteGroups removes the group's Redis consumer groups (XINFO GROUPS shows them while
    it lives) on the streams it fetched from, and touches no other stream: before, every
    deletion scanned the whole keyspace and sent an XGROUP DESTROY to every stream (11,105 of
    them for one group on 11,000 streams in a new user's trial)."""
    from confluent_kafka import Producer

    broker = KorvetProcess(tmp_path / "broker").start()
    try:
        client = admin(broker)
        topics = [f"many-{n}" for n in range(40)]
        for future in client.create_topics([NewTopic(t, 1) for t in topics]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for topic in topics:
            producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        consumer, _ = _first_record(broker, "many-0", "reader")
        consumer.close()  # no commit: the Redis group exists from the fetch alone
        stream = "korvet:{many-0:0}:stream"

        def redis(*args: str) -> str:
            return _redis(broker, *args)

        def calls(command: str) -> int:
            return _redis_calls(broker, command)

        assert "reader" in redis("XINFO", "GROUPS", stream).split()
        destroys, scans = calls("xgroup|destroy"), calls("scan")
        client.delete_consumer_groups(["reader"])["reader"].result(30)
        deadline = time.monotonic() + 10
        while "reader" in redis("XINFO", "GROUPS", stream).split():
            assert time.monotonic() < deadline, "the Redis group outlived its group"
            time.sleep(0.1)
        assert calls("xgroup|destroy") - destroys == 1
        assert calls("scan") == scans
        assert redis("--scan", "--pattern", "*reader*").split() == []
    finally:
        broker.stop()


def test_a_commit_by_a_group_that_never_fetched_sends_no_redis_group_moves(
        korvet: KorvetProcess, unique_name: str) -> None:
    """A tool, or a consumer that assign()s with a group id, commits offsets of 500
    partitions for a group that has no Redis consumer group: the offsets are stored, with one
    SADD to the group's index, and no XGROUP SETID is sent. Before, each commit sent one
    SADD and one SETID per partition, the SETIDs all failing: a new user's 10,000-offset
    commits cost the broker about a second of CPU each."""
    from confluent_kafka import Consumer, TopicPartition

    partitions = 500
    client = admin(korvet)
    client.create_topics([NewTopic(unique_name, partitions)])[unique_name].result(60)
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "enable.auto.commit": False})
    try:
        setids, sadds = _redis_calls(korvet, "xgroup|setid"), _redis_calls(korvet, "sadd")
        consumer.commit(offsets=[TopicPartition(unique_name, p, 1_000 + p)
                                 for p in range(partitions)], asynchronous=False)
        assert _redis_calls(korvet, "xgroup|setid") == setids
        # the group's index, and the broker's set of group ids (a new group)
        assert _redis_calls(korvet, "sadd") - sadds <= 2
        committed = consumer.committed([TopicPartition(unique_name, p)
                                        for p in range(partitions)], timeout=30)
        assert [tp.offset for tp in committed] == [1_000 + p for p in range(partitions)]
    finally:
        consumer.close()


def test_deleting_a_topic_takes_it_out_of_the_groups_indexes(korvet: KorvetProcess,
                                                            unique_name: str) -> None:
    """A group's index of the partitions it has offsets for loses a deleted topic's
    partitions with their offsets (a new user's trial found them left behind until the
    group itself was deleted)."""
    from confluent_kafka import Consumer, TopicPartition

    client = admin(korvet)
    gone, kept = f"{unique_name}-gone", f"{unique_name}-kept"
    for future in client.create_topics([NewTopic(gone, 2), NewTopic(kept, 1)]).values():
        future.result(30)
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(gone, 0, 5), TopicPartition(gone, 1, 5),
                             TopicPartition(kept, 0, 5)], asynchronous=False)
    consumer.close()

    def index() -> list[str]:
        return sorted(_redis(korvet, "SMEMBERS", f"korvet:{{group:{unique_name}}}:commits").split())

    assert index() == sorted([f"korvet:{{{gone}:0}}:stream", f"korvet:{{{gone}:1}}:stream",
                              f"korvet:{{{kept}:0}}:stream"])
    client.delete_topics([gone])[gone].result(30)
    assert index() == [f"korvet:{{{kept}:0}}:stream"]
