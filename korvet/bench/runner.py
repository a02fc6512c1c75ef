"""Run the whole benchmark: every target, one at a time, with progress, into a ``BenchResult``.

Per target: start the broker; warm it up (``warmup_runs`` rounds in which each client
produces and consumes once per record size, logged and kept in ``meta["warmups"]``, not
among the runs: a JVM broker compiles its hot paths during its first runs); for each record
size and repeat, each client produces
``records`` records to a fresh topic and reads them back (the topic is deleted
afterwards, so memory and disk stay small), and for a Korvet target the ceiling
(korvet/bench/ceiling.py) follows at once, in batches of the size that produce run
had, on the broker's own Redis while the broker idles: so a ratio korvet/ceiling
compares runs seconds apart on a machine whose load drifts. Then the fixed-rate
latency runs; stop the broker. With ``profile``, one more produce and consume per
client and size runs under py-spy (not counted).

CPU time per record is charged to each server process (from /proc) and to the
client (the finished child processes' rusage) over each run. For a Korvet target, Redis'
``used_memory`` is read before and after each produce run (the topic is fresh, so the
difference is what its records take): ``extra["redis_bytes_per_million"]``. After every
run, each server process' peak RSS so far (``VmHWM``): ``extra["peak_rss_bytes"]``.
"""

from __future__ import annotations

import itertools
import json
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from korvet.jvm.java_clients import KafkaJavaTools

from . import brokers, clients, environment
from .brokers import Broker, KafkaBroker, KorvetBroker, cpu_times
from .model import (
    APPENDFSYNC,
    CONSUME,
    JAVA,
    KAFKA,
    KORVET_TARGETS,
    LATENCY,
    PRODUCE,
    SHARE,
    SWEEP,
    BenchParams,
    Run,
    ceiling_client,
)
from .profiling import PySpy, RedisCommandStats, RedisMemory, py_spy_binary


@dataclass
class BenchResult:
    params: BenchParams
    meta: dict[str, Any] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "meta": self.meta, "params": self.params.to_json(),
                "runs": [run.to_json() for run in self.runs], "profiles": self.profiles}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchResult:
        return cls(params=BenchParams.from_json(data["params"]), meta=data.get("meta", {}),
                   runs=[Run.from_json(r) for r in data["runs"]],
                   profiles=data.get("profiles", []))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> BenchResult:
        return cls.from_json(json.loads(path.read_text()))


NO_GROUPS = ("not run: ConsumerPerformance needs a consumer group and the broker lists no "
             "FindCoordinator in ApiVersions")


def _steps_of(params: BenchParams, target: str) -> int:
    """Progress steps of one target after its broker started."""
    per_run = 3 if target in KORVET_TARGETS else 2  # produce, consume (, ceiling)
    steps = len(params.record_sizes) * params.repeats * len(params.clients) * per_run
    steps += params.repeats * len(params.clients)
    steps += params.warmup_runs * len(params.record_sizes) * len(params.clients) * 2
    steps += (len(params.batch_sizes) * params.repeats * len(params.clients)
              * (len(params.sweep_formats) if target in KORVET_TARGETS else 1))
    if target in KORVET_TARGETS and params.profile:
        steps += len(params.record_sizes) * len(params.clients) * 2
    steps += len(params.share_consumers) * params.repeats
    return steps


def count_steps(params: BenchParams) -> int:
    return sum(1 + _steps_of(params, target) for target in params.targets)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _describe(run: Run) -> str:
    if run.error:
        return f"[red]failed[/red]: {escape(run.error)}"
    text = f"{run.records_per_sec:,.0f} rec/s ({run.mb_per_sec:.1f} MB/s)"
    if run.latency is not None:
        text += f", p99 {run.latency.target_p99_ms:.1f} ms"
    if run.records_per_batch:
        text += f", {run.records_per_batch:.0f} rec/batch"
    if "redis_bytes_per_million" in run.extra:
        text += f", Redis {run.extra['redis_bytes_per_million'] / 2**20:,.0f} MiB per million records"
    cpu = ", ".join(f"{name} {us:.1f}" for name, us in run.cpu_us_per_record.items())
    if cpu:
        text += f"; CPU µs/rec: {cpu}"
    return text


class BenchRunner:
    def __init__(self, params: BenchParams, work_dir: Path, console: Console,
                 profile_dir: Path | None = None) -> None:
        self.params = params
        self.work_dir = work_dir
        self.console = console
        self.profile_dir = profile_dir
        self.result = BenchResult(params)
        self._progress: Progress | None = None
        self._task: Any = None
        self._has_groups = True  # does the running broker have consumer groups?

    # -- progress ---------------------------------------------------------------------

    def _status(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def _advance(self, steps: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, steps)

    def _log(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def _record(self, run: Run) -> None:
        self.result.runs.append(run)
        size = f"{run.record_size} B"
        rate = f" at {run.rate:,}/s" if run.rate else ""
        if run.mode == SWEEP:
            rate = f" batch.size {run.extra['batch_size']:,}" + (
                f", {run.extra['storage_format']}" if run.extra.get("storage_format") else "")
        self._log(f"  {run.target:17} {run.client:18} {size:>7} {run.mode}{rate} #{run.repeat + 1}: "
                  f"{_describe(run)}")

    # -- the whole run ------------------------------------------------------------------

    def run(self) -> BenchResult:
        self.result.meta = {"machine": environment.describe(), "command": sys.argv[1:],
                            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                            "load_average_start": environment.load_average()}
        started = time.monotonic()
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=False) as progress:
            self._progress = progress
            self._task = progress.add_task("starting", total=count_steps(self.params))
            for target in self.params.targets:
                self._target(target)
            progress.update(self._task, description="done")
        self._progress = None
        self.result.meta.update(finished=time.strftime("%Y-%m-%d %H:%M:%S %z"),
                                seconds=round(time.monotonic() - started, 1),
                                load_average_end=environment.load_average())
        return self.result

    def _make_broker(self, target: str) -> Broker:
        folder = self.work_dir / target
        if target == KAFKA:
            return KafkaBroker(target, folder)
        return KorvetBroker(target, folder, appendfsync=APPENDFSYNC[target])

    def _target(self, target: str) -> None:
        params = self.params
        broker = self._make_broker(target)
        self._status(f"{target}: starting the broker")
        try:
            broker.start()
        except Exception as exc:  # reported; the other targets still run
            self._log(f"[red]{target}: the broker did not start: {escape(str(exc))}[/red]")
            self.result.meta.setdefault("failures", []).append(f"{target}: {exc}")
            self._advance(1 + _steps_of(params, target))
            broker.stop()
            return
        self._advance()
        try:
            self._has_groups = brokers.FIND_COORDINATOR in brokers.supported_api_keys(broker.bootstrap)
        except (OSError, brokers.BrokerError):
            self._has_groups = True  # let the client find out
        self._log(f"[bold]{target}[/bold] at {broker.bootstrap} "
                  f"(started in {getattr(broker, 'startup_seconds', 0.0):.1f} s)")
        try:
            self._runs(broker, target)
        finally:
            self._status(f"{target}: stopping the broker")
            broker.stop()

    def _runs(self, broker: Broker, target: str) -> None:
        """Every run of one target, on its started broker: the warm-up first."""
        params = self.params
        for warmup, size, client in itertools.product(range(params.warmup_runs),
                                                      params.record_sizes, params.clients):
            self._warm_up(broker, target, client, size, warmup)
        for size in params.record_sizes:
            for repeat in range(params.repeats):
                for client in params.clients:
                    self._produce_consume(broker, target, client, size, repeat)
        for repeat in range(params.repeats):
            for client in params.clients:
                self._latency(broker, target, client, repeat)
        if params.batch_sizes:
            self._sweep(broker, target)
        self._shares(broker, target)
        if target in KORVET_TARGETS and params.profile:
            for size in params.record_sizes:
                for client in params.clients:
                    self._profiled(broker, target, client, size)

    # -- one measurement -----------------------------------------------------------------

    @contextmanager
    def _process_figures(self, broker: Broker, run: Run) -> Iterator[None]:
        """Around one run: each process' CPU per record, and each server's peak RSS after it."""
        pids = broker.processes()
        before = {name: cpu_times(pid) for name, pid in pids.items()}
        children = _children_cpu()
        try:
            yield
        finally:
            if run.records > 0:
                scale = 1e6 / run.records
                for name, pid in pids.items():
                    user, system = cpu_times(pid)
                    user, system = user - before[name][0], system - before[name][1]
                    run.cpu_us_per_record[name] = (user + system) * scale
                    # the kernel's share: socket sends and receives, AOF writes
                    run.cpu_us_per_record[f"{name}.sys"] = system * scale
                run.cpu_us_per_record["client"] = (_children_cpu() - children) * scale
            # Each server process' peak RSS since it started, read after every run: the
            # largest over a target's runs is its peak over the whole benchmark.
            peaks = {name: peak for name, pid in pids.items()
                     if (peak := brokers.peak_rss_bytes(pid)) is not None}
            if peaks:
                run.extra["peak_rss_bytes"] = peaks

    def _measure(self, broker: Broker, run: Run, action: Callable[[], None]) -> Run:
        try:
            with self._process_figures(broker, run):
                action()
        except (clients.ClientError, brokers.BrokerError, OSError, ValueError) as exc:
            run.error = str(exc)[:500]
        return run

    def _topic(self, broker: Broker, client: str, size: int,
               configs: dict[str, str] | None = None) -> str | None:
        name = f"bench-{client}-{size}-{uuid.uuid4().hex[:8]}"
        configs = self.params.topic_config_map if configs is None else configs
        if isinstance(broker, brokers.KafkaBroker):  # Kafka refuses Korvet's own settings
            configs = {k: v for k, v in configs.items() if not k.startswith("korvet.")}
        try:
            brokers.create_topic(broker.bootstrap, name, self.params.partitions, configs)
        except brokers.BrokerError as exc:
            self._log(f"[red]{escape(str(exc))}[/red]")
            return None
        return name

    def _drop(self, broker: Broker, topic: str) -> None:
        try:
            brokers.delete_topic(broker.bootstrap, topic)
        except brokers.BrokerError as exc:
            self._log(f"[yellow]{escape(str(exc))}[/yellow]")

    def _produce(self, broker: Broker, run: Run, topic: str, *, num_records: int,
                 throughput: int = -1, warmup_records: int = 0,
                 params: BenchParams | None = None) -> Run:
        given = params or self.params

        def action() -> None:
            if run.client == JAVA:
                clients.java_produce(KafkaJavaTools(broker.bootstrap), given, run, topic,
                                     num_records=num_records, throughput=throughput,
                                     warmup_records=warmup_records)
            else:
                clients.rdkafka_produce(broker.bootstrap, given, run, topic,
                                        num_records=num_records, throughput=throughput,
                                        warmup_records=warmup_records)
        return self._measure(broker, run, action)

    def _consume(self, broker: Broker, run: Run, topic: str, *, num_records: int) -> Run:
        def action() -> None:
            if run.client == JAVA:
                clients.java_consume(KafkaJavaTools(broker.bootstrap), run, topic,
                                     num_records=num_records)
            else:
                clients.rdkafka_consume(broker.bootstrap, run, topic, num_records=num_records)
        return self._measure(broker, run, action)

    def _produce_consume(self, broker: Broker, target: str, client: str, size: int,
                         repeat: int) -> None:
        params = self.params
        produce = Run(target, client, PRODUCE, size, repeat)
        consume = Run(target, client, CONSUME, size, repeat)
        self._status(f"{target}: {client} produces {params.records:,} × {size} B (#{repeat + 1})")
        topic = self._topic(broker, client, size)
        if topic is None:
            produce.error = consume.error = "topic not created"
            self._record(produce)
            self._record(consume)
            self._advance(2)
            return
        memory = _redis_memory(broker)
        before = memory.used() if memory else None
        self._record(self._measure_memory(
            self._produce(broker, produce, topic, num_records=params.records), memory, before))
        self._advance()
        self._status(f"{target}: {client} consumes {params.records:,} × {size} B (#{repeat + 1})")
        if produce.error:
            consume.error = "nothing to read: the produce run failed"
            self._record(consume)
        elif client == JAVA and not self._has_groups:
            consume.error = NO_GROUPS
            consume.extra["unsupported"] = True
            self._record(consume)
        else:
            self._record(self._consume(broker, consume, topic, num_records=params.records))
        self._advance()
        self._drop(broker, topic)
        if target in KORVET_TARGETS:
            self._ceiling(broker, target, client, size, repeat, produce)

    def _shares(self, broker: Broker, target: str) -> None:
        for repeat in range(self.params.repeats):
            for consumers in self.params.share_consumers:
                self._share(broker, target, consumers, repeat)

    def _share(self, broker: Broker, target: str, consumers: int, repeat: int) -> None:
        """``consumers`` share consumers (Java) of one share group read a topic the Java
        producer filled with ``records`` records of the first record size (the fill is not
        recorded); records/s over all of them, and the redeliveries."""
        params = self.params
        size = params.record_sizes[0]
        run = Run(target, JAVA, SHARE, size, repeat)
        self._status(f"{target}: {consumers} share consumer(s) read {params.records:,} × "
                     f"{size} B (#{repeat + 1})")
        topic = self._topic(broker, JAVA, size)
        if topic is None:
            run.error = "topic not created"
        else:
            fill = self._produce(broker, Run(target, JAVA, PRODUCE, size, repeat), topic,
                                 num_records=params.records)
            if fill.error:
                run.error = f"filling the topic failed: {fill.error}"
            else:
                tools = KafkaJavaTools(broker.bootstrap)
                self._measure(broker, run, lambda: clients.java_share_consume(
                    tools, run, topic, num_records=params.records, consumers=consumers))
            self._drop(broker, topic)
        run.extra.setdefault("consumers", consumers)
        self._record(run)
        self._advance()

    def _warm_up(self, broker: Broker, target: str, client: str, size: int, number: int) -> None:
        """A produce and a consume run like the measured ones, not recorded: logged, and kept
        in the results' meta (``warmups``) to show what a cold broker does."""
        params = self.params
        self._status(f"{target}: warm-up, {client} produces {params.records:,} × {size} B")
        topic = self._topic(broker, client, size)
        runs = [Run(target, client, PRODUCE, size, number), Run(target, client, CONSUME, size, number)]
        if topic is None:
            runs[0].error = runs[1].error = "topic not created"
        else:
            self._produce(broker, runs[0], topic, num_records=params.records)
            self._advance()
            if runs[0].error:
                runs[1].error = "nothing to read: the produce run failed"
            elif client != JAVA or self._has_groups:
                self._status(f"{target}: warm-up, {client} consumes {params.records:,} × {size} B")
                self._consume(broker, runs[1], topic, num_records=params.records)
            self._drop(broker, topic)
        self._advance(2 if topic is None else 1)
        for run in runs:
            if run.records or run.error:
                self._log(f"  {target:17} {client:18} {size:>7} {run.mode} warm-up "
                          f"#{number + 1} (not recorded): {_describe(run)}")
                self.result.meta.setdefault("warmups", []).append(
                    {"target": target, "client": client, "record_size": size, "mode": run.mode,
                     "records_per_sec": run.records_per_sec, "error": run.error})

    @staticmethod
    def _measure_memory(run: Run, memory: RedisMemory | None, before: int | None) -> Run:
        """What the run's records take in Redis, per million records (``used_memory`` after
        the run less before it)."""
        if memory is None:
            return run
        after = memory.used()
        memory.close()
        if run.ok and run.records and before is not None and after is not None:
            run.extra["redis_bytes_per_million"] = (after - before) * 1e6 / run.records
            run.extra["redis_used_memory_before"] = before
            run.extra["redis_used_memory_after"] = after
        return run

    def _latency(self, broker: Broker, target: str, client: str, repeat: int) -> None:
        params = self.params
        size = params.latency_record_size
        run = Run(target, client, LATENCY, size, repeat, rate=params.latency_rate)
        self._status(f"{target}: {client} produces at {params.latency_rate:,} rec/s (#{repeat + 1})")
        topic = self._topic(broker, client, size)
        if topic is None:
            run.error = "topic not created"
        else:
            self._produce(broker, run, topic, num_records=params.latency_records,
                          throughput=params.latency_rate,
                          warmup_records=params.latency_warmup_records)
            self._drop(broker, topic)
        self._record(run)
        self._advance()

    def _sweep(self, broker: Broker, target: str) -> None:
        """Produce runs of the first record size at each ``batch_sizes`` value (the producers'
        ``batch.size``, everything else as in the main runs), per repeat and client; on a
        Korvet target once per storage format (``korvet.storage.format`` of the topic)."""
        params = self.params
        size = params.record_sizes[0]
        formats = params.sweep_formats if target in KORVET_TARGETS else ("",)
        for batch_size in params.batch_sizes:
            swept = replace(params, batch_size=batch_size)
            for repeat in range(params.repeats):
                for client in params.clients:
                    for storage in formats:
                        extra: dict[str, Any] = {"batch_size": batch_size}
                        configs = dict(params.topic_config_map)
                        if storage:
                            extra["storage_format"] = configs["korvet.storage.format"] = storage
                        run = Run(target, client, SWEEP, size, repeat, extra=extra)
                        self._status(f"{target}: {client} produces with batch.size "
                                     f"{batch_size:,} {storage} (#{repeat + 1})")
                        topic = self._topic(broker, client, size, configs)
                        if topic is None:
                            run.error = "topic not created"
                        else:
                            self._produce(broker, run, topic, num_records=params.records,
                                          params=swept)
                            self._drop(broker, topic)
                        self._record(run)
                        self._advance()

    def _ceiling(self, broker: Broker, target: str, client: str, size: int, repeat: int,
                 produce: Run) -> None:
        """The same records through the append script alone, in the batches of ``produce``."""
        params = self.params
        if produce.ok and produce.records_per_batch:
            batch_records = max(1, round(produce.records_per_batch))
            source = f"{client}'s produce run"
        else:
            batch_records = max(1, (params.batch_size - clients.BATCH_OVERHEAD) // (size + 10))
            source = "a full batch.size (no client figure)"
        read_count = max(1, min(10_000, 1_048_576 // size))
        self._status(f"{target}: ceiling, {size} B in batches of {batch_records} (#{repeat + 1})")
        url_file = getattr(broker, "data_dir", Path("/nonexistent")) / "redis" / "redis.url"
        command = [sys.executable, "-m", "korvet.bench.ceiling",
                   "--appendfsync", APPENDFSYNC[target], "--record-size", str(size),
                   "--num-records", str(params.records), "--batch-records", str(batch_records),
                   "--partitions", str(params.partitions), "--read-count", str(read_count),
                   "--repeats", "1", "--data-dir", str(self.work_dir / f"ceiling-{target}"),
                   *(f"--topic-config={item}" for item in params.topic_configs)]
        if url_file.is_file():
            command += ["--redis-url", url_file.read_text().strip()]
        runs: list[dict[str, Any]] = []
        error: str | None = None
        try:
            process = subprocess.run(command, capture_output=True, text=True, check=False,
                                     timeout=300 + params.records / 1000, stdin=subprocess.DEVNULL)
            lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
            if process.returncode != 0 or not lines:
                error = f"ceiling exited with {process.returncode}: {process.stderr[-800:]}"
            else:
                runs = json.loads(lines[-1])["runs"]
        except subprocess.TimeoutExpired:
            error = "the ceiling run timed out"
        for mode in (PRODUCE, CONSUME):
            run = Run(target, ceiling_client(client), mode, size, repeat,
                      extra={"batch_records_from": source, "read_count": read_count})
            if runs:
                figures = runs[0][mode]
                run.records = int(figures["records"])
                run.seconds = float(figures["seconds"])
                run.records_per_sec = float(figures["records_per_sec"])
                run.mb_per_sec = float(figures["mb_per_sec"])
                run.records_per_batch = figures.get("records_per_batch")
                run.cpu_us_per_record = dict(figures["cpu_us_per_record"])
            else:
                run.error = error or "no figure"
            self._record(run)
        self._advance()

    def _profiled(self, broker: Broker, target: str, client: str, size: int) -> None:
        """One more produce and consume with py-spy on the broker (not counted)."""
        params = self.params
        pids = broker.processes()
        folder = self.profile_dir or (self.work_dir / "profiles")
        topic = self._topic(broker, client, size) if "broker" in pids else None
        if topic is None or py_spy_binary() is None:
            self._log("[yellow]profiling skipped (no broker pid, topic or py-spy)[/yellow]")
            self._advance(2)
            return
        redis_url_file = getattr(broker, "data_dir", Path("/nonexistent")) / "redis" / "redis.url"
        redis_url = redis_url_file.read_text().strip() if redis_url_file.is_file() else None
        for mode in (PRODUCE, CONSUME):
            if mode == CONSUME and client == JAVA and not self._has_groups:
                self._advance()
                continue
            self._status(f"{target}: {client} {mode} {size} B under py-spy")
            run = Run(target, client, mode, size, 0, extra={"profiled": True})
            stem = f"{target}-{client}-{size}-{mode}"
            spies = {"wall": PySpy(pids["broker"], folder / f"{stem}-wall.txt"),
                     "gil": PySpy(pids["broker"], folder / f"{stem}-gil.txt", gil=True)}
            stats = RedisCommandStats(redis_url) if redis_url else None
            if stats:
                stats.reset()
            try:
                for spy in spies.values():
                    spy.start()
                time.sleep(0.3)  # attached before the run starts
            except RuntimeError as exc:
                self._log(f"[yellow]{escape(str(exc))}[/yellow]")
                self._advance()
                continue
            if mode == PRODUCE:
                self._produce(broker, run, topic, num_records=params.records)
            else:
                self._consume(broker, run, topic, num_records=params.records)
            summary = spies["wall"].stop()
            gil = spies["gil"].stop()
            profile = {"target": target, "client": client, "record_size": size, "mode": mode,
                       "run": run.to_json(), "py_spy": summary, "py_spy_gil": gil,
                       "redis_commandstats": stats.read(run.records) if stats else []}
            self.result.profiles.append(profile)
            top = ", ".join(f"{name.split(' (')[0]} {share}%" for name, share in gil.get("self", [])[:4])
            self._log(f"  profiled {target} {client} {size} B {mode}: {_describe(run)}; "
                      f"running Python {gil.get('busy', 0):.0%} of the time, in a system call or "
                      f"Python {summary.get('busy', 0):.0%}; top (GIL held): {escape(top)}")
            self._advance()
        self._drop(broker, topic)


def _redis_memory(broker: Broker) -> RedisMemory | None:
    """The broker's embedded Redis, for its ``used_memory`` (None for Kafka)."""
    url_file = getattr(broker, "data_dir", Path("/nonexistent")) / "redis" / "redis.url"
    return RedisMemory(url_file.read_text().strip()) if url_file.is_file() else None
