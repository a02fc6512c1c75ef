"""The broker's Prometheus metrics: one ``BrokerMetrics`` per broker, in its own registry.

Why not prometheus_client's global registry: tests (and one process running several
brokers) would add up every broker's counters in one set of series, and a second broker
in the process would fail to register its metrics at all. So each ``Broker`` owns one
``CollectorRegistry``; the HTTP endpoint (server/http.py) exposes that registry through
prometheus_client's own exposition (``generate_latest``), never hand-written text.

Two kinds of metrics:

* **Counted on the hot path**, by the listener (requests, frames, connections), the
  Produce and Fetch handlers (records, latencies, errors by code) and the coordinator
  (rebalances). Each series' child object is looked up once and kept (``labels()``
  costs a dictionary lookup and a lock). The series updated on every request are
  ``LeanCounter`` and ``LeanHistogram`` families: plain numbers the event loop adds to,
  printed at scrape time as prometheus_client prints its own (3.6 µs of metrics per
  produce request instead of 12).
* **Read at scrape time** (``Scraper.refresh``, before each exposition): Redis'
  round-trip time and memory, groups by state, members, consumer lag, storage sizes.
  Nothing of those is maintained per request.

Names: the original product's (``korvet_broker_produce_records_total{topic}``,
``korvet_broker_produce_seconds{topic}``, ``korvet_broker_fetch_seconds{topic}``,
``korvet_broker_frame_size_bytes{api_key,direction}``, ``korvet_broker_failures_total
{operation}``, ``korvet_storage_write_messages_total{tier}``), with its labels and units;
the rest follow the same ``korvet_`` scheme. ``api_key`` values are Kafka's ApiKeys
names (``PRODUCE``, ``FETCH``, ``API_VERSIONS`` ...). docs/users/operations.md lists them.

Consumer lag: see ``Scraper._lag`` and docs/users/operations.md#consumer-lag.
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from korvet.core.api_keys import ApiKey
from korvet.core.coordinator.state import CoordinatorState, GroupState
from korvet.core.errors import ErrorCode

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)
SIZE_BUCKETS = (64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                16777216.0, 104857600.0)
UNKNOWN_API = "UNKNOWN"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class CountChild:
    """One series of a ``LeanCounter``: a plain number (see ``LeanFamily``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    """One series of a ``LeanHistogram``: a count per bucket (the last one ``+Inf``) and a
    sum, cumulated only when scraped."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bound >= amount


class LeanFamily(Collector):
    """A labelled counter or histogram for the request path, exposed like prometheus_client's
    (same names, ``_total``, ``_bucket{le}``, ``_sum``, ``_count``), without its per-update
    lock and checks: prometheus_client's ``Histogram.observe`` takes a lock twice and its
    ``Counter.inc`` once, and the per-request series (frame sizes, latencies, bytes, records)
    cost 12 µs per produce request that way. The broker updates them from its event loop
    only; a scrape from another thread reads numbers that may be one update apart."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets: tuple[float, ...] | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.buckets = buckets
        self._children: dict[tuple[str, ...], CountChild | HistogramChild] = {}
        if registry is not None:
            registry.register(self)

    def _child(self, values: tuple[str, ...]) -> CountChild | HistogramChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = (CountChild() if self.buckets is None
                                              else HistogramChild(self.buckets))
        return child

    def remove(self, *values: str) -> None:
        del self._children[values]

    def collect(self) -> Iterator[Metric]:
        labels = list(self.labelnames)
        if self.buckets is None:
            counter = CounterMetricFamily(self.name, self.documentation, labels=labels)
            for values, child in list(self._children.items()):
                assert isinstance(child, CountChild)
                counter.add_metric(list(values), child.value)
            yield counter
            return
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=labels)
        names = [floatToGoString(bound) for bound in self.buckets]  # type: ignore[no-untyped-call]
        names.append("+Inf")
        for values, child in list(self._children.items()):
            assert isinstance(child, HistogramChild)
            counts, total = list(child.counts), 0
            cumulative: list[tuple[str, float]] = []
            for le, count in zip(names, counts, strict=True):
                total += count
                cumulative.append((le, total))
            histogram.add_metric(list(values), cumulative, child.sum)
        yield histogram


class LeanCounter(LeanFamily):
    def labels(self, *values: str) -> CountChild:
        child = self._child(values)
        assert isinstance(child, CountChild)
        return child


class LeanHistogram(LeanFamily):
    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets: tuple[float, ...], registry: CollectorRegistry | None = None) -> None:
        super().__init__(name, documentation, labelnames, buckets, registry)

    def labels(self, *values: str) -> HistogramChild:
        child = self._child(values)
        assert isinstance(child, HistogramChild)
        return child


class _ApiSeries:
    """The children of one API's series, looked up once."""

    __slots__ = ("frame_in", "frame_out", "requests", "seconds")

    def __init__(self, metrics: BrokerMetrics, api: str) -> None:
        self.requests = metrics.requests.labels(api)
        self.seconds = metrics.request_seconds.labels(api)
        self.frame_in = metrics.frame_size.labels(api, "request")
        self.frame_out = metrics.frame_size.labels(api, "response")


class TopicSeries:
    """The children of one topic's series, looked up once per topic."""

    __slots__ = ("fetch_records", "fetch_seconds", "produce_records", "produce_seconds")

    def __init__(self, metrics: BrokerMetrics, topic: str) -> None:
        self.produce_records = metrics.produce_records.labels(topic)
        self.produce_seconds = metrics.produce_seconds.labels(topic)
        self.fetch_seconds = metrics.fetch_seconds.labels(topic)
        self.fetch_records = metrics.fetch_records.labels(topic)


class BrokerMetrics:
    """Every metric of one broker. The listener, handlers and coordinator call the small
    methods below; ``registry`` is what the HTTP endpoint exposes."""

    def __init__(self) -> None:
        # No `_created` series: they double the exposition and no dashboard reads them. The
        # switch is process-wide in prometheus_client; every Korvet registry wants it off.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        r = self.registry = CollectorRegistry()
        # --- the original product's names -------------------------------------------------
        # The series updated on every request are ``Lean`` families (see ``LeanFamily``).
        self.produce_records = LeanCounter(
            "korvet_broker_produce_records", "Records appended, by topic", ("topic",), registry=r)
        self.produce_seconds = LeanHistogram(
            "korvet_broker_produce_seconds",
            "Produce latency per topic: from the request's arrival to Redis' answer to the "
            "append of its batch", ("topic",), buckets=LATENCY_BUCKETS, registry=r)
        self.fetch_seconds = LeanHistogram(
            "korvet_broker_fetch_seconds",
            "Fetch latency per topic in the request, long-poll wait (max.wait.ms) included",
            ("topic",), buckets=LATENCY_BUCKETS, registry=r)
        self.frame_size = LeanHistogram(
            "korvet_broker_frame_size_bytes",
            "Kafka frame sizes (without the 4-byte size prefix), by API and direction "
            "(request, response)", ("api_key", "direction"), buckets=SIZE_BUCKETS, registry=r)
        self.failures = Counter(
            "korvet_broker_failures",
            "Failed operations: produce and fetch partitions answered with an error, requests "
            "whose handler failed, connections closed for bad input or a refused "
            "authentication", ["operation"], registry=r)
        self.storage_writes = LeanCounter(
            "korvet_storage_write_messages", "Records written to storage, by tier (local: Redis)",
            ("tier",), registry=r).labels("local")
        # --- requests, connections, bytes ------------------------------------------------------
        self.requests = LeanCounter("korvet_broker_requests", "Requests answered, by API",
                                    ("api_key",), registry=r)
        self.request_seconds = LeanHistogram(
            "korvet_broker_request_seconds",
            "Request latency by API: from the frame's arrival to its response being ready",
            ("api_key",), buckets=LATENCY_BUCKETS, registry=r)
        self.connections = Gauge("korvet_broker_connections", "Open client connections",
                                 registry=r)
        self.connections_accepted = Counter("korvet_broker_connections_accepted",
                                            "Client connections accepted", registry=r)
        network = LeanCounter("korvet_broker_network_bytes",
                              "Bytes received and sent on Kafka connections (frames with their "
                              "size prefix)", ("direction",), registry=r)
        self.bytes_in, self.bytes_out = network.labels("in"), network.labels("out")
        self.fetch_records = LeanCounter("korvet_broker_fetch_records",
                                         "Records fetched, by topic", ("topic",), registry=r)
        self.produce_errors = Counter(
            "korvet_broker_produce_errors", "Produce partitions answered with an error, by code",
            ["error"], registry=r)
        self.fetch_errors = Counter(
            "korvet_broker_fetch_errors", "Fetch partitions answered with an error, by code",
            ["error"], registry=r)
        self.rebalances = Counter(
            "korvet_group_rebalances", "Rebalances started (a group entering PreparingRebalance)",
            ["group"], registry=r)
        # --- the log cleaner (server/cleaner.py) ------------------------------------------------
        self.cleaner_passes = Counter(
            "korvet_cleaner_passes", "Log cleaner passes that swapped a cleaned partition in, by "
            "topic", ["topic"], registry=r)
        self.cleaner_records_removed = Counter(
            "korvet_cleaner_records_removed", "Records the log cleaner removed (superseded "
            "values, tombstones past delete.retention.ms, aborted data), by topic", ["topic"],
            registry=r)
        self.cleaner_seconds = Counter(
            "korvet_cleaner_seconds", "Time the log cleaner's passes took (wall time, from their "
            "begin to their swap), by topic", ["topic"], registry=r)
        self.cleaner_longest_call = Gauge(
            "korvet_cleaner_longest_call_seconds", "The longest call of the cleaner's script "
            "(one chunk: what blocked Redis longest), measured from the broker", registry=r)
        self.cleaner_dirty_ratio = Gauge(
            "korvet_cleaner_dirty_ratio", "Each compacted partition's dirty ratio at the "
            "cleaner's last round (min.cleanable.dirty.ratio compares with it)",
            ["topic", "partition"], registry=r)
        self._failure_children = {op: self.failures.labels(op)
                                  for op in ("produce", "fetch", "request", "connection")}
        self._apis: dict[int, _ApiSeries] = {}
        self._unknown_api = _ApiSeries(self, UNKNOWN_API)
        self._topics: dict[str, TopicSeries] = {}
        self.scraped = ScrapeSnapshot()
        r.register(_ScrapeCollector(self.scraped))
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    # --- set-up ----------------------------------------------------------------------------

    def name_apis(self, keys: Iterable[ApiKey]) -> None:
        """The APIs the broker serves, labelled by Kafka's ApiKeys enum name (``API_VERSIONS``);
        other keys count as UNKNOWN."""
        for key in keys:
            self._apis[key] = _ApiSeries(self, key.name)

    # --- the listener (korvet/server/listener.py's ListenerMetrics) ------------------------------

    def connection_opened(self) -> None:
        self.connections.inc()
        self.connections_accepted.inc()

    def connection_closed(self) -> None:
        self.connections.dec()

    def connection_refused(self) -> None:
        """A connection the broker closed: bad input (frame size, undecodable, unknown API)
        or its authentication (a request before SASL, a failed or expired session)."""
        self._failure_children["connection"].inc()

    def request_received(self, api_key: int, size: int) -> float:
        self._apis.get(api_key, self._unknown_api).frame_in.observe(size)
        self.bytes_in.inc(size + 4)
        return time.perf_counter()

    def response_sent(self, api_key: int, size: int, started: float) -> None:
        series = self._apis.get(api_key, self._unknown_api)
        series.requests.inc()
        series.seconds.observe(time.perf_counter() - started)
        if size:  # the response frame with its 4-byte size prefix; 0 when none is sent
            series.frame_out.observe(size - 4)
            self.bytes_out.inc(size)

    def request_failed(self) -> None:
        self._failure_children["request"].inc()

    # --- produce and fetch --------------------------------------------------------------------

    def topic(self, name: str) -> TopicSeries:
        series = self._topics.get(name)
        if series is None:
            series = self._topics[name] = TopicSeries(self, name)
        return series

    def produced(self, topic: str, records: int, started: float) -> None:
        series = self.topic(topic)
        series.produce_records.inc(records)
        series.produce_seconds.observe(time.perf_counter() - started)
        self.storage_writes.inc(records)

    def produce_error(self, code: int) -> None:
        self.produce_errors.labels(error_name(code)).inc()
        self._failure_children["produce"].inc()

    def fetch_error(self, code: int) -> None:
        self.fetch_errors.labels(error_name(code)).inc()
        self._failure_children["fetch"].inc()

    async def forget_topic(self, name: str) -> None:
        """A deleted topic's series go with it (a topic_deleted hook)."""
        for counter in (self.cleaner_passes, self.cleaner_records_removed, self.cleaner_seconds):
            with contextlib.suppress(KeyError):
                counter.remove(name)
        if self._topics.pop(name, None) is None:
            return
        for metric in (self.produce_records, self.produce_seconds, self.fetch_seconds,
                       self.fetch_records):
            with contextlib.suppress(KeyError):
                metric.remove(name)

    # --- the coordinator ---------------------------------------------------------------------

    def coordinator_stepped(self, before: CoordinatorState, after: CoordinatorState,
                            group_id: str | None) -> None:
        """Count groups that entered PreparingRebalance in one step (``group_id``: the group
        the event was about; None: any group may have changed)."""
        ids: Iterable[str] = (group_id,) if group_id is not None else after.groups
        for gid in ids:
            now = after.groups.get(gid)
            if now is None or now.state is not GroupState.PREPARING_REBALANCE:
                continue
            was = before.groups.get(gid)
            if was is None or was.state is not GroupState.PREPARING_REBALANCE:
                self.rebalances.labels(gid).inc()


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    offsets: int  # high watermark - committed offset (what Kafka tools show)
    records: int | None  # records after the committed offset, when they can be counted
    seconds: float | None  # a time topic's: the millisecond parts of the two offsets apart


@dataclass
class ScrapeSnapshot:
    """What the last scrape read from Redis and the coordinator (``Scraper.refresh``)."""

    redis_up: bool = False
    redis_roundtrip: float | None = None
    redis_memory: Mapping[str, int] = field(default_factory=dict)
    groups_by_state: Mapping[str, int] = field(default_factory=dict)
    members: Mapping[str, int] = field(default_factory=dict)
    lag: list[PartitionLag] = field(default_factory=list)
    topics: int = 0
    partitions: int = 0
    entries: Mapping[str, int] = field(default_factory=dict)  # topic -> stream entries
    scrape_seconds: float = 0.0
    scrape_errors: int = 0


_MEMORY_FIELDS = {
    "used_memory": ("korvet_redis_memory_used_bytes", "Redis used_memory (INFO memory)"),
    "used_memory_peak": ("korvet_redis_memory_peak_bytes", "Redis used_memory_peak"),
    "maxmemory": ("korvet_redis_memory_max_bytes", "Redis maxmemory (0: no limit)"),
}


class _ScrapeCollector(Collector):
    """Exposes the last ``ScrapeSnapshot`` (series appear and go with groups and topics)."""

    def __init__(self, snapshot: ScrapeSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield GaugeMetricFamily("korvet_redis_up", "1 when the last scrape's PING and write "
                                "to Redis succeeded", value=1 if s.redis_up else 0)
        if s.redis_roundtrip is not None:
            yield GaugeMetricFamily("korvet_redis_roundtrip_seconds",
                                    "Round trip of a PING to Redis at the last scrape",
                                    value=s.redis_roundtrip)
        for info_field, (name, doc) in _MEMORY_FIELDS.items():
            if info_field in s.redis_memory:
                yield GaugeMetricFamily(name, doc, value=s.redis_memory[info_field])
        yield from self._groups(s)
        yield from self._lag(s)
        yield from self._storage(s)
        yield GaugeMetricFamily("korvet_scrape_seconds", "Time the last scrape spent reading "
                                "Redis and the coordinator", value=s.scrape_seconds)
        yield CounterMetricFamily("korvet_scrape_errors", "Scrapes whose Redis reads failed",
                                  value=s.scrape_errors)

    @staticmethod
    def _groups(s: ScrapeSnapshot) -> Iterator[Metric]:
        states = GaugeMetricFamily("korvet_groups", "Consumer groups by state", labels=["state"])
        for state in GroupState:
            states.add_metric([state.value], s.groups_by_state.get(state.value, 0))
        yield states
        members = GaugeMetricFamily("korvet_group_members", "Members of each consumer group",
                                    labels=["group"])
        for group, count in sorted(s.members.items()):
            members.add_metric([group], count)
        yield members

    @staticmethod
    def _lag(s: ScrapeSnapshot) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        offsets = GaugeMetricFamily(
            "korvet_consumer_group_lag_offsets",
            "High watermark minus committed offset: what Kafka's tools show as lag (records "
            "on a dense topic, ms * 2^bits + seq offsets on a time topic)", labels=labels)
        records = GaugeMetricFamily(
            "korvet_consumer_group_lag_records",
            "Records after the committed offset: on a dense topic the offsets' difference, on a "
            "time topic counted by Redis (XINFO GROUPS lag), present only where Redis can "
            "count them without a scan", labels=labels)
        seconds = GaugeMetricFamily(
            "korvet_consumer_group_lag_seconds",
            "Append-time distance between the newest record and the committed offset "
            "(from the milliseconds a time topic's offsets encode; none on dense topics)",
            labels=labels)
        for lag in s.lag:
            values = [lag.group, lag.topic, str(lag.partition)]
            offsets.add_metric(values, lag.offsets)
            if lag.seconds is not None:
                seconds.add_metric(values, lag.seconds)
            if lag.records is not None:
                records.add_metric(values, lag.records)
        yield offsets
        yield records
        yield seconds

    @staticmethod
    def _storage(s: ScrapeSnapshot) -> Iterator[Metric]:
        yield GaugeMetricFamily("korvet_storage_topics", "Topics in Redis", value=s.topics)
        yield GaugeMetricFamily("korvet_storage_partitions", "Partition streams of all topics",
                                value=s.partitions)
        entries = GaugeMetricFamily("korvet_storage_entries",
                                    "Stream entries (records) kept in Redis, by topic",
                                    labels=["topic"])
        for topic, count in sorted(s.entries.items()):
            entries.add_metric([topic], count)
        yield entries
