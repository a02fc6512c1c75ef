"""A librdkafka (confluent-kafka) producer and consumer performance run, like Kafka's perf tools.

Run as its own process, so the client has a Python interpreter to itself, and print
one JSON object on stdout::

    python -m korvet.bench.rdkafka_perf produce --bootstrap H:P --topic T --num-records N \
        --record-size 100 [--throughput R] [--acks 1] [--batch-size 16384] ...
    python -m korvet.bench.rdkafka_perf consume --bootstrap H:P --topic T --num-records N

Produce sends ``N`` records of ``record-size`` random uppercase letters and no key
(what ProducerPerformance sends), as fast as it can or throttled to ``throughput``
records/s the way ProducerPerformance throttles (sleep whenever ahead of schedule).
Each record's latency is librdkafka's own: from ``produce()`` until its delivery
report (``Message.latency()``), i.e. until the broker's acknowledgement arrived.
Throughput counts from the first ``produce()`` until ``flush()`` returned. With
``--warmup-records W`` the steady-state percentiles leave the first W reports out
(ProducerPerformance's ``--warmup-records``).

Consume assigns every partition at the beginning (no group join, so no rebalance
time to subtract) and counts from ``assign()`` until the N-th record arrived.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

# Quantiles kept for the latency CDF: every 0.1 % and a finer tail.
CDF_QUANTILES: tuple[float, ...] = (
    *(i / 1000 for i in range(1000)), 0.9995, 0.9999, 1.0,
)


def payload(size: int, seed: int = 0) -> bytes:
    """Random uppercase letters, as ProducerPerformance's --record-size payload."""
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile of an ascending sequence (q in 0..1)."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def latency_summary(latencies_ms: list[float]) -> dict[str, Any]:
    values = sorted(latencies_ms)
    if not values:
        return {}
    return {
        "avg_ms": sum(values) / len(values),
        "max_ms": values[-1],
        "p50_ms": quantile(values, 0.50),
        "p95_ms": quantile(values, 0.95),
        "p99_ms": quantile(values, 0.99),
        "p999_ms": quantile(values, 0.999),
        "cdf": [[round(quantile(values, q), 4), q] for q in CDF_QUANTILES],
    }


class _BatchStats:
    """Records and bytes per produced batch, summed over librdkafka's statistics windows
    (each window's ``batchcnt``/``batchsize`` covers only the interval since the last)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.batches = 0
        self.records = 0
        self.bytes = 0

    def on_stats(self, text: str) -> None:
        stats = json.loads(text)
        topic = stats.get("topics", {}).get(self.topic)
        if not topic:
            return
        count = topic.get("batchcnt", {})
        size = topic.get("batchsize", {})
        self.batches += int(count.get("cnt", 0))
        self.records += int(count.get("sum", 0))
        self.bytes += int(size.get("sum", 0))

    def summary(self) -> dict[str, float]:
        if not self.batches:
            return {}
        return {"records_per_batch": self.records / self.batches,
                "bytes_per_batch": self.bytes / self.batches,
                "batches": float(self.batches)}


class _Transactions:
    """A transactional producer committing every ``ms`` (as Kafka's ProducerPerformance
    ``--transaction-duration-ms``); with ``ms`` 0, none."""

    def __init__(self, config: dict[str, Any], ms: int) -> None:
        self.ms = ms
        self.begun = 0.0
        if ms > 0:
            config["transactional.id"] = f"korvet-bench-{uuid.uuid4()}"
            config["enable.idempotence"] = True

    def start(self, producer: Producer) -> None:
        if self.ms > 0:
            producer.init_transactions(30)
            producer.begin_transaction()
            self.begun = time.perf_counter()

    def maybe_commit(self, producer: Producer) -> None:
        if self.ms > 0 and (time.perf_counter() - self.begun) * 1000 >= self.ms:
            producer.commit_transaction(60)
            producer.begin_transaction()
            self.begun = time.perf_counter()

    def finish(self, producer: Producer) -> None:
        if self.ms > 0:
            producer.commit_transaction(120)  # flushes the last transaction's records


def produce(args: argparse.Namespace) -> dict[str, Any]:
    batch_stats = _BatchStats(args.topic)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "compression.type": args.compression,
        "enable.idempotence": args.idempotence,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "statistics.interval.ms": 200,
        "stats_cb": batch_stats.on_stats,
        "client.id": "korvet-bench-rdkafka",
    }
    transactions = _Transactions(config, args.transaction_ms)
    producer = Producer(config)
    transactions.start(producer)
    value = payload(args.record_size)
    latencies: list[float] = []
    errors: list[str] = []
    record_latency = latencies.append

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        seconds = msg.latency()
        if seconds is not None:
            record_latency(seconds * 1000.0)

    # Connect and learn the partitions before the clock starts, as the Java tool does
    # (its first send waits for metadata inside the timed loop, but the JVM warm-up
    # dominates there anyway).
    producer.list_topics(args.topic, timeout=30)
    topic, total, rate = args.topic, args.num_records, args.throughput
    send = producer.produce
    poll = producer.poll
    started = time.perf_counter()
    sent = 0
    while sent < total:
        transactions.maybe_commit(producer)
        if rate > 0:
            ahead = sent / rate - (time.perf_counter() - started)
            if ahead > 0.0005:
                poll(0)
                time.sleep(ahead)
        chunk = min(total - sent, 64 if rate <= 0 else max(1, min(64, rate // 1000)))
        for _ in range(chunk):
            try:
                send(topic, value, on_delivery=delivered)
            except BufferError:
                poll(0.001)
                send(topic, value, on_delivery=delivered)
        sent += chunk
        poll(0)
    transactions.finish(producer)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    poll(0.3)  # one more statistics window
    if remaining:
        errors.append(f"{remaining} records still unacknowledged after flush")
    result: dict[str, Any] = {
        "records": len(latencies),
        "seconds": elapsed,
        "records_per_sec": len(latencies) / elapsed if elapsed > 0 else 0.0,
        "mb_per_sec": len(latencies) * args.record_size / elapsed / 1e6 if elapsed > 0 else 0.0,
        "errors": errors[:5],
        "error_count": len(errors),
        **batch_stats.summary(),
    }
    result.update(latency_summary(latencies))
    if 0 < args.warmup_records < len(latencies):
        # Delivery reports arrive in produce order per partition: the first ones are the warm-up.
        steady = sorted(latencies[args.warmup_records:])
        result.update(steady_p50_ms=quantile(steady, 0.50), steady_p95_ms=quantile(steady, 0.95),
                      steady_p99_ms=quantile(steady, 0.99),
                      steady_p999_ms=quantile(steady, 0.999))
    return result


def consume(args: argparse.Namespace) -> dict[str, Any]:
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": f"korvet-bench-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "client.id": "korvet-bench-rdkafka",
        # Once its local queue holds queued.min.messages (100,000) or 64 MiB, librdkafka waits
        # this long before its next fetch (default 1,000 ms). A broker that fills the queue
        # faster than the loop below empties it then lost a whole second in a run of a few
        # tenths: 100 B consumes of either broker came out at about 230,000 or 750,000+
        # records/s from one run to the next. 10 ms keeps the queue's bounds and its memory.
        "fetch.queue.backoff.ms": 10,
    })
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    started = time.perf_counter()
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    received = 0
    received_bytes = 0
    errors: list[str] = []
    last_progress = started
    finished = started
    while received < args.num_records:
        # Never ask for more than is left: consume() waits its whole timeout for a full list.
        messages = consumer.consume(num_messages=min(10_000, args.num_records - received),
                                    timeout=0.5)
        now = time.perf_counter()
        if not messages:
            if now - last_progress > args.idle_timeout_ms / 1000:
                errors.append(f"no record for {args.idle_timeout_ms} ms after {received}")
                break
            continue
        last_progress = now
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    errors.append(str(error))
                continue
            received += 1
            received_bytes += len(message.value() or b"")
        finished = now
    consumer.close()
    elapsed = finished - started
    return {
        "records": received,
        "seconds": elapsed,
        "records_per_sec": received / elapsed if elapsed > 0 else 0.0,
        "mb_per_sec": received_bytes / elapsed / 1e6 if elapsed > 0 else 0.0,
        "errors": errors[:5],
        "error_count": len(errors),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m korvet.bench.rdkafka_perf")
    modes = parser.add_subparsers(dest="mode", required=True)
    for name in ("produce", "consume"):
        mode = modes.add_parser(name)
        mode.add_argument("--bootstrap", required=True)
        mode.add_argument("--topic", required=True)
        mode.add_argument("--num-records", type=int, required=True)
        mode.add_argument("--record-size", type=int, default=100)
    producer = modes.choices["produce"]
    producer.add_argument("--throughput", type=int, default=-1, help="records/s; -1: unthrottled")
    producer.add_argument("--acks", default="1")
    producer.add_argument("--batch-size", type=int, default=16384)
    producer.add_argument("--linger-ms", type=float, default=5.0)
    producer.add_argument("--compression", default="none")
    producer.add_argument("--idempotence", action="store_true")
    producer.add_argument("--transaction-ms", type=int, default=0,
                          help="a transactional producer committing every N ms (0: none)")
    producer.add_argument("--warmup-records", type=int, default=0,
                          help="leave the first N delivery reports out of the steady-state percentiles")
    modes.choices["consume"].add_argument("--idle-timeout-ms", type=int, default=10_000)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = produce(args) if args.mode == "produce" else consume(args)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0 if not result["error_count"] else 1


if __name__ == "__main__":
    sys.exit(main())
