"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), DescribeClientQuotas (48).

Groups (resource type 32) take Kafka's group configs (korvet/core/group_configs.py) through
IncrementalAlterConfigs and DescribeConfigs. Topics (resource type 2) support every config in
korvet.core.topics.CONFIG_DEFS:
those that act (retention, timestamps, max message size, sequence bits ...) and
those accepted only for compatibility (segment.*, min.insync.replicas ...),
which DescribeConfigs documents as having no effect. ``korvet.sequence.bits`` and
``korvet.storage.format`` are read-only after creation: changing them would change the
meaning of every stored offset or entry. The broker (resource type 4) can be described;
its settings are static (``korvet serve`` flags/env/YAML), so altering them is refused.

Requests are decoded into version-free values (korvet/protocol/decoders/configs.py). The
alter requests read, decide and write: resource by resource, the handler reads the topic, the
plan (korvet/core/alter_configs.py) applies Kafka's checks in Kafka's order and gives the new
configs, and the handler stores them.
"""

from __future__ import annotations

from typing import Any

from korvet.core import admin
from korvet.core import alter_configs as alter_plan
from korvet.core import group_configs as group_rules
from korvet.core import topics as rules
from korvet.core.admin import Refusal
from korvet.core.alter_configs import AlterConfigsCall, ConfigResource, NewConfigs
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import CLUSTER_NAME
from korvet.core.topics import TopicConfig
from korvet.protocol.decoders.configs import (
    DescribeConfigsCall,
    DescribedResource,
    decode_alter_configs,
    decode_describe_configs,
    decode_incremental_alter_configs,
)
from korvet.protocol.denials import Shape, Whole, config_resources, whole_error
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.group_configs import GroupConfigs
from korvet.server.services import Services

TOPIC, BROKER, GROUP = 2, 4, group_rules.GROUP_RESOURCE
# DescribeConfigs config sources
SOURCE_CODES = {"topic": 1, "broker": 4, "default": 5, "group": 8}
# DescribeConfigs v3+ config types
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_CONFIG_TYPES = {"boolean": BOOLEAN, "string": STRING, "int": INT, "long": LONG,
                 "double": DOUBLE, "list": LIST}


def config_type(definition: rules.ConfigDef) -> int:
    return _CONFIG_TYPES[definition.kind]


def _doc(definition: rules.ConfigDef) -> str:
    return definition.doc if definition.effective else f"Accepted for compatibility; {definition.doc}"


def broker_configs(services: Services) -> list[tuple[str, str, str]]:
    """(name, value, documentation) of the broker's settings under Kafka's names."""
    return [
        *services.settings.kafka_configs(),
        ("message.max.bytes", rules.CONFIGS["max.message.bytes"].default, "default max.message.bytes"),
        ("offsets.topic.replication.factor", "1", "one copy; Redis provides durability"),
        ("default.replication.factor", "1", "one copy; Redis provides durability"),
    ]


async def describe_configs(services: Services, ctx: RequestContext,
                           request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    call = decode_describe_configs(request)
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DescribeConfigsResult")
    refused = admin.describe_configs_request_error(r.resource_type for r in call.resources)
    if refused is not ErrorCode.NONE:
        code = ErrorCode(int(refused))
        return make(response_cls, throttle_time=0, results=tuple(
            make(result_cls, error_code=code, error_message="Unknown resource type in the request.",
                 resource_type=r.resource_type, resource_name=r.name, configs=())
            for r in call.resources))
    results = []
    for resource in call.resources:
        entries, error, message = await _describe_resource(services, response_cls, call, resource)
        results.append(make(result_cls, error_code=error, error_message=message,
                            resource_type=resource.resource_type,
                            resource_name=resource.name, configs=tuple(entries)))
    return make(response_cls, throttle_time=0, results=tuple(results))


async def _describe_resource(services: Services, response_cls: type[Any], call: DescribeConfigsCall,
                             resource: DescribedResource) -> tuple[list[Any], ErrorCode, str | None]:
    entry_cls = nested(response_cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(response_cls, "DescribeConfigsSynonym")
    synonyms_wanted, docs_wanted = call.include_synonyms, call.include_documentation
    keys = resource.keys
    entries: list[Any] = []
    if resource.resource_type == TOPIC:
        topic = await services.topics.get(resource.name)
        found = admin.config_topic_error(resource.name, topic is not None)
        if topic is None or found is not ErrorCode.NONE:
            message = (f"Topic '{resource.name}' does not exist."
                       if found is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                       else f"Invalid topic name {resource.name!r}.")
            return entries, ErrorCode(int(found)), message
        for definition in rules.CONFIG_DEFS:
            if keys is None or definition.name in keys:
                entries.append(_topic_entry(entry_cls, synonym_cls, definition, topic.config,
                                            synonyms_wanted, docs_wanted))
        return entries, ErrorCode.NONE, None
    if resource.resource_type == BROKER:
        if resource.name not in ("", str(services.node_id)):
            return entries, ErrorCode.INVALID_REQUEST, f"Unknown broker id {resource.name!r}."
        for name, value, doc in broker_configs(services):
            if keys is not None and name not in keys:
                continue
            synonyms = ((make(synonym_cls, name=name, value=value, source=4),)
                        if synonyms_wanted else ())
            entries.append(make(entry_cls, name=name, value=value, read_only=True,
                                config_source=4, is_default=False, is_sensitive=False,
                                synonyms=synonyms, config_type=STRING,
                                documentation=doc if docs_wanted else None))
        return entries, ErrorCode.NONE, None
    if resource.resource_type == GROUP:
        return await _describe_group(services, entry_cls, synonym_cls, call, resource), \
            ErrorCode.NONE, None
    return (entries, ErrorCode.INVALID_REQUEST,
            f"Resource type {resource.resource_type} is not supported by Korvet.")


async def _describe_group(services: Services, entry_cls: type[Any], synonym_cls: type[Any],
                          call: DescribeConfigsCall, resource: DescribedResource) -> list[Any]:
    """Every group config (whether or not the group exists, as Kafka): the group's own value,
    else the broker's setting of the same meaning, else Kafka's default."""
    configs = services.part(GroupConfigs)
    explicit, broker = await configs.explicit(resource.name), configs.broker()
    values = group_rules.effective(explicit, broker)
    entries = []
    for definition in group_rules.GROUP_CONFIG_DEFS:
        if resource.keys is not None and definition.name not in resource.keys:
            continue
        source = group_rules.source_of(definition.name, explicit, broker)
        synonyms: list[Any] = []
        if call.include_synonyms:
            if source == "group":
                synonyms.append(make(synonym_cls, name=definition.name, value=values[definition.name],
                                     source=SOURCE_CODES["group"]))
            if definition.broker_synonym in broker:
                synonyms.append(make(synonym_cls, name=definition.broker_synonym,
                                     value=broker[definition.broker_synonym],
                                     source=SOURCE_CODES["broker"]))
            synonyms.append(make(synonym_cls, name=definition.name, value=definition.default,
                                 source=SOURCE_CODES["default"]))
        entries.append(make(
            entry_cls, name=definition.name, value=values[definition.name], read_only=False,
            config_source=SOURCE_CODES[source], is_default=source == "default",
            is_sensitive=False, synonyms=tuple(synonyms),
            config_type=_CONFIG_TYPES[definition.kind],
            documentation=definition.doc if call.include_documentation else None))
    return entries


def _topic_entry(entry_cls: type[Any], synonym_cls: type[Any], definition: rules.ConfigDef,
                 config: TopicConfig, synonyms_wanted: bool, docs_wanted: bool) -> Any:
    source = config.source(definition.name)
    synonyms: tuple[Any, ...] = ()
    if synonyms_wanted and definition.read_only_after_create:
        # the topic's own value if it differs, then what a new topic gets
        own = [make(synonym_cls, name=definition.name, value=config.get(definition.name),
                    source=SOURCE_CODES["topic"])] if source == "topic" else []
        synonyms = (*own, make(synonym_cls, name=definition.name,
                               value=config.new_topic_default(definition.name),
                               source=SOURCE_CODES["default"]))
    elif synonyms_wanted:
        chain = []
        if definition.name in config.explicit:
            chain.append(make(synonym_cls, name=definition.name,
                              value=config.explicit[definition.name], source=SOURCE_CODES["topic"]))
        if definition.name in config.defaults:
            chain.append(make(synonym_cls, name=definition.name,
                              value=config.defaults[definition.name], source=SOURCE_CODES["broker"]))
        chain.append(make(synonym_cls, name=definition.name, value=definition.default,
                          source=SOURCE_CODES["default"]))
        synonyms = tuple(chain)
    return make(
        entry_cls, name=definition.name, value=config.get(definition.name),
        read_only=definition.read_only_after_create, config_source=SOURCE_CODES[source],
        is_default=source == "default", is_sensitive=definition.sensitive, synonyms=synonyms,
        config_type=config_type(definition), documentation=_doc(definition) if docs_wanted else None,
    )


async def _alter(services: Services, request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
                 call: AlterConfigsCall) -> Any:
    """Resource by resource: reads its topic, asks the plan (core/alter_configs.py), writes the
    new configs."""
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "AlterConfigsResourceResponse")
    results = []
    for resource in call.resources:
        if resource.resource_type == GROUP:
            results.append(await _alter_group(services, result_cls, call, resource))
            continue
        topic = await services.topics.get(resource.name) if resource.names_topic else None
        verdict = alter_plan.decide(resource, topic.config if topic else None,
                                    incremental=call.incremental, validate_only=call.validate_only)
        if isinstance(verdict, NewConfigs) and verdict.write:
            await services.store.update_topic_configs(verdict.topic, verdict.configs,
                                                      verdict.removed)
            services.topics.invalidate(verdict.topic)
        refusal = verdict if isinstance(verdict, Refusal) else None
        results.append(make(result_cls, error_code=refusal.code if refusal else ErrorCode.NONE,
                            error_message=refusal.message if refusal else None,
                            resource_type=resource.resource_type, resource_name=resource.name))
    return make(response_cls, throttle_time=0, responses=tuple(results))


async def _alter_group(services: Services, result_cls: type[Any], call: AlterConfigsCall,
                       resource: ConfigResource) -> Any:
    configs = services.part(GroupConfigs)
    current = await configs.explicit(resource.name) if resource.name else {}
    verdict = group_rules.decide(resource, current, configs.broker(),
                                 incremental=call.incremental, validate_only=call.validate_only)
    if isinstance(verdict, group_rules.NewGroupConfigs) and verdict.write:
        await configs.put(verdict.group, dict(verdict.configs))
    refusal = verdict if isinstance(verdict, Refusal) else None
    return make(result_cls, error_code=refusal.code if refusal else ErrorCode.NONE,
                error_message=refusal.message if refusal else None,
                resource_type=resource.resource_type, resource_name=resource.name)


async def alter_configs(services: Services, ctx: RequestContext,
                        request: AlterConfigsRequest) -> AlterConfigsResponse:
    return await _alter(services, request, decode_alter_configs(request))


async def incremental_alter_configs(
        services: Services, ctx: RequestContext,
        request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return await _alter(services, request, decode_incremental_alter_configs(request))


async def describe_client_quotas(services: Services, ctx: RequestContext,
                                 request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    """Korvet has no client quotas: every query matches nothing (``kafka-configs --describe
    --entity-type users`` asks this besides the users' SCRAM credentials)."""
    return make(response_type(type(request)), throttle_time=0, error_code=ErrorCode.NONE,
                error_message=None, entries=())


APIS = (
    Api(ApiKey.DESCRIBE_CONFIGS, range(1, 5), describe_configs,
        "topics and groups; the broker's static settings readable",
        Shape((config_resources("DescribeConfigsResult", "results"),))),
    Api(ApiKey.ALTER_CONFIGS, range(0, 3), alter_configs,
        "topics (the whole set replaced, as Kafka); the broker's settings are static",
        Shape((config_resources("AlterConfigsResourceResponse", "responses"),))),
    Api(ApiKey.INCREMENTAL_ALTER_CONFIGS, range(0, 2), incremental_alter_configs,
        "topics: SET, DELETE, APPEND, SUBTRACT; groups (share.auto.offset.reset ...): SET, "
        "DELETE; the broker's settings are static",
        Shape((config_resources("AlterConfigsResourceResponse", "responses"),))),
    Api(ApiKey.DESCRIBE_CLIENT_QUOTAS, range(0, 2), describe_client_quotas,
        "no quotas: always empty (`kafka-configs --describe --entity-type users` asks it)",
        Shape((Whole(lambda r: CLUSTER_NAME, whole_error(error_message=None, entries=None)),))),
)
