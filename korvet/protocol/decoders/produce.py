"""Produce (v3-13) as a ``ProduceCall``: topics are named until v12 and named by id in v13."""

from __future__ import annotations

from typing import Any

from korvet.core.produce import ProduceCall, ProducePartition, ProduceTopic
from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import ProduceRequest


def decode_produce(request: ProduceRequest) -> ProduceCall:
    return ProduceCall(request.acks, request.transactional_id,
                       tuple(_topic(topic) for topic in request.topic_data))


def topic_id_of(topic: Any) -> Any:
    """A request topic's id as kio read it (v13), None when it is named."""
    return topic.topic_id if _named_by_id(type(topic)) else None


def _topic(topic: Any) -> ProduceTopic:
    partitions = tuple(ProducePartition(p.index, p.records) for p in topic.partition_data)
    if _named_by_id(type(topic)):
        return ProduceTopic(None, str(topic.topic_id), partitions)
    return ProduceTopic(topic.name, None, partitions)


_BY_ID: dict[type[Any], bool] = {}  # per kio class: whether its topics are named by id


def _named_by_id(cls: type[Any]) -> bool:
    found = _BY_ID.get(cls)
    if found is None:
        found = _BY_ID[cls] = has_field(cls, "topic_id")
    return found
