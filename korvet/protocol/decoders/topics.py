"""CreateTopics (v2-7), DeleteTopics (v1-6) and CreatePartitions (v0-3) as version-free values.

DeleteTopics names its topics in a list of names until v5 and as (name, id) pairs from v6;
the others read the same fields in every version served.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from korvet.core.create_partitions import CreatePartitionsCall, PartitionsIncrease
from korvet.core.create_topics import CreateTopicsCall, NewTopic, ReplicaAssignment
from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest


def decode_create_topics(request: CreateTopicsRequest) -> CreateTopicsCall:
    return CreateTopicsCall(tuple(_new_topic(t) for t in request.topics),
                            bool(request.validate_only))


def _new_topic(topic: Any) -> NewTopic:
    return NewTopic(
        str(topic.name), int(topic.num_partitions), int(topic.replication_factor),
        tuple(ReplicaAssignment(int(a.partition_index), tuple(int(b) for b in a.broker_ids))
              for a in topic.assignments or ()),
        tuple((c.name, c.value) for c in topic.configs or ()))


@dataclass(frozen=True, slots=True)
class TopicToDelete:
    name: str | None  # None: named by id (v6+)
    topic_id: uuid.UUID | None  # None before v6


def decode_delete_topics(request: DeleteTopicsRequest) -> tuple[TopicToDelete, ...]:
    shaped: Any = request  # which of the two fields it has is asked here, once
    if _names_pairs(type(request)):
        return tuple(TopicToDelete(t.name, t.topic_id) for t in shaped.topics)
    return tuple(TopicToDelete(name, None) for name in shaped.topic_names)


def deleted_topics_field(request: Any) -> str:
    """The field of a DeleteTopics request that lists its topics (for the check point)."""
    return "topics" if _names_pairs(type(request)) else "topic_names"


def _names_pairs(cls: type[Any]) -> bool:
    return has_field(cls, "topics")


def decode_create_partitions(request: CreatePartitionsRequest) -> CreatePartitionsCall:
    return CreatePartitionsCall(
        tuple(PartitionsIncrease(
            str(t.name), int(t.count),
            None if t.assignments is None
            else tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments))
              for t in request.topics),
        bool(request.validate_only))
