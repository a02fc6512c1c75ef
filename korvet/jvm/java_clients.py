"""Kafka's own Java command-line tools (jar set ``kafka``), run against any bootstrap server.

Each helper runs one JVM with the pinned Kafka 4.3.1 class path, has a timeout,
and either returns the finished process or what the tool printed, parsed:

========================  ============================================================
helper                    main class (Kafka 4 moved most tools to org.apache.kafka.tools)
========================  ============================================================
``console_produce``       ``org.apache.kafka.tools.ConsoleProducer``
``console_consume``       ``org.apache.kafka.tools.consumer.ConsoleConsumer``
``list_groups``           ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``
``describe_group``        (same, ``--describe --group G``)
``producer_performance``  ``org.apache.kafka.tools.ProducerPerformance``
``consumer_performance``  ``org.apache.kafka.tools.ConsumerPerformance``
========================  ============================================================

The console producer and consumer are driven with ASCII control characters as
field, header and line separators (see ``FIELD_SEPARATOR`` and friends), so keys,
values and headers may hold tabs, commas and colons; only header *keys* must not
hold ``:``, which the console consumer prints between a header's key and value
whatever it is told. Tool logging goes to stderr at WARN.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from korvet.jvm import class_sharing
from korvet.jvm.kafka_server import (
    JAR_SET,
    KAFKA_GC_OPTIONS,
    KafkaToolsError,
    jar_classpath,
    java_binary,
    tools_log4j2_config,
)

CONSOLE_PRODUCER_MAIN = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER_MAIN = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS_MAIN = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PRODUCER_PERFORMANCE_MAIN = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE_MAIN = "org.apache.kafka.tools.ConsumerPerformance"
GET_OFFSETS_MAIN = "org.apache.kafka.tools.GetOffsetShell"
SHARE_CONSUMER_PERFORMANCE_MAIN = "org.apache.kafka.tools.ShareConsumerPerformance"
SHARE_GROUPS_MAIN = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"

FIELD_SEPARATOR = "\x1d"  # between timestamp, partition, offset, headers, key and value
HEADER_SEPARATOR = "\x1f"  # between two headers
HEADER_KEY_SEPARATOR = "\x1e"  # between a header's key and value (producer side only)
RECORD_SEPARATOR = "\x1c"  # after each record the console consumer prints
NULL_MARKER = "\x15"  # a null key, value or header value

_CONTROL = (FIELD_SEPARATOR, HEADER_SEPARATOR, HEADER_KEY_SEPARATOR, RECORD_SEPARATOR, NULL_MARKER,
            "\n", "\r")


class JavaToolError(KafkaToolsError):
    """A Kafka tool failed, timed out, or printed something this module cannot parse."""

    def __init__(self, message: str, process: subprocess.CompletedProcess[str] | None = None) -> None:
        super().__init__(message)
        self.process = process


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One line for the console producer: a value, optionally a key and headers."""

    value: str | None
    key: str | None = None
    headers: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsoleRecord:
    """One record as the console consumer printed it."""

    timestamp_type: str  # "CreateTime", "LogAppendTime" or "NoTimestamp"
    timestamp: int | None
    partition: int
    offset: int
    headers: tuple[tuple[str, str | None], ...]
    key: str | None
    value: str | None


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    records: list[ConsoleRecord]
    process: subprocess.CompletedProcess[str]


@dataclass(frozen=True, slots=True)
class GroupOffsetRow:
    """One row of ``kafka-consumer-groups --describe``; ``None`` where the tool prints ``-``."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


@dataclass(frozen=True, slots=True)
class ProducerPerformanceResult:
    """The summary line of ``kafka-producer-perf-test``."""

    records: int
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int
    process: subprocess.CompletedProcess[str] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ConsumerPerformanceResult:
    """The result row of ``kafka-consumer-perf-test``."""

    start_time: str
    end_time: str
    mb_consumed: float
    mb_per_sec: float
    records: int
    records_per_sec: float
    rebalance_time_ms: int
    fetch_time_ms: int
    fetch_mb_per_sec: float
    fetch_records_per_sec: float
    process: subprocess.CompletedProcess[str] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ShareConsumerPerformanceResult:
    """The result row of ``kafka-share-consumer-perf-test`` (every share consumer together):
    ``records`` counts deliveries, a record delivered twice twice."""

    start_time: str
    end_time: str
    mb_consumed: float
    mb_per_sec: float
    records_per_sec: float
    records: int
    fetch_time_ms: int
    process: subprocess.CompletedProcess[str] = field(repr=False, compare=False)


def _check_text(what: str, text: str) -> None:
    for mark in _CONTROL:
        if mark in text:
            raise ValueError(f"{what} {text!r} holds {mark!r}, which the console tools use as a separator")


def _properties(option: str, properties: Mapping[str, str] | None) -> list[str]:
    args: list[str] = []
    for key, value in (properties or {}).items():
        args += [option, f"{key}={value}"]
    return args


def _nullable(text: str) -> str | None:
    return None if text == NULL_MARKER else text


def _number(text: str) -> int | None:
    return None if text == "-" else int(text)


def _word(text: str) -> str | None:
    return None if text == "-" else text


class KafkaJavaTools:
    """Runs Kafka's Java tools against ``bootstrap`` (``host:port``), each in its own JVM."""

    def __init__(
        self,
        bootstrap: str,
        *,
        heap: str = "256m",
        timeout: float = 120.0,
        jvm_options: Sequence[str] = (),
    ) -> None:
        self.bootstrap = bootstrap
        self.heap = heap
        self.timeout = timeout
        self.jvm_options = tuple(jvm_options)

    def command(self, main_class: str, args: Sequence[str], *, benchmark: bool = False) -> list[str]:
        """The java command line; ``benchmark`` picks the JVM flags of Kafka's perf-test scripts.
        It maps the class archive an earlier ``run`` of the same tool wrote (class_sharing)."""
        java, classpath = java_binary(), jar_classpath(JAR_SET)
        return self._command(java, classpath, main_class, args, benchmark=benchmark,
                             sharing=class_sharing.options_for(java, classpath, main_class))

    def _command(self, java: str, classpath: str, main_class: str, args: Sequence[str], *,
                 benchmark: bool, sharing: Sequence[str]) -> list[str]:
        if benchmark:
            # kafka-producer-perf-test.sh: 512 MB heap, G1 and the full JIT, so that
            # figures compare with ones measured with Kafka's own scripts.
            tuning = ["-Xmx512m", *KAFKA_GC_OPTIONS]
        else:
            # A console tool lives for seconds: start fast rather than peak.
            tuning = [f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                      "-Djava.awt.headless=true"]
        return [
            java,
            *tuning,
            *sharing,
            "-Dfile.encoding=UTF-8",
            "-Dsun.stdout.encoding=UTF-8",
            "-Dsun.stderr.encoding=UTF-8",
            f"-Dlog4j2.configurationFile={tools_log4j2_config()}",
            *self.jvm_options,
            "-cp", classpath,
            main_class,
            *args,
        ]

    def run(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        input_text: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        benchmark: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run one tool to completion; with ``check``, a non-zero exit raises ``JavaToolError``."""
        limit = self.timeout if timeout is None else timeout
        java, classpath = java_binary(), jar_classpath(JAR_SET)
        sharing = class_sharing.plan(java, classpath, main_class)
        command = self._command(java, classpath, main_class, args, benchmark=benchmark,
                                sharing=sharing.options)
        exited = False  # by itself: a JVM killed at the time limit may be writing its archive
        try:
            process = subprocess.run(
                command,
                input=input_text,
                stdin=None if input_text is not None else subprocess.DEVNULL,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=limit,
                check=False,
            )
            exited = process.returncode >= 0
        except subprocess.TimeoutExpired as exc:
            raise JavaToolError(f"{main_class} did not finish in {limit:.0f} s") from exc
        finally:
            class_sharing.finish(sharing, java, classpath, exited=exited)
        if check and process.returncode != 0:
            raise JavaToolError(
                f"{main_class} exited with {process.returncode}:\n{process.stdout[-2000:]}"
                f"{process.stderr[-4000:]}",
                process,
            )
        return process

    # -- console producer and consumer ------------------------------------

    def console_produce(
        self,
        topic: str,
        records: Iterable[ProduceRecord | str],
        *,
        properties: Mapping[str, str] | None = None,
        sync: bool = False,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Send records through ``kafka-console-producer``; waits until it exits (all acked).

        ``properties`` are producer configs (``--command-property``), e.g.
        ``{"enable.idempotence": "true", "retries": "5", "acks": "all"}``. A plain
        string is a value without key. If any record has headers, every record must
        have at least one (the console producer then expects a header field on every line).
        """
        items = [r if isinstance(r, ProduceRecord) else ProduceRecord(value=r) for r in records]
        with_keys = any(r.key is not None for r in items)
        with_headers = any(r.headers for r in items)
        if with_headers and not all(r.headers for r in items):
            raise ValueError("the console producer cannot mix records with and without headers")
        lines = []
        for record in items:
            fields: list[str] = []
            if with_headers:
                pairs = []
                for name, value in record.headers:
                    _check_text("header key", name)
                    if value is not None:
                        _check_text("header value", value)
                    shown = NULL_MARKER if value is None else value
                    pairs.append(f"{name}{HEADER_KEY_SEPARATOR}{shown}")
                fields.append(HEADER_SEPARATOR.join(pairs))
            if with_keys:
                if record.key is not None:
                    _check_text("key", record.key)
                fields.append(NULL_MARKER if record.key is None else record.key)
            if record.value is not None:
                _check_text("value", record.value)
            fields.append(NULL_MARKER if record.value is None else record.value)
            lines.append(FIELD_SEPARATOR.join(fields))
        args = self.console_producer_args(topic, keys=with_keys, headers=with_headers,
                                          properties=properties, sync=sync)
        text = "".join(f"{line}\n" for line in lines)
        return self.run(CONSOLE_PRODUCER_MAIN, args, input_text=text, timeout=timeout)

    def console_producer_args(
        self,
        topic: str,
        *,
        keys: bool,
        headers: bool = False,
        properties: Mapping[str, str] | None = None,
        sync: bool = False,
    ) -> list[str]:
        """The console producer's arguments: it reads one record a line from stdin, the
        fields separated by ``FIELD_SEPARATOR`` (headers, then the key when ``keys``,
        then the value), so a caller may also keep it running and feed it lines."""
        reader = {
            "parse.key": "true" if keys else "false",
            "parse.headers": "true" if headers else "false",
            "key.separator": FIELD_SEPARATOR,
            "headers.delimiter": FIELD_SEPARATOR,
            "headers.separator": HEADER_SEPARATOR,
            "headers.key.separator": HEADER_KEY_SEPARATOR,
            "null.marker": NULL_MARKER,
            "ignore.error": "false",
        }
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic]
        args += _properties("--reader-property", reader)
        args += _properties("--command-property", properties)
        if sync:
            args.append("--sync")
        return args

    def console_consumer_args(
        self,
        topic: str,
        *,
        max_messages: int | None = None,
        from_beginning: bool = True,
        group: str | None = None,
        partition: int | None = None,
        offset: int | str | None = None,
        idle_timeout_ms: int | None = 10_000,
        isolation_level: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The console consumer's arguments, printing everything ``parse_console_records`` reads."""
        formatter = {
            "print.timestamp": "true",
            "print.partition": "true",
            "print.offset": "true",
            "print.headers": "true",
            "print.key": "true",
            "print.value": "true",
            "key.separator": FIELD_SEPARATOR,
            "headers.separator": HEADER_SEPARATOR,
            "line.separator": RECORD_SEPARATOR,
            "null.literal": NULL_MARKER,
        }
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic]
        if max_messages is not None:
            args += ["--max-messages", str(max_messages)]
        if idle_timeout_ms is not None:
            args += ["--timeout-ms", str(idle_timeout_ms)]
        if partition is not None:
            args += ["--partition", str(partition)]
            if offset is not None:
                args += ["--offset", str(offset)]
            elif from_beginning:
                args += ["--offset", "earliest"]
        elif from_beginning:
            args.append("--from-beginning")
        if group is not None:
            args += ["--group", group]
        if isolation_level is not None:
            args += ["--isolation-level", isolation_level]
        args += _properties("--formatter-property", formatter)
        args += _properties("--command-property", properties)
        return args

    def console_consume(
        self,
        topic: str,
        *,
        max_messages: int,
        from_beginning: bool = True,
        group: str | None = None,
        partition: int | None = None,
        offset: int | str | None = None,
        idle_timeout_ms: int = 10_000,
        isolation_level: str | None = None,
        properties: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ConsumeResult:
        """Read up to ``max_messages`` with ``kafka-console-consumer``, printing everything.

        It stops early when no record arrives for ``idle_timeout_ms``, so fewer
        records than asked for is a normal result, not an error.
        """
        args = self.console_consumer_args(
            topic, max_messages=max_messages, from_beginning=from_beginning, group=group,
            partition=partition, offset=offset, idle_timeout_ms=idle_timeout_ms,
            isolation_level=isolation_level, properties=properties)
        process = self.run(CONSOLE_CONSUMER_MAIN, args, timeout=timeout)
        return ConsumeResult(parse_console_records(process.stdout), process)

    # -- kafka-consumer-groups --------------------------------------------

    def list_groups(self, *, timeout: float | None = None) -> list[str]:
        process = self.run(CONSUMER_GROUPS_MAIN, ["--bootstrap-server", self.bootstrap, "--list"],
                           timeout=timeout)
        _raise_on_tool_error(process)
        return [line.strip() for line in process.stdout.splitlines() if line.strip()]

    def describe_group(self, group: str, *, timeout: float | None = None) -> list[GroupOffsetRow]:
        """Committed offsets, log-end offsets, lag and owners of every partition of ``group``."""
        process = self.run(
            CONSUMER_GROUPS_MAIN,
            ["--bootstrap-server", self.bootstrap, "--describe", "--group", group],
            timeout=timeout,
        )
        _raise_on_tool_error(process)
        return parse_group_description(process)

    def get_offsets(self, topic: str, time_spec: str | int, *,
                    timeout: float | None = None) -> dict[int, int]:
        """``kafka-get-offsets --time``: each partition's offset for ``time_spec`` (-1 latest,
        -2 earliest, -3 max-timestamp, or a timestamp in ms); a partition with no answer for
        a timestamp is left out, as the tool leaves it out."""
        process = self.run(GET_OFFSETS_MAIN, ["--bootstrap-server", self.bootstrap, "--topic", topic,
                                              "--time", str(time_spec)], timeout=timeout)
        _raise_on_tool_error(process)
        return parse_offsets(topic, process)

    # -- performance tools ------------------------------------------------

    def producer_performance(
        self,
        topic: str,
        *,
        num_records: int,
        record_size: int = 100,
        throughput: int = -1,
        properties: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProducerPerformanceResult:
        """``kafka-producer-perf-test``; ``throughput=-1`` sends as fast as it can."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic,
                "--num-records", str(num_records), "--record-size", str(record_size),
                "--throughput", str(throughput)]
        if properties:
            args += ["--command-property", *(f"{k}={v}" for k, v in properties.items())]
        process = self.run(PRODUCER_PERFORMANCE_MAIN, args, timeout=timeout, benchmark=True)
        return parse_producer_performance(process)

    def consumer_performance(
        self,
        topic: str,
        *,
        num_records: int,
        group: str | None = None,
        idle_timeout_ms: int = 10_000,
        properties: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ConsumerPerformanceResult:
        """``kafka-consumer-perf-test`` reading ``num_records`` from the start of ``topic``."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic,
                "--num-records", str(num_records), "--timeout", str(idle_timeout_ms)]
        if group is not None:
            args += ["--group", group]
        args += _properties("--command-property", properties)
        process = self.run(CONSUMER_PERFORMANCE_MAIN, args, timeout=timeout, benchmark=True)
        return parse_consumer_performance(process)

    def share_consumer_performance(
        self,
        topic: str,
        *,
        num_records: int,
        group: str,
        consumers: int = 1,
        idle_timeout_ms: int = 10_000,
        timeout: float | None = None,
    ) -> ShareConsumerPerformanceResult:
        """``kafka-share-consumer-perf-test``: ``consumers`` share consumers of ``group`` (one
        thread each, implicit acknowledgement) reading until ``num_records`` deliveries."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic, "--group", group,
                "--num-records", str(num_records), "--threads", str(consumers),
                "--timeout", str(idle_timeout_ms)]
        process = self.run(SHARE_CONSUMER_PERFORMANCE_MAIN, args, timeout=timeout,
                           benchmark=True)
        return parse_share_consumer_performance(process)

    def share_group_lag(self, group: str, topic: str, *,
                        timeout: float | None = None) -> int:
        """``kafka-share-groups --describe``: the group's records on ``topic`` not yet
        acknowledged (the LAG column, summed over the partitions)."""
        process = self.run(SHARE_GROUPS_MAIN, ["--bootstrap-server", self.bootstrap,
                                               "--describe", "--group", group], timeout=timeout)
        return parse_share_group_lag(process, group, topic)


# -- parsers (pure; tested on the tools' real output) ---------------------

_TIMESTAMP = re.compile(r"^(CreateTime|LogAppendTime):(-?\d+)$")


def parse_console_records(stdout: str) -> list[ConsoleRecord]:
    """Parse what ``console_consume`` made the console consumer print."""
    records: list[ConsoleRecord] = []
    for chunk in stdout.split(RECORD_SEPARATOR):
        if not chunk.strip("\n"):
            continue
        fields = chunk.split(FIELD_SEPARATOR)
        if len(fields) < 6:
            raise JavaToolError(f"cannot parse console consumer output {chunk!r}")
        stamp, partition, offset, headers_text, key = fields[:5]
        value = FIELD_SEPARATOR.join(fields[5:])
        matched = _TIMESTAMP.match(stamp)
        if matched:
            timestamp_type, timestamp = matched.group(1), int(matched.group(2))
        elif stamp == "NO_TIMESTAMP":
            timestamp_type, timestamp = "NoTimestamp", None
        else:
            raise JavaToolError(f"cannot parse timestamp {stamp!r}")
        if not partition.startswith("Partition:") or not offset.startswith("Offset:"):
            raise JavaToolError(f"cannot parse partition and offset in {chunk!r}")
        headers: list[tuple[str, str | None]] = []
        if headers_text != "NO_HEADERS":
            for pair in headers_text.split(HEADER_SEPARATOR):
                name, sep, header_value = pair.partition(":")
                if not sep:
                    raise JavaToolError(f"cannot parse header {pair!r}")
                headers.append((name, _nullable(header_value)))
        records.append(ConsoleRecord(
            timestamp_type=timestamp_type,
            timestamp=timestamp,
            partition=int(partition.removeprefix("Partition:")),
            offset=int(offset.removeprefix("Offset:")),
            headers=tuple(headers),
            key=_nullable(key),
            value=_nullable(value),
        ))
    return records


def _raise_on_tool_error(process: subprocess.CompletedProcess[str]) -> None:
    # kafka-consumer-groups reports some failures (an unknown group, say) on stdout
    # as "Error: ..." and still exits with 0.
    for line in process.stdout.splitlines():
        if line.startswith("Error:"):
            raise JavaToolError(line, process)


_GROUP_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"]


def parse_group_description(process: subprocess.CompletedProcess[str]) -> list[GroupOffsetRow]:
    """Parse the offsets table of ``kafka-consumer-groups --describe``."""
    rows: list[GroupOffsetRow] = []
    in_table = False
    for line in process.stdout.splitlines():
        words = line.split()
        if not words:
            in_table = False
            continue
        if words == _GROUP_HEADER:
            in_table = True
            continue
        if not in_table:
            continue
        parts = line.split(None, len(_GROUP_HEADER) - 1)
        if len(parts) != len(_GROUP_HEADER):
            raise JavaToolError(f"cannot parse consumer group row {line!r}", process)
        try:
            rows.append(GroupOffsetRow(
                group=parts[0],
                topic=_word(parts[1]),
                partition=_number(parts[2]),
                current_offset=_number(parts[3]),
                log_end_offset=_number(parts[4]),
                lag=_number(parts[5]),
                consumer_id=_word(parts[6]),
                host=_word(parts[7]),
                client_id=_word(parts[8].strip()),
            ))
        except ValueError as exc:
            raise JavaToolError(f"cannot parse consumer group row {line!r}", process) from exc
    return rows


def parse_offsets(topic: str, process: subprocess.CompletedProcess[str]) -> dict[int, int]:
    """Parse ``kafka-get-offsets``' lines ``topic:partition:offset``."""
    offsets: dict[int, int] = {}
    for line in process.stdout.splitlines():
        name, _, rest = line.strip().rpartition(":")
        name, _, partition = name.rpartition(":")
        if name != topic:
            continue
        try:
            offsets[int(partition)] = int(rest)
        except ValueError as exc:
            raise JavaToolError(f"cannot parse offsets line {line!r}", process) from exc
    return offsets


_PRODUCER_SUMMARY = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$"
)


def parse_producer_performance(process: subprocess.CompletedProcess[str]) -> ProducerPerformanceResult:
    """The whole-run summary (the first line with percentiles; a steady-state line may follow)."""
    for line in process.stdout.splitlines():
        matched = _PRODUCER_SUMMARY.match(line.strip())
        if matched:
            return ProducerPerformanceResult(
                records=int(matched["records"]),
                records_per_sec=float(matched["rps"]),
                mb_per_sec=float(matched["mbps"]),
                avg_latency_ms=float(matched["avg"]),
                max_latency_ms=float(matched["max"]),
                p50_ms=int(matched["p50"]),
                p95_ms=int(matched["p95"]),
                p99_ms=int(matched["p99"]),
                p999_ms=int(matched["p999"]),
                process=process,
            )
    raise JavaToolError("no summary line in the producer performance output", process)


_CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                    "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def parse_consumer_performance(process: subprocess.CompletedProcess[str]) -> ConsumerPerformanceResult:
    lines = [line.strip() for line in process.stdout.splitlines() if line.strip()]
    for number, line in enumerate(lines[:-1]):
        if line != _CONSUMER_HEADER:
            continue
        values = [v.strip() for v in lines[number + 1].split(",")]
        if len(values) != 10:
            break
        try:
            return ConsumerPerformanceResult(
                start_time=values[0],
                end_time=values[1],
                mb_consumed=float(values[2]),
                mb_per_sec=float(values[3]),
                records=int(values[4]),
                records_per_sec=float(values[5]),
                rebalance_time_ms=int(values[6]),
                fetch_time_ms=int(values[7]),
                fetch_mb_per_sec=float(values[8]),
                fetch_records_per_sec=float(values[9]),
                process=process,
            )
        except ValueError:
            break
    raise JavaToolError("no result row in the consumer performance output", process)


_SHARE_CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, "
                          "data.consumed.in.nMsg, fetch.time.ms")


def parse_share_consumer_performance(
        process: subprocess.CompletedProcess[str]) -> ShareConsumerPerformanceResult:
    lines = [line.strip() for line in process.stdout.splitlines() if line.strip()]
    for number, line in enumerate(lines[:-1]):
        if line != _SHARE_CONSUMER_HEADER:
            continue
        # the group's row is the last line of seven values (progress lines name a consumer)
        for row in reversed(lines[number + 1:]):
            values = [v.strip() for v in row.split(",")]
            if len(values) != 7:
                continue
            try:
                return ShareConsumerPerformanceResult(
                    start_time=values[0], end_time=values[1], mb_consumed=float(values[2]),
                    mb_per_sec=float(values[3]), records_per_sec=float(values[4]),
                    records=int(values[5]), fetch_time_ms=int(values[6]), process=process)
            except ValueError:
                continue
    raise JavaToolError("no result row in the share consumer performance output", process)


def parse_share_group_lag(process: subprocess.CompletedProcess[str], group: str,
                          topic: str) -> int:
    """The LAG column of ``kafka-share-groups --describe`` (GROUP TOPIC PARTITION
    START-OFFSET LAG ...), summed over ``topic``'s partitions."""
    rows = [line.split() for line in process.stdout.splitlines()]
    found = [row for row in rows if row[:2] == [group, topic] and len(row) >= 5]
    if not found:
        raise JavaToolError(f"kafka-share-groups shows no partition of {topic} for {group}",
                            process)
    try:
        return sum(int(row[4]) for row in found)
    except ValueError as exc:
        raise JavaToolError(f"kafka-share-groups' LAG column unreadable: {found}",
                            process) from exc
