"""The coordinator's guarantee at the wire (spec/GroupCoordinatorDurable.tla), with real parts.

- While Redis refuses writes (``min-replicas-to-write 1`` on a Redis without replicas), a
  consumer that joins gets no assignment, a JoinGroup and an OffsetCommit are answered
  COORDINATOR_NOT_AVAILABLE and nothing is reported committed that Redis does not hold;
  once Redis takes writes again the group forms and no committed offset was lost.
- After a broker crash whose Redis restarted too (the embedded one), the load raises the
  group to a new band of generations and the consumer rebalances and goes on exactly at its
  committed offsets; after a crash whose Redis kept running, the generation is kept.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from korvet.core.coordinator.durability import BAND, MAX_BAND
from korvet.core.coordinator.snapshot import read_group
from korvet.server.embedded_redis import EmbeddedRedis
from tests.conftest import KorvetProcess
from tests.integration.clients import confluent_produce, make_records
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = [pytest.mark.clients]

PARTITIONS = 3


def _consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                     "topic.metadata.refresh.interval.ms": 1000})


def _poll(consumers: list[Any], want: int, timeout: float = 60) -> list[tuple[int, int]]:
    """Poll every consumer until ``want`` records came in; (partition, offset) of each."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for consumer in consumers:
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is None:
                    got.append((msg.partition(), msg.offset()))
    return got


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    with WireClient(bootstrap) as wire:
        reply = wire.request(OffsetFetchRequest(
            group_id=GroupId(group), require_stable=False, topics=(OffsetFetchRequestTopic(
                name=TopicName(topic), partition_indexes=tuple(i32(p) for p in range(PARTITIONS))),)))
    return {int(p.partition_index): int(p.committed_offset)
            for t in reply.topics for p in t.partitions}


def _generations(event_log: Path, group: str) -> list[int]:
    """The generations JoinGroup replies actually sent for ``group`` revealed, in order."""
    joined: dict[int, str] = {}
    found = []
    for line in event_log.read_text().splitlines():
        entry = json.loads(line)
        event = entry.get("event") or {}
        if event.get("type") == "JoinGroup":
            joined[event["request_id"]] = event["group_id"]
        for reply in entry.get("sent", []):
            if reply.get("type") == "JoinGroupReply" and reply["error"] == 0 and \
                    joined.get(reply["request_id"]) == group:
                found.append(int(reply["generation_id"]))
    return found


@pytest.fixture
def logged_korvet(tmp_path: Path) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path / "korvet", extra_args=[
        "--groups-event-log", str(tmp_path / "coordinator.ndjson"),
        "--groups-initial-rebalance-delay-ms", "300"])
    broker.start()
    yield broker
    broker.stop()


@pytest.mark.spec("GroupCoordinatorDurable", "phase", "Step", "StepOf", "saved", "dur", "disk",
                  "Persist", "Replies", "PersistFails", "Unavailable", "Parked")
def test_a_group_forms_only_once_redis_takes_its_writes(logged_korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    bootstrap, topic, group = logged_korvet.bootstrap, unique_name, f"{unique_name}-g"
    create_topic(bootstrap, topic, PARTITIONS)
    confluent_produce(bootstrap, topic, make_records(60, PARTITIONS))
    first = _consumer(bootstrap, group)
    first.subscribe([topic])
    second = _consumer(bootstrap, group)
    try:
        assert len(_poll([first], 60)) == 60
        first.commit(asynchronous=False)
        before = _committed(bootstrap, group, topic)
        assert sum(1 for o in before.values() if o >= 0) == PARTITIONS

        admin = redis.Redis.from_url(logged_korvet.redis_url)
        admin.config_set("min-replicas-to-write", 1)  # no replica: every write is refused
        try:
            second.subscribe([topic])
            _poll([first, second], 1, timeout=6)
            assert second.assignment() == [], "an assignment revealed while Redis refused it"
            with WireClient(bootstrap) as wire:
                six_s = i32Timedelta.parse(datetime.timedelta(milliseconds=6000))
                joined = wire.request(JoinGroupRequest(
                    group_id=GroupId(f"{group}-new"), session_timeout=six_s,
                    rebalance_timeout=six_s, member_id="",
                    group_instance_id=None, protocol_type="consumer",
                    protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
                assert joined.error_code == ErrorCode.coordinator_not_available
                commit = wire.request(OffsetCommitRequest(
                    group_id=GroupId(f"{group}-simple"), generation_id_or_member_epoch=i32(-1),
                    member_id="", group_instance_id=None, topics=(OffsetCommitRequestTopic(
                        name=TopicName(topic), partitions=(OffsetCommitRequestPartition(
                            partition_index=i32(0), committed_offset=i64(5),
                            committed_leader_epoch=i32(-1), committed_metadata=""),)),)))
                (result,) = commit.topics[0].partitions
                assert result.error_code == ErrorCode.coordinator_not_available
            assert _committed(bootstrap, f"{group}-simple", topic)[0] == -1
            assert _committed(bootstrap, group, topic) == before
        finally:
            admin.config_set("min-replicas-to-write", 0)

        # Redis takes writes again: the second consumer joins, the two share the partitions,
        # and they go on exactly where the group committed.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not second.assignment():
            _poll([first, second], 1, timeout=1)
        assert second.assignment(), "the group never formed once Redis took writes again"
        owned = [{tp.partition for tp in c.assignment()} for c in (first, second)]
        assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == set(range(PARTITIONS))
        confluent_produce(bootstrap, topic, make_records(30, PARTITIONS))
        got = _poll([first, second], 30)
        assert len(got) == 30 and len(set(got)) == 30
        assert all(offset >= before[p] for p, offset in got), "a committed record came again"
    finally:
        first.close()
        second.close()
    generations = _generations(logged_korvet.data_dir.parent / "coordinator.ndjson", group)
    assert generations and generations == sorted(generations)


def _resume_after_crash(broker: KorvetProcess, event_log: Path, topic: str, group: str,
                        before_kill: Callable[[], None] = lambda: None
                        ) -> tuple[list[int], list[int]]:
    """A consumer commits, the broker is killed and started again, the consumer goes on.
    Returns the generations before and after the crash."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    confluent_produce(bootstrap, topic, make_records(30, PARTITIONS))
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        assert len(_poll([consumer], 30)) == 30
        consumer.commit(asynchronous=False)
        before = _committed(bootstrap, group, topic)
        generations = _generations(event_log, group)
        before_kill()
        broker.kill()
        broker.start()
        assert _committed(bootstrap, group, topic) == before
        confluent_produce(bootstrap, topic, make_records(30, PARTITIONS))
        got = _poll([consumer], 30, timeout=90)
        assert len(got) == 30 and all(offset >= before[p] for p, offset in got)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return generations, _generations(event_log, group)[len(generations):]


@pytest.mark.spec("GroupCoordinatorDurable", "BrokerRestart", "bands", "loadLife", "floor", "Raise")
def test_a_crash_whose_redis_restarted_raises_generations_to_a_new_band(
        logged_korvet: KorvetProcess, unique_name: str) -> None:
    event_log = logged_korvet.data_dir.parent / "coordinator.ndjson"
    before, after = _resume_after_crash(logged_korvet, event_log, unique_name,
                                        f"{unique_name}-g")
    assert before and max(before) < BAND
    assert after and min(after) > BAND, f"generations after the crash: {after}"
    loads = [json.loads(line)["load"] for line in event_log.read_text().splitlines()
             if '"load"' in line]
    assert [load["lossy"] for load in loads] == [False, True]


def test_the_bands_wrap_before_generations_leave_int32(logged_korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    """The coordinator's record says band 2,047 is open, the last whose generations fit the
    protocol's int32 (2,047 lossy loads, a week of a crash loop): the next lossy load opens
    band 1, and the group forms again there. Before, it opened generation 2^31, no JoinGroup
    answer could be encoded, and every group stopped for good."""
    event_log = logged_korvet.data_dir.parent / "coordinator.ndjson"

    def at_the_last_band() -> None:
        subprocess.run(["redis-cli", "-u", logged_korvet.redis_url, "HSET",
                        "korvet:coordinator", "bands", str(MAX_BAND),
                        "floor", str(MAX_BAND * BAND)], check=True, capture_output=True)
        time.sleep(1.5)  # fsynced (everysec) before the crash

    _, after = _resume_after_crash(logged_korvet, event_log, unique_name, f"{unique_name}-g",
                                   before_kill=at_the_last_band)
    assert after and all(BAND < g < 2 * BAND for g in after), f"generations: {after}"
    loads = [json.loads(line)["load"] for line in event_log.read_text().splitlines()
             if '"load"' in line]
    assert [(load["lossy"], load["floor"]) for load in loads][-1] == (True, BAND)


@pytest.mark.spec("GroupCoordinatorDurable", "CleanStop", "durMark", "diskMark")
def test_a_crash_whose_redis_kept_running_keeps_the_generation(tmp_path: Path,
                                                               unique_name: str) -> None:
    redis_server = EmbeddedRedis(tmp_path / "redis", appendfsync="everysec")
    url = redis_server.start()
    event_log = tmp_path / "coordinator.ndjson"
    broker = KorvetProcess(tmp_path / "korvet", extra_args=[
        "--redis-url", url, "--groups-event-log", str(event_log),
        "--groups-initial-rebalance-delay-ms", "300"])
    try:
        broker.start()
        _, after = _resume_after_crash(broker, event_log, unique_name, f"{unique_name}-g")
    finally:
        broker.stop()
        redis_server.stop()
    assert all(g < BAND for g in after), f"generations after the crash: {after}"
    loads = [json.loads(line)["load"] for line in event_log.read_text().splitlines()
             if '"load"' in line]
    assert [load["lossy"] for load in loads] == [False, False]


def test_an_fsync_barrier_left_behind_by_a_killed_broker_is_undone(tmp_path: Path) -> None:
    """A broker killed between the start-up barrier's CONFIG SET appendfsync always and the
    set back left a shared Redis fsyncing every write for good, and the next broker took it
    for the operator's choice (a new user's trial). The barrier now notes what it replaced,
    and the next start sets it back."""
    redis_server = EmbeddedRedis(tmp_path / "redis", appendfsync="everysec")
    url = redis_server.start()

    def redis(*args: str) -> str:
        return subprocess.run(["redis-cli", "-u", url, "--raw", *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--redis-url", url])
    try:
        broker.start()
        broker.stop()
        assert redis("CONFIG", "GET", "appendfsync").splitlines()[1] == "everysec"
        assert redis("HEXISTS", "korvet:coordinator", "fsync-restore") == "0"
        # what a broker killed inside its barrier leaves
        redis("CONFIG", "SET", "appendfsync", "always")
        redis("HSET", "korvet:coordinator", "fsync-restore", "everysec")
        broker.start()
        assert redis("CONFIG", "GET", "appendfsync").splitlines()[1] == "everysec"
        assert redis("HEXISTS", "korvet:coordinator", "fsync-restore") == "0"
        assert "appendfsync was left at 'always'" in broker.log_tail(100)
        # a fresh note may be another broker's barrier in progress: left alone
        broker.stop()
        redis("CONFIG", "SET", "appendfsync", "always")
        redis("HSET", "korvet:coordinator", "fsync-restore", f"everysec {int(time.time() * 1000)}")
        broker.start()
        assert redis("CONFIG", "GET", "appendfsync").splitlines()[1] == "always"
        assert redis("HEXISTS", "korvet:coordinator", "fsync-restore") == "1"
        # an operator's own 'always' (no note) is kept
        broker.stop()
        redis("HDEL", "korvet:coordinator", "fsync-restore")
        broker.start()
        assert redis("CONFIG", "GET", "appendfsync").splitlines()[1] == "always"
    finally:
        broker.stop()
        redis_server.stop()


@pytest.mark.spec("GroupCoordinatorDurable", "BrokerRestart", "Raise")
def test_several_brokers_raise_a_group_only_under_its_lease(tmp_path: Path,
                                                           unique_name: str) -> None:
    """Several brokers: a broker whose start finds that Redis may have lost writes opens a
    new band, but writes no group: another broker may own it. Before, it wrote every
    group's raised snapshot without the lease, over the snapshot the owner keeps writing.
    The group is raised when a broker adopts it, and written under that broker's lease."""
    redis_server = EmbeddedRedis(tmp_path / "redis", appendfsync="everysec")
    url = redis_server.start()
    group, topic = f"{unique_name}-g", unique_name
    snapshot_key = f"korvet:{{group:{group}}}:snapshot"
    admin = redis.Redis.from_url(url)

    def generation() -> int:
        text = admin.get(snapshot_key)
        assert text is not None, "no snapshot of the group"
        return read_group(json.loads(text)).generation

    def broker(name: str, broker_id: str) -> KorvetProcess:
        return KorvetProcess(tmp_path / name, extra_args=[
            "--redis-url", url, "--multi-broker", "--broker-id", broker_id,
            "--groups-initial-rebalance-delay-ms", "300"])

    first = broker("first", "1").start()
    second = broker("second", "2")
    consumer = None
    try:
        create_topic(first.bootstrap, topic, PARTITIONS)
        confluent_produce(first.bootstrap, topic, make_records(30, PARTITIONS))
        consumer = _consumer(first.bootstrap, group)
        consumer.subscribe([topic])
        assert len(_poll([consumer], 30)) == 30
        consumer.commit(asynchronous=False)
        owned = generation()
        assert 0 < owned < BAND
        # Redis "restarted since the last load, without the clean-stop mark": the next
        # broker's load is lossy and opens a band.
        admin.hset("korvet:coordinator", mapping={"redis-run-id": "another-life", "clean": "0"})
        second.start()
        assert int(admin.hget("korvet:coordinator", "floor") or 0) >= BAND
        time.sleep(2)  # the first broker's group, left alone: no write by the second broker
        assert generation() == owned, "a broker without the group's lease wrote its snapshot"
        deadline = time.monotonic() + 30  # the consumer learns of the second broker
        while len(consumer.list_topics(timeout=10).brokers) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        first.stop()  # the group moves to the second broker, which adopts and raises it
        confluent_produce(second.bootstrap, topic, make_records(30, PARTITIONS))
        assert len(_poll([consumer], 30, timeout=90)) == 30
        consumer.commit(asynchronous=False)
        assert generation() > BAND, f"adopted at generation {generation()}: not raised"
    finally:
        if consumer is not None:
            consumer.close()
        second.stop()
        first.stop()
        redis_server.stop()
