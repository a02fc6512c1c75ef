"""The operations endpoint and the original product's configuration, on real brokers.

Two brokers share this module: ``external`` is an ordinary broker whose embedded Redis
plays "the operator's Redis"; ``broker`` is started the way a deployment written for the
original product starts it: ``KORVET_REDIS_URI`` pointing at that Redis, a namespace,
declared topics (``KORVET_TOPICS_<n>_*``) and one misspelt variable. The tests then
scrape its /metrics while a real client (confluent-kafka) produces and consumes in a
group, ask its probes, and finally stop the Redis under it.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, KorvetProcess
from tests.integration.clients import confluent_produce, make_records

DASHBOARD = ROOT / "docs" / "grafana" / "korvet-dashboard.json"


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    process = KorvetProcess(tmp_path_factory.mktemp("ops-external"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def broker(external: KorvetProcess,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    env = {
        "KORVET_REDIS_URI": external.redis_url,
        "KORVET_NAMESPACE": "ops",
        "KORVET_TOPICS_0_NAME": "*",
        "KORVET_TOPICS_0_PARTITIONS": "2",
        "KORVET_TOPICS_1_NAME": "declared-orders",
        "KORVET_TOPICS_1_PARTITIONS": "3",
        "KORVET_TOPICS_1_LOG_APPEND_TIMESTAMP_HEADER": "true",
        "KORVET_TOPICS_1_RETENTION_TIME": "2d",
        "KORVET_TOPICS_2_NAME": "manual-*",
        "KORVET_TOPICS_2_AUTO_CREATE": "false",
        "KORVET_BROKER_PROT": "1",  # a typo: warned about, with the closest known name
    }
    process = KorvetProcess(tmp_path_factory.mktemp("ops-broker"), env=env,
                            extra_args=["--groups-initial-rebalance-delay-ms", "0"])
    process.start()
    yield process
    process.stop()


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(broker: KorvetProcess) -> tuple[Samples, set[str]]:
    """Every sample of /metrics by (name, labels), and every family and sample name."""
    status, content_type, text = _get(broker.http_port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples: Samples = {}
    names: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",)}
    for family in text_string_to_metric_families(text):
        # A family is exported even before its first sample (errors by code, lag records).
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
        for sample in family.samples:
            names.add(sample.name)
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples, names


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_serve_says_which_redis_it_uses_and_warns_about_unknown_variables(
        broker: KorvetProcess, external: KorvetProcess) -> None:
    log = broker.log_tail(200)
    assert (f"using Redis at {external.redis_url} (from environment variable KORVET_REDIS_URI)"
            in log)
    assert re.search(r"warning: environment variable KORVET_BROKER_PROT: unknown setting; "
                     r"did you mean KORVET_BROKER_PORT\?", log), log
    assert "HTTP endpoint on http://127.0.0.1:" in log


def test_the_given_redis_holds_the_data_under_the_namespace(
        broker: KorvetProcess, external: KorvetProcess) -> None:
    # The declared topic exists from the start, with its partitions, in the operator's Redis.
    described = subprocess.run(
        ["redis-cli", "-u", external.redis_url, "HGET", "ops:{topics}:topic:declared-orders", "partitions"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert described == "3"
    before = time.time_ns() // 1_000_000
    confluent_produce(broker.bootstrap, "declared-orders", make_records(5, 3))
    after = time.time_ns() // 1_000_000
    length = subprocess.run(["redis-cli", "-u", external.redis_url, "XLEN",
                             "ops:{declared-orders:0}:stream"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert int(length) == 2  # records 0 and 3 went to partition 0
    # log.append.timestamp.header=true (declared): each record carries its arrival time.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ops-header-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("declared-orders", 0, OFFSET_BEGINNING)])
    try:
        got: list[Message] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(10, timeout=1.0) if not m.error()]
    finally:
        consumer.close()
    assert len(got) == 2
    for message in got:
        headers = dict(message.headers() or [])
        stamp_text = headers["korvet.log.append.timestamp.ms"]
        assert isinstance(stamp_text, bytes)
        stamp = int(stamp_text)
        assert before <= stamp <= after
        assert headers["idx"] in (b"0", b"3")  # the producer's own headers are kept


def test_declared_patterns_set_partitions_and_auto_creation(broker: KorvetProcess) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    confluent_produce(broker.bootstrap, "anything-else", make_records(1, 1))
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["anything-else"].partitions) == 2  # from the '*' declaration
    metadata = admin.list_topics(topic="manual-never", timeout=10)
    assert metadata.topics["manual-never"].error is not None  # auto-create: false for manual-*
    assert "manual-never" not in admin.list_topics(timeout=10).topics


def test_probes_answer_in_the_actuator_shape(broker: KorvetProcess) -> None:
    for path in ("/health/liveness", "/actuator/health/liveness"):
        status, content_type, body = _get(broker.http_port, path)
        assert (status, content_type, json.loads(body)) == (200, "application/json",
                                                            {"status": "UP"})
    for path in ("/health/readiness", "/actuator/health/readiness", "/actuator/health"):
        status, _, body = _get(broker.http_port, path)
        document = json.loads(body)
        assert status == 200 and document["status"] == "UP", body
        assert document["components"]["redis"]["status"] == "UP"
    status, content_type, text = _get(broker.http_port, "/actuator/prometheus")
    assert status == 200 and "korvet_broker_produce_records_total" in text
    assert _get(broker.http_port, "/no/such/path")[0] == 404


def _consume(consumer: Consumer, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        got += [m for m in consumer.consume(min(500, count - len(got)), timeout=1.0)
                if not m.error()]
    assert len(got) == count, f"consumed {len(got)} of {count}"
    return got


def _assert_unread_lag(samples: Samples, labels: dict[str, str], scheme: str, unread: int) -> None:
    if scheme == "dense":
        assert _value(samples, "korvet_consumer_group_lag_offsets", **labels) == unread
        assert _value(samples, "korvet_consumer_group_lag_records", **labels) == unread
        assert _value(samples, "korvet_consumer_group_lag_seconds", **labels) is None
    else:
        # at least the unread records: equal when they were appended in one millisecond
        assert (_value(samples, "korvet_consumer_group_lag_offsets", **labels) or 0) >= unread
        assert (_value(samples, "korvet_consumer_group_lag_seconds", **labels) or 0) >= 0
        # Redis' own count, or absent where Redis cannot count without a scan.
        assert _value(samples, "korvet_consumer_group_lag_records", **labels) in (None, unread)


@pytest.mark.parametrize("scheme", ["dense", "time"])
def test_metrics_move_during_a_produce_consume_run_and_lag_falls_to_zero(
        broker: KorvetProcess, scheme: str) -> None:
    """Lag series: on a dense topic (the default) offsets count records, so the records
    series is the offsets' difference and there is no seconds series; on a time topic the
    offsets' difference counts offsets, Redis counts records where it can, and the
    seconds series is the append-time distance."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, group, count = f"ops-lag-{scheme}", f"ops-lag-group-{scheme}", 400
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1,
                                  config={"korvet.offset.scheme": scheme})])[topic].result(30)
    start, _ = _scrape(broker)
    confluent_produce(broker.bootstrap, topic, [r for r in make_records(count, 1)])
    produced, _ = _scrape(broker)
    assert _value(produced, "korvet_broker_produce_records_total", topic=topic) == count
    assert (_value(produced, "korvet_storage_write_messages_total", tier="local") or 0) >= (
        (_value(start, "korvet_storage_write_messages_total", tier="local") or 0) + count)
    assert (_value(produced, "korvet_broker_produce_seconds_count", topic=topic) or 0) >= 1
    assert (_value(produced, "korvet_broker_requests_total", api_key="PRODUCE") or 0) > (
        _value(start, "korvet_broker_requests_total", api_key="PRODUCE") or 0)
    assert _value(produced, "korvet_storage_entries", topic=topic) == count
    labels = {"group": group, "topic": topic, "partition": "0"}

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        first = _consume(consumer, 150)
        consumer.commit(message=first[-1], asynchronous=False)
        middle, _ = _scrape(broker)
        assert (_value(middle, "korvet_broker_fetch_records_total", topic=topic) or 0) >= 150
        assert _value(middle, "korvet_group_members", group=group) == 1
        assert (_value(middle, "korvet_group_rebalances_total", group=group) or 0) >= 1
        assert (_value(middle, "korvet_groups", state="Stable") or 0) >= 1
        _assert_unread_lag(middle, labels, scheme, 250)

        rest = _consume(consumer, count - 150)
        consumer.commit(message=rest[-1], asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        last = rest[-1].offset()
        assert last is not None and committed[0].offset == last + 1
        done, _ = _scrape(broker)
    finally:
        consumer.close()
    assert _value(done, "korvet_consumer_group_lag_offsets", **labels) == 0
    assert _value(done, "korvet_consumer_group_lag_records", **labels) == 0
    assert _value(done, "korvet_consumer_group_lag_seconds", **labels) == (
        None if scheme == "dense" else 0)
    assert (_value(done, "korvet_broker_fetch_records_total", topic=topic) or 0) >= count
    assert (_value(done, "korvet_broker_fetch_seconds_count", topic=topic) or 0) >= 1
    assert (_value(done, "korvet_broker_requests_total", api_key="FETCH") or 0) > (
        _value(start, "korvet_broker_requests_total", api_key="FETCH") or 0)
    assert (_value(done, "korvet_broker_requests_total", api_key="OFFSET_COMMIT") or 0) >= 2
    assert (_value(done, "korvet_broker_frame_size_bytes_sum", api_key="FETCH",
                   direction="response") or 0) > 0
    assert (_value(done, "korvet_broker_network_bytes_total", direction="out") or 0) > (
        _value(start, "korvet_broker_network_bytes_total", direction="out") or 0)
    assert (_value(done, "korvet_broker_connections") or 0) >= 0
    assert _value(done, "korvet_redis_up") == 1
    assert (_value(done, "korvet_redis_memory_used_bytes") or 0) > 0


def _dashboard_metrics() -> set[str]:
    document = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            if isinstance(node.get("query"), str) and "label_values" in node["query"]:
                exprs.append(node["query"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert len(exprs) >= 20, "the dashboard should chart the broker's metrics"
    names: set[str] = set()
    for expr in exprs:
        without_strings = re.sub(r'"[^"]*"', '""', expr)
        names |= set(re.findall(r"\b((?:korvet|process|python)_[a-zA-Z0-9_]+)", without_strings))
    return names


def test_every_dashboard_query_names_a_metric_the_broker_exports(broker: KorvetProcess) -> None:
    _, exported = _scrape(broker)
    wanted = _dashboard_metrics()
    assert wanted, "no metric names found in the dashboard"
    assert not wanted - exported, f"the dashboard queries unknown metrics: {wanted - exported}"


def test_readiness_fails_and_liveness_holds_when_redis_goes(
        broker: KorvetProcess, external: KorvetProcess) -> None:
    errors_before = _value(_scrape(broker)[0], "korvet_scrape_errors_total")
    assert errors_before is not None
    external.stop()  # its embedded Redis, which `broker` uses, stops with it
    status, _, body = _get(broker.http_port, "/health/readiness")
    assert status == 503
    document = json.loads(body)
    assert document["status"] == "OUT_OF_SERVICE"
    assert document["components"]["redis"]["status"] == "DOWN"
    assert _get(broker.http_port, "/health/liveness")[0] == 200
    assert _get(broker.http_port, "/actuator/health")[0] == 503
    samples, _ = _scrape(broker)
    assert _value(samples, "korvet_redis_up") == 0
    assert _value(samples, "korvet_scrape_errors_total") == errors_before + 1


def test_dashboard_file_is_grafana_json() -> None:
    document = json.loads(Path(DASHBOARD).read_text())
    assert document["title"] and document["panels"]
