"""An upgrade: the broker of this wave started on a Redis that the second wave's broker
(commit 1eee073, before topics had an offset scheme) filled. tests/data/upgrade/wave2.rdb
is that Redis' data set and wave2.json what the old broker answered; both were written by
tests/support/make_upgrade_data.py. Nothing stored before the change may change meaning:
the old topics keep their time offsets, records, timestamps, headers and the group's
committed offsets, take new records after the old ones, and say they are `time` topics;
a topic created after the upgrade gets the new default, dense offsets from 0."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from korvet.server.embedded_redis import EmbeddedRedis
from tests.conftest import KorvetProcess

pytestmark = pytest.mark.clients

DATA = Path(__file__).resolve().parents[1] / "data" / "upgrade"


@pytest.fixture
def upgraded(tmp_path: Path) -> Iterator[tuple[KorvetProcess, dict[str, Any]]]:
    redis = EmbeddedRedis(tmp_path / "old", appendfsync="off")
    redis.redis_dir.mkdir(parents=True)
    shutil.copy(DATA / "wave2.rdb", redis.redis_dir / "dump.rdb")  # loaded at start
    url = redis.start()
    broker = KorvetProcess(tmp_path / "broker", extra_args=["--redis-url", url])
    try:
        broker.start()
        yield broker, json.loads((DATA / "wave2.json").read_text())
    finally:
        broker.stop()
        redis.stop()


def read_all(bootstrap: str, topic: str, partition: int, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "upgrade-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, partition, -2)])
        got: list[Any] = []
        for _ in range(60):
            got.extend(m for m in consumer.consume(num_messages=100, timeout=0.5)
                       if m.error() is None)
            if len(got) >= count:
                break
        return got
    finally:
        consumer.close()


def test_the_old_topics_are_served_as_before(upgraded: tuple[KorvetProcess, dict[str, Any]]) -> None:
    broker, old = upgraded
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    for topic, described in old["topics"].items():
        assert len(topics[topic].partitions) == 2
        configs = admin.describe_configs([ConfigResource("topic", topic)])
        values = next(iter(configs.values())).result(30)
        assert values["korvet.offset.scheme"].value == "time"
        assert values["korvet.storage.format"].value == described["format"]
        for partition in (0, 1):
            wanted = [r for r in described["records"] if r["partition"] == partition]
            got = read_all(broker.bootstrap, topic, partition, len(wanted))
            assert [(m.offset(), m.key().decode(), m.value().decode(), m.timestamp()[1],
                     [[k, v.decode()] for k, v in m.headers() or []]) for m in got] == [
                (r["offset"], r["key"], r["value"], r["timestamp"], r["headers"]) for r in wanted]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": old["group"],
                         "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(t, 0) for t in old["topics"]], timeout=30)
    finally:
        consumer.close()
    assert {tp.topic: tp.offset for tp in committed} == {
        t: d["committed"]["0"] for t, d in old["topics"].items()}


def test_old_topics_take_new_records_after_the_old_ones_and_new_topics_are_dense(
        upgraded: tuple[KorvetProcess, dict[str, Any]]) -> None:
    broker, old = upgraded
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    told: dict[str, int] = {}

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        told[msg.topic()] = msg.offset()

    for topic in old["topics"]:
        producer.produce(topic, key=b"new", value=b"after the upgrade", partition=0,
                         on_delivery=done)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("after-upgrade", num_partitions=1)])["after-upgrade"].result(30)
    producer.produce("after-upgrade", value=b"first", on_delivery=done)
    producer.produce("after-upgrade", value=b"second", on_delivery=done)
    assert producer.flush(30) == 0
    for topic, described in old["topics"].items():
        last_old = max(r["offset"] for r in described["records"] if r["partition"] == 0)
        assert told[topic] > last_old > 2**40  # a time offset, after the old records
        got = read_all(broker.bootstrap, topic, 0, 7)
        assert [m.value() for m in got][-1] == b"after the upgrade"
        assert got[-1].offset() == told[topic]
    assert told["after-upgrade"] == 1  # dense: the second record of a new topic
