"""Drivers for the real Kafka clients the broker is verified with.

Each driver produces a list of records to explicit partitions and returns, per
record, the (partition, offset) the producer was told; and reads partitions back
from the beginning. Records are compared byte for byte by the tests.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int


@dataclass(frozen=True, slots=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int


def make_records(count: int, partitions: int, *, text_only: bool = False,
                 base_ts: int | None = None) -> list[Rec]:
    """Deterministic keyed records with repeated header names and binary payloads."""
    stamp = base_ts if base_ts is not None else int(time.time() * 1000) - 60_000
    records = []
    for i in range(count):
        if text_only:
            value = f"value-{i}-" + "x" * (i % 50)
            payload = value.encode()
        else:
            payload = bytes((i * 7 + j) % 256 for j in range(20 + i % 40))
        headers: tuple[Header, ...] = (
            ("idx", str(i).encode()), ("dup", b"first"), ("dup", b"second"),
        )
        records.append(Rec(i % partitions, f"key-{i}".encode(), payload, headers, stamp + i))
    return records


def _header(pair: Sequence[object]) -> Header:
    name, value = pair[0], pair[1]
    assert isinstance(value, bytes | None)
    return str(name), value


# --- confluent-kafka (librdkafka) ---------------------------------------------------

def confluent_produce(bootstrap: str, topic: str, records: Sequence[Rec], *,
                      extra: dict[str, Any] | None = None) -> list[tuple[int, int]]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, **(extra or {})})
    told: list[tuple[int, int]] = [(-1, -1)] * len(records)
    errors: list[str] = []

    def report(index: int):  # type: ignore[no-untyped-def]
        def callback(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                told[index] = (msg.partition(), msg.offset())
        return callback

    for index, rec in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=rec.key, value=rec.value, partition=rec.partition,
                                 headers=list(rec.headers), timestamp=rec.timestamp,
                                 on_delivery=report(index))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "confluent-kafka could not deliver every record"
    assert not errors, errors[:5]
    return told


def confluent_consume(bootstrap: str, topic: str, partitions: int, expected: int,
                      timeout: float = 60) -> list[Got]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                headers = tuple(_header(pair) for pair in (msg.headers() or ()))
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                got.append(Got(partition, offset, msg.key(), msg.value(), headers,
                               msg.timestamp()[1]))
    finally:
        consumer.close()
    return got


# --- kafka-python ---------------------------------------------------------------------

def kafka_python_produce(bootstrap: str, topic: str, records: Sequence[Rec], *,
                         extra: dict[str, Any] | None = None) -> list[tuple[int, int]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             **(extra or {}))
    futures = [producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                             headers=list(r.headers), timestamp_ms=r.timestamp) for r in records]
    producer.flush(60)
    told = []
    for future in futures:
        meta = future.get(timeout=60)
        told.append((meta.partition, meta.offset))
    producer.close()
    return told


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, expected: int,
                         timeout: float = 60) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=1000, max_records=2000).items():
                for m in messages:
                    got.append(Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers),
                                   m.timestamp))
    finally:
        consumer.close()
    return got


# --- aiokafka ---------------------------------------------------------------------------

def aiokafka_produce(bootstrap: str, topic: str, records: Sequence[Rec]) -> list[tuple[int, int]]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[tuple[int, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                                           headers=list(r.headers), timestamp_ms=r.timestamp)
                       for r in records]
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return [(m.partition, m.offset) for m in metas]

    return asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, partitions: int, expected: int,
                     timeout: float = 60) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Got]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < expected and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
                for tp, messages in batch.items():
                    for m in messages:
                        got.append(Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers),
                                       m.timestamp))
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


# --- kcat (librdkafka 2.0, Debian) --------------------------------------------------------

def kcat_produce(bootstrap: str, topic: str, records: Sequence[Rec]) -> None:
    """kcat sends one file per partition; it sets the same headers on every record and
    does not print offsets, so its records are checked against what consumers read."""
    for partition in sorted({r.partition for r in records}):
        lines = [f"{r.key.decode() if r.key else ''}\t{(r.value or b'').decode()}"
                 for r in records if r.partition == partition]
        subprocess.run(
            ["kcat", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t", "-P",
             "-H", "idx=kcat", "-H", "dup=first", "-H", "dup=second", "-X", "acks=all"],
            input="\n".join(lines) + "\n", text=True, check=True, timeout=120,
            capture_output=True,
        )


def kcat_consume(bootstrap: str, topic: str, partitions: int) -> list[Got]:
    got: list[Got] = []
    for partition in range(partitions):
        out = subprocess.run(
            ["kcat", "-b", bootstrap, "-t", topic, "-p", str(partition), "-C", "-o", "beginning",
             "-e", "-J", "-q"],
            text=True, check=True, timeout=120, capture_output=True,
        ).stdout
        for line in out.splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            raw_headers = doc.get("headers") or []
            headers = tuple((raw_headers[i], raw_headers[i + 1].encode())
                            for i in range(0, len(raw_headers), 2))
            key = doc["key"].encode() if doc.get("key") is not None else None
            value = doc["payload"].encode() if doc.get("payload") is not None else None
            got.append(Got(doc["partition"], doc["offset"], key, value, headers, doc["ts"]))
    return got
