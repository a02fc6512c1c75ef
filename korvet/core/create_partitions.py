"""CreatePartitions (37): Kafka's checks of a request to add partitions, as one pure plan.

The handler (korvet/server/handlers/topics.py) decodes the request into a
``CreatePartitionsCall`` (korvet/protocol/decoders/topics.py), looks up the topics ``plan``
needs (``CreatePartitionsCall.looked_up``), asks ``plan`` what each topic gets and writes the
growths. A topic of the request gets the first of these that applies (Kafka's
ControllerApis.createPartitions and ReplicationControlManager.createPartitions):

1. it is named more than once in the request: INVALID_REQUEST (each entry of it);
2. it does not exist: UNKNOWN_TOPIC_OR_PARTITION;
3. the count asked for is not above the topic's: INVALID_PARTITIONS ("only be increased");
4. the count is over ``topics.MAX_PARTITIONS``, Korvet's bound (every partition is a Redis
   stream): INVALID_PARTITIONS;
5. assignments are given and there is not one for each new partition, or one names a
   broker other than this one (Korvet keeps one copy, on the broker asked):
   INVALID_REPLICA_ASSIGNMENT.

A topic that passes them grows to the count (``Growth``), unless the request only validates.
The write is conditional on the topic being what was read (storage's ``grow_partitions``); a
topic changed in between is answered ``CHANGED_CONCURRENTLY``.

Tests: tests/unit/core/test_admin_plans.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from korvet.core.admin import Refusal, named_twice
from korvet.core.errors import ErrorCode
from korvet.core.topics import PartitionCountError, TopicInfo, validate_partition_count


@dataclass(frozen=True, slots=True)
class PartitionsIncrease:
    """A topic of the request: its new partition count and, optionally, the replicas (broker
    ids) of each new partition."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None


@dataclass(frozen=True, slots=True)
class CreatePartitionsCall:
    """A CreatePartitions request, whatever its version."""

    topics: tuple[PartitionsIncrease, ...]
    validate_only: bool

    @property
    def looked_up(self) -> tuple[str, ...]:
        """The topics ``plan`` needs the facts of: those named once (a topic named twice is
        refused whatever it is)."""
        twice = named_twice(t.name for t in self.topics)
        return tuple(dict.fromkeys(t.name for t in self.topics if t.name not in twice))


@dataclass(frozen=True, slots=True)
class Growth:
    """A topic that passes every check: it grows to ``count`` partitions if ``write``."""

    name: str
    topic_id: str  # the id read: the write is refused if the topic is another by then
    count: int
    write: bool  # False: the request only validates


CHANGED_CONCURRENTLY = Refusal(ErrorCode.INVALID_PARTITIONS,
                               "The topic changed concurrently; describe it and retry.")


def plan(call: CreatePartitionsCall, topics: Mapping[str, TopicInfo],
         node_id: int) -> tuple[Growth | Refusal, ...]:
    """What each topic of the request gets, in request order. ``topics`` holds the existing
    topics among ``call.looked_up``; ``node_id`` is the broker asked (the only one an
    assignment may name)."""
    twice = named_twice(t.name for t in call.topics)
    return tuple(
        Refusal(ErrorCode.INVALID_REQUEST, f"Duplicate topic {wanted.name} in the request.")
        if wanted.name in twice else _topic(wanted, topics.get(wanted.name), node_id,
                                               call.validate_only)
        for wanted in call.topics)


def _topic(wanted: PartitionsIncrease, topic: TopicInfo | None, node_id: int,
           validate_only: bool) -> Growth | Refusal:
    if topic is None:
        return Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"The topic '{wanted.name}' does not exist.")
    return (_count_refusal(wanted.count, topic.partitions)
            or _assignment_refusal(wanted, topic.partitions, node_id)
            or Growth(topic.name, topic.topic_id, wanted.count, write=not validate_only))


def _count_refusal(count: int, current: int) -> Refusal | None:
    if count < current:
        return Refusal(ErrorCode.INVALID_PARTITIONS,
                       f"Topic currently has {current} partitions, which is higher than the "
                       f"requested {count}.")
    if count == current:
        return Refusal(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    try:
        validate_partition_count(count)
    except PartitionCountError as exc:
        return Refusal(ErrorCode.INVALID_PARTITIONS, str(exc))
    return None


def _assignment_refusal(wanted: PartitionsIncrease, current: int, node_id: int) -> Refusal | None:
    assignments = wanted.assignments
    if assignments is None:
        return None
    added = wanted.count - current
    if len(assignments) != added:
        return Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Increasing the number of partitions by {added} but {len(assignments)} "
                       "assignments provided.")
    for replicas in assignments:
        if list(replicas) != [node_id]:
            return Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Unknown broker(s) in assignment {list(replicas)}.")
    return None
