"""Kafka's rules for the admin APIs operators' tools call, as pure functions.

- DeleteRecords (21): ``delete_records`` says what a requested offset does to a partition's
  log start. -1 means the high watermark; any other negative offset, or one above the high
  watermark, is OFFSET_OUT_OF_RANGE; otherwise the log start becomes the larger of itself
  and the offset (it never moves back), and the response's low watermark is the new log
  start. A partition named twice in one request counts once, with the last offset
  (``unique_partitions``); a topic named twice is one entry and one named with no partition is
  left out of the response (``delete_records_targets``). A compacted topic's records cannot
  be deleted: POLICY_VIOLATION (``topics.records_deletable``, checked by the handler).
- DescribeTopicPartitions (75): ``describe_topic_partitions`` pages through topics in name
  order, at most ``min(response_partition_limit, 2000)`` partitions a response, with a
  cursor (topic, first partition) to continue from. With no topics named, every topic is
  described and none is an error; named topics that do not exist are
  UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name); a cursor must
  name one of the named topics (INVALID_REQUEST). As Kafka's DescribeTopicPartitionsRequestHandler
  and KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse: a response describes at least
  one partition (the limit is max(min(limit, 2000), 1), so a limit of 0 or less still makes
  progress); with no topics named, a cursor selects the existing topics whose names are >= its
  topic (a cursor naming a topic that does not exist is not described); names are ordered as
  Java's String.compareTo orders them (by UTF-16 code unit, ``java_order``).
- DescribeLogDirs (35): ``log_dir_partitions`` picks the partitions to describe: every
  partition of every topic when the request names none (null), else the named ones that
  exist (unknown topics and partitions are left out, as Kafka leaves out what it has not).
- DescribeConfigs (32): ``describe_configs_request_error``: a resource type Kafka does not know
  (ConfigResource.Type: 2 topic, 4 broker, 8 broker logger, 16 client metrics, 32 group) makes
  the whole request INVALID_REQUEST, every resource answered with it (Kafka's KafkaApis throws
  while authorizing, before any resource is looked at). ``config_topic_error``: a topic resource
  is validated as a topic name first (INVALID_TOPIC_EXCEPTION), then looked up
  (UNKNOWN_TOPIC_OR_PARTITION).

The plans of the admin requests that change topics (korvet/core/create_partitions.py,
korvet/core/alter_configs.py) answer a refused item with a ``Refusal``.

Tests: tests/unit/core/test_admin_rules.py, tests/unit/core/test_admin_plans.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicNameError, validate_topic_name

HIGH_WATERMARK = -1  # DeleteRecords: delete everything below the high watermark
NO_LOW_WATERMARK = -1
MAX_PARTITIONS_PER_DESCRIBE = 2000  # Kafka's max.request.partition.size.limit default


@dataclass(frozen=True, slots=True)
class Refusal:
    """An item of an admin request (a topic, a config resource) refused: Kafka's error code
    and the message sent with it."""

    code: ErrorCode
    message: str


def named_twice(names: Iterable[str]) -> frozenset[str]:
    """The names a request lists more than once: CreateTopics and CreatePartitions refuse every
    entry of each with INVALID_REQUEST (Kafka's ControllerApis), whatever else they ask."""
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return frozenset(twice)


@dataclass(frozen=True, slots=True)
class Deletion:
    error: ErrorCode
    low_watermark: int  # the log start after the request; -1 with an error

    @property
    def ok(self) -> bool:
        return self.error is ErrorCode.NONE


def delete_records(requested: int, log_start: int, high_watermark: int) -> Deletion:
    """What DeleteRecords to ``requested`` does to a log [log_start, high_watermark)."""
    target = high_watermark if requested == HIGH_WATERMARK else requested
    if target < 0 or target > high_watermark:
        return Deletion(ErrorCode.OFFSET_OUT_OF_RANGE, NO_LOW_WATERMARK)
    return Deletion(ErrorCode.NONE, max(log_start, target))


def unique_partitions(entries: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(partition, offset) pairs with each partition once: the last offset, the first place."""
    chosen: dict[int, int] = {}
    for partition, offset in entries:
        chosen[partition] = offset
    return list(chosen.items())


def delete_records_targets(topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]
                           ) -> list[tuple[str, list[tuple[int, int]]]]:
    """The topics a DeleteRecords response lists, each once, with its ``unique_partitions``: Kafka
    builds the response from one result per partition grouped by topic, so a topic named twice
    is one entry and a topic named with no partition is not in the response at all."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for name, partitions in topics:
        by_topic.setdefault(name, []).extend(partitions)
    return [(name, unique_partitions(entries)) for name, entries in by_topic.items() if entries]


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """One topic of a DescribeTopicPartitions response."""

    name: str
    error: ErrorCode
    partitions: range  # the partition indexes this response describes


@dataclass(frozen=True, slots=True)
class PartitionsPage:
    error: ErrorCode  # INVALID_REQUEST answers every named topic with it and nothing else
    topics: tuple[TopicPartitions, ...]
    next_cursor: tuple[str, int] | None


def java_order(name: str) -> bytes:
    """A sort key that orders names as Java's String.compareTo does (UTF-16 code unit by code
    unit), which Kafka uses to sort and compare topic names; Python's order (by code point)
    differs for names mixing characters above U+FFFF with ones in U+E000..U+FFFF."""
    return name.encode("utf-16-be", "surrogatepass")


def describe_topic_partitions(requested: Sequence[str], topics: Mapping[str, int],
                              cursor: tuple[str, int] | None, limit: int) -> PartitionsPage:
    """One page of DescribeTopicPartitions. ``topics`` maps every existing topic to its
    partition count; ``requested`` is empty to describe all of them."""
    describe_all = not requested
    if cursor is not None and cursor[1] < 0:
        return PartitionsPage(ErrorCode.INVALID_REQUEST, (), None)
    after = java_order(cursor[0]) if cursor is not None else b""
    names = {n for n in (topics if describe_all else requested) if java_order(n) >= after}
    if cursor is not None and not describe_all and cursor[0] not in names:
        return PartitionsPage(ErrorCode.INVALID_REQUEST, (), None)
    remaining = max(min(MAX_PARTITIONS_PER_DESCRIBE, limit), 1)
    page: list[TopicPartitions] = []
    for name in sorted(names, key=java_order):
        if remaining <= 0:
            return PartitionsPage(ErrorCode.NONE, tuple(page), (name, 0))
        count = topics.get(name)
        if count is None:
            if not describe_all:
                page.append(TopicPartitions(name, _missing_topic_error(name), range(0)))
            continue
        first = cursor[1] if cursor is not None and name == cursor[0] else 0
        upper = min(count, first + remaining)
        page.append(TopicPartitions(name, ErrorCode.NONE, range(first, upper)))
        if upper < count:
            return PartitionsPage(ErrorCode.NONE, tuple(page), (name, upper))
        remaining -= max(0, upper - first)
    return PartitionsPage(ErrorCode.NONE, tuple(page), None)


TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = (
    2, 4, 8, 16, 32)
CONFIG_RESOURCE_TYPES = frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE,
                                   CLIENT_METRICS_RESOURCE, GROUP_RESOURCE})


def describe_configs_request_error(resource_types: Iterable[int]) -> ErrorCode:
    """INVALID_REQUEST when any resource's type is not one Kafka knows: the whole request fails,
    every resource (also the valid ones) answered with it. Kafka: KafkaApis
    handleDescribeConfigsRequest ('Unexpected resource type') -> DescribeConfigsRequest
    getErrorResponse."""
    if any(t not in CONFIG_RESOURCE_TYPES for t in resource_types):
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.NONE


def config_topic_error(name: str, exists: bool) -> ErrorCode:
    """A DescribeConfigs topic resource: Kafka's ConfigHelper runs Topic.validate on the name
    before it looks the topic up."""
    try:
        validate_topic_name(name)
    except TopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.NONE if exists else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _missing_topic_error(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except TopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def log_dir_partitions(requested: Sequence[tuple[str, Sequence[int]]] | None,
                       topics: Mapping[str, int]) -> dict[str, list[int]]:
    """The partitions DescribeLogDirs describes, per topic, in name then index order."""
    if requested is None:
        return {name: list(range(topics[name])) for name in sorted(topics)}
    chosen: dict[str, set[int]] = {}
    for name, partitions in requested:
        count = topics.get(name)
        if count is None:
            continue
        chosen.setdefault(name, set()).update(p for p in partitions if 0 <= p < count)
    return {name: sorted(chosen[name]) for name in sorted(chosen) if chosen[name]}
