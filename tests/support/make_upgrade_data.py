"""Writes tests/data/upgrade/wave2.rdb and wave2.json: a Redis as Korvet's second wave left it
(commit 1eee073, before offset schemes existed), for tests/integration/test_upgrade.py.

Run once, from a checkout of that commit, with redis-server on PATH and this project's venv:

    PYTHONPATH=<checkout of 1eee073> .venv/bin/python <this file> tests/data/upgrade

It starts redis-server and the old broker, creates a topic in each storage format, produces
keyed records with headers and fixed timestamps, commits a group's offsets, and saves the
Redis data set; wave2.json records what the old broker answered (offsets, records, commits),
so the test can ask the new broker the same questions."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

TOPICS = {"wave2-records": "records", "wave2-batches": "batches"}
GROUP = "wave2-group"
BASE_TS = 1_700_000_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    redis_port, kafka_port = free_port(), free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--dir", str(out), "--dbfilename", "wave2.rdb", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    broker = subprocess.Popen([sys.executable, "-m", "korvet.cli", "serve", "--port", str(kafka_port),
                               "--redis-url", f"redis://127.0.0.1:{redis_port}"])
    bootstrap = f"127.0.0.1:{kafka_port}"
    try:
        time.sleep(3)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(t, num_partitions=2,
                                                config={"korvet.storage.format": f})
                                       for t, f in TOPICS.items()])
        for future in futures.values():
            future.result(30)
        described: dict[str, Any] = {}
        manifest: dict[str, Any] = {"group": GROUP, "topics": described}
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 50})
        acked: dict[str, list[dict[str, Any]]] = {t: [] for t in TOPICS}

        def record(topic: str) -> Callable[[Any, Any], None]:
            def done(err: Any, msg: Any) -> None:
                assert err is None, err
                acked[topic].append({"partition": msg.partition(), "offset": msg.offset(),
                                     "key": msg.key().decode(), "value": msg.value().decode(),
                                     "timestamp": msg.timestamp()[1],
                                     # a delivery report carries no headers: these are the ones sent
                                     "headers": [["h", msg.key().decode()[1:]]]})
            return done

        for topic in TOPICS:
            for i in range(12):
                producer.produce(topic, key=f"k{i}", value=f"{topic}-v{i}", partition=i % 2,
                                 timestamp=BASE_TS + i * 1000, headers=[("h", f"{i}")],
                                 on_delivery=record(topic))
            producer.flush(30)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})
        commits = []
        for topic in TOPICS:
            part0 = sorted(int(r["offset"]) for r in acked[topic] if r["partition"] == 0)
            commits.append(TopicPartition(topic, 0, part0[3]))  # 3 records read
        consumer.commit(offsets=commits, asynchronous=False)
        consumer.close()
        for topic, storage_format in TOPICS.items():
            described[topic] = {
                "format": storage_format,
                "records": sorted(acked[topic], key=lambda r: (r["partition"], r["offset"])),
                "committed": {str(c.partition): c.offset for c in commits if c.topic == topic}}
        subprocess.run(["redis-cli", "-p", str(redis_port), "SAVE"], check=True)
        (out / "wave2.json").write_text(json.dumps(manifest, indent=1) + "\n")
    finally:
        broker.terminate()
        broker.wait(30)
        redis.terminate()
        redis.wait(30)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
