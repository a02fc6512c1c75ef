"""Share groups end to end (issue 33 step 4): Kafka 4.3.1's Java ``KafkaShareConsumer``
(tests/support/ShareConsumerProbe.java, checked against Apache Kafka 4.3.1 when it was
written) on Korvet: two consumers of one share group split a topic, each record accepted
once; released records come back with their delivery count; a rejected record never comes
back; a consumer killed with records acquired has them redelivered to another once their
lock runs out; a record released at every delivery is archived at the group's delivery
limit; a classic group on the same topic reads everything besides. The group's start and
limits are set as a user sets them on Kafka: group configs through the Admin client
(IncrementalAlterConfigs on the GROUP resource). confluent-kafka's ShareConsumer too."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from korvet.bench.clients import alter_group_configs
from korvet.jvm.java_clients import KafkaJavaTools
from korvet.process import stop_process
from tests.conftest import KorvetProcess

pytestmark = pytest.mark.clients

PROBE = str(Path(__file__).resolve().parents[1] / "support" / "ShareConsumerProbe.java")
KEYS = [f"k{i}" for i in range(20)]


@dataclass
class Probe:
    """One share consumer process and the lines it printed."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @staticmethod
    def start(bootstrap: str, group: str, topic: str, mode: str, idle_ms: int = 8000,
              reset: str | None = None) -> Probe:
        args = [bootstrap, group, topic, mode, str(idle_ms), f"{group}-{mode}"]
        if reset is not None:
            args.append(reset)
        command = KafkaJavaTools(bootstrap).command(PROBE, args)
        probe = Probe(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True))
        probe.reader = threading.Thread(target=probe._read, daemon=True)
        probe.reader.start()
        return probe

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, timeout: float = 120.0) -> None:
        self.process.wait(timeout)
        assert self.reader is not None
        self.reader.join(10)
        assert self.process.returncode == 0 and "DONE" in self.lines, self.tail()

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.lines:
            assert self.process.poll() is None, self.tail()
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s: {self.tail()}"
            time.sleep(0.1)

    def kill(self) -> None:
        stop_process(self.process, signal.SIGKILL, timeout=10)

    def records(self) -> list[tuple[int, int, int, str, str]]:
        """(partition, offset, delivery count, key, what the consumer did) per record given."""
        found = []
        for line in self.lines:
            parts = line.split()
            if len(parts) == 6 and parts[0] == "R":
                found.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[4], parts[5]))
        return found

    def tail(self) -> str:
        return "\n".join(self.lines[-40:])


def create_and_fill(bootstrap: str, topic: str, partitions: int = 2,
                    keys: list[str] = KEYS, timestamp_ms: int = 0) -> None:
    """The topic (made once) and one record per key, spread over its partitions, stamped
    ``timestamp_ms`` (0: now)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number, key in enumerate(keys):
        producer.produce(topic, key=key, value=f"value-{number}", partition=number % partitions,
                         timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """share_record_lock_duration_ms="2000" sets share.record.lock.duration.ms."""
    alter_group_configs(bootstrap, group, {name.replace("_", "."): value
                                           for name, value in configs.items()})


def classic_read_all(bootstrap: str, topic: str, group: str) -> list[str]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    found: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < len(KEYS) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                found.append(bytes(message.key() or b"").decode())
    finally:
        consumer.close()
    return found


def test_share_groups_split_release_and_reject_beside_a_classic_group(
        korvet: KorvetProcess, unique_name: str) -> None:
    bootstrap, topic = korvet.bootstrap, unique_name
    create_and_fill(bootstrap, topic)
    split, released, rejected = (f"{topic}-split", f"{topic}-released", f"{topic}-rejected")
    probes = [Probe.start(bootstrap, split, topic, "accept", reset="earliest"),
              Probe.start(bootstrap, split, topic, "accept", reset="earliest"),
              Probe.start(bootstrap, released, topic, "release:2", reset="earliest"),
              Probe.start(bootstrap, rejected, topic, "reject:k3", reset="earliest")]
    classic = classic_read_all(bootstrap, topic, f"{topic}-classic")
    for probe in probes:
        probe.wait()
    # One share group, two consumers: every record given once, to one of them, accepted.
    given = probes[0].records() + probes[1].records()
    assert sorted(r[3] for r in given) == sorted(KEYS), given
    assert {r[2] for r in given} == {1}
    # Released once, each record comes back with delivery count 2 and is then accepted.
    counts = Counter((r[3], r[2], r[4]) for r in probes[2].records())
    assert counts == Counter({**{(k, 1, "release"): 1 for k in KEYS},
                              **{(k, 2, "accept"): 1 for k in KEYS}}), probes[2].tail()
    # A rejected record is archived: given once, never again.
    keys = Counter(r[3] for r in probes[3].records())
    assert keys == Counter(KEYS), probes[3].tail()
    # The classic group on the same topic reads every record, share groups or not.
    assert sorted(classic) == sorted(KEYS)


def test_a_killed_consumers_records_come_back_after_their_lock_until_the_delivery_limit(
        korvet: KorvetProcess, unique_name: str) -> None:
    bootstrap, topic, group = korvet.bootstrap, unique_name, f"{unique_name}-group"
    create_and_fill(bootstrap, topic, partitions=1)
    set_group_configs(bootstrap, group, share_record_lock_duration_ms="2000",
                      share_delivery_count_limit="3")
    holder = Probe.start(bootstrap, group, topic, "hold", reset="earliest")
    holder.wait_for("HOLDING")
    held = {r[3] for r in holder.records()}
    assert held and all(r[2] == 1 for r in holder.records())
    holder.kill()
    releaser = Probe.start(bootstrap, group, topic, "release-always")
    releaser.wait()
    given = releaser.records()
    counts: Counter[str] = Counter(r[3] for r in given)
    # A held record comes back once its lock ran out, its delivery to the killed consumer
    # counted; the others are given from their first delivery.
    for key in KEYS:
        deliveries = sorted(r[2] for r in given if r[3] == key)
        expected = [2, 3] if key in held else [1, 2, 3]
        assert deliveries == expected, (key, deliveries, releaser.tail())
    # At the limit (3) every record is archived: nothing is given a fourth time.
    assert max(counts.values()) <= 3


def test_a_group_starting_by_duration_skips_older_records(korvet: KorvetProcess,
                                                          unique_name: str) -> None:
    """share.auto.offset.reset=by_duration:PT1H: a new share group starts at the first record
    of the last hour (by timestamp), not at the log's start nor its end."""
    bootstrap, topic = korvet.bootstrap, unique_name
    old = [f"old{i}" for i in range(6)]
    create_and_fill(bootstrap, topic, partitions=1, keys=old,
                    timestamp_ms=int(time.time() * 1000) - 2 * 3600 * 1000)
    create_and_fill(bootstrap, topic, partitions=1)
    probe = Probe.start(bootstrap, f"{topic}-recent", topic, "accept", reset="by_duration:PT1H")
    probe.wait()
    assert sorted(r[3] for r in probe.records()) == sorted(KEYS), probe.tail()


SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def test_kafka_share_groups_describes_resets_and_deletes_a_groups_offsets(
        korvet: KorvetProcess, unique_name: str) -> None:
    """`kafka-share-groups --describe` shows where the group is (start offset, lag);
    `--reset-offsets --to-earliest` moves an empty group back to the first record; after
    `--delete-offsets` it has no offset information and starts anew; `--delete` takes its
    state on the partitions with it (Describe-, Alter- and DeleteShareGroupOffsets,
    DeleteGroups)."""
    bootstrap, topic, group = korvet.bootstrap, unique_name, f"{unique_name}-group"
    create_and_fill(bootstrap, topic, partitions=1)
    first = Probe.start(bootstrap, group, topic, "accept", idle_ms=5000, reset="earliest")
    first.wait()
    assert len(first.records()) == len(KEYS)
    tools = KafkaJavaTools(bootstrap)

    def run(*args: str) -> str:
        done = tools.run(SHARE_GROUP_COMMAND, ["--bootstrap-server", bootstrap, *args])
        return done.stdout

    def row() -> list[str]:
        lines = [line.split() for line in run("--describe", "--group", group).splitlines()]
        found = [line for line in lines if line[:2] == [group, topic]]
        assert len(found) == 1, lines
        return found[0][2:]

    assert row() == ["0", str(len(KEYS)), "0"]  # partition, start offset, lag: all accepted
    reset = run("--reset-offsets", "--to-earliest", "--topic", topic, "--group", group,
                "--execute")
    assert f"{group}" in reset and topic in reset, reset
    assert row() == ["0", "0", str(len(KEYS))]
    deleted = run("--delete-offsets", "--topic", topic, "--group", group)
    assert "Successful" in deleted, deleted
    assert "has no offset information" in run("--describe", "--group", group)
    # Its state gone, the group starts anew (from the earliest record, as it is configured).
    again = Probe.start(bootstrap, group, topic, "accept", idle_ms=5000)
    again.wait()
    assert sorted(r[3] for r in again.records()) == sorted(KEYS), again.tail()
    assert row() == ["0", str(len(KEYS)), "0"]
    # Deleting the group takes its state on the partitions with it (its Redis consumer group).
    assert "was successful" in run("--delete", "--group", group)
    streams = redis.Redis.from_url(korvet.redis_url)
    try:
        keys = list(streams.scan_iter(f"*{topic}*:stream"))
        names = [info["name"].decode() for key in keys for info in streams.xinfo_groups(key)]
    finally:
        streams.close()
    assert keys, "the topic's stream was not found"
    assert f"share:{group}" not in names, names


def test_confluent_kafkas_share_consumer_releases_then_accepts(korvet: KorvetProcess,
                                                               unique_name: str) -> None:
    """confluent-kafka's ShareConsumer (librdkafka 2.16), explicit acknowledgement: each
    record released at its first delivery comes back with delivery count 2 and is accepted
    (the same 40 deliveries on Apache Kafka 4.3.1)."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    bootstrap, topic, group = korvet.bootstrap, unique_name, f"{unique_name}-group"
    create_and_fill(bootstrap, topic)
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    seen: list[tuple[str, int]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(n == 2 for _, n in seen) < len(KEYS):
            messages = consumer.poll(1.0)
            for message in messages:
                assert message.error() is None, message.error()
                count = int(message.delivery_count() or 0)
                consumer.acknowledge(message, AcknowledgeType.RELEASE if count < 2
                                     else AcknowledgeType.ACCEPT)
                seen.append((bytes(message.key() or b"").decode(), count))
            if messages:
                consumer.commit_sync()
    finally:
        consumer.close()
    assert Counter(seen) == Counter({**{(k, 1): 1 for k in KEYS}, **{(k, 2): 1 for k in KEYS}})


def test_a_latest_group_that_fetched_an_empty_partition_gets_its_first_records(
        korvet: KorvetProcess, unique_name: str) -> None:
    """share.auto.offset.reset=latest (the default) on a partition with no record yet: the
    group starts where the partition was at its first fetch, so the records produced after
    the consumer came are all handed out (as on Kafka, where the start is the high
    watermark, 0, at the first fetch), not only those after a later one."""
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap, topic, group = korvet.bootstrap, unique_name, f"{unique_name}-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    streams = redis.Redis.from_url(korvet.redis_url)
    try:
        consumer.subscribe([topic])
        # Until the group has fetched from the empty partition (its mark in the meta hash).
        deadline = time.monotonic() + 60
        meta = f"korvet:{{{topic}:0}}:partition"  # the partition's meta hash
        while not streams.hexists(meta, f"share-start:share:{group}"):
            assert time.monotonic() < deadline, "the share consumer never fetched"
            assert not consumer.poll(0.5)
        create_and_fill(bootstrap, topic, partitions=1)
        keys: list[str] = []
        while len(keys) < len(KEYS) and time.monotonic() < deadline:
            keys += [bytes(m.key() or b"").decode() for m in consumer.poll(1.0)]
        assert sorted(keys) == sorted(KEYS)
    finally:
        consumer.close()
        streams.close()


def test_a_read_committed_group_gets_no_aborted_or_undecided_record(
        korvet: KorvetProcess, unique_name: str) -> None:
    """share.isolation.level=read_committed: a share group is given what a read_committed
    consumer reads (records below the last stable offset, none of an aborted transaction);
    a read_uncommitted group on the same topic gets every record. Once the open transaction
    commits, the committed group gets the rest."""
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap, topic = korvet.bootstrap, unique_name
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)

    def transactional(name: str) -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap,
                             "transactional.id": f"{unique_name}-{name}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        return producer

    aborting = transactional("aborting")
    for key in ("aborted-1", "aborted-2"):
        aborting.produce(topic, key=key, value=key)
    assert aborting.flush(30) == 0  # written, then aborted (unsent records would be dropped)
    aborting.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, key="plain-1", value="plain-1")
    assert plain.flush(30) == 0
    committing = transactional("committing")
    committing.produce(topic, key="committed-1", value="committed-1")
    committing.commit_transaction(30)
    staying_open = transactional("open")
    staying_open.produce(topic, key="open-1", value="open-1")
    assert staying_open.flush(30) == 0
    plain.produce(topic, key="plain-2", value="plain-2")  # past the last stable offset
    assert plain.flush(30) == 0

    def consumer(level: str) -> ShareConsumer:
        group = f"{unique_name}-{level}"
        set_group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                          share_isolation_level=level)
        found = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        found.subscribe([topic])
        return found

    def keys_until(share: ShareConsumer, wanted: int, seconds: float) -> list[str]:
        keys: list[str] = []
        deadline = time.monotonic() + seconds
        while len(keys) < wanted and time.monotonic() < deadline:
            keys += [bytes(m.key() or b"").decode() for m in share.poll(1.0)
                     if m.error() is None]
        return keys

    committed, uncommitted = consumer("read_committed"), consumer("read_uncommitted")
    try:
        assert sorted(keys_until(uncommitted, 6, 60)) == [
            "aborted-1", "aborted-2", "committed-1", "open-1", "plain-1", "plain-2"]
        # what the committed group is given: no aborted record, nothing past the open
        # transaction's first record (waiting 8 s for more shows nothing else comes)
        assert sorted(keys_until(committed, 3, 8)) == ["committed-1", "plain-1"]
        staying_open.commit_transaction(30)
        assert sorted(keys_until(committed, 2, 60)) == ["open-1", "plain-2"]
    finally:
        committed.close()
        uncommitted.close()
