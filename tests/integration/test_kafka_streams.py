"""Kafka Streams 4.3.1 with ``processing.guarantee=exactly_once_v2`` on Korvet, from the pinned
jars (the ``streams`` jar set; the application is tests/support/StreamsEosCounter.java).

A stateful topology (a count per key into an in-memory store, each update written out) runs
while its input is produced, is killed with -9 part way, and starts again with the same
application id: its store is rebuilt from the changelog, its input read again from the
offsets committed with its last transaction. Read committed, the output holds for every key
exactly the counts 1, 2, ..., n in order: no record counted twice, none left out, nothing of
the killed instance's open transaction.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from korvet.jvm.java_clients import KafkaJavaTools
from korvet.jvm.kafka_server import jar_classpath
from korvet.process import stop_process
from tests.conftest import KorvetProcess
from tests.integration.test_transactions import create, read_all_keyed

pytestmark = [pytest.mark.clients, pytest.mark.slow]

APP = str(Path(__file__).resolve().parents[1] / "support" / "StreamsEosCounter.java")
KEYS, PER_KEY = 20, 60


class App:
    def __init__(self, bootstrap: str, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.command = KafkaJavaTools(bootstrap).command(APP, [bootstrap, str(folder / "state")])
        self.command[self.command.index("-cp") + 1] = jar_classpath("streams")
        self.log = folder / "app.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            stop_process(self.process, sig, timeout=60)
            self.process = None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def test_streams_exactly_once_v2_counts_exactly_through_a_killed_instance(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    broker = KorvetProcess(tmp_path / "broker").start()
    app = App(broker.bootstrap, tmp_path / "app")
    try:
        create(broker.bootstrap, "words", partitions=2)
        create(broker.bootstrap, "counts", partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

        def produce(rounds: range) -> None:
            for _ in rounds:
                for k in range(KEYS):
                    producer.produce("words", key=b"key-%02d" % k, value=b"x")
            producer.flush(30)

        app.start()
        produce(range(PER_KEY // 2))
        deadline = time.monotonic() + 120
        while len(read_all_keyed(broker.bootstrap, "counts", "read_committed")) < KEYS * 5:
            assert time.monotonic() < deadline, f"no counts in 120 s:\n{app.tail()}"
            assert app.process is not None and app.process.poll() is None, app.tail()
            time.sleep(1)
        app.stop(signal.SIGKILL)  # part way: committed transactions, perhaps one open
        produce(range(PER_KEY // 2, PER_KEY))
        app.start()
        expected = {b"key-%02d" % k: [b"%d" % n for n in range(1, PER_KEY + 1)]
                    for k in range(KEYS)}
        deadline = time.monotonic() + 240
        counts: dict[bytes, list[bytes]] = {}
        while time.monotonic() < deadline:
            counts = {}
            for key, value in read_all_keyed(broker.bootstrap, "counts", "read_committed"):
                counts.setdefault(key, []).append(value)
            if all(len(counts.get(k, [])) >= PER_KEY for k in expected):
                break
            time.sleep(2)
        assert counts == expected, (
            {k.decode(): [int(v) for v in vs][-5:] for k, vs in counts.items()
             if vs != expected.get(k)}, app.tail())
    finally:
        app.stop()
        broker.stop()
