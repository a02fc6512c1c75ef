"""Record-batch codec micro-benchmark: why Korvet decodes and builds batches with aiokafka.

    .venv/bin/python scripts/bench_codec.py [--records 500] [--batches 200] [--repeats 5]

Prints records/s (median and range over repeats) for decoding a 500-record
batch (key 10 B, value 100 B, one header) and for building one, with:
aiokafka's compiled codec (what korvet.protocol.records uses), kafka-python's
pure-Python codec, and kio's records module. Single process, no I/O.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder


def make_records(count: int) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes | None]]]]:
    stamp = 1_700_000_000_123
    return [(stamp + i, b"key-%06d" % i, bytes([i % 256]) * 100, [("h", b"v")])
            for i in range(count)]


def aiokafka_build(records: list[tuple[int, bytes, bytes, list[tuple[str, bytes | None]]]]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for delta, (stamp, key, value, headers) in enumerate(records):
        builder.append(delta, stamp, key, value, headers)
    return bytes(builder.build())


def aiokafka_decode(batch: bytes) -> int:
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc()
    return sum(1 for _ in parsed)


def kafka_python_codec() -> tuple[Callable[..., bytes], Callable[[bytes], int]]:
    from kafka.record.default_records import DefaultRecordBatch as PyBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as PyBuilder

    def build(records: list[tuple[int, bytes, bytes, list[tuple[str, bytes | None]]]]) -> bytes:
        builder = PyBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for delta, (stamp, key, value, headers) in enumerate(records):
            builder.append(delta, stamp, key, value, headers)
        return bytes(builder.build())

    def decode(batch: bytes) -> int:
        parsed = PyBatch(batch)
        assert parsed.validate_crc()
        return sum(1 for _ in parsed)

    return build, decode


def kio_decode(batch: bytes) -> int:
    from kio.records.readers import read_batch

    parsed, _ = read_batch(memoryview(batch), 0)
    return len(parsed.records)


def measure(label: str, work: Callable[[], int], per_call: int, repeats: int,
            calls: int) -> tuple[str, float, float, float]:
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        rates.append(per_call * calls / (time.perf_counter() - started))
    return label, statistics.median(rates), min(rates), max(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    records = make_records(args.records)
    batch = aiokafka_build(records)
    py_build, py_decode = kafka_python_codec()
    # Independent codecs must agree: kafka-python's pure one decodes aiokafka's batch identically.
    assert py_decode(batch) == aiokafka_decode(batch) == args.records
    rows = [
        measure("aiokafka (compiled) decode + CRC", lambda: aiokafka_decode(batch),
                args.records, args.repeats, args.batches),
        measure("aiokafka (compiled) build", lambda: len(aiokafka_build(records)),
                args.records, args.repeats, args.batches),
        measure("kafka-python (pure) decode + CRC", lambda: py_decode(batch),
                args.records, args.repeats, max(1, args.batches // 10)),
        measure("kafka-python (pure) build", lambda: len(py_build(records)),
                args.records, args.repeats, max(1, args.batches // 10)),
    ]
    try:
        rows.append(measure("kio records decode", lambda: kio_decode(batch), args.records,
                            args.repeats, max(1, args.batches // 20)))
    except Exception as exc:  # kio's records module fails on some inputs; say so
        print(f"kio records decode failed: {exc!r}")
    print(f"{args.records}-record batches (key 10 B, value 100 B, 1 header), "
          f"{args.repeats} repeats, records/s:")
    print(f"{'codec':40} {'median':>12} {'min':>12} {'max':>12}")
    for label, median, low, high in rows:
        print(f"{label:40} {median:12,.0f} {low:12,.0f} {high:12,.0f}")


if __name__ == "__main__":
    main()
