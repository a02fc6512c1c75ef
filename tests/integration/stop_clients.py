"""The clients of tests/integration/test_stop.py, in a process of their own (killed when the
test is done: clients left connected to a stopped broker keep reconnecting):

    python -m tests.integration.stop_clients BOOTSTRAP FLOWING EMPTY TRICKLED GROUP_PREFIX

A librdkafka producer and consumer on FLOWING, a consumer long-polling EMPTY, and aiokafka
producing and tailing TRICKLED one record at a time. Prints "flowing" once 2,000 records were
consumed, then runs until killed; none of them closes its connections.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from confluent_kafka import Consumer, Producer

READY_AFTER = 2000


def _produce(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                         "message.timeout.ms": 5000})
    while not stop.is_set():
        producer.produce(topic, value=b"x" * 200)
        producer.poll(0)
        time.sleep(0.0005)


def _consume(bootstrap: str, topic: str, group: str, stop: threading.Event,
             consumed: list[int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 500,
                         "reconnect.backoff.max.ms": 60000})
    consumer.subscribe([topic])
    while not stop.is_set():
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            consumed[0] += 1
    # not closed: a client that stays connected while the broker stops


def _trickle(bootstrap: str, topic: str, group: str, stop: threading.Event,
             consumed: list[int]) -> None:
    """aiokafka: one record at a time into a topic its consumer tails, so that the consumer's
    fetch mostly waits on a read-ahead that waits for data."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest")
        await producer.start()
        await consumer.start()
        while not stop.is_set():
            try:
                await producer.send_and_wait(topic, b"x")
                got = await consumer.getmany(timeout_ms=50)
                consumed[0] += sum(len(batch) for batch in got.values())
            except Exception:  # the broker went away: stay connected, as a client does
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.01)

    asyncio.run(run())


def main(argv: list[str]) -> int:
    bootstrap, flowing, empty, trickled, prefix = argv
    stop = threading.Event()  # never set: the process is killed
    consumed = [0]
    workers = [
        threading.Thread(target=_produce, args=(bootstrap, flowing, stop), daemon=True),
        threading.Thread(target=_consume, args=(bootstrap, flowing, f"{prefix}-g", stop, consumed),
                         daemon=True),
        threading.Thread(target=_consume, args=(bootstrap, empty, f"{prefix}-e", stop, consumed),
                         daemon=True),
        threading.Thread(target=_trickle, args=(bootstrap, trickled, f"{prefix}-t", stop, consumed),
                         daemon=True)]
    for worker in workers:
        worker.start()
    while consumed[0] < READY_AFTER:
        time.sleep(0.1)
    print("flowing", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
