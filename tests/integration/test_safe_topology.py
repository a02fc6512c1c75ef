"""No unsafe topology: every broker claims its broker id in its keyspace (server/claim.py).

One bare redis-server per test (not embedded in a broker) and ``korvet serve`` processes
on it, with a short claim time (``cluster.broker-ttl-ms`` 1500):

- a second broker without ``--multi-broker`` on a Redis a single broker serves refuses to
  start (exit 2), naming the other broker's id and address and ``--multi-broker``; so does
  one with ``--multi-broker``, and a single broker next to a multi-broker one, and a second
  multi-broker broker with a broker id already held;
- a single broker killed with -9 leaves a claim that ends (the default time, 6 s): the
  broker restarted on the same Redis at once starts (it waits for the claim to end) and a
  consumer group reads through it;
- a Redis that loses the claims (FLUSHALL, as a restart without persistence would): the
  single broker claims again at its next renewal and keeps serving, and a second broker is
  still refused;
- a single broker paused (SIGSTOP) past its claim while another broker starts: the second
  takes over (a consumer group reads every record through it) and the resumed one stops
  (exit 1) naming it, rather than coordinating the group a second time.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import KorvetProcess
from tests.integration.clients import confluent_produce, make_records
from tests.integration.test_clients import create_topic

pytest.importorskip("confluent_kafka")

TTL = ["--cluster-broker-ttl-ms", "1500", "--cluster-lease-margin-ms", "300"]


def _broker(folder: Path, url: str, *args: str, ttl: list[str] = TTL) -> KorvetProcess:
    return KorvetProcess(folder, extra_args=["--redis-url", url, *ttl, *args])


def _refused(broker: KorvetProcess, timeout: float = 20) -> str:
    """Start ``broker`` expecting a refusal: its exit code must be 2; returns its log."""
    with pytest.raises(RuntimeError):
        broker.start(timeout=timeout)
    assert broker.process is not None
    assert broker.process.wait(10) == 2
    broker.process = None
    return broker.log_tail(80)


def _consume_group(bootstrap: str, topic: str, group: str, want: int,
                   timeout: float = 60) -> int:
    from confluent_kafka import Consumer

    consumer: Any = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while seen < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
    finally:
        consumer.close()
    return seen


def test_a_second_broker_on_a_single_brokers_redis_is_refused(
        fresh_redis_url: str, tmp_path: Path) -> None:
    first = _broker(tmp_path / "first", fresh_redis_url, "--broker-id", "1").start()
    try:
        log = _refused(_broker(tmp_path / "plain", fresh_redis_url, "--broker-id", "2"))
        assert f"broker 1 at 127.0.0.1:{first.port}" in log
        assert "as the single broker" in log and "--multi-broker" in log
        log = _refused(_broker(tmp_path / "multi", fresh_redis_url, "--broker-id", "2",
                               "--multi-broker"))
        assert f"broker 1 at 127.0.0.1:{first.port}" in log and "--multi-broker" in log
        log = _refused(_broker(tmp_path / "same", fresh_redis_url))  # both broker id 0 vs 1
        assert "broker 1 at" in log
        assert first.process is not None and first.process.poll() is None
    finally:
        first.stop()


def test_a_single_broker_next_to_multi_brokers_and_a_taken_broker_id_are_refused(
        fresh_redis_url: str, tmp_path: Path) -> None:
    first = _broker(tmp_path / "first", fresh_redis_url, "--broker-id", "1", "--multi-broker").start()
    second = _broker(tmp_path / "second", fresh_redis_url, "--broker-id", "2",
                     "--multi-broker").start()  # several brokers as documented: fine
    try:
        log = _refused(_broker(tmp_path / "plain", fresh_redis_url, "--broker-id", "3"))
        assert "with cluster.multi-broker" in log and "--multi-broker" in log
        assert f"broker 1 at 127.0.0.1:{first.port}" in log or \
            f"broker 2 at 127.0.0.1:{second.port}" in log
        log = _refused(_broker(tmp_path / "twin", fresh_redis_url, "--broker-id", "2",
                               "--multi-broker"))
        assert f"broker 2 at 127.0.0.1:{second.port} holds broker id 2" in log
        assert "--broker-id" in log
    finally:
        second.stop()
        first.stop()


def test_a_single_broker_killed_and_restarted_on_its_redis_starts_again(
        fresh_redis_url: str, tmp_path: Path) -> None:
    # the default claim time (6 s): the restarted broker is up before the dead one's ends
    broker = _broker(tmp_path / "broker", fresh_redis_url, ttl=[]).start()
    topic = f"restart-{time.monotonic_ns()}"
    create_topic(broker.bootstrap, topic, partitions=2)
    confluent_produce(broker.bootstrap, topic, make_records(50, 2))
    broker.kill()
    started = time.monotonic()
    broker.start()
    try:
        assert time.monotonic() - started < 10
        assert _consume_group(broker.bootstrap, topic, "after-restart", 50) == 50
    finally:
        broker.stop()


def test_a_single_broker_claims_again_when_redis_lost_its_claim(
        fresh_redis_url: str, tmp_path: Path) -> None:
    broker = _broker(tmp_path / "broker", fresh_redis_url, "--broker-id", "1").start()
    try:
        redis.Redis.from_url(fresh_redis_url).flushall()
        time.sleep(2.0)  # past the claim's 1.5 s: renewals ran meanwhile
        assert broker.process is not None and broker.process.poll() is None, broker.log_tail()
        assert "lost its claim" not in broker.log_tail(80)
        log = _refused(_broker(tmp_path / "second", fresh_redis_url, "--broker-id", "2"))
        assert f"broker 1 at 127.0.0.1:{broker.port}" in log
        topic = f"flushed-{time.monotonic_ns()}"
        create_topic(broker.bootstrap, topic, partitions=1)
        confluent_produce(broker.bootstrap, topic, make_records(10, 1))
        assert _consume_group(broker.bootstrap, topic, "after-flush", 10) == 10
    finally:
        broker.stop()


def test_a_paused_single_broker_that_lost_its_claim_stops(
        fresh_redis_url: str, tmp_path: Path) -> None:
    first = _broker(tmp_path / "first", fresh_redis_url, "--broker-id", "1").start()
    second = _broker(tmp_path / "second", fresh_redis_url, "--broker-id", "2")
    topic = f"paused-{time.monotonic_ns()}"
    try:
        create_topic(first.bootstrap, topic, partitions=4)
        confluent_produce(first.bootstrap, topic, make_records(400, 4))
        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)
        time.sleep(2.0)  # past the claim's 1.5 s
        second.start()
        assert _consume_group(second.bootstrap, topic, "one-group", 400) == 400
        first.process.send_signal(signal.SIGCONT)
        assert first.process.wait(15) == 1
        log = first.log_tail(80)
        assert "lost its claim" in log and f"broker 2 at 127.0.0.1:{second.port}" in log
        first.process = None
    except subprocess.TimeoutExpired:
        pytest.fail(f"the paused broker kept serving after losing its claim:\n{first.log_tail()}")
    finally:
        if first.process is not None:
            first.process.send_signal(signal.SIGCONT)
        first.stop()
        second.stop()
