"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Each request is decoded into a version-free value (korvet/protocol/decoders/topics.py).
CreateTopics and CreatePartitions then read, decide and write: the handler reads the facts
their plan needs (which topics exist, their partition counts), the plan applies Kafka's checks
in Kafka's order (korvet/core/create_topics.py, korvet/core/create_partitions.py: a topic
named twice in one request -> INVALID_REQUEST (42), invalid names -> INVALID_TOPIC_EXCEPTION
(17), existing -> TOPIC_ALREADY_EXISTS (36, whatever else the request asks), partitions < 1 ->
INVALID_PARTITIONS (37), a replication factor this single-copy store cannot give ->
INVALID_REPLICATION_FACTOR (38), bad configs -> INVALID_CONFIG (40) ...), and the handler
writes what passes. ``validate_only`` checks everything and changes nothing.
Partition streams are created lazily by the first append.
"""

from __future__ import annotations

import uuid
from typing import Any

from korvet.core import create_partitions as partitions_plan
from korvet.core import create_topics as create_topics_plan
from korvet.core import topics as rules
from korvet.core.admin import Refusal
from korvet.core.api_keys import ApiKey
from korvet.core.create_partitions import Growth
from korvet.core.create_topics import Creation
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicConfig
from korvet.protocol.decoders.topics import (
    decode_create_partitions,
    decode_create_topics,
    decode_delete_topics,
    deleted_topics_field,
)
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


async def create_topics(services: Services, ctx: RequestContext,
                        request: CreateTopicsRequest) -> CreateTopicsResponse:
    """Reads which topics exist (in Redis, not the cache), asks the plan
    (core/create_topics.py) and creates each topic that passes."""
    call = decode_create_topics(request)
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "CreatableTopicResult")
    config_cls = (nested(response_cls, "CreatableTopicConfigs")
                  if has_field(result_cls, "configs") else None)
    existing = {name for name in call.looked_up
                if await services.store.get_topic(name, {}) is not None}
    verdicts = create_topics_plan.plan(
        call, existing, {name: services.default_partitions(name) for name in call.looked_up},
        services.node_id)
    results = []
    for wanted, verdict in zip(call.topics, verdicts, strict=True):
        created = (await _create(services, verdict, call.validate_only)
                   if isinstance(verdict, Creation) else verdict)
        if isinstance(created, Refusal):
            results.append(make(result_cls, name=wanted.name, topic_id=uuid.UUID(int=0),
                                error_code=created.code, error_message=created.message,
                                topic_config_error_code=0, num_partitions=-1,
                                replication_factor=-1, configs=None))
            continue
        assert isinstance(verdict, Creation)
        described = None
        if config_cls is not None:
            full = {**services.fixed_at_creation(verdict.name), **verdict.configs}
            described = _described_configs(config_cls, TopicConfig(
                explicit=full, defaults=services.topics.defaults_for(verdict.name)))
        results.append(make(
            result_cls, name=verdict.name, topic_id=created, error_code=ErrorCode.NONE,
            error_message=None, topic_config_error_code=0, num_partitions=verdict.partitions,
            replication_factor=1, configs=described,
        ))
    return make(response_cls, throttle_time=0, topics=tuple(results))


async def _create(services: Services, creation: Creation, validate_only: bool) -> uuid.UUID | Refusal:
    """The new topic's id (the zero id when the request only validates), or why storage
    refused it."""
    try:
        outcome, detail = await services.create_topic(creation.name, creation.partitions,
                                                      dict(creation.configs),
                                                      validate_only=validate_only)
    except rules.TopicConfigError as exc:  # with the broker's defaults for the topic
        return Refusal(ErrorCode.INVALID_CONFIG, str(exc))
    if outcome is CreateOutcome.EXISTS:
        return create_topics_plan.already_exists(creation.name)
    if outcome is CreateOutcome.COLLIDES:
        return Refusal(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Topic '{creation.name}' collides with existing topic: {detail}")
    return uuid.UUID(detail) if outcome is CreateOutcome.CREATED else uuid.UUID(int=0)


def _described_configs(config_cls: type[Any], config: TopicConfig) -> tuple[Any, ...]:
    return tuple(
        make(config_cls, name=d.name, value=config.get(d.name), read_only=d.read_only_after_create,
             config_source=SOURCE_CODES[config.source(d.name)], is_sensitive=d.sensitive)
        for d in rules.CONFIG_DEFS
    )


async def delete_topics(services: Services, ctx: RequestContext,
                        request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DeletableTopicResult")
    wanted = [(t.name, t.topic_id) for t in decode_delete_topics(request)]
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


async def create_partitions(services: Services, ctx: RequestContext,
                            request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    """Reads the topics, asks the plan (core/create_partitions.py), grows the topics that
    pass: each write is conditional on the topic read (its id and a smaller count)."""
    call = decode_create_partitions(request)
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "CreatePartitionsTopicResult")
    found = {name: await services.topics.get(name) for name in call.looked_up}
    verdicts = partitions_plan.plan(
        call, {name: topic for name, topic in found.items() if topic is not None},
        services.node_id)
    results = []
    for wanted, verdict in zip(call.topics, verdicts, strict=True):
        refusal = await _grow(services, verdict) if isinstance(verdict, Growth) else verdict
        results.append(make(result_cls, name=wanted.name,
                            error_code=refusal.code if refusal else ErrorCode.NONE,
                            error_message=refusal.message if refusal else None))
    return make(response_cls, throttle_time=0, results=tuple(results))


async def _grow(services: Services, growth: Growth) -> Refusal | None:
    if not growth.write:
        return None
    grown = await services.store.grow_partitions(growth.name, growth.topic_id, growth.count)
    services.topics.invalidate(growth.name)
    return None if grown else partitions_plan.CHANGED_CONCURRENTLY


APIS = (
    Api(ApiKey.CREATE_TOPICS, range(2, 8), create_topics,
        "Kafka's name rules and errors; validate_only",
        Shape((Items("topics", "topics", flat_answer(
            "CreatableTopicResult", "name", error_message=None, topic_config_error_code=0,
            num_partitions=-1, replication_factor=-1, configs=None), empty=empty(topics=())),))),
    Api(ApiKey.DELETE_TOPICS, range(1, 7), delete_topics,
        "by name or by id (v6); Kafka's errors",
        Shape((Items(
            deleted_topics_field, "responses",
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
