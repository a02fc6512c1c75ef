"""The ceiling: the broker's storage path alone, from one Python process.

The same records a client run sent (``record-size`` random uppercase letters, no key,
no headers, the batch's clock as timestamp), in batches of the size that client
run's batches had, go through exactly what the Produce handler does per batch, and
nothing of the Kafka protocol: ``entries.pack_records`` (for a topic configured with
``korvet.storage.format=batches``: ``entries.pack_batch`` of a batch built before the clock
starts, as the broker receives it built), ``trim_policy`` of the
topic and one append (the atomic append script) per batch, sent on the store's one
pipe with up to ``--in-flight`` appends unanswered (default 5, a Kafka producer's
``max.in.flight.requests.per.connection``), as the broker handles one connection's
requests. Redis is the Korvet target's
own embedded Redis while the broker idles between client runs (``--redis-url``, under
its own keyspace), or a private ``redis-server`` started here with a given persistence
setting (``EmbeddedRedis``, the broker's own launcher). The read ceiling reads the
records back with ``RedisStore.read`` (XRANGE + the meta hash, ids to offsets) in
reads of ``--read-count`` entries, as the Fetch handler sizes them for 1 MiB.

Run as its own process and print one JSON object (a list of repeats)::

    python -m korvet.bench.ceiling --appendfsync everysec --record-size 100 \
        --num-records 300000 --batch-records 148 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from korvet.core.offsets import EntryId
from korvet.core.topics import TopicInfo, trim_policy
from korvet.protocol.records import build_batch
from korvet.server.embedded_redis import EmbeddedRedis
from korvet.server.services import topic_defaults
from korvet.settings import load
from korvet.storage import entries
from korvet.storage.redis_store import AppendStatus, ProducerBatch, RedisStore

from .rdkafka_perf import payload


async def _redis_cpu(client: aioredis.Redis) -> tuple[float, float]:
    """(user, system) CPU seconds of the Redis server."""
    info: dict[str, Any] = await client.info("cpu")
    return float(info["used_cpu_user"]), float(info["used_cpu_sys"])


def _own_cpu() -> tuple[float, float]:
    times = os.times()
    return times.user, times.system


def _cpu_per_record(python: tuple[float, float], redis: tuple[float, float],
                    records: int) -> dict[str, float]:
    """µs per record; ``*.sys`` is the kernel's share (socket I/O, AOF writes)."""
    scale = 1e6 / records
    return {"python": sum(python) * scale, "redis": sum(redis) * scale,
            "python.sys": python[1] * scale, "redis.sys": redis[1] * scale}


def _minus(after: tuple[float, float], before: tuple[float, float]) -> tuple[float, float]:
    return after[0] - before[0], after[1] - before[1]


def _batches(value: bytes, total: int, batch_records: int) -> dict[int, bytes]:
    """The record batches a producer would send, by record count (a full batch and the last,
    shorter one), built before the clock starts: the broker receives them built."""
    now = time.time_ns() // 1_000_000
    counts = {min(batch_records, total), total % batch_records or batch_records}
    return {count: build_batch([(now, None, value, [])] * count) for count in counts}


async def _append_all(store: RedisStore, topic: TopicInfo, value: bytes, total: int,
                      batch_records: int, in_flight: int,
                      batches: dict[int, bytes] | None = None) -> None:
    """Append ``total`` records, keeping up to ``in_flight`` appends sent and unanswered
    on the one pipe, as the broker does with a producer's in-flight requests. A topic that
    stores batches gets ``batches`` (from ``_batches``), stored as the broker stores them."""
    partitions = topic.partitions
    partition = 0
    left = total
    no_producer = ProducerBatch()
    config = topic.config
    pending: deque[asyncio.Future[Any]] = deque()

    async def settle(sent: asyncio.Future[Any]) -> None:
        result = await store.append_result(topic, sent)
        if result.status is not AppendStatus.OK:
            raise RuntimeError(f"append answered {result.status}")

    while left > 0:
        count = min(batch_records, left)
        now = time.time_ns() // 1_000_000
        if config.stores_batches:  # one entry per batch, as the broker stores it
            if batches is None:
                batches = _batches(value, total, batch_records)
            packed = entries.pack_batch(count, now, batches[count])
            trim = trim_policy(config, now, packed.size, count, entries=1)
        else:
            records: list[tuple[int, bytes | None, bytes | None, list[entries.Header]]] = [
                (now, None, value, [])] * count
            packed = entries.pack_records(records)
            trim = trim_policy(config, now, packed.size, count)
        pending.append(await store.append_send(topic, partition, packed, count, now, trim,
                                               no_producer))
        if len(pending) >= in_flight:
            await settle(pending.popleft())
        left -= count
        partition = (partition + 1) % partitions
    while pending:
        await settle(pending.popleft())


async def _read_all(store: RedisStore, topic: TopicInfo, read_count: int) -> int:
    read = 0
    codec = topic.config.codec
    for partition in range(topic.partitions):
        offset, end = await store.offsets(topic, partition)
        while offset < end:
            result = (await store.read([(topic, partition, offset, read_count)]))[0]
            if not result.raw:
                break
            if topic.config.stores_batches:  # one entry per batch: its records count
                stored = [entries.batch_fields(fields) for _, fields in result.raw]
                read += sum(s[0] for s in stored if s is not None)
                last = stored[-1]
                offset = (codec.encode_id(EntryId.parse(result.raw[-1][0]))
                          + (last[0] if last is not None else 1))
            else:
                read += len(result.raw)
                offset = codec.encode_id(EntryId.parse(result.raw[-1][0])) + 1
    return read


async def run(args: argparse.Namespace, url: str) -> list[dict[str, Any]]:
    client = aioredis.from_url(url, decode_responses=False)
    store = RedisStore(client, keyspace=args.keyspace)
    defaults = topic_defaults(load(env={}).topics)
    value = payload(args.record_size)
    runs: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            name = f"ceiling-{repeat}"
            configs = {"korvet.sequence.bits": "10",
                       **dict(item.split("=", 1) for item in args.topic_config)}
            await store.create_topic(name, args.partitions, configs, time.time_ns() // 1_000_000)
            topic = await store.get_topic(name, defaults)
            assert topic is not None
            batches = (_batches(value, args.num_records, args.batch_records)
                       if topic.config.stores_batches else None)
            redis_before = await _redis_cpu(client)
            cpu_before = _own_cpu()
            started = time.perf_counter()
            await _append_all(store, topic, value, args.num_records, args.batch_records,
                              args.in_flight, batches)
            produce_seconds = time.perf_counter() - started
            produce_cpu = _minus(_own_cpu(), cpu_before)
            redis_mid = await _redis_cpu(client)
            cpu_before = _own_cpu()
            started = time.perf_counter()
            # A read of 1 MiB is read_count records: that many entries, or as many batches.
            read = await _read_all(store, topic, args.read_count
                                   if not topic.config.stores_batches
                                   else max(1, args.read_count // args.batch_records))
            read_seconds = time.perf_counter() - started
            read_cpu = _minus(_own_cpu(), cpu_before)
            redis_after = await _redis_cpu(client)
            if read != args.num_records:
                raise RuntimeError(f"read back {read} of {args.num_records} records")
            n = args.num_records
            runs.append({
                "produce": {
                    "records": n, "seconds": produce_seconds,
                    "records_per_sec": n / produce_seconds,
                    "mb_per_sec": n * args.record_size / produce_seconds / 1e6,
                    "records_per_batch": float(args.batch_records),
                    "cpu_us_per_record": _cpu_per_record(produce_cpu, _minus(redis_mid, redis_before), n),
                },
                "consume": {
                    "records": read, "seconds": read_seconds,
                    "records_per_sec": read / read_seconds,
                    "mb_per_sec": read * args.record_size / read_seconds / 1e6,
                    "cpu_us_per_record": _cpu_per_record(read_cpu, _minus(redis_after, redis_mid), n),
                },
            })
            await store.delete_topic(name)
    finally:
        await client.aclose()
    return runs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m korvet.bench.ceiling")
    parser.add_argument("--appendfsync", default="everysec",
                        help="the embedded Redis' persistence: always, everysec, no or off")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--num-records", type=int, default=300_000)
    parser.add_argument("--batch-records", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=5,
                        help="appends sent before the oldest answer is awaited (1: one at a "
                             "time); 5 is a Kafka producer's max.in.flight.requests")
    parser.add_argument("--read-count", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--topic-config", action="append", default=[], metavar="NAME=VALUE",
                        help="a config of the topic, as the benchmark topics have it; repeatable")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="folder for the private Redis (default: a temporary folder)")
    parser.add_argument("--redis-url", default=None,
                        help="use this Redis (e.g. an idle broker's embedded one) instead of "
                             "starting a private one; --appendfsync is then its own")
    parser.add_argument("--keyspace", default="korvet-ceiling",
                        help="key prefix, so the ceiling never touches a broker's keys")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batch_records < 1 or args.num_records < 1 or args.in_flight < 1:
        raise SystemExit("--batch-records, --num-records and --in-flight must be positive")
    if args.redis_url:
        runs = asyncio.run(run(args, args.redis_url))
    else:
        with tempfile.TemporaryDirectory(prefix="korvet-ceiling-") as scratch:
            server = EmbeddedRedis(args.data_dir or Path(scratch), appendfsync=args.appendfsync)
            url = server.start()
            try:
                runs = asyncio.run(run(args, url))
            finally:
                server.stop()
    json.dump({"runs": runs}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
