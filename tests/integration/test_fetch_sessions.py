"""Fetch sessions (KIP-227) with the clients that use them: Kafka's Java consumer (4.3.1,
from the pinned jars) and kafka-python. librdkafka does not use fetch sessions (it sends
session 0, epoch -1 on every Fetch), so it is the sessionless case elsewhere.

Each client consumes a 40-partition topic while records keep arriving, and must read
every record exactly once; the broker (logging every request, DEBUG) must have given it a
session and served it incrementally: after the first full request, fetches name only the
partitions whose position changed instead of all 40. The broker keeps at most two
sessions here (fetch.max-sessions 2): a third consumer gets none and still reads
everything.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from korvet.jvm.java_clients import ConsumeResult, KafkaJavaTools
from tests.conftest import KorvetProcess
from tests.integration import clients
from tests.integration.clients import Got, Rec
from tests.integration.test_clients import create_topic

pytestmark = [pytest.mark.clients, pytest.mark.slow]

PARTITIONS = 40
FIRST, LATER = 400, 400  # records before the consumer starts, and while it reads


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    # No initial rebalance delay (not tested here): the Java consumer's group forms at once.
    process = KorvetProcess(tmp_path_factory.mktemp("fetch-sessions"), extra_args=[
        "--log-level", "DEBUG", "--redis-appendfsync", "off", "--fetch-max-sessions", "2",
        "--groups-initial-rebalance-delay-ms", "0"])
    process.start()
    yield process
    process.stop()


def records(count: int, start: int) -> list[Rec]:
    now = int(time.time() * 1000)
    return [Rec(partition=(start + i) % PARTITIONS, key=b"k%d" % (start + i),
                value=b"v%d" % (start + i), headers=(), timestamp=now) for i in range(count)]


def produce_slowly(bootstrap: str, topic: str, reading: Callable[[], bool]) -> threading.Thread:
    """LATER records in small bursts over about a second, once the consumer is ``reading``
    (or after 30 s, when the test fails anyway)."""
    def run() -> None:
        deadline = time.monotonic() + 30
        while not reading() and time.monotonic() < deadline:
            time.sleep(0.1)
        for burst in range(10):
            clients.confluent_produce(bootstrap, topic, records(LATER // 10, FIRST + burst * 40))
            time.sleep(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def session_lines(broker: KorvetProcess, mark: int) -> list[tuple[int, int, str, int, int]]:
    """(session id, epoch, context, partitions named, partitions read) per Fetch since mark."""
    assert broker.log_path is not None
    text = broker.log_path.read_text(errors="replace")[mark:]
    return [(int(sid), int(epoch), context, int(named), int(read)) for sid, epoch, context, named,
            read in re.findall(r"fetch session (-?\d+) epoch (-?\d+): (\w+) \w+, (\d+) partitions "
                               r"named, \d+ forgotten, (\d+) to read", text)]


def log_size(broker: KorvetProcess) -> int:
    assert broker.log_path is not None
    return len(broker.log_path.read_text(errors="replace"))


def assert_incremental(lines: list[tuple[int, int, str, int, int]]) -> None:
    full = [line for line in lines if line[2] == "full"]
    incremental = [line for line in lines if line[2] == "incremental"]
    assert full, "the client never asked for a session"
    assert len(incremental) >= 5, f"only {len(incremental)} incremental fetches: {lines[:20]}"
    assert all(read == PARTITIONS for *_, read in incremental), "a session lost partitions"
    named = [n for *_, n, _ in incremental]
    # Once in a session, a fetch names the partitions whose position moved, not all 40.
    assert statistics.median(named) < PARTITIONS / 2, f"partitions named per fetch: {named}"
    assert min(named) < PARTITIONS
    assert not [line for line in lines if line[2] == "error"], "a session error"


def assert_exactly_once(got: list[tuple[int, bytes | None]]) -> None:
    values = sorted(v or b"" for _, v in got)
    assert values == sorted(b"v%d" % i for i in range(FIRST + LATER))
    for partition, value in got:
        assert int((value or b"v-1")[1:]) % PARTITIONS == partition


def test_java_consumer_reads_everything_through_an_incremental_session(
        broker: KorvetProcess, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, PARTITIONS)
    clients.confluent_produce(broker.bootstrap, unique_name, records(FIRST, 0))
    mark = log_size(broker)
    producer = produce_slowly(broker.bootstrap, unique_name,
                              reading=lambda: bool(session_lines(broker, mark)))
    tools = KafkaJavaTools(broker.bootstrap, timeout=120)
    result: ConsumeResult = tools.console_consume(unique_name, max_messages=FIRST + LATER,
                                                  group=f"{unique_name}-g", idle_timeout_ms=8000)
    producer.join(30)
    got: list[tuple[int, bytes | None]] = [(r.partition, (r.value or "").encode())
                                           for r in result.records]
    assert len(got) == FIRST + LATER
    assert_exactly_once(got)
    assert_incremental(session_lines(broker, mark))


def test_kafka_python_reads_everything_through_an_incremental_session(
        broker: KorvetProcess, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, PARTITIONS)
    clients.confluent_produce(broker.bootstrap, unique_name, records(FIRST, 0))
    mark = log_size(broker)
    producer = produce_slowly(broker.bootstrap, unique_name,
                              reading=lambda: bool(session_lines(broker, mark)))
    got: list[Got] = clients.kafka_python_consume(broker.bootstrap, unique_name, PARTITIONS,
                                                  FIRST + LATER)
    producer.join(30)
    assert len(got) == FIRST + LATER
    assert_exactly_once([(g.partition, g.value) for g in got])
    assert_incremental(session_lines(broker, mark))


def test_a_full_session_table_leaves_a_consumer_sessionless_but_served(
        broker: KorvetProcess, unique_name: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    create_topic(broker.bootstrap, unique_name, PARTITIONS)
    clients.confluent_produce(broker.bootstrap, unique_name, records(FIRST + LATER, 0))
    consumers = []
    try:
        mark = log_size(broker)
        for _ in range(3):  # each holds its session (fresh ones are not evicted)
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                     auto_offset_reset="earliest", group_id=None)
            tps = [TopicPartition(unique_name, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            consumers.append(consumer)
        for consumer in consumers:
            got: list[tuple[int, bytes | None]] = []
            deadline = time.monotonic() + 60
            while len(got) < FIRST + LATER and time.monotonic() < deadline:
                for tp, messages in consumer.poll(timeout_ms=500, max_records=2000).items():
                    got.extend((tp.partition, m.value) for m in messages)
            assert_exactly_once(got)
        assert broker.log_path is not None
        text = broker.log_path.read_text(errors="replace")[mark:]
        assert "no fetch session slot free (2 sessions held)" in text
    finally:
        for consumer in consumers:
            consumer.close()
