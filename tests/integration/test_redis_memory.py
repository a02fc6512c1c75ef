"""A Redis that can lose keys is refused; a full one is told (server/redis_memory.py).

One bare redis-server per test (not embedded: its maxmemory and policy are set here with
CONFIG SET, as an operator would) and a ``korvet serve`` on it:

- ``allkeys-lru``: the broker refuses to start (exit 2) with a message naming the policy,
  ``CONFIG SET maxmemory-policy noeviction`` and ``redis.accept-eviction``; with
  ``--redis-accept-eviction`` it starts, serves a producer and consumer, and its metric
  says the policy is unsafe;
- the policy switched to ``allkeys-lfu`` while the broker runs: readiness turns DOWN with
  the reason, the metric turns 1, the log says it (once per interval, not more); switched
  back, readiness is UP again;
- a Redis past a tiny ``maxmemory`` under noeviction: a produce gets KAFKA_STORAGE_ERROR,
  readiness is DOWN saying Redis is full, the log has one line per interval for a burst of
  refused appends (none per request), and a confluent-kafka producer that keeps retrying
  has every record acknowledged once memory is raised.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.schema.errors import ErrorCode

from tests.conftest import KorvetProcess
from tests.integration.clients import confluent_consume, confluent_produce, make_records
from tests.integration.test_broker_behaviour import batch, produce_request
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytest.importorskip("confluent_kafka")

INTERVAL_MS = 1000


def _broker(folder: Path, url: str, *args: str) -> KorvetProcess:
    return KorvetProcess(folder, extra_args=[
        "--redis-url", url, "--redis-memory-check-interval-ms", str(INTERVAL_MS), *args])


def _readiness(broker: KorvetProcess) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{broker.http_port}/health/readiness"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _metric(broker: KorvetProcess, name: str) -> float:
    url = f"http://127.0.0.1:{broker.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def _until(check: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_an_evicting_redis_is_refused_at_start_unless_accepted(
        fresh_redis_url: str, tmp_path: Path) -> None:
    redis.Redis.from_url(fresh_redis_url).config_set("maxmemory-policy", "allkeys-lru")
    refused = _broker(tmp_path / "refused", fresh_redis_url)
    with pytest.raises(RuntimeError):
        refused.start()
    assert refused.process is not None and refused.process.wait(10) == 2
    refused.process = None
    log = refused.log_tail(60)
    assert "maxmemory-policy allkeys-lru" in log
    assert "CONFIG SET maxmemory-policy noeviction" in log and "redis.accept-eviction" in log

    accepted = _broker(tmp_path / "accepted", fresh_redis_url, "--redis-accept-eviction").start()
    try:
        assert "acknowledged records may be evicted" in accepted.log_tail(60)
        topic = f"accepted-{time.monotonic_ns()}"
        create_topic(accepted.bootstrap, topic, partitions=1)
        confluent_produce(accepted.bootstrap, topic, make_records(20, 1))
        assert len(confluent_consume(accepted.bootstrap, topic, 1, 20)) == 20
        assert _metric(accepted, "korvet_redis_eviction_unsafe") == 1
        status, body = _readiness(accepted)
        assert status == 200, body
        assert body["components"]["redisMemory"]["details"]["evictionAccepted"] is True
    finally:
        accepted.stop()


def test_a_policy_switched_while_running_is_noticed(fresh_redis_url: str, tmp_path: Path) -> None:
    broker = _broker(tmp_path / "broker", fresh_redis_url).start()
    admin = redis.Redis.from_url(fresh_redis_url)
    try:
        assert _readiness(broker)[0] == 200
        assert _metric(broker, "korvet_redis_eviction_unsafe") == 0
        admin.config_set("maxmemory-policy", "allkeys-lfu")
        switched = time.monotonic()
        status, body = _until(lambda: (r := _readiness(broker))[0] == 503 and r)
        assert status == 503, body
        reason = body["components"]["redisMemory"]["details"]["reason"]
        assert "allkeys-lfu" in reason and "CONFIG SET maxmemory-policy noeviction" in reason
        assert _metric(broker, "korvet_redis_eviction_unsafe") == 1
        time.sleep(3 * INTERVAL_MS / 1000)
        lines = [line for line in broker.log_tail(200).splitlines()
                 if "maxmemory-policy allkeys-lfu" in line and "noticed while running" in line]
        elapsed = time.monotonic() - switched
        assert 1 <= len(lines) <= elapsed / (INTERVAL_MS / 1000) + 1, lines
        admin.config_set("maxmemory-policy", "noeviction")
        assert _until(lambda: _readiness(broker)[0] == 200)
    finally:
        broker.stop()


def test_a_full_redis_answers_storage_errors_says_why_and_logs_once_per_interval(
        fresh_redis_url: str, tmp_path: Path) -> None:
    broker = _broker(tmp_path / "broker", fresh_redis_url).start()
    admin = redis.Redis.from_url(fresh_redis_url)
    topic = f"full-{time.monotonic_ns()}"
    try:
        create_topic(broker.bootstrap, topic, partitions=1)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(used // 2))  # past it: every write is refused
        codes = []
        with WireClient(broker.bootstrap) as client:
            for i in range(30):
                response = client.request(produce_request(topic, {0: batch(5, start=i * 5)}))
                codes.append(response.responses[0].partition_responses[0].error_code)
                time.sleep(0.1)
        assert set(codes) == {ErrorCode.kafka_storage_error}, codes
        status, body = _readiness(broker)
        assert status == 503, body
        assert "Redis is full" in body["components"]["redisMemory"]["details"]["reason"]
        assert _metric(broker, "korvet_redis_full") == 1
        log = broker.log_tail(400).splitlines()
        full_lines = [line for line in log if "Redis is full: it refused" in line]
        assert 1 <= len(full_lines) <= 5, full_lines  # 30 refusals over ~3 s, 1 s interval
        assert not [line for line in log if f"append to {topic}-0 failed" in line]
        assert not [line for line in log if "Redis failed while answering" in line]

        # a producer that retries gets every record in once Redis has room again
        from confluent_kafka import Producer

        producer: Any = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                  "enable.idempotence": True, "message.timeout.ms": 60000})
        delivered: list[Any] = []
        for i in range(10):
            producer.produce(topic, value=b"v%d" % i, partition=0,
                             on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(3)
        assert not delivered, "acknowledged while Redis was full"
        admin.config_set("maxmemory", "0")
        producer.flush(30)
        assert delivered == [None] * 10
        log = broker.log_tail(400).splitlines()  # the producer's retries: no line per request
        assert not [line for line in log if "Redis failed while answering" in line]
        assert _until(lambda: _readiness(broker)[0] == 200, timeout=3 * INTERVAL_MS / 1000 + 10)
    finally:
        admin.config_set("maxmemory", "0")
        broker.stop()
