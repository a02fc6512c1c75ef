"""CreateTopics (19): Kafka's checks of a request to create topics, as one pure plan.

The handler (korvet/server/handlers/topics.py) decodes the request into a
``CreateTopicsCall`` (korvet/protocol/decoders/topics.py), asks Redis which of the topics
``plan`` needs (``CreateTopicsCall.looked_up``) exist, asks ``plan`` what each topic gets and
creates the ``Creation``s. A topic of the request gets the first of these that applies
(Kafka's ControllerApis.createTopics and ReplicationControlManager.createTopics):

1. it is named more than once in the request: INVALID_REQUEST (each entry of it);
2. its name breaks Kafka's rules (``topics.validate_topic_name``): INVALID_TOPIC_EXCEPTION;
3. it exists: TOPIC_ALREADY_EXISTS, whatever else the request asks (a create-if-missing tool
   learns the topic is there);
4. its partitions: explicit assignments with a partition count or a replication factor:
   INVALID_REQUEST; assignments not numbered 0, 1, ...: INVALID_REPLICA_ASSIGNMENT;
   one naming a broker other than this one (Korvet keeps one copy, on the broker asked):
   INVALID_REPLICA_ASSIGNMENT. Without assignments: a replication factor other than 1 (or -1,
   the default) is INVALID_REPLICATION_FACTOR, a partition count below 1 or over
   ``topics.MAX_PARTITIONS`` INVALID_PARTITIONS (-1: the topic's default count);
5. its configs: a null value, a config Korvet does not know, a value Kafka's ConfigDef would
   not read, settings that do not go together: INVALID_CONFIG.

KORVET: two orders differ from Kafka's, for a topic with two faults: Kafka checks the configs
(5) before the partitions (4), and a partition count of 0 or below -1 before a replication
factor it cannot place (above 1 here).

A topic that passes them is created (``validate_only``: checked by storage as a creation
would be, then left alone); what storage answers then (the topic appeared meanwhile, or its
name collides with another's) is the handler's to report.

Tests: tests/unit/core/test_admin_plans.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from korvet.core.admin import Refusal, named_twice
from korvet.core.errors import ErrorCode
from korvet.core.topics import (
    PartitionCountError,
    TopicConfigError,
    TopicNameError,
    validate_configs,
    validate_partition_count,
    validate_topic_name,
)

DEFAULT = -1  # a partition count or replication factor left to the broker


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    partition: int
    brokers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic of the request."""

    name: str
    partitions: int  # DEFAULT: the topic's default count
    replication_factor: int  # DEFAULT: the broker's (one copy)
    assignments: tuple[ReplicaAssignment, ...]  # none: the broker places the partitions
    configs: tuple[tuple[str, str | None], ...]  # (name, value) as sent


@dataclass(frozen=True, slots=True)
class CreateTopicsCall:
    """A CreateTopics request, whatever its version."""

    topics: tuple[NewTopic, ...]
    validate_only: bool

    @property
    def looked_up(self) -> tuple[str, ...]:
        """The topics whose existence ``plan`` needs: those named once, with a valid name."""
        twice = named_twice(t.name for t in self.topics)
        return tuple(dict.fromkeys(t.name for t in self.topics
                                   if t.name not in twice and _name_refusal(t.name) is None))


@dataclass(frozen=True, slots=True)
class Creation:
    """A topic that passes every check: created with these partitions and settings."""

    name: str
    partitions: int
    configs: Mapping[str, str]  # each as Kafka reads it


def plan(call: CreateTopicsCall, existing: Set[str], default_partitions: Mapping[str, int],
         node_id: int) -> tuple[Creation | Refusal, ...]:
    """What each topic of the request gets, in request order. ``existing`` holds the topics
    among ``call.looked_up`` that exist, ``default_partitions`` their partition count when the
    request leaves it to the broker; ``node_id`` is the broker asked."""
    twice = named_twice(t.name for t in call.topics)
    return tuple(_topic(wanted, wanted.name in twice, wanted.name in existing,
                        default_partitions, node_id)
                 for wanted in call.topics)


def _topic(wanted: NewTopic, duplicated: bool, exists: bool,
           default_partitions: Mapping[str, int], node_id: int) -> Creation | Refusal:
    if duplicated:
        return Refusal(ErrorCode.INVALID_REQUEST,
                       f"Create topics request contains multiple entries for {wanted.name}.")
    refused = _name_refusal(wanted.name)
    if refused is not None:
        return refused
    if exists:
        return already_exists(wanted.name)
    partitions = _partitions(wanted, default_partitions, node_id)
    if isinstance(partitions, Refusal):
        return partitions
    configs = _configs(wanted.configs)
    if isinstance(configs, Refusal):
        return configs
    return Creation(wanted.name, partitions, configs)


def already_exists(name: str) -> Refusal:
    return Refusal(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")


def _name_refusal(name: str) -> Refusal | None:
    try:
        validate_topic_name(name)
    except TopicNameError as exc:
        return Refusal(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    return None


def _partitions(wanted: NewTopic, default_partitions: Mapping[str, int],
                node_id: int) -> int | Refusal:
    if wanted.assignments:
        return _assigned(wanted, node_id)
    refused = _replication_refusal(wanted.replication_factor)
    if refused is not None:
        return refused
    if wanted.partitions == DEFAULT:
        return default_partitions[wanted.name]
    try:
        return validate_partition_count(wanted.partitions)
    except PartitionCountError as exc:
        return Refusal(ErrorCode.INVALID_PARTITIONS, str(exc))


def _assigned(wanted: NewTopic, node_id: int) -> int | Refusal:
    """The partition count explicit assignments give, or why they cannot be."""
    assignments = wanted.assignments
    if wanted.partitions != DEFAULT or wanted.replication_factor != DEFAULT:
        return Refusal(ErrorCode.INVALID_REQUEST,
                       "Both numPartitions or replicationFactor and replicasAssignments were "
                       "set. Both cannot be used at the same time.")
    if sorted(a.partition for a in assignments) != list(range(len(assignments))):
        return Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "Partitions in the assignment must be consecutive from 0.")
    for assignment in assignments:
        if list(assignment.brokers) != [node_id]:
            return Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica assignment {list(assignment.brokers)} names brokers other "
                           f"than the only broker {node_id}.")
    return len(assignments)


def _replication_refusal(requested: int) -> Refusal | None:
    if requested == DEFAULT:
        return None
    if requested < 1:
        return Refusal(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor must be larger than 0, or -1 to use the default "
                       f"value (got {requested}).")
    if requested > 1:
        return Refusal(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Unable to replicate the partition {requested} time(s): the target "
                       "replication factor cannot be reached because only 1 broker(s) are "
                       "registered (Korvet keeps one copy; Redis provides durability).")
    return None


def _configs(configs: tuple[tuple[str, str | None], ...]) -> dict[str, str] | Refusal:
    raw: dict[str, str | None] = {}
    for name, value in configs:
        if value is None:
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"Null value not supported for topic configs: {name}")
        raw[name] = value
    try:
        return validate_configs(raw)
    except TopicConfigError as exc:
        return Refusal(ErrorCode.INVALID_CONFIG, str(exc))
