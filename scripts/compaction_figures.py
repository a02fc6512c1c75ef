"""Issue 34's measurement: a compacted topic's Redis memory after many updates of few keys, and
produce throughput on a compacted topic being cleaned against a `delete` topic.

    .venv/bin/korvet serve --port 19402 --http-port 18402 --data-dir /tmp/cf --cleaner-backoff-ms 1000
    .venv/bin/python scripts/compaction_figures.py --bootstrap localhost:19402 \\
        --redis-url redis://127.0.0.1:<the port the broker's log names>/0 \\
        --metrics-url http://127.0.0.1:18402 [--updates 10000000] [--keys 10000] [--value-bytes 100]
        [--per-run 1000000]

Against a running broker (its embedded Redis, or the Redis it names), one partition per topic,
librdkafka producers (acks=all, linger.ms 5, batch.size 64 KiB), keys `key-000000` ... cycling:

1. the reference: exactly ``--keys`` records in a `delete` topic, its stream's MEMORY USAGE;
2. ``--updates`` updates of those keys into a `compact` topic (max.compaction.lag.ms 30 s),
   its produce rate and stream size, then, every 5 s until the cleaner has left one entry per
   key (at most 10 minutes), its length; the stream's MEMORY USAGE at the end against the
   reference;
3. three rounds of ``--per-run`` records into a `delete` topic, then into a `compact` one set to
   be cleaned at every cleaner round (min.cleanable.dirty.ratio 0.01, max.compaction.lag.ms
   1000): the produce rates side by side, and the cleaner's metrics (passes and records
   removed, by topic) at the end.

Prints one JSON object. Results: docs/performance.md, "Compacted topics".
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any
from urllib.request import urlopen

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


class Figures:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.redis = redis.Redis.from_url(args.redis_url)
        self.admin = AdminClient({"bootstrap.servers": args.bootstrap})

    def create(self, configs: dict[str, str]) -> str:
        name = f"{configs['cleanup.policy']}-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, 1, config=configs)])[name].result(30)
        return name

    def produce(self, topic: str, count: int, first: int = 0) -> float:
        """Records/s of ``count`` keyed records, from the first send to the last acknowledgement."""
        producer = Producer({"bootstrap.servers": self.args.bootstrap, "linger.ms": 5,
                             "batch.size": 65536, "acks": "all",
                             "queue.buffering.max.messages": 500_000})
        value = b"v" * self.args.value_bytes
        started = time.monotonic()
        for number in range(first, first + count):
            while True:
                try:
                    producer.produce(topic, key=b"key-%06d" % (number % self.args.keys),
                                     value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
            if number % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0, "records left unacknowledged"
        return count / (time.monotonic() - started)

    def stream(self, topic: str) -> str:
        return f"korvet:{{{topic}:0}}:stream"

    def stream_bytes(self, topic: str) -> int:
        return int(self.redis.memory_usage(self.stream(topic), samples=0) or 0)

    def length(self, topic: str) -> int:
        return int(self.redis.xlen(self.stream(topic)))

    def run(self) -> dict[str, Any]:
        a = self.args
        out: dict[str, Any] = {"updates": a.updates, "keys": a.keys, "value_bytes": a.value_bytes}
        reference = self.create({"cleanup.policy": "delete"})
        self.produce(reference, a.keys)
        out["live_records_stream_bytes"] = self.stream_bytes(reference)

        compacted = self.create({"cleanup.policy": "compact", "max.compaction.lag.ms": "30000"})
        started = time.monotonic()
        out["compact_produce_per_s"] = round(self.produce(compacted, a.updates))
        out["produce_seconds"] = round(time.monotonic() - started, 1)
        out["length_after_produce"] = self.length(compacted)
        out["stream_bytes_after_produce"] = self.stream_bytes(compacted)
        samples = []
        while time.monotonic() - started < 600:
            samples.append((round(time.monotonic() - started), self.length(compacted)))
            if samples[-1][1] <= a.keys:
                break
            time.sleep(5)
        out["length_by_seconds"] = samples
        out["stream_bytes_final"] = self.stream_bytes(compacted)
        out["final_to_live"] = round(out["stream_bytes_final"] / out["live_records_stream_bytes"], 2)
        out["redis_used_memory_final"] = int(self.redis.info("memory")["used_memory"])

        plain = self.create({"cleanup.policy": "delete"})
        busy = self.create({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                            "max.compaction.lag.ms": "1000"})
        rates: dict[str, list[int]] = {"delete": [], "compact": []}
        for round_ in range(3):
            rates["delete"].append(round(self.produce(plain, a.per_run, round_ * a.per_run)))
            rates["compact"].append(round(self.produce(busy, a.per_run, round_ * a.per_run)))
        out["produce_per_s"] = rates
        out["busy_compact_length_after"] = self.length(busy)
        metrics = urlopen(f"{a.metrics_url}/metrics", timeout=10).read().decode()
        out["cleaner"] = [line for line in metrics.splitlines() if line.startswith(
            ("korvet_cleaner_passes_total", "korvet_cleaner_records_removed_total"))]
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--metrics-url", required=True, help="the broker's HTTP endpoint")
    parser.add_argument("--updates", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--per-run", type=int, default=1_000_000)
    print(json.dumps(Figures(parser.parse_args()).run()))


if __name__ == "__main__":
    main()
