"""`korvet bench` keeps working: a tiny end-to-end run (--smoke), and its pure parts.

The smoke run starts every target (Korvet with AOF everysec, Korvet without persistence,
Apache Kafka) and drives both clients and the ceiling with a few thousand records, so it
says nothing about speed: docs/performance.md holds the figures of a full run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from korvet.bench.clients import java_records_per_batch, parse_producer_output
from korvet.bench.model import (
    CONSUME,
    JAVA,
    KAFKA,
    KORVET_EMBEDDED,
    KORVET_NOPERSIST,
    KORVET_TARGETS,
    LATENCY,
    LIBRDKAFKA,
    PRODUCE,
    SHARE,
    SWEEP,
    BenchParams,
    Latency,
    Run,
    ceiling_client,
)
from korvet.bench.report import BEGIN_MARK, END_MARK, memory_rows, share_rows
from korvet.bench.runner import BenchResult
from korvet.bench.summary import find, memory_verdicts, ratios, summarize, verdicts
from korvet.bench.sweep import sweep_cells

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_warmed_up(log: str, data: dict[str, Any], params: BenchParams, runs: list[Run]) -> None:
    """Each target's broker is warmed up first (a JVM broker compiles its hot paths during its
    first runs): one produce and consume per client, logged and kept apart, not measured."""
    assert params.warmup_runs == 1
    logged = re.findall(r"(produce|consume)\s+warm-up\s+#1\s+\(not\s+recorded\)", log)
    assert logged.count(PRODUCE) == len(params.targets) * len(params.clients), log[-3000:]
    for target in params.targets:
        for client in params.clients:
            warm = [w for w in data["meta"]["warmups"]
                    if (w["target"], w["client"], w["mode"]) == (target, client, PRODUCE)]
            assert len(warm) == 1 and warm[0]["records_per_sec"] > 0, warm
            measured = [r for r in runs if (r.target, r.client, r.mode) == (target, client, PRODUCE)]
            assert len(measured) == params.repeats  # the warm-up is not among them


def _assert_shared_once(params: BenchParams, runs: list[Run]) -> None:
    """Two share consumers of one share group read every record once on every target: each
    delivery acknowledged, none repeated, nothing left behind."""
    for target in params.targets:
        shared = [r for r in runs if (r.target, r.mode) == (target, SHARE)]
        assert [r.extra["consumers"] for r in shared] == [2], shared
        for run in shared:
            assert run.ok and run.records == params.records, run
            assert (run.extra["redeliveries"], run.extra["unacknowledged"]) == (0, 0), run


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.clients
def test_bench_smoke_runs_every_target_and_writes_table_json_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = subprocess.run(
        [sys.executable, "-m", "korvet.cli", "bench", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    assert "korvet bench: medians over repeats" in process.stdout
    assert "the issue's targets" in process.stdout

    data = json.loads((out / "results.json").read_text())
    params = BenchParams.from_json(data["params"])
    assert params.smoke and params.repeats == 1
    runs = [Run.from_json(r) for r in data["runs"]]
    assert data["meta"]["machine"]["cpus"] >= 1

    def runs_of(target: str, client: str, mode: str) -> list[Run]:
        return [r for r in runs if (r.target, r.client, r.mode) == (target, client, mode)]

    _assert_warmed_up(process.stderr, data, params, runs)
    assert "unrecorded produce and consume run(s)" in (out / "results.md").read_text()

    for target in params.targets:
        for client in params.clients:
            for mode in (PRODUCE, LATENCY):
                found = runs_of(target, client, mode)
                assert found, f"no {mode} run of {client} against {target}"
                assert all(r.ok and r.records_per_sec > 0 for r in found), found
            for run in runs_of(target, client, LATENCY):
                assert run.latency is not None and run.latency.p99_ms > 0
            consumed = runs_of(target, client, CONSUME)
            assert consumed, f"no consume run of {client} against {target}"
            for run in consumed:
                if run.extra.get("unsupported"):
                    # Kafka's ConsumerPerformance needs consumer groups; allowed only where
                    # the broker does not list FindCoordinator, and never for Kafka itself.
                    assert target != KAFKA and client == JAVA and "FindCoordinator" in (run.error or "")
                else:
                    assert run.ok and run.records == params.records, run
            if target in KORVET_TARGETS:
                # what the produced records take in Redis (at least their payload), and the
                # broker's and its Redis' peak RSS, read after every run (a Python
                # broker holds more than 20 MiB once it has served clients)
                for run in runs_of(target, client, PRODUCE) + runs_of(target, client, CONSUME):
                    assert run.mode == CONSUME or \
                        run.extra["redis_bytes_per_million"] >= 0.5 * run.record_size * 1e6, run
                    peaks = run.extra["peak_rss_bytes"]
                    assert peaks["broker"] > 20 * 2**20 and peaks["redis"] > 0, run.extra
                for mode in (PRODUCE, CONSUME):
                    ceiling = runs_of(target, ceiling_client(client), mode)
                    assert ceiling and all(r.ok for r in ceiling), ceiling
    _assert_shared_once(params, runs)
    librdkafka_latency = runs_of(KORVET_EMBEDDED, LIBRDKAFKA, LATENCY)
    assert librdkafka_latency[0].latency and librdkafka_latency[0].latency.cdf

    for name in ("bench-throughput.png", "bench-latency-cdf.png"):
        image = (out / name).read_bytes()
        assert image.startswith(PNG_MAGIC) and len(image) > 10_000, name
    assert "### Targets of the issue" in (out / "results.md").read_text()
    assert "### Redis memory per million records" in (out / "results.md").read_text()
    assert "### Share consumers (KIP-932)" in (out / "results.md").read_text()
    assert "broker RSS < 300 MiB during every run" in (out / "results.md").read_text()

    # The doc's tables and plots come back from the JSON alone.
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\nhand-written\n\n{BEGIN_MARK}\nold\n{END_MARK}\n\ntail\n")
    rendered = subprocess.run(
        [sys.executable, "-m", "korvet.cli", "bench", "--render-doc", str(out / "results.json"),
         "--doc", str(doc), "--images", str(tmp_path / "img")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert rendered.returncode == 0, rendered.stderr
    text = doc.read_text()
    assert "hand-written" in text and text.rstrip().endswith("tail") and "\nold\n" not in text
    assert "![throughput by record size](img/bench-throughput.png)" in text
    assert (tmp_path / "img" / "bench-latency-cdf.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.slow
@pytest.mark.kafka
def test_batch_size_sweep_runs_each_format_and_kafka_and_plots_throughput_against_batch_size(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = subprocess.run(
        [sys.executable, "-m", "korvet.cli", "bench", "--smoke", "--targets",
         f"{KORVET_EMBEDDED},{KAFKA}", "--clients", LIBRDKAFKA, "--batch-sizes", "1024,16384",
         "--share-consumers", "none", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    assert "produce throughput against the producers' batch.size" in process.stdout
    runs = [Run.from_json(r) for r in json.loads((out / "results.json").read_text())["runs"]]
    assert not [r for r in runs if r.mode == SHARE]  # --share-consumers none
    swept = {(r.target, r.extra.get("storage_format"), r.extra["batch_size"]): r
             for r in runs if r.mode == SWEEP}
    assert set(swept) == {(KORVET_EMBEDDED, "records", 1024), (KORVET_EMBEDDED, "records", 16384),
                          (KORVET_EMBEDDED, "batches", 1024), (KORVET_EMBEDDED, "batches", 16384),
                          (KAFKA, None, 1024), (KAFKA, None, 16384)}
    for key, run in swept.items():
        assert run.ok and run.records == 2_000, (key, run)
    for target, storage in ((KORVET_EMBEDDED, "records"), (KORVET_EMBEDDED, "batches"), (KAFKA, None)):
        small, large = swept[(target, storage, 1024)], swept[(target, storage, 16384)]
        # the producers really used the batch.size asked for: 100 B records, about 9 to a
        # 1 KiB batch and over a hundred to a 16 KiB one
        assert small.records_per_batch and small.records_per_batch < 12, small
        assert large.records_per_batch and large.records_per_batch > 50, large
    # The main table's produce medians are at the one --batch-size only.
    produce = find(summarize(runs), KORVET_EMBEDDED, LIBRDKAFKA, PRODUCE, 100)
    assert produce is not None and produce.n == 1
    assert (out / "bench-batch-size.png").read_bytes().startswith(PNG_MAGIC)
    markdown = (out / "results.md").read_text()
    assert "### Produce throughput against the producers' batch.size" in markdown
    assert "![produce throughput against batch.size](bench-batch-size.png)" in markdown


def test_sweep_cells_are_medians_per_target_format_client_and_batch_size() -> None:
    def run(storage: str | None, batch_size: int, rate: float, repeat: int) -> Run:
        extra: dict[str, object] = {"batch_size": batch_size}
        if storage:
            extra["storage_format"] = storage
        return Run(KORVET_EMBEDDED if storage else KAFKA, JAVA, SWEEP, 100, repeat,
                   records=1000, seconds=1.0, records_per_sec=rate, extra=extra)

    runs = [run("batches", 4096, r, i) for i, r in enumerate((10.0, 30.0, 20.0))]
    runs += [run("records", 4096, 5.0, 0), run("batches", 65536, 50.0, 0), run(None, 4096, 7.0, 0),
             Run(KORVET_EMBEDDED, JAVA, PRODUCE, 100, 0, records=1000, seconds=1.0,
                 records_per_sec=99.0)]
    cells = {(c.target, c.storage_format, c.batch_size): c for c in sweep_cells(runs)}
    assert set(cells) == {(KORVET_EMBEDDED, "batches", 4096), (KORVET_EMBEDDED, "records", 4096),
                          (KORVET_EMBEDDED, "batches", 65536), (KAFKA, "", 4096)}
    batches = cells[(KORVET_EMBEDDED, "batches", 4096)]
    assert (batches.median, batches.low, batches.high, batches.n) == (20.0, 10.0, 30.0, 3)
    # and the sweep's runs stay out of the main table's medians
    (cell,) = [c for c in summarize(runs) if c.target == KORVET_EMBEDDED]
    assert (cell.mode, cell.median, cell.n) == (PRODUCE, 99.0, 1)


# What ProducerPerformance 4.3.1 printed in a run with --warmup-records and --print-metrics.
PRODUCER_OUTPUT = """\
Warmup first 20000 records. Steady state results will print after the complete test summary.
In steady state.
50854 records sent, 10156.6 records/sec (0.97 MB/sec), 2867.1 ms avg latency, 4468.0 ms max latency.
100000 records sent, 12327.416174 records/sec (1.18 MB/sec), 3183.63 ms avg latency, 6515.00 ms max latency, \
3317 ms 50th, 6192 ms 95th, 6461 ms 99th, 6512 ms 99.9th.
80000 steady state records sent, 10844.516741 records/sec (1.03 MB/sec), 3845.06 ms avg latency, \
6515.00 ms max latency, 3822 ms 50th, 6253 ms 95th, 6470 ms 99th, 6512 ms 99.9th.

Metric Name                                                                                   Value
producer-metrics:batch-size-avg:{client-id=perf-producer-client}                            : 16269.189
producer-metrics:records-per-request-avg:{client-id=perf-producer-client}                   : 147.929
producer-metrics:reauthentication-latency-avg:{client-id=perf-producer-client}              : NaN
producer-topic-metrics:record-send-total:{client-id=perf-producer-client, topic=t1}         : 100000.000
"""


def test_producer_performance_output_is_parsed_whole_run_steady_state_and_batches() -> None:
    parsed = parse_producer_output(PRODUCER_OUTPUT)
    assert parsed["whole"]["records"] == "100000" and parsed["whole"]["p99"] == "6461"
    assert parsed["steady"]["records"] == "80000" and parsed["steady"]["p99"] == "6470"
    metrics = parsed["metrics"]
    assert metrics["records-per-request-avg"] == pytest.approx(147.929)
    assert java_records_per_batch(metrics, 100, 1) == pytest.approx(147.929)
    # Several partitions: estimated from the batch bytes (61 B header, ~110 B per record).
    assert java_records_per_batch(metrics, 100, 3) == pytest.approx((16269.189 - 61) / 110)


def _run(target: str, client: str, mode: str, rate: float, repeat: int, p99: float | None = None) -> Run:
    latency = Latency(1, 2, 1, 2, p99, 3, steady_p99_ms=p99) if p99 is not None else None
    return Run(target, client, mode, 100, repeat, records=1000, records_per_sec=rate,
               latency=latency, rate=50_000 if mode == LATENCY else None)


def test_results_written_before_warm_ups_existed_read_as_having_none() -> None:
    old = BenchParams().to_json()
    del old["warmup_runs"]
    assert BenchParams.from_json(old).warmup_runs == 0
    assert BenchParams.from_json(BenchParams().to_json()).warmup_runs == 1


def test_medians_spreads_ratios_and_verdicts() -> None:
    runs = [
        *(_run(KORVET_EMBEDDED, JAVA, PRODUCE, r, i) for i, r in enumerate((90_000, 120_000, 100_000))),
        *(_run(KORVET_EMBEDDED, ceiling_client(JAVA), PRODUCE, r, i)
          for i, r in enumerate((150_000, 160_000, 170_000))),
        *(_run(KAFKA, JAVA, PRODUCE, r, i) for i, r in enumerate((400_000, 500_000, 600_000))),
        *(_run(KORVET_EMBEDDED, JAVA, LATENCY, 50_000, i, p99) for i, p99 in enumerate((8.0, 12.0, 9.0))),
        Run(KORVET_EMBEDDED, JAVA, CONSUME, 100, 0, error="boom"),
    ]
    cells = summarize(runs)
    produce = find(cells, KORVET_EMBEDDED, JAVA, PRODUCE, 100)
    assert produce is not None
    assert (produce.median, produce.low, produce.high, produce.n) == (100_000, 90_000, 120_000, 3)
    consume = find(cells, KORVET_EMBEDDED, JAVA, CONSUME, 100)
    assert consume is not None and consume.n == 0 and consume.failed == 1
    found = {(r.kind, r.mode): r.value for r in ratios(cells)}
    assert found[("korvet/ceiling", PRODUCE)] == pytest.approx(100_000 / 160_000)
    assert found[("korvet/kafka", PRODUCE)] == pytest.approx(100_000 / 500_000)
    params = BenchParams(targets=(KORVET_EMBEDDED, KAFKA), clients=(JAVA,))
    judged = {(v.goal, v.target): v for v in verdicts(cells, ratios(cells), params)}
    assert judged[("produce ≥ 100,000 rec/s (AOF everysec)", KORVET_EMBEDDED)].met is True
    assert judged[("produce p99 < 10 ms at 50,000 rec/s", KORVET_EMBEDDED)].met is True  # median 9
    assert judged[("produce korvet/ceiling ≥ 0.6", KORVET_EMBEDDED)].met is True  # 0.625
    assert judged[("consume ≥ 250,000 rec/s", KORVET_EMBEDDED)].met is None
    assert not any(goal.startswith("batches") for goal, _ in judged)  # records format run
    batches = BenchParams(targets=(KORVET_EMBEDDED, KAFKA), clients=(JAVA,), record_sizes=(100,),
                          topic_configs=("korvet.storage.format=batches",))
    by_goal = {v.goal: v for v in verdicts(cells, ratios(cells), batches)}
    assert by_goal["batches produce ≥ 1.0× Kafka (100 B)"].met is False  # 0.2
    assert by_goal["batches produce ≥ 1.0× Kafka (100 B)"].figure == "0.20 (100,000 / 500,000)"
    assert by_goal["batches produce korvet/ceiling ≥ 0.8 (100 B)"].met is False  # 0.625
    assert by_goal["batches consume ≥ 1.0× Kafka (100 B)"].met is None  # the consume run failed


def test_redis_memory_rows_are_medians_of_the_produce_runs_in_mib_per_million() -> None:
    runs = [Run(KORVET_EMBEDDED, LIBRDKAFKA, PRODUCE, 1024, i, records=1000, records_per_sec=1,
                extra={"redis_bytes_per_million": mib * 2**20})
            for i, mib in enumerate((1100, 1000, 1300))]
    runs.append(Run(KORVET_EMBEDDED, LIBRDKAFKA, CONSUME, 1024, 0, records=1000))  # no figure
    params = BenchParams(topic_configs=("korvet.storage.format=batches",))
    assert memory_rows(BenchResult(params, runs=runs)) == [
        [KORVET_EMBEDDED, LIBRDKAFKA, "1,024", "batches", "1,100", "1,000–1,300", "3"]]
    assert memory_rows(BenchResult(BenchParams(), runs=runs))[0][3] == "records (default)"


def test_the_broker_rss_verdict_takes_the_largest_peak_of_each_korvet_target() -> None:
    def run(target: str, mode: str, mib: float | None) -> Run:
        extra = {} if mib is None else {"peak_rss_bytes": {"broker": int(mib * 2**20), "redis": 1}}
        return Run(target, LIBRDKAFKA, mode, 100, 0, records=1000, records_per_sec=1, extra=extra)

    runs = [run(KORVET_EMBEDDED, PRODUCE, 80), run(KORVET_EMBEDDED, CONSUME, 120),
            run(KORVET_EMBEDDED, LATENCY, None), run(KORVET_NOPERSIST, PRODUCE, 310),
            run(KAFKA, PRODUCE, 900)]  # Kafka's JVM is not judged
    params = BenchParams(targets=(KORVET_EMBEDDED, KORVET_NOPERSIST, KAFKA))
    judged = {v.target: v for v in memory_verdicts(runs, params)}
    assert set(judged) == {KORVET_EMBEDDED, KORVET_NOPERSIST}
    assert judged[KORVET_EMBEDDED].met is True
    assert judged[KORVET_EMBEDDED].figure == "peak 120 MiB (read after each of 2 runs)"
    assert judged[KORVET_NOPERSIST].met is False
    unmeasured = memory_verdicts([run(KORVET_EMBEDDED, PRODUCE, None)],
                                 BenchParams(targets=(KORVET_EMBEDDED,)))
    assert [(v.met, v.figure) for v in unmeasured] == [(None, "not measured")]


def test_share_rows_are_medians_per_target_and_consumer_count_with_redeliveries() -> None:
    def run(target: str, consumers: int, rate: float, redeliveries: int, repeat: int,
            error: str | None = None) -> Run:
        return Run(target, JAVA, SHARE, 100, repeat, records=1000, records_per_sec=rate,
                   mb_per_sec=rate / 10_000, error=error,
                   extra={"consumers": consumers, "redeliveries": redeliveries})

    runs = [run(KAFKA, 4, 9000, 0, 0), run(KORVET_EMBEDDED, 4, 3000, 5, 0),
            run(KORVET_EMBEDDED, 4, 1000, 0, 1), run(KORVET_EMBEDDED, 4, 2000, 1, 2),
            run(KORVET_EMBEDDED, 1, 0, 0, 0, error="read 10 of 1000 records")]
    result = BenchResult(BenchParams(share_consumers=(1, 4)), runs=runs)
    assert share_rows(result) == [
        [KORVET_EMBEDDED, "1", "100", "failed", "read 10 of 1000 records", "", "", "0 (+1 failed)"],
        [KORVET_EMBEDDED, "4", "100", "2,000", "1,000–3,000", "0.2", "1, 5", "3"],
        [KAFKA, "4", "100", "9,000", "9,000–9,000", "0.9", "0, 0", "1"],
    ]
