"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Kafka's rules and error codes, in Kafka's order: a topic named twice in one request ->
INVALID_REQUEST (42), invalid names -> INVALID_TOPIC_EXCEPTION (17), existing ->
TOPIC_ALREADY_EXISTS (36, whatever else the request asks), partitions < 1 -> INVALID_PARTITIONS (37),
a replication factor this single-copy store cannot give -> INVALID_REPLICATION_FACTOR
(38), bad configs -> INVALID_CONFIG (40). ``validate_only`` checks everything and
changes nothing.
Partition streams are created lazily by the first append.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from korvet.core import topics as rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicConfig
from korvet.protocol.denials import Items, Shape, empty, flat_answer
from korvet.protocol.kbuild import has_field, make, nested, response_type
from korvet.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.handlers.configs import SOURCE_CODES
from korvet.server.services import Services
from korvet.storage.redis_store import CreateOutcome


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _replication_factor(services: Services, requested: int) -> int:
    if requested == -1:
        return 1
    if requested < 1:
        raise _Refused(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor must be larger than 0, or -1 to use the default "
                       f"value (got {requested}).")
    if requested > 1:
        raise _Refused(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Unable to replicate the partition {requested} time(s): the target "
                       "replication factor cannot be reached because only 1 broker(s) are "
                       "registered (Korvet keeps one copy; Redis provides durability).")
    return 1


def _partition_count(services: Services, topic: Any) -> int:
    assignments = tuple(getattr(topic, "assignments", ()) or ())
    if assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(ErrorCode.INVALID_REQUEST,
                           "Both numPartitions or replicationFactor and replicasAssignments "
                           "were set. Both cannot be used at the same time.")
        indexes = sorted(a.partition_index for a in assignments)
        if indexes != list(range(len(assignments))):
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "Partitions in the assignment must be consecutive from 0.")
        for assignment in assignments:
            if list(assignment.broker_ids) != [services.node_id]:
                raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Replica assignment {list(assignment.broker_ids)} names brokers "
                               f"other than the only broker {services.node_id}.")
        return len(assignments)
    _replication_factor(services, topic.replication_factor)
    if topic.num_partitions == -1:
        return services.default_partitions(topic.name)
    try:
        return rules.validate_partition_count(topic.num_partitions)
    except rules.PartitionCountError as exc:
        raise _Refused(ErrorCode.INVALID_PARTITIONS, str(exc)) from None


def _configs(topic: Any) -> dict[str, str]:
    raw: dict[str, str | None] = {}
    for entry in topic.configs or ():
        if entry.value is None:
            raise _Refused(ErrorCode.INVALID_CONFIG,
                           f"Null value not supported for topic configs: {entry.name}")
        raw[entry.name] = entry.value
    try:
        return rules.validate_configs(raw)
    except rules.TopicConfigError as exc:
        raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None


async def create_topics(services: Services, ctx: RequestContext,
                        request: CreateTopicsRequest) -> CreateTopicsResponse:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "CreatableTopicResult")
    config_cls = (nested(response_cls, "CreatableTopicConfigs")
                  if has_field(result_cls, "configs") else None)
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        name = topic.name
        try:
            if counts[name] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               f"Create topics request contains multiple entries for {name}.")
            try:
                rules.validate_topic_name(name)
            except rules.TopicNameError as exc:
                raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
            if await services.store.get_topic(name, {}) is not None:  # Redis, not the cache
                # Kafka marks existing topics before it validates configs and partitions:
                # a create-if-missing tool learns the topic is there whatever it asked.
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            partitions = _partition_count(services, topic)
            configs = _configs(topic)
            try:
                outcome, detail = await services.create_topic(name, partitions, configs,
                                                              validate_only=request.validate_only)
            except rules.TopicConfigError as exc:
                raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
            if outcome is CreateOutcome.EXISTS:
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            if outcome is CreateOutcome.COLLIDES:
                raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION,
                               f"Topic '{name}' collides with existing topic: {detail}")
        except _Refused as refused:
            results.append(make(result_cls, name=name, topic_id=uuid.UUID(int=0),
                                error_code=refused.code, error_message=str(refused),
                                topic_config_error_code=0, num_partitions=-1,
                                replication_factor=-1, configs=None))
            continue
        described = None
        if config_cls is not None:
            full = {**services.fixed_at_creation(name), **configs}
            described = _described_configs(config_cls, services, TopicConfig(
                explicit=full, defaults=services.topics.defaults_for(name)))
        results.append(make(
            result_cls, name=name,
            topic_id=uuid.UUID(detail) if outcome is CreateOutcome.CREATED else uuid.UUID(int=0),
            error_code=ErrorCode.NONE, error_message=None, topic_config_error_code=0,
            num_partitions=partitions, replication_factor=1, configs=described,
        ))
    return make(response_cls, throttle_time=0, topics=tuple(results))


def _described_configs(config_cls: type[Any], services: Services, config: TopicConfig) -> tuple[Any, ...]:
    return tuple(
        make(config_cls, name=d.name, value=config.get(d.name), read_only=d.read_only_after_create,
             config_source=SOURCE_CODES[config.source(d.name)], is_sensitive=d.sensitive)
        for d in rules.CONFIG_DEFS
    )


async def delete_topics(services: Services, ctx: RequestContext,
                        request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DeletableTopicResult")
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        error, message, resolved_id = ErrorCode.NONE, None, topic_id
        resolved = name
        if name is None and topic_id is not None:
            topic = await services.topics.by_id(str(topic_id))
            resolved = topic.name if topic else None
            if resolved is None:
                error, message = ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} not found."
        if resolved is not None:
            topic = await services.topics.get(resolved)
            if topic is None:
                error, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "This server does not host this topic-partition.")
            else:
                resolved_id = uuid.UUID(topic.topic_id)
                if not await services.store.delete_topic(resolved):
                    error, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                      "This server does not host this topic-partition.")
                services.topics.invalidate(resolved)
                await services.on_topic_deleted(resolved)
        results.append(make(result_cls, name=resolved, topic_id=resolved_id or uuid.UUID(int=0),
                            error_code=error, error_message=message))
    return make(response_cls, throttle_time=0, responses=tuple(results))


async def create_partitions(services: Services, ctx: RequestContext,  # noqa: C901, PLR0912 -- Kafka's checks of CreatePartitions, in Kafka's order
                            request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "CreatePartitionsTopicResult")
    counts = Counter(t.name for t in request.topics)
    results = []
    for entry in request.topics:
        error, message = ErrorCode.NONE, None
        try:
            if counts[entry.name] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               f"Duplicate topic {entry.name} in the request.")
            topic = await services.topics.get(entry.name)
            if topic is None:
                raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"The topic '{entry.name}' does not exist.")
            if entry.count < topic.partitions:
                raise _Refused(ErrorCode.INVALID_PARTITIONS,
                               f"Topic currently has {topic.partitions} partitions, which is "
                               f"higher than the requested {entry.count}.")
            if entry.count == topic.partitions:
                raise _Refused(ErrorCode.INVALID_PARTITIONS,
                               f"Topic already has {topic.partitions} partitions.")
            try:
                rules.validate_partition_count(entry.count)
            except rules.PartitionCountError as exc:
                raise _Refused(ErrorCode.INVALID_PARTITIONS, str(exc)) from None
            assignments = entry.assignments
            if assignments is not None:
                if len(assignments) != entry.count - topic.partitions:
                    raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   f"Increasing the number of partitions by "
                                   f"{entry.count - topic.partitions} but {len(assignments)} "
                                   "assignments provided.")
                for assignment in assignments:
                    if list(assignment.broker_ids) != [services.node_id]:
                        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"Unknown broker(s) in assignment {list(assignment.broker_ids)}.")
            if not request.validate_only:
                grown = await services.store.grow_partitions(entry.name, topic.topic_id, entry.count)
                services.topics.invalidate(entry.name)
                if not grown:
                    raise _Refused(ErrorCode.INVALID_PARTITIONS,
                                   "The topic changed concurrently; describe it and retry.")
        except _Refused as refused:
            error, message = refused.code, str(refused)
        results.append(make(result_cls, name=entry.name, error_code=error, error_message=message))
    return make(response_cls, throttle_time=0, results=tuple(results))


APIS = (
    Api(ApiKey.CREATE_TOPICS, range(2, 8), create_topics,
        "Kafka's name rules and errors; validate_only",
        Shape((Items("topics", "topics", flat_answer(
            "CreatableTopicResult", "name", error_message=None, topic_config_error_code=0,
            num_partitions=-1, replication_factor=-1, configs=None), empty=empty(topics=())),))),
    Api(ApiKey.DELETE_TOPICS, range(1, 7), delete_topics,
        "by name or by id (v6); Kafka's errors",
        Shape((Items(
            lambda r: "topics" if has_field(type(r), "topics") else "topic_names", "responses",
            flat_answer("DeletableTopicResult", "name", error_message=None),
            name_of=lambda t: t if isinstance(t, str) else t.name,
            id_of=lambda t: None if isinstance(t, str) else t.topic_id,
            empty=empty(responses=())),))),
    Api(ApiKey.CREATE_PARTITIONS, range(0, 4), create_partitions,
        "Kafka's order of checks; validate_only",
        Shape((Items("topics", "results", flat_answer(
            "CreatePartitionsTopicResult", "name",
            error_message="The topic authorization is failed."), empty=empty(results=())),))),
)
