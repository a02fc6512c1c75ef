"""Compacted topics (issue 34) through a real broker process, its embedded redis-server and real
clients: keyless records refused, and the log cleaner (korvet/server/cleaner.py,
korvet/storage/lua/clean.lua, spec/Compaction.tla) keeping the latest value of each key with
its original offset.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.conftest import KorvetProcess

pytestmark = pytest.mark.clients


def create(broker: KorvetProcess, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, config=configs)])[name].result(30)


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_refuses_records_without_a_key(korvet: KorvetProcess,
                                                         policy: str) -> None:
    """Kafka's answer, INVALID_RECORD (87), reaches librdkafka's delivery report; a keyed
    record on the same topic is stored, and a keyless one on a `delete` topic too."""
    name = f"keyless-{uuid.uuid4().hex[:8]}"
    create(korvet, name, {"cleanup.policy": policy})
    create(korvet, name + "-delete", {"cleanup.policy": "delete"})
    producer = Producer({"bootstrap.servers": korvet.bootstrap, "retries": 0})
    reports: dict[str, KafkaError | None] = {}

    def report(tag: str):  # type: ignore[no-untyped-def]
        def done(err: KafkaError | None, _msg: object) -> None:
            reports[tag] = err
        return done

    producer.produce(name, value=b"v", on_delivery=report("keyless"))
    producer.flush(30)
    producer.produce(name, key=b"k", value=b"v", on_delivery=report("keyed"))
    producer.produce(name + "-delete", value=b"v", on_delivery=report("delete-topic"))
    producer.flush(30)
    keyless = reports["keyless"]
    assert keyless is not None and keyless.code() == KafkaError.INVALID_RECORD, keyless
    assert reports["keyed"] is None
    assert reports["delete-topic"] is None

