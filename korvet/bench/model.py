"""What a benchmark run is asked to do (``BenchParams``) and what one measurement holds (``Run``).

Both turn into plain JSON and back, so the results file is the single source of the
table, the plots and the markdown of docs/performance.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

KORVET_EMBEDDED = "korvet-embedded"
KORVET_NOPERSIST = "korvet-nopersist"
KAFKA = "kafka"
TARGETS = (KORVET_EMBEDDED, KORVET_NOPERSIST, KAFKA)
KORVET_TARGETS = (KORVET_EMBEDDED, KORVET_NOPERSIST)
# The embedded Redis' persistence of each Korvet target (`korvet serve --redis-appendfsync`).
APPENDFSYNC = {KORVET_EMBEDDED: "everysec", KORVET_NOPERSIST: "off"}
TARGET_TITLES = {
    KORVET_EMBEDDED: "Korvet, embedded Redis (AOF everysec)",
    KORVET_NOPERSIST: "Korvet, Redis without persistence",
    KAFKA: "Apache Kafka 4.3.1",
}

JAVA = "java"
LIBRDKAFKA = "librdkafka"
CLIENTS = (JAVA, LIBRDKAFKA)
CLIENT_TITLES = {
    JAVA: "Kafka ProducerPerformance / ConsumerPerformance (Java)",
    LIBRDKAFKA: "librdkafka 2.16 via confluent-kafka (korvet/bench/rdkafka_perf.py)",
}
CEILING_PREFIX = "ceiling:"  # client name of a ceiling run: "ceiling:java" = in java's batches

PRODUCE = "produce"
CONSUME = "consume"
LATENCY = "latency"  # produce at a fixed rate, for the latency percentiles
SHARE = "share-consume"  # N share consumers of one share group (KIP-932) read a topic
MODES = (PRODUCE, CONSUME, LATENCY)
SWEEP = "batch-size sweep"  # produce at each --batch-sizes value (sweep.py), apart from MODES
STORAGE_FORMATS = ("records", "batches")  # korvet.storage.format


def ceiling_client(client: str) -> str:
    return f"{CEILING_PREFIX}{client}"


def is_ceiling(client: str) -> bool:
    return client.startswith(CEILING_PREFIX)


@dataclass(frozen=True, slots=True)
class BenchParams:
    record_sizes: tuple[int, ...] = (100, 1024)
    records: int = 300_000
    partitions: int = 1
    acks: str = "1"
    batch_size: int = 16384
    linger_ms: int = 5
    compression: str = "none"
    idempotence: bool = False
    # transactional producers committing every this many ms (0: none; idempotence implied)
    transaction_ms: int = 0
    # topic configs of every benchmark topic, as "name=value" (CreateTopics configs)
    topic_configs: tuple[str, ...] = ()
    repeats: int = 3
    targets: tuple[str, ...] = TARGETS
    clients: tuple[str, ...] = CLIENTS
    latency_rate: int = 50_000
    latency_seconds: float = 5.0
    latency_warmup_seconds: float = 1.0
    latency_record_size: int = 100
    smoke: bool = False
    profile: bool = False
    # The batch.size sweep (sweep.py): produce runs of the first record size at each of these
    # batch sizes, per client and repeat; on a Korvet target once per storage format.
    batch_sizes: tuple[int, ...] = ()
    sweep_formats: tuple[str, ...] = STORAGE_FORMATS
    # Unrecorded produce and consume runs per client and record size on each target before
    # its measured runs: Apache Kafka's JVM compiles its hot paths during its first runs
    # (its first 100 B produce ran at half the rate of its sixth, 2026-11-24).
    warmup_runs: int = 1
    # Share-consumer runs (runner._share): for each count here, that many share consumers of
    # one share group (Kafka's ShareConsumerPerformance, one thread each) read `records`
    # records of the first record size from a topic of `partitions` partitions (empty: none).
    # Results written before these runs existed read back with none (from_json).
    share_consumers: tuple[int, ...] = (1, 4)

    @property
    def latency_records(self) -> int:
        return max(1, int(self.latency_rate * (self.latency_seconds + self.latency_warmup_seconds)))

    @property
    def topic_config_map(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.topic_configs)

    @property
    def latency_warmup_records(self) -> int:
        return int(self.latency_rate * self.latency_warmup_seconds)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["latency_records"] = self.latency_records
        data["latency_warmup_records"] = self.latency_warmup_records
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchParams:
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in data.items() if k in names}
        values.setdefault("warmup_runs", 0)  # results written before warm-ups existed had none
        values.setdefault("share_consumers", ())  # nor share-consumer runs
        return cls(**values)


@dataclass(slots=True)
class Latency:
    """Producer latency percentiles in ms: whole run, and (when a warm-up was set)
    the steady state after it. ``cdf`` is [[ms, quantile], ...] where measured per record."""

    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    steady_p50_ms: float | None = None
    steady_p95_ms: float | None = None
    steady_p99_ms: float | None = None
    steady_p999_ms: float | None = None
    cdf: list[list[float]] | None = None

    @property
    def target_p99_ms(self) -> float:
        """The p99 a latency target is judged on: steady state when measured."""
        return self.steady_p99_ms if self.steady_p99_ms is not None else self.p99_ms


@dataclass(slots=True)
class Run:
    """One measurement: one client (or the ceiling) against one target, one repeat."""

    target: str
    client: str
    mode: str
    record_size: int
    repeat: int
    records: int = 0
    seconds: float = 0.0
    records_per_sec: float = 0.0
    mb_per_sec: float = 0.0
    latency: Latency | None = None
    records_per_batch: float | None = None
    # CPU time per record (µs) of each process: broker, redis, client (or python for the ceiling)
    cpu_us_per_record: dict[str, float] = field(default_factory=dict)
    rate: int | None = None  # the fixed rate of a latency run
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.records_per_sec > 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        values = dict(data)
        latency = values.pop("latency", None)
        run = cls(**values)
        if latency is not None:
            run.latency = Latency(**latency)
        return run
