"""Broker operations on the raw wire client, for any negotiated API version.

``Ops(session)`` works for whoever drives it (a check's context, say: see
``session.Session``): each method builds the request for the newest version both the
broker and kio know (or the ``version`` asked for), sends it on the given connection (by
default one shared per ``Ops``) and returns the part of the answer a caller asserts on.
Nothing here asserts Kafka behaviour except where an operation cannot continue (a topic
that was never created): then it raises ``KafkaCallFailed``; the callers do the asserting.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.records import BatchInfo, Fetched, Rec, build_batch, decode_records
from korvet.conformance.kafka.session import KafkaCallFailed, Session
from korvet.conformance.kafka.wire import WireClient
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3  # ListOffsets' special timestamps
# FindCoordinator's answers that clients wait out: the coordinator is loading or not there yet.
COORDINATOR_STARTING = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                  ErrorCode.COORDINATOR_NOT_AVAILABLE})
# InitProducerId's answers that clients retry (CONCURRENT_TRANSACTIONS: the first call on a fresh
# Kafka creates __transaction_state); after one of _COORDINATOR_MOVED they look the coordinator up
# again.
_INIT_PRODUCER_RETRIABLE = frozenset({*COORDINATOR_STARTING, ErrorCode.NOT_COORDINATOR,
                                      ErrorCode.CONCURRENT_TRANSACTIONS})
_COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})

ZERO_UUID = uuid.UUID(int=0)


@dataclass
class Topic:
    name: str
    partitions: int
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True)
class ProduceResult:
    error: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None
    record_errors: tuple[Any, ...] = ()


@dataclass
class FetchResult:
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: list[Fetched]
    batches: list[BatchInfo]
    partial_bytes: int
    top_error: int = 0
    session_id: int = 0
    aborted: list[Any] = field(default_factory=list)
    raw_size: int = 0
    diverging: tuple[int, int] | None = None  # v12+: diverging_epoch (epoch, end offset), if sent

    @property
    def offsets(self) -> list[int]:
        return [r.offset for r in self.records]

    @property
    def values(self) -> list[bytes | None]:
        return [r.value for r in self.records]


@dataclass(frozen=True)
class ListedOffset:
    error: int
    offset: int
    timestamp: int
    leader_epoch: int


def _ms(value: Any) -> int:
    """A kio duration or timestamp (timedelta, datetime or None) as milliseconds (-1 for None)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


class Ops:
    def __init__(self, session: Session, conn: WireClient | None = None) -> None:
        """``conn``: the connection to use by default (one from the session when not given)."""
        self.session = session
        self.apis = session.apis
        self._conn = conn

    @property
    def conn(self) -> WireClient:
        if self._conn is None:
            self._conn = self.session.client()
        return self._conn

    def v(self, api_key: int, version: int | None = None, lo: int | None = None,
          hi: int | None = None) -> int:
        if version is not None:
            if not self.apis.has(api_key, version):
                return self.apis.pick(api_key, version, version)
            return version
        return self.apis.pick(api_key, lo, hi)

    def call(self, api_key: int, version: int | None = None, conn: WireClient | None = None,
             wait: float | None = None, **values: Any) -> Any:
        """Build (from plain values), send and receive; ``wait`` bounds the wait for the answer."""
        ver = self.v(api_key, version)
        return (conn or self.conn).call(build_request(api_key, ver, **values), timeout=wait)

    # -- metadata and topics -------------------------------------------------

    def metadata(self, topics: list[str] | None, *, auto_create: bool = False, version: int | None = None,
                 conn: WireClient | None = None) -> Any:
        ver = self.v(ApiKey.METADATA, version)
        requested = None if topics is None else [
            {"name": name, "topic_id": ZERO_UUID} for name in topics
        ]
        return self.call(ApiKey.METADATA, ver, conn, topics=requested, allow_auto_topic_creation=auto_create,
                         include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False)

    def topic_metadata(self, name: str, **kw: Any) -> Any:
        response = self.metadata([name], **kw)
        for topic in response.topics:
            if topic.name == name:
                return topic
        raise KafkaCallFailed(f"Metadata for topic {name!r} does not list it", topics=[t.name for t in
                              response.topics])

    def leader_epoch(self, name: str, partition: int = 0) -> int:
        """The partition's leader epoch as Metadata v7+ gives it (KIP-320)."""
        topic = self.topic_metadata(name, version=self.v(ApiKey.METADATA, lo=7))
        return int(next(p for p in topic.partitions if p.partition_index == partition).leader_epoch)

    def epoch_end(self, name: str, leader_epoch: int, *, current_leader_epoch: int = -1,
                  partition: int = 0) -> Any:
        """OffsetForLeaderEpoch v3+ of one partition (replica_id -1, a consumer's): its
        answer (error_code, leader_epoch, end_offset)."""
        response = self.call(ApiKey.OFFSET_FOR_LEADER_EPOCH,
                             self.v(ApiKey.OFFSET_FOR_LEADER_EPOCH, lo=3), replica_id=-1, topics=[
                                 {"topic": name, "partitions": [{
                                     "partition": partition, "leader_epoch": leader_epoch,
                                     "current_leader_epoch": current_leader_epoch}]}])
        return response.topics[0].partitions[0]

    def wait_topic_ready(self, name: str, partitions: int, timeout: float = 15.0) -> Any:
        """Metadata lists every partition with a leader: the topic takes produce and fetch."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            topic = self.topic_metadata(name)
            ready = (int(topic.error_code) == ErrorCode.NONE and len(topic.partitions) == partitions
                     and all(int(p.error_code) == ErrorCode.NONE and p.leader_id >= 0
                             for p in topic.partitions))
            if ready:
                return topic
            last = f"{error_name(int(topic.error_code))}, {len(topic.partitions)} partitions"
            if time.monotonic() > deadline:
                raise KafkaCallFailed(f"topic {name} not ready within {timeout:.0f} s ({last})")
            time.sleep(0.1)

    def create_topics_raw(self, topics: list[dict[str, Any]], *, validate_only: bool = False,
                          timeout_ms: int = 30_000, version: int | None = None) -> Any:
        full = [{"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": [], **t}
                for t in topics]
        for t in full:
            if isinstance(t["configs"], dict):
                t["configs"] = [{"name": k, "value": v} for k, v in t["configs"].items()]
        return self.call(ApiKey.CREATE_TOPICS, version, topics=full, timeout=timeout_ms,
                         validate_only=validate_only)

    def create_topic(self, *, partitions: int = 1, configs: dict[str, str] | None = None,
                     name: str | None = None, wait: bool = True) -> Topic:
        topic_name = name or self.session.name("t")
        response = self.create_topics_raw([{"name": topic_name, "num_partitions": partitions,
                                            "configs": configs or {}}])
        result = response.topics[0]
        if int(result.error_code) != ErrorCode.NONE:
            raise KafkaCallFailed(f"CreateTopics {topic_name}: {error_name(int(result.error_code))} "
                                  f"({result.error_message})")
        topic = Topic(topic_name, partitions, getattr(result, "topic_id", None))
        if wait:
            meta = self.wait_topic_ready(topic_name, partitions)
            if getattr(meta, "topic_id", None) not in (None, ZERO_UUID):
                topic.topic_id = meta.topic_id
            self.wait_partitions_serving(topic)
        return topic

    def wait_partitions_serving(self, topic: Topic, timeout: float = 15.0) -> None:
        """Every partition answers ListOffsets: the leader has loaded it (Metadata can list a
        leader a moment before the leader answers NOT_LEADER_OR_FOLLOWER no more)."""
        deadline = time.monotonic() + timeout
        for partition in range(topic.partitions):
            while True:
                listed = self.list_offsets(topic, partition, LATEST)
                if listed.error == ErrorCode.NONE:
                    break
                if time.monotonic() > deadline:
                    raise KafkaCallFailed(f"partition {partition} of new topic {topic.name} answers "
                                          f"{error_name(listed.error)} to ListOffsets after {timeout:.0f} s")
                time.sleep(0.05)

    def delete_topic(self, name: str, version: int | None = None) -> int:
        ver = self.v(ApiKey.DELETE_TOPICS, version)
        if ver >= 6:
            response = self.call(ApiKey.DELETE_TOPICS, ver, topics=[{"name": name, "topic_id": ZERO_UUID}],
                                 timeout=30_000)
        else:
            response = self.call(ApiKey.DELETE_TOPICS, ver, topic_names=[name], timeout=30_000)
        return int(response.responses[0].error_code)

    # -- produce -------------------------------------------------------------

    def produce_raw(self, topic: Topic | str, partition_records: dict[int, bytes | None], *,
                    acks: int = -1, version: int | None = None, conn: WireClient | None = None,
                    transactional_id: str | None = None, timeout_ms: int = 30_000,
                    topic_id: uuid.UUID | None = None) -> Any:
        """One Produce request with the given records fields; the whole response (None for acks=0)."""
        ver = self.v(ApiKey.PRODUCE, version)
        name = topic.name if isinstance(topic, Topic) else topic
        data: dict[str, Any] = {
            "partition_data": [{"index": p, "records": r} for p, r in partition_records.items()],
        }
        if ver >= 13:
            tid = topic_id or (topic.topic_id if isinstance(topic, Topic) else None)
            if tid is None:
                tid = self.topic_id_of(name)
            data["topic_id"] = tid
        else:
            data["name"] = name
        request = build_request(ApiKey.PRODUCE, ver, transactional_id=transactional_id, acks=acks,
                                timeout=timeout_ms, topic_data=[data])
        connection = conn or self.conn
        if acks == 0:
            connection.send(request, expect_response=False)
            return None
        return connection.call(request)

    def topic_id_of(self, name: str) -> uuid.UUID:
        meta = self.topic_metadata(name, version=self.v(ApiKey.METADATA, lo=10))
        if meta.topic_id in (None, ZERO_UUID):
            raise KafkaCallFailed(f"Metadata v10+ gives no topic id for {name}")
        return uuid.UUID(str(meta.topic_id))

    def produce(self, topic: Topic | str, partition: int, records: list[Rec] | bytes, *, acks: int = -1,
                compression: int = 0, version: int | None = None, conn: WireClient | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                transactional_id: str | None = None) -> ProduceResult:
        batch = records if isinstance(records, bytes) else build_batch(
            records, compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, transactional=transactional_id is not None)
        response = self.produce_raw(topic, {partition: batch}, acks=acks, version=version, conn=conn,
                                    transactional_id=transactional_id)
        if response is None:
            return ProduceResult(0, -1, -1, -1, None)
        return produce_result(response)

    def produce_ok(self, topic: Topic | str, partition: int, records: list[Rec], **kw: Any) -> int:
        """Produce and require NONE; returns the base offset."""
        result = self.produce(topic, partition, records, **kw)
        if result.error != ErrorCode.NONE:
            raise KafkaCallFailed(f"Produce to partition {partition}: {error_name(result.error)} "
                                  f"({result.error_message})")
        return result.base_offset

    def produce_values(self, topic: Topic | str, partition: int, values: list[str], **kw: Any) -> list[int]:
        """Produce each value in its own batch; returns their offsets."""
        return [self.produce_ok(topic, partition, [Rec(v.encode())], **kw) for v in values]

    # -- fetch ---------------------------------------------------------------

    def fetch_request(self, parts: Sequence[tuple[Topic | str, int, int]], *, max_wait_ms: int = 0,
                      min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
                      partition_max_bytes: int = 1024 * 1024, isolation_level: int = 0,
                      session_id: int = 0, session_epoch: int = -1, version: int | None = None,
                      current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> Any:
        ver = self.v(ApiKey.FETCH, version)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        ids: dict[str, uuid.UUID | None] = {}
        for topic, partition, offset in parts:
            name = topic.name if isinstance(topic, Topic) else topic
            ids.setdefault(name, topic.topic_id if isinstance(topic, Topic) else None)
            by_topic.setdefault(name, []).append({
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes,
                "current_leader_epoch": current_leader_epoch, "log_start_offset": -1,
                "last_fetched_epoch": last_fetched_epoch,
            })
        topics = []
        for name, partitions in by_topic.items():
            entry: dict[str, Any] = {"partitions": partitions}
            if ver >= 13:
                tid = ids[name] or self.topic_id_of(name)
                entry["topic_id"] = tid
            else:
                entry["topic"] = name
            topics.append(entry)
        return build_request(ApiKey.FETCH, ver, replica_id=-1, max_wait=max_wait_ms, min_bytes=min_bytes,
                             max_bytes=max_bytes, isolation_level=isolation_level, session_id=session_id,
                             session_epoch=session_epoch, topics=topics, forgotten_topics_data=[],
                             rack_id="")

    def fetch_many(self, parts: Sequence[tuple[Topic | str, int, int]], *, conn: WireClient | None = None,
                   timeout: float | None = None, **kw: Any) -> tuple[Any, list[FetchResult]]:
        request = self.fetch_request(parts, **kw)
        response = (conn or self.conn).call(request, timeout=timeout)
        results = []
        for topic in response.responses:
            for p in topic.partitions:
                results.append(fetch_result(response, p))
        return response, results

    def fetch(self, topic: Topic | str, partition: int, offset: int, **kw: Any) -> FetchResult:
        _, results = self.fetch_many([(topic, partition, offset)], **kw)
        if len(results) != 1:
            top = int(getattr(_, "error_code", 0))
            raise KafkaCallFailed(f"Fetch of one partition answered {len(results)} partitions "
                                  f"(top-level {error_name(top)})")
        return results[0]

    def read_all(self, topic: Topic | str, partition: int, start: int, *, until: int | None = None,
                 max_rounds: int = 50, **kw: Any) -> list[Fetched]:
        """Fetch from ``start`` until the high watermark (or ``until``), following next offsets."""
        records: list[Fetched] = []
        offset = start
        for _ in range(max_rounds):
            result = self.fetch(topic, partition, offset, **kw)
            if result.error != ErrorCode.NONE:
                raise KafkaCallFailed(f"Fetch at offset {offset}: {error_name(result.error)}")
            fresh = [r for r in result.records if r.offset >= offset]
            records.extend(fresh)
            end = until if until is not None else result.high_watermark
            if fresh:
                offset = fresh[-1].offset + 1
            if offset >= end or not fresh:
                break
        return records

    # -- list offsets --------------------------------------------------------

    def list_offsets(self, topic: Topic | str, partition: int, timestamp: int, *,
                     isolation_level: int = 0, version: int | None = None,
                     current_leader_epoch: int = -1, conn: WireClient | None = None) -> ListedOffset:
        ver = self.v(ApiKey.LIST_OFFSETS, version)
        name = topic.name if isinstance(topic, Topic) else topic
        response = self.call(ApiKey.LIST_OFFSETS, ver, conn, replica_id=-1, isolation_level=isolation_level,
                             timeout=30_000, topics=[{"name": name, "partitions": [
                                 {"partition_index": partition, "timestamp": timestamp,
                                  "current_leader_epoch": current_leader_epoch, "max_num_offsets": 1}]}])
        p = response.topics[0].partitions[0]
        if ver == 0:
            offsets = list(getattr(p, "old_style_offsets", ()))
            return ListedOffset(int(p.error_code), offsets[0] if offsets else -1, -1, -1)
        return ListedOffset(int(p.error_code), int(p.offset), int(p.timestamp),
                            int(getattr(p, "leader_epoch", -1)))

    def offset_of(self, topic: Topic | str, partition: int, timestamp: int, **kw: Any) -> int:
        listed = self.list_offsets(topic, partition, timestamp, **kw)
        if listed.error != ErrorCode.NONE:
            raise KafkaCallFailed(f"ListOffsets({timestamp}) on partition {partition}: "
                                  f"{error_name(listed.error)}")
        return listed.offset

    # -- producer ids --------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None = None, *, timeout_ms: int = 30_000,
                         version: int | None = None, retry_for: float = 20.0) -> Any:
        """InitProducerId as a client does it: a transactional id goes to its transaction
        coordinator (FindCoordinator key type 1), and retriable coordinator errors
        (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
        CONCURRENT_TRANSACTIONS: the first call on a fresh Kafka creates __transaction_state)
        are retried for up to ``retry_for`` seconds."""
        deadline = time.monotonic() + retry_for
        conn: WireClient | None = None
        while True:
            if transactional_id is not None and conn is None:
                conn = self._transaction_coordinator(transactional_id, deadline)
            response = self.call(ApiKey.INIT_PRODUCER_ID, version, conn, transactional_id=transactional_id,
                                 transaction_timeout=timeout_ms, producer_id=-1, producer_epoch=-1)
            code = int(response.error_code)
            if code not in _INIT_PRODUCER_RETRIABLE or time.monotonic() > deadline:
                return response
            if code in _COORDINATOR_MOVED:
                conn = None
            time.sleep(0.2)

    def _transaction_coordinator(self, transactional_id: str, deadline: float) -> WireClient | None:
        """A connection to the transaction coordinator, or None (the default connection) when the
        broker does not name one (it will then answer the InitProducerId with its own error)."""
        while True:
            error, entry = self.find_coordinator(transactional_id, key_type=1)
            if error == ErrorCode.NONE:
                if (str(entry.host), int(entry.port)) == (self.session.host, self.session.port):
                    return None
                return self.session.client(str(entry.host), int(entry.port))
            if error not in COORDINATOR_STARTING or time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    # -- coordinators --------------------------------------------------------

    def find_coordinator(self, key: str, key_type: int = 0, version: int | None = None,
                         retry_for: float = 20.0) -> tuple[int, Any]:
        """(error, coordinator entry with node_id/host/port) for one group (key type 0) or
        transactional (1) id.

        COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS are retried for ``retry_for``
        seconds, as clients do: a fresh Kafka answers them until its __consumer_offsets exists."""
        ver = self.v(ApiKey.FIND_COORDINATOR, version)
        deadline = time.monotonic() + retry_for
        while True:
            if ver >= 4:
                response = self.call(ApiKey.FIND_COORDINATOR, ver, key_type=key_type, coordinator_keys=[key])
                entry = response.coordinators[0]
            else:
                entry = self.call(ApiKey.FIND_COORDINATOR, ver, key=key, key_type=key_type)
            error = int(entry.error_code)
            if error not in COORDINATOR_STARTING or time.monotonic() > deadline:
                return error, entry
            time.sleep(0.2)

    def coordinator_address(self, group: str) -> tuple[str, int]:
        """(host, port) of ``group``'s coordinator; KafkaCallFailed when the broker names none."""
        error, entry = self.find_coordinator(group)
        if error != ErrorCode.NONE:
            raise KafkaCallFailed(f"FindCoordinator({group}): {error_name(error)}")
        return str(entry.host), int(entry.port)

    # -- configs -------------------------------------------------------------

    def describe_topic_configs(self, name: str, keys: list[str] | None = None,
                               version: int | None = None) -> Any:
        response = self.call(ApiKey.DESCRIBE_CONFIGS, version, resources=[
            {"resource_type": 2, "resource_name": name, "configuration_keys": keys}],
            include_synonyms=False, include_documentation=False)
        return response.results[0]

    def topic_config(self, name: str, key: str) -> str | None:
        result = self.describe_topic_configs(name, [key])
        if int(result.error_code) != ErrorCode.NONE:
            raise KafkaCallFailed(f"DescribeConfigs {name}: {error_name(int(result.error_code))}")
        for entry in result.configs:
            if entry.name == key:
                value: str | None = entry.value
                return value
        raise KafkaCallFailed(f"DescribeConfigs {name} does not list {key}")


def produce_result(response: Any) -> ProduceResult:
    p = response.responses[0].partition_responses[0]
    return ProduceResult(
        error=int(p.error_code), base_offset=int(p.base_offset),
        log_append_time=_ms(getattr(p, "log_append_time", None)),
        log_start_offset=int(getattr(p, "log_start_offset", -1)),
        error_message=getattr(p, "error_message", None),
        record_errors=tuple(getattr(p, "record_errors", ())),
    )


def fetch_result(response: Any, p: Any) -> FetchResult:
    data = p.records
    try:
        batches, records, partial = decode_records(data)
    except ValueError as exc:
        raise KafkaCallFailed(f"fetched records do not decode: {exc}") from exc
    return FetchResult(
        error=int(p.error_code), high_watermark=int(p.high_watermark),
        last_stable_offset=int(getattr(p, "last_stable_offset", -1)),
        log_start_offset=int(getattr(p, "log_start_offset", -1)),
        records=records, batches=batches, partial_bytes=partial,
        top_error=int(getattr(response, "error_code", 0)),
        session_id=int(getattr(response, "session_id", 0)),
        aborted=list(getattr(p, "aborted_transactions", None) or []),
        raw_size=len(data or b""),
        diverging=_diverging(p),
    )


def _diverging(p: Any) -> tuple[int, int] | None:
    """A partition's diverging_epoch (v12+), None when absent (its default, -1 and -1)."""
    found = getattr(p, "diverging_epoch", None)
    if found is None or (int(found.epoch), int(found.end_offset)) == (-1, -1):
        return None
    return int(found.epoch), int(found.end_offset)
