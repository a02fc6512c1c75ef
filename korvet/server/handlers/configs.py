"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), DescribeClientQuotas (48).

Topics (resource type 2) support every config in korvet.core.topics.CONFIG_DEFS:
those that act (retention, timestamps, max message size, sequence bits ...) and
those accepted only for compatibility (segment.*, min.insync.replicas ...),
which DescribeConfigs documents as having no effect. ``korvet.sequence.bits`` and
``korvet.storage.format`` are read-only after creation: changing them would change the
meaning of every stored offset or entry. The broker (resource type 4) can be described;
its settings are static (``korvet serve`` flags/env/YAML), so altering them is refused.
"""

from __future__ import annotations

from typing import Any

from korvet.core import admin
from korvet.core import topics as rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import CLUSTER_NAME
from korvet.core.topics import TopicConfig
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
from korvet.server.services import Services

TOPIC, BROKER = 2, 4
# DescribeConfigs config sources
SOURCE_CODES = {"topic": 1, "broker": 4, "default": 5}
# DescribeConfigs v3+ config types
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_CONFIG_TYPES = {"boolean": BOOLEAN, "string": STRING, "int": INT, "long": LONG,
                 "double": DOUBLE, "list": LIST}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


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
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DescribeConfigsResult")
    refused = admin.describe_configs_request_error(r.resource_type for r in request.resources)
    if refused is not ErrorCode.NONE:
        code = ErrorCode(int(refused))
        return make(response_cls, throttle_time=0, results=tuple(
            make(result_cls, error_code=code, error_message="Unknown resource type in the request.",
                 resource_type=r.resource_type, resource_name=r.resource_name, configs=())
            for r in request.resources))
    results = []
    for resource in request.resources:
        entries, error, message = await _describe_resource(services, response_cls, request, resource)
        results.append(make(result_cls, error_code=error, error_message=message,
                            resource_type=resource.resource_type,
                            resource_name=resource.resource_name, configs=tuple(entries)))
    return make(response_cls, throttle_time=0, results=tuple(results))


async def _describe_resource(services: Services, response_cls: type[Any], request: Any,
                             resource: Any) -> tuple[list[Any], ErrorCode, str | None]:
    entry_cls = nested(response_cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(response_cls, "DescribeConfigsSynonym")
    synonyms_wanted = bool(getattr(request, "include_synonyms", False))
    docs_wanted = bool(getattr(request, "include_documentation", False))
    keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
    entries: list[Any] = []
    if resource.resource_type == TOPIC:
        topic = await services.topics.get(resource.resource_name)
        found = admin.config_topic_error(resource.resource_name, topic is not None)
        if topic is None or found is not ErrorCode.NONE:
            message = (f"Topic '{resource.resource_name}' does not exist."
                       if found is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                       else f"Invalid topic name {resource.resource_name!r}.")
            return entries, ErrorCode(int(found)), message
        for definition in rules.CONFIG_DEFS:
            if keys is None or definition.name in keys:
                entries.append(_topic_entry(entry_cls, synonym_cls, definition, topic.config,
                                            synonyms_wanted, docs_wanted))
        return entries, ErrorCode.NONE, None
    if resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(services.node_id)):
            return entries, ErrorCode.INVALID_REQUEST, f"Unknown broker id {resource.resource_name!r}."
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
    return (entries, ErrorCode.INVALID_REQUEST,
            f"Resource type {resource.resource_type} is not supported by Korvet.")


def _topic_entry(entry_cls: type[Any], synonym_cls: type[Any], definition: rules.ConfigDef,
                 config: TopicConfig, synonyms_wanted: bool, docs_wanted: bool) -> Any:
    source = config.source(definition.name)
    synonyms: tuple[Any, ...] = ()
    if synonyms_wanted:
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


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


_FIXED_WHY = {
    rules.STORAGE_FORMAT: "every stored entry of its partitions has that format; to change it, "
                          "create a topic with the other format and copy the records",
    "": "it fixes the meaning of every stored offset",
}


def _check_read_only(current: TopicConfig, wanted: dict[str, str]) -> None:
    for definition in rules.CONFIG_DEFS:
        if not definition.read_only_after_create:
            continue
        if definition.name not in wanted:
            if definition.name in current.explicit:
                # A DELETE: the topic would read its stored entries with the built-in default.
                raise _Refused(ErrorCode.INVALID_CONFIG,
                               f"{definition.name} cannot be deleted: it is fixed when the topic "
                               f"is created ({_FIXED_WHY.get(definition.name, _FIXED_WHY[''])}); "
                               f"it is {current.get(definition.name)!r}")
            continue
        if wanted[definition.name] != current.get(definition.name):
            raise _Refused(ErrorCode.INVALID_CONFIG,
                           f"{definition.name} cannot change after the topic is created "
                           f"({_FIXED_WHY.get(definition.name, _FIXED_WHY[''])}); it is "
                           f"{current.get(definition.name)!r}")


async def _alter(services: Services,  # noqa: C901, PLR0912 -- Kafka's checks, in Kafka's order
                 request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
                 incremental: bool) -> Any:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "AlterConfigsResourceResponse")
    results = []
    for resource in request.resources:
        error, message = ErrorCode.NONE, None
        try:
            if resource.resource_type == BROKER:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Broker settings are static in Korvet: restart `korvet serve` "
                               "with new flags, KORVET_* variables or YAML.")
            if resource.resource_type != TOPIC:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               f"Resource type {resource.resource_type} is not supported.")
            topic = await services.topics.get(resource.resource_name)
            if topic is None:
                raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"Topic '{resource.resource_name}' does not exist.")
            stored = topic.config.explicit
            # A setting Korvet no longer knows (one Kafka removed) is dropped by the next change.
            current = {name: value for name, value in stored.items() if name in rules.CONFIGS}
            if incremental:
                wanted = dict(current)
                for entry in resource.configs:
                    _apply_operation(wanted, entry, topic.config)
            else:
                wanted = {}
                for entry in resource.configs:
                    if entry.value is None:
                        raise _Refused(ErrorCode.INVALID_CONFIG,
                                       f"Null value not supported for topic configs: {entry.name}")
                    wanted[entry.name] = entry.value
                for definition in rules.CONFIG_DEFS:  # a full replace keeps read-only settings
                    if definition.read_only_after_create and definition.name in current:
                        wanted.setdefault(definition.name, current[definition.name])
            try:
                validated = rules.validate_configs(wanted)
            except rules.TopicConfigError as exc:
                raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
            _check_read_only(topic.config, validated)
            try:
                rules.check_combination(TopicConfig(validated, topic.config.defaults))
            except rules.TopicConfigError as exc:
                raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
            if not request.validate_only:
                removed = [name for name in stored if name not in validated]
                await services.store.update_topic_configs(topic.name, validated, removed)
                services.topics.invalidate(topic.name)
        except _Refused as refused:
            error, message = refused.code, str(refused)
        results.append(make(result_cls, error_code=error, error_message=message,
                            resource_type=resource.resource_type,
                            resource_name=resource.resource_name))
    return make(response_cls, throttle_time=0, responses=tuple(results))


def _apply_operation(wanted: dict[str, str], entry: Any, config: TopicConfig) -> None:
    name, operation, value = entry.name, entry.config_operation, entry.value
    if name not in rules.CONFIGS:
        raise _Refused(ErrorCode.INVALID_CONFIG, f"unknown topic config {name!r}")
    if operation == SET:
        if value is None:
            raise _Refused(ErrorCode.INVALID_CONFIG, f"Null value not supported for {name}")
        wanted[name] = value
    elif operation == DELETE:
        wanted.pop(name, None)
    elif operation in (APPEND, SUBTRACT):
        if config_type(rules.CONFIGS[name]) != LIST:
            raise _Refused(ErrorCode.INVALID_CONFIG,
                           f"{name} is not a list: APPEND and SUBTRACT apply to list configs only")
        items = [v for v in wanted.get(name, config.get(name)).split(",") if v]
        for item in (value or "").split(","):
            if operation == APPEND and item and item not in items:
                items.append(item)
            if operation == SUBTRACT and item in items:
                items.remove(item)
        wanted[name] = ",".join(items)
    else:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation}.")


async def alter_configs(services: Services, ctx: RequestContext,
                        request: AlterConfigsRequest) -> AlterConfigsResponse:
    return await _alter(services, request, incremental=False)


async def incremental_alter_configs(
        services: Services, ctx: RequestContext,
        request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return await _alter(services, request, incremental=True)


async def describe_client_quotas(services: Services, ctx: RequestContext,
                                 request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    """Korvet has no client quotas: every query matches nothing (``kafka-configs --describe
    --entity-type users`` asks this besides the users' SCRAM credentials)."""
    return make(response_type(type(request)), throttle_time=0, error_code=ErrorCode.NONE,
                error_message=None, entries=())


APIS = (
    Api(ApiKey.DESCRIBE_CONFIGS, range(1, 5), describe_configs,
        "topics; the broker's static settings readable",
        Shape((config_resources("DescribeConfigsResult", "results"),))),
    Api(ApiKey.ALTER_CONFIGS, range(0, 3), alter_configs,
        "topics (the whole set replaced, as Kafka); the broker's settings are static",
        Shape((config_resources("AlterConfigsResourceResponse", "responses"),))),
    Api(ApiKey.INCREMENTAL_ALTER_CONFIGS, range(0, 2), incremental_alter_configs,
        "topics: SET, DELETE, APPEND, SUBTRACT; the broker's settings are static",
        Shape((config_resources("AlterConfigsResourceResponse", "responses"),))),
    Api(ApiKey.DESCRIBE_CLIENT_QUOTAS, range(0, 2), describe_client_quotas,
        "no quotas: always empty (`kafka-configs --describe --entity-type users` asks it)",
        Shape((Whole(lambda r: CLUSTER_NAME, whole_error(error_message=None, entries=None)),))),
)
