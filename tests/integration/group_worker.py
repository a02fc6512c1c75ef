"""A consumer-group member in its own process, for the group tests (one of three clients).

    python -m tests.integration.group_worker CLIENT BOOTSTRAP TOPIC GROUP OUT [SESSION_MS]

CLIENT is confluent-kafka, kafka-python or aiokafka. The worker subscribes, and for
every batch it polls writes one JSON line per record (partition, offset, key) to OUT,
then commits synchronously: what is in OUT before a commit is what the group has
committed past. SIGTERM closes the consumer (leaving the group) and exits; SIGKILL
is the crash the tests also use. OUT also gets one line per assignment change.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, Any


class _Stop:
    """Set by SIGTERM/SIGINT; every runner's loop checks it."""

    requested = False


def _stop(*_args: object) -> None:
    _Stop.requested = True


def _write(out: IO[str], records: list[tuple[int, int, bytes | None]]) -> None:
    for partition, offset, key in records:
        out.write(json.dumps({"p": partition, "o": offset,
                              "k": key.decode() if key is not None else None}) + "\n")
    out.flush()


def _note(out: IO[str], kind: str, partitions: list[int]) -> None:
    out.write(json.dumps({"event": kind, "partitions": sorted(partitions),
                          "t": time.time()}) + "\n")
    out.flush()


def run_confluent(bootstrap: str, topic: str, group: str, out: IO[str], session_ms: int) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": session_ms, "heartbeat.interval.ms": 500,
                         "client.id": f"worker-{group}"})
    consumer.subscribe([topic],
                       on_assign=lambda c, ps: _note(out, "assigned", [p.partition for p in ps]),
                       on_revoke=lambda c, ps: _note(out, "revoked", [p.partition for p in ps]))
    while not _Stop.requested:
        messages = consumer.consume(num_messages=500, timeout=0.5)
        batch = [(m.partition(), m.offset(), m.key()) for m in messages if not m.error()]
        if batch:
            _write(out, batch)  # type: ignore[arg-type]
            try:
                consumer.commit(asynchronous=False)
            except Exception as exc:  # a rebalance can refuse the commit; records come again
                _note(out, f"commit-failed {exc}", [])
    consumer.close()


def run_kafka_python(bootstrap: str, topic: str, group: str, out: IO[str],
                     session_ms: int) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, assigned: Any) -> None:
            _note(out, "assigned", [p.partition for p in assigned])

        def on_partitions_revoked(self, revoked: Any) -> None:
            _note(out, "revoked", [p.partition for p in revoked])

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=session_ms, heartbeat_interval_ms=500,
                             client_id=f"worker-{group}")
    consumer.subscribe([topic], listener=Listener())
    while not _Stop.requested:
        polled = consumer.poll(timeout_ms=500, max_records=500)
        batch = [(tp.partition, m.offset, m.key) for tp, ms in polled.items() for m in ms]
        if batch:
            _write(out, batch)
            try:
                consumer.commit()
            except Exception as exc:
                _note(out, f"commit-failed {exc}", [])
    consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str, out: IO[str], session_ms: int) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_assigned(self, assigned: Any) -> None:
            _note(out, "assigned", [p.partition for p in assigned])

        async def on_partitions_revoked(self, revoked: Any) -> None:
            _note(out, "revoked", [p.partition for p in revoked])

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=session_ms, heartbeat_interval_ms=500,
                                    client_id=f"worker-{group}")
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not _Stop.requested:
                polled = await consumer.getmany(timeout_ms=500, max_records=500)
                batch = [(tp.partition, m.offset, m.key) for tp, ms in polled.items() for m in ms]
                if batch:
                    _write(out, batch)
                    try:
                        await consumer.commit()
                    except Exception as exc:
                        _note(out, f"commit-failed {exc}", [])
        finally:
            await consumer.stop()

    asyncio.run(main())


RUNNERS: dict[str, Callable[[str, str, str, IO[str], int], None]] = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main() -> None:
    client, bootstrap, topic, group, out_path = sys.argv[1:6]
    session_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 6000
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with open(out_path, "a") as out:
        _note(out, "started", [])
        RUNNERS[client](bootstrap, topic, group, out, session_ms)
        _note(out, "stopped", [])


if __name__ == "__main__":
    main()
