"""Kafka Connect 4.3.1 in distributed mode on Korvet, from the pinned jars.

A distributed worker keeps its connectors' configurations, source offsets and statuses in
three compacted topics (cleanup.policy=compact), replayed from their start when a worker
starts. The test runs the file connectors Kafka ships (FileStreamSource into a topic,
FileStreamSink out of it), stops the worker, adds lines, starts it again and checks that it
found its connectors in the config topic and went on where it stopped: every line arrives
once, in order. With ``exactly.once.source.support=enabled`` (KIP-618: the source task's
records and its offsets written in one transaction) a worker killed with -9 while the
source writes loses and duplicates no line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from korvet.jvm.java_clients import KafkaJavaTools
from korvet.process import free_port, stop_process
from tests.conftest import KorvetProcess

pytestmark = [pytest.mark.clients, pytest.mark.slow]

WORKER_TOPICS = ("connect-configs", "connect-offsets", "connect-status")


class Worker:
    def __init__(self, tmp_path: Path, bootstrap: str, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.properties = tmp_path / "worker.properties"
        self.properties.write_text("\n".join([
            f"bootstrap.servers={bootstrap}",
            "group.id=korvet-connect",
            *(f"{kind}.storage.topic={topic}"
              for kind, topic in zip(("config", "offset", "status"), WORKER_TOPICS, strict=True)),
            *(f"{kind}.storage.replication.factor=1" for kind in ("config", "offset", "status")),
            "offset.storage.partitions=2",
            "status.storage.partitions=1",
            "key.converter=org.apache.kafka.connect.json.JsonConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms=1000",
            f"listeners=http://127.0.0.1:{self.port}",
            *extra,
        ]) + "\n")
        self.command = KafkaJavaTools(bootstrap).command(
            "org.apache.kafka.connect.cli.ConnectDistributed", [str(self.properties)])
        self.log = tmp_path / "worker.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            assert self.process.poll() is None, f"the worker exited:\n{self.tail()}"
            try:
                if self.rest("GET", "/connectors") is not None:
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, f"no REST answer in 90 s:\n{self.tail()}"
            time.sleep(0.5)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            stop_process(self.process, sig, timeout=60)
            self.process = None

    def rest(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[KorvetProcess, Worker]]:
    broker = KorvetProcess(tmp_path / "broker").start()
    connect = Worker(tmp_path, broker.bootstrap)
    try:
        yield broker, connect
    finally:
        connect.stop()
        broker.stop()


def wait_for_lines(path: Path, expected: list[str], worker: Worker, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    got: list[str] = []
    while time.monotonic() < deadline:
        got = path.read_text().splitlines() if path.exists() else []
        if len(got) >= len(expected):
            break
        time.sleep(0.5)
    first_wrong = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False))
                        if a != b), min(len(got), len(expected)))
    assert got == expected, (f"{len(got)} lines of {len(expected)}; first difference at line "
                             f"{first_wrong}\n{worker.tail()}")


def test_connect_distributed_keeps_its_connectors_and_offsets_across_a_restart(
        worker: tuple[KorvetProcess, Worker], tmp_path: Path) -> None:
    broker, connect = worker
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {n}" for n in range(1, 501)]
    source.write_text("\n".join(lines) + "\n")
    connect.start()
    for name, config in (
            ("lines-in", {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                          "topic": "connect-lines", "file": str(source)}),
            ("lines-out", {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                           "topics": "connect-lines", "file": str(sink)})):
        connect.rest("POST", "/connectors", {"name": name, "config": {"tasks.max": "1", **config}})
    wait_for_lines(sink, lines, connect)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([ConfigResource("topic", t) for t in WORKER_TOPICS])
    for resource, future in described.items():
        assert future.result(30)["cleanup.policy"].value == "compact", resource

    connect.stop()
    more = [f"line {n}" for n in range(501, 801)]
    with source.open("a") as out:
        out.write("\n".join(more) + "\n")
    connect.start()  # reads its connectors back from connect-configs, its offsets back
    assert sorted(connect.rest("GET", "/connectors")) == ["lines-in", "lines-out"]
    wait_for_lines(sink, lines + more, connect)
    for name in ("lines-in", "lines-out"):
        status = connect.rest("GET", f"/connectors/{name}/status")
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status


def test_connect_exactly_once_source_survives_a_killed_worker(tmp_path: Path) -> None:
    """KIP-618 on Korvet: the worker fences the source task's transactional producer, each
    batch of lines and its file offset commit in one transaction; the worker is killed with
    -9 while the file is being read, started again, and the topic read committed holds every
    line exactly once, in order."""
    from tests.integration.test_transactions import list_latest, read_all

    broker = KorvetProcess(tmp_path / "broker").start()
    connect = Worker(tmp_path, broker.bootstrap,
                     ("exactly.once.source.support=enabled",
                      "consumer.isolation.level=read_committed"))
    try:
        source = tmp_path / "in.txt"
        lines = [f"line {n}" for n in range(1, 40_001)]
        source.write_text("\n".join(lines) + "\n")
        connect.start()
        connect.rest("POST", "/connectors", {"name": "lines-eos", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "topic": "connect-eos-lines", "file": str(source),
            "batch.size": "200", "exactly.once.support": "required",
            "transaction.boundary": "poll"}})
        def committed_end() -> int:
            try:  # at most a second: the worker reads the whole file in seconds
                return list_latest(broker.bootstrap, "connect-eos-lines", "read_committed",
                                   timeout=1)
            except Exception:  # the topic is not there yet
                return 0

        deadline = time.monotonic() + 120
        # killed at the first commit seen: a wait for 2,000 lines (with a ListOffsets that
        # waited 10 s while the topic was missing) once saw the whole file committed first
        while committed_end() == 0:
            assert time.monotonic() < deadline, f"nothing committed in 120 s:\n{connect.tail()}"
            time.sleep(0.2)
        connect.stop(signal.SIGKILL)  # mid-file: some transactions committed, one maybe open
        at_kill = committed_end()
        assert at_kill < len(lines) + 200, "the file was read whole before the kill"
        connect.start()
        # the last stable offset counts the lines and the markers: read once it is past the
        # lines and has stopped moving (a read of 40,000 records each round costs minutes)
        deadline = time.monotonic() + 240
        last, still = -1, 0
        while time.monotonic() < deadline and still < 3:
            end = committed_end()
            last, still = end, (still + 1 if end == last and end >= len(lines) else 0)
            time.sleep(1)
        got = [v for _, v in read_all(broker.bootstrap, "connect-eos-lines", "read_committed",
                                      idle=2)]
        assert [v.decode() for v in got] == lines, (
            f"{len(got)} lines of {len(lines)}, {len(got) - len(set(got))} repeated\n"
            f"{connect.tail()}\nthe broker's transaction log lines (fences, timeouts, refused "
            f"EndTxn):\n{_transaction_lines(broker)}")
    finally:
        connect.stop()
        broker.stop()


def _transaction_lines(broker: KorvetProcess) -> str:
    """What the broker logged of transactions: why a producer was fenced or refused."""
    if broker.log_path is None or not broker.log_path.is_file():
        return "(no broker log)"
    lines = [line for line in broker.log_path.read_text(errors="replace").splitlines()
             if "korvet.transactions" in line or "korvet.server.handlers.transactions" in line]
    return "\n".join(lines[-40:]) or "(none)"

