"""Drive one client run against a bootstrap server and turn what it printed into a ``Run``.

Java: Kafka's ProducerPerformance (with ``--print-metrics`` for the records per batch
and, in latency runs, ``--warmup-records`` for a steady-state line) and
ConsumerPerformance (its ``fetch.nMsg.sec``: records over the fetch time, without the
JVM start and the group join). librdkafka: korvet/bench/rdkafka_perf.py in its own
Python process.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from korvet.jvm.java_clients import (
    PRODUCER_PERFORMANCE_MAIN,
    JavaToolError,
    KafkaJavaTools,
)

from .model import BenchParams, Latency, Run

BATCH_OVERHEAD = 61  # RecordBatch v2 header bytes


class ClientError(RuntimeError):
    """A client run failed or printed nothing this module can read."""


def producer_config(params: BenchParams) -> dict[str, str]:
    """The producer settings both clients get (same names in Java and librdkafka)."""
    return {
        "acks": params.acks,
        "batch.size": str(params.batch_size),
        "linger.ms": str(params.linger_ms),
        "compression.type": params.compression,
        "enable.idempotence": "true" if params.idempotence else "false",
    }


def _timeout(records: int, floor_rate: float = 1500.0) -> float:
    """Generous: a run slower than ``floor_rate`` records/s is a failure, not a figure."""
    return 120.0 + records / floor_rate


# -- Java --------------------------------------------------------------------------

_SUMMARY = (r"(?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg latency, "
            r"(?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
            r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.")
_WHOLE_RUN = re.compile(r"^(?P<records>\d+) records sent, " + _SUMMARY + "$")
_STEADY = re.compile(r"^(?P<records>\d+) steady state records sent, " + _SUMMARY + "$")
_METRIC = re.compile(r"^(?P<name>[\w-]+:[\w.-]+):\{(?P<tags>[^}]*)\}\s*:\s*(?P<value>\S+)$")


def parse_producer_output(stdout: str) -> dict[str, Any]:
    """The whole-run and steady-state summary lines and the producer metrics of
    ``ProducerPerformance --print-metrics``."""
    whole: dict[str, str] | None = None
    steady: dict[str, str] | None = None
    metrics: dict[str, float] = {}
    for raw in stdout.splitlines():
        line = raw.strip()
        matched = _WHOLE_RUN.match(line)
        if matched and whole is None:
            whole = matched.groupdict()
            continue
        matched = _STEADY.match(line)
        if matched:
            steady = matched.groupdict()
            continue
        metric = _METRIC.match(line)
        if metric and metric["name"].startswith("producer-metrics:"):
            with contextlib.suppress(ValueError):
                metrics[metric["name"].removeprefix("producer-metrics:")] = float(metric["value"])
    if whole is None:
        raise ClientError("no summary line in the ProducerPerformance output")
    return {"whole": whole, "steady": steady, "metrics": metrics}


def java_records_per_batch(metrics: dict[str, float], record_size: int, partitions: int) -> float | None:
    """Records per produced batch. With one partition each request holds one batch, so
    records-per-request-avg is exact; otherwise estimate from the average batch bytes and
    the wire size of one record (about 10 bytes of framing around the value)."""
    if partitions == 1 and metrics.get("records-per-request-avg", 0) > 0:
        return metrics["records-per-request-avg"]
    batch_bytes = metrics.get("batch-size-avg", 0.0)
    if batch_bytes <= 0:
        return None
    return max(1.0, (batch_bytes - BATCH_OVERHEAD) / (record_size + 10))


def java_produce(tools: KafkaJavaTools, params: BenchParams, run: Run, topic: str, *,
                 num_records: int, throughput: int = -1, warmup_records: int = 0) -> None:
    args = ["--bootstrap-server", tools.bootstrap, "--topic", topic,
            "--num-records", str(num_records), "--record-size", str(run.record_size),
            "--throughput", str(throughput), "--print-metrics",
            "--command-property", *(f"{k}={v}" for k, v in producer_config(params).items())]
    if warmup_records > 0:
        args[args.index("--print-metrics"):args.index("--print-metrics")] = [
            "--warmup-records", str(warmup_records)]
    if params.transaction_ms > 0:  # a random transactional id, a commit every that many ms
        args[args.index("--print-metrics"):args.index("--print-metrics")] = [
            "--transaction-duration-ms", str(params.transaction_ms)]
    try:
        process = tools.run(PRODUCER_PERFORMANCE_MAIN, args, timeout=_timeout(num_records),
                            benchmark=True)
    except JavaToolError as exc:
        raise ClientError(str(exc).splitlines()[0]) from exc
    parsed = parse_producer_output(process.stdout)
    whole, steady, metrics = parsed["whole"], parsed["steady"], parsed["metrics"]
    run.records = int(whole["records"])
    run.records_per_sec = float(whole["rps"])
    run.mb_per_sec = float(whole["mbps"])
    run.seconds = run.records / run.records_per_sec if run.records_per_sec else 0.0
    run.latency = Latency(
        avg_ms=float(whole["avg"]), max_ms=float(whole["max"]), p50_ms=float(whole["p50"]),
        p95_ms=float(whole["p95"]), p99_ms=float(whole["p99"]), p999_ms=float(whole["p999"]),
        steady_p50_ms=float(steady["p50"]) if steady else None,
        steady_p95_ms=float(steady["p95"]) if steady else None,
        steady_p99_ms=float(steady["p99"]) if steady else None,
        steady_p999_ms=float(steady["p999"]) if steady else None,
    )
    run.records_per_batch = java_records_per_batch(metrics, run.record_size, params.partitions)
    run.extra["producer_metrics"] = {k: metrics[k] for k in (
        "batch-size-avg", "records-per-request-avg", "request-latency-avg", "request-latency-max",
        "record-queue-time-avg", "compression-rate-avg") if k in metrics}
    if steady:
        run.extra["steady_records_per_sec"] = float(steady["rps"])
    if metrics.get("record-error-total", 0) > 0:
        run.error = f"{metrics['record-error-total']:.0f} records failed"


def java_consume(tools: KafkaJavaTools, run: Run, topic: str, *, num_records: int) -> None:
    try:
        result = tools.consumer_performance(topic, num_records=num_records,
                                            group=f"{topic}-java", timeout=_timeout(num_records))
    except JavaToolError as exc:
        raise ClientError(str(exc).splitlines()[0]) from exc
    run.records = result.records
    run.seconds = result.fetch_time_ms / 1000
    run.records_per_sec = result.fetch_records_per_sec
    run.mb_per_sec = result.fetch_mb_per_sec * 1.048576  # the tool's MB is MiB
    run.extra.update(rebalance_ms=result.rebalance_time_ms,
                     whole_records_per_sec=result.records_per_sec)
    if result.records < num_records:
        run.error = f"read {result.records} of {num_records} records"


def java_share_consume(tools: KafkaJavaTools, run: Run, topic: str, *, num_records: int,
                       consumers: int) -> None:
    """``consumers`` share consumers of a new share group, set to start at the earliest
    record, read until ``num_records`` deliveries; then ``kafka-share-groups --describe``
    says how many records were left unacknowledged. The redeliveries are the deliveries
    beyond the records acknowledged: ``delivered - (num_records - unacknowledged)`` (the
    tool acknowledges implicitly and commits before it closes its consumers)."""
    group = f"{topic}-share"
    try:
        set_group_configs(tools.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        limit = _timeout(num_records)
        # The tool's --timeout bounds each consumer thread's whole run in Kafka 4.3.1 (it
        # waits on the thread's future that long), not only the gap between records: 10 s
        # failed one consumer reading 300,000 records at 24,000 records/s. It gets the
        # run's own limit, less a margin so that the tool, not the kill, ends a stuck run.
        result = tools.share_consumer_performance(
            topic, num_records=num_records, group=group, consumers=consumers,
            idle_timeout_ms=int((limit - 20) * 1000), timeout=limit)
        unacknowledged = tools.share_group_lag(group, topic)
    except JavaToolError as exc:
        raise ClientError(str(exc).splitlines()[0]) from exc
    run.records = result.records
    run.seconds = result.fetch_time_ms / 1000
    run.records_per_sec = result.records_per_sec
    run.mb_per_sec = result.mb_per_sec * 1.048576  # the tool's MB is MiB
    run.extra.update(consumers=consumers, unacknowledged=unacknowledged,
                     redeliveries=max(0, result.records - (num_records - unacknowledged)))
    if result.records < num_records:
        run.error = f"read {result.records} of {num_records} records"


def alter_group_configs(bootstrap: str, group: str, configs: Mapping[str, str | None]) -> None:
    """IncrementalAlterConfigs on the GROUP resource (what `kafka-configs --entity-type groups
    --alter` sends), through confluent-kafka's AdminClient: SET each config with a value,
    DELETE each given None; raises the broker's refusal."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET
                    if value is not None else AlterConfigOpType.DELETE)
        for name, value in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """``alter_group_configs`` for a benchmark run: a refusal is the run's ClientError."""
    try:
        alter_group_configs(bootstrap, group, configs)
    except Exception as exc:  # confluent-kafka raises KafkaException (and others) here
        raise ClientError(f"setting {sorted(configs)} on share group {group}: {exc}") from exc


# -- librdkafka --------------------------------------------------------------------

def _rdkafka(args: list[str], timeout: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "korvet.bench.rdkafka_perf", *args]
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                 check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise ClientError(f"rdkafka_perf did not finish in {timeout:.0f} s") from exc
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ClientError(f"rdkafka_perf exited with {process.returncode}: {process.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def rdkafka_produce(bootstrap: str, params: BenchParams, run: Run, topic: str, *,
                    num_records: int, throughput: int = -1, warmup_records: int = 0) -> None:
    args = ["produce", "--bootstrap", bootstrap, "--topic", topic,
            "--num-records", str(num_records), "--record-size", str(run.record_size),
            "--throughput", str(throughput), "--acks", params.acks,
            "--batch-size", str(params.batch_size), "--linger-ms", str(params.linger_ms),
            "--compression", params.compression, "--warmup-records", str(warmup_records)]
    if params.idempotence:
        args.append("--idempotence")
    if params.transaction_ms > 0:
        args += ["--transaction-ms", str(params.transaction_ms)]
    result = _rdkafka(args, _timeout(num_records))
    run.records = int(result["records"])
    run.seconds = float(result["seconds"])
    run.records_per_sec = float(result["records_per_sec"])
    run.mb_per_sec = float(result["mb_per_sec"])
    if "p99_ms" in result:
        run.latency = Latency(
            avg_ms=result["avg_ms"], max_ms=result["max_ms"], p50_ms=result["p50_ms"],
            p95_ms=result["p95_ms"], p99_ms=result["p99_ms"], p999_ms=result["p999_ms"],
            steady_p50_ms=result.get("steady_p50_ms"), steady_p95_ms=result.get("steady_p95_ms"),
            steady_p99_ms=result.get("steady_p99_ms"),
            steady_p999_ms=result.get("steady_p999_ms"), cdf=result.get("cdf"))
    run.records_per_batch = result.get("records_per_batch")
    if result["error_count"]:
        run.error = f"{result['error_count']} errors, first: {result['errors'][0]}"


def rdkafka_consume(bootstrap: str, run: Run, topic: str, *, num_records: int) -> None:
    result = _rdkafka(["consume", "--bootstrap", bootstrap, "--topic", topic,
                       "--num-records", str(num_records), "--record-size", str(run.record_size)],
                      _timeout(num_records))
    run.records = int(result["records"])
    run.seconds = float(result["seconds"])
    run.records_per_sec = float(result["records_per_sec"])
    run.mb_per_sec = float(result["mb_per_sec"])
    if result["error_count"]:
        run.error = f"{result['error_count']} errors, first: {result['errors'][0]}"
