"""The authorization check point: every handler of a broker with an authorizer runs behind it.

``Guard.wrap(api_key, handler)`` applies the API's row of korvet.core.security.rules with
the connection's ``access`` before the handler runs, without the handler knowing:

- a request-wide resource (a group id, the cluster, a transactional id) that is denied
  answers the whole request with the API's error, and the handler is not called;
- per-item resources (topics, groups, config resources) that are denied are taken out of
  the request; the handler gets the rest (or is skipped if nothing is left), and the
  denied items are added to its response with the error, as Kafka answers them
  (TOPIC_AUTHORIZATION_FAILED on every partition of a denied topic, ...).

Which fields hold the items, and how a denied item is answered, is the API's ``Shape``
below: the only place that knows kio's request and response layouts for authorization.
A topic named by id is authorized by the name the id resolves to; an unknown id goes to
the handler, which answers UNKNOWN_TOPIC_ID. Without an authorizer ``wrap`` returns the
handler itself: no check, no cost.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from korvet.core.errors import ErrorCode
from korvet.core.security import rules
from korvet.core.security.access import NOT_REQUESTED, Access
from korvet.core.security.acl import CLUSTER_NAME, ResourceType
from korvet.core.security.rules import ApiRule, Need
from korvet.protocol.fetch_response import FetchAnswer
from korvet.protocol.kbuild import has_field, make, nested, response_type
from korvet.protocol.registry import CloseConnection, Deferred, Handler, RequestContext
from korvet.protocol.response_templates import ProduceAnswer
from korvet.server.services import Services

log = logging.getLogger("korvet.authz")

Respond = Callable[[type[Any], Any, int, ErrorCode], Any]  # (response class, request, version, code)
Answer = Callable[[type[Any], Any, int, ErrorCode], Any]  # (response class, request item, version, code)


@dataclass(frozen=True, slots=True)
class Whole:
    """A request-wide resource: its name in the request, and the all-denied response."""

    name_of: Callable[[Any], str | None]  # None: the check does not apply to this request
    respond: Respond


@dataclass(frozen=True, slots=True)
class Items:
    """Items of a request list, each answered in a response list."""

    request_field: str | Callable[[Any], str]
    response_field: str
    answer: Answer
    name_of: Callable[[Any], str | None] = lambda item: getattr(item, "name", None)
    id_of: Callable[[Any], uuid.UUID | None] = lambda item: None
    # the response to merge into when no item is left for the handler
    empty: Callable[[type[Any], int], Any] | None = None
    # config resources: (resource type, need applies) from an item; default: the need's type
    kind_of: Callable[[Any], ResourceType | None] | None = None

    def field(self, request: Any) -> str:
        return self.request_field if isinstance(self.request_field, str) else self.request_field(request)


Check = Whole | Items


@dataclass(frozen=True, slots=True)
class Shape:
    checks: tuple[Check, ...]  # one per Need of the API's rule, in the same order


# --- helpers for answers ----------------------------------------------------------------------

def _partitions(item: Any, field_name: str, index_name: str) -> list[int]:
    found = getattr(item, field_name, ()) or ()
    return [p if isinstance(p, int) else int(getattr(p, index_name)) for p in found]


def _topic_answer(topic_cls: str, partitions_field: str, partition_cls: str,
                  request_partitions: str, request_index: str, index_name: str,
                  name_field: str = "name", **fill: Any) -> Answer:
    """A denied topic with every requested partition answered ``code``."""

    def answer(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
        partition_type = nested(response_cls, partition_cls)
        parts = tuple(make(partition_type, **{index_name: index}, error_code=code, **fill)
                      for index in _partitions(item, request_partitions, request_index))
        values = {name_field: getattr(item, name_field, getattr(item, "name", None)),
                  "topic_id": getattr(item, "topic_id", None) or uuid.UUID(int=0),
                  partitions_field: parts}
        return make(nested(response_cls, topic_cls), **values)

    return answer


def _flat_answer(item_cls: str, key_field: str, request_key: str | None = None, **fill: Any) -> Answer:
    """A denied item that is one flat response entry (a topic result, a group result)."""

    def answer(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
        key = item if isinstance(item, str) else getattr(item, request_key or key_field)
        values = {key_field: key, "error_code": code, **fill}
        if not isinstance(item, str):
            values.setdefault("topic_id", getattr(item, "topic_id", None) or uuid.UUID(int=0))
        return make(nested(response_cls, item_cls), **values)

    return answer


def _config_answer(item_cls: str) -> Answer:
    def answer(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
        return make(nested(response_cls, item_cls), error_code=code, error_message=None,
                    resource_type=item.resource_type, resource_name=item.resource_name, configs=())
    return answer


def _empty(**values: Any) -> Callable[[type[Any], int], Any]:
    return lambda response_cls, version: make(response_cls, throttle_time=0, **values)


def _group_id(request: Any) -> str | None:
    return str(request.group_id)


def _whole_error(**values: Any) -> Respond:
    return lambda response_cls, request, version, code: make(
        response_cls, throttle_time=0, error_code=code, **values)


def _join_error(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
    return make(response_cls, throttle_time=0, error_code=code, generation_id=-1, protocol_type=None,
                protocol_name="" if version < 7 else None, leader="", skip_assignment=False,
                member_id="", members=())


def _every_partition(topic_cls: str, partition_cls: str, request_partitions: str, request_index: str,
                     index_name: str, topics_field: str = "topics", **fill: Any) -> Respond:
    """The whole request denied: every topic and partition it names answered ``code``."""
    answer = _topic_answer(topic_cls, "partitions", partition_cls, request_partitions, request_index,
                           index_name, **fill)

    def respond(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
        return make(response_cls, throttle_time=0, **{topics_field: tuple(
            answer(response_cls, item, version, code) for item in request.topics)})
    return respond


def _produce_every_partition(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
    answer = _PRODUCE_TOPIC
    return make(response_cls, throttle_time=0, responses=tuple(
        answer(response_cls, item, version, code) for item in request.topic_data))


def _per_item(item_cls: str, items_field: str, response_field: str, **fill: Any) -> Respond:
    """The whole request denied, answered on each of its items (CreateAcls, DeleteAcls, ...)."""
    def respond(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
        return make(response_cls, throttle_time=0, **{response_field: tuple(
            make(nested(response_cls, item_cls), error_code=code, error_message=None, **fill)
            for _ in getattr(request, items_field))})
    return respond


def _alter_users_error(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return make(response_cls, throttle_time=0, results=tuple(
        make(nested(response_cls, "AlterUserScramCredentialsResult"), user=user, error_code=code,
             error_message=None) for user in users))


_PRODUCE_TOPIC = _topic_answer(
    "TopicProduceResponse", "partition_responses", "PartitionProduceResponse", "partition_data",
    "index", "index", base_offset=-1, log_append_time=-1, log_start_offset=-1, record_errors=(),
    error_message=None)


def _config_kind(item: Any) -> ResourceType | None:
    if item.resource_type == rules.CONFIG_TOPIC_TYPE:
        return ResourceType.TOPIC
    if item.resource_type in rules.CONFIG_BROKER_TYPES:
        return ResourceType.CLUSTER
    return None


def _find_coordinator_groups(request: Any) -> str:
    return "coordinator_keys"


def _coordinator_key_of(request: Any) -> str | None:
    if getattr(request, "key_type", 0) != 0 or has_field(type(request), "coordinator_keys"):
        return None
    return str(request.key)


def _coordinator_answer(response_cls: type[Any], key: Any, version: int, code: ErrorCode) -> Any:
    return make(nested(response_cls, "Coordinator"), key=key, node_id=-1, host="", port=-1,
                error_code=code, error_message=None)


SHAPES: dict[int, Shape] = {
    0: Shape((
        Whole(lambda r: r.transactional_id, _produce_every_partition),
        Items("topic_data", "responses", _PRODUCE_TOPIC, id_of=lambda t: getattr(t, "topic_id", None),
              empty=_empty(responses=())))),
    1: Shape((Items(
        "topics", "responses",
        _topic_answer("FetchableTopicResponse", "partitions", "PartitionData", "partitions", "partition",
                      "partition_index", name_field="topic", high_watermark=-1, last_stable_offset=-1,
                      log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
                      records=b""),
        name_of=lambda t: getattr(t, "topic", None), id_of=lambda t: getattr(t, "topic_id", None),
        empty=_empty(error_code=ErrorCode.NONE, session_id=0, responses=())),)),
    2: Shape((Items(
        "topics", "topics",
        _topic_answer("ListOffsetsTopicResponse", "partitions", "ListOffsetsPartitionResponse",
                      "partitions", "partition_index", "partition_index", timestamp=-1, offset=-1,
                      old_style_offsets=(), leader_epoch=-1),
        empty=_empty(topics=())),)),
    8: Shape((
        Whole(_group_id, _every_partition("OffsetCommitResponseTopic", "OffsetCommitResponsePartition",
                                          "partitions", "partition_index", "partition_index")),
        Items("topics", "topics",
              _topic_answer("OffsetCommitResponseTopic", "partitions", "OffsetCommitResponsePartition",
                            "partitions", "partition_index", "partition_index"),
              empty=_empty(topics=())))),
    10: Shape((
        Items(_find_coordinator_groups, "coordinators", _coordinator_answer,
              name_of=str, empty=_empty(coordinators=())),)),
    11: Shape((Whole(_group_id, _join_error),)),
    12: Shape((Whole(_group_id, _whole_error()),)),
    13: Shape((Whole(_group_id, _whole_error(members=())),)),
    14: Shape((Whole(_group_id, _whole_error(protocol_type=None, protocol_name=None,
                                             assignment=b"")),)),
    15: Shape((Items("groups", "groups", _flat_answer(
        "DescribedGroup", "group_id", error_message=None, group_state="", protocol_type="",
        protocol_data="", members=(), authorized_operations=NOT_REQUESTED),
        name_of=str, empty=_empty(groups=())),)),
    19: Shape((Items("topics", "topics", _flat_answer(
        "CreatableTopicResult", "name", error_message=None, topic_config_error_code=0,
        num_partitions=-1, replication_factor=-1, configs=None), empty=_empty(topics=())),)),
    20: Shape((Items(
        lambda r: "topics" if has_field(type(r), "topics") else "topic_names", "responses",
        _flat_answer("DeletableTopicResult", "name", error_message=None),
        name_of=lambda t: t if isinstance(t, str) else t.name,
        id_of=lambda t: None if isinstance(t, str) else t.topic_id,
        empty=_empty(responses=())),)),
    21: Shape((Items("topics", "topics", _topic_answer(
        "DeleteRecordsTopicResult", "partitions", "DeleteRecordsPartitionResult", "partitions",
        "partition_index", "partition_index", low_watermark=-1), empty=_empty(topics=())),)),
    23: Shape((Items("topics", "topics", _topic_answer(
        "OffsetForLeaderTopicResult", "partitions", "EpochEndOffset", "partitions", "partition",
        "partition", name_field="topic", leader_epoch=-1, end_offset=-1),
        name_of=lambda t: t.topic, empty=_empty(topics=())),)),
    29: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(error_message=None, resources=())),)),
    30: Shape((Whole(lambda r: CLUSTER_NAME, _per_item("AclCreationResult", "creations",
                                                        "results")),)),
    31: Shape((Whole(lambda r: CLUSTER_NAME, _per_item("DeleteAclsFilterResult", "filters",
                                                        "filter_results", matching_acls=())),)),
    32: Shape((Items("resources", "results", _config_answer("DescribeConfigsResult"),
                     name_of=lambda r: r.resource_name, kind_of=_config_kind,
                     empty=_empty(results=())),)),
    33: Shape((Items("resources", "responses", _config_answer("AlterConfigsResourceResponse"),
                     name_of=lambda r: r.resource_name, kind_of=_config_kind,
                     empty=_empty(responses=())),)),
    35: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(results=())),)),
    37: Shape((Items("topics", "results", _flat_answer(
        "CreatePartitionsTopicResult", "name", error_message="The topic authorization is failed."),
        empty=_empty(results=())),)),
    42: Shape((Items("groups_names", "results", _flat_answer("DeletableGroupResult", "group_id"),
                     name_of=str, empty=_empty(results=())),)),
    43: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(replica_election_results=())),)),
    44: Shape((Items("resources", "responses", _config_answer("AlterConfigsResourceResponse"),
                     name_of=lambda r: r.resource_name, kind_of=_config_kind,
                     empty=_empty(responses=())),)),
    46: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(error_message=None, topics=())),)),
    47: Shape((
        Whole(_group_id, _whole_error(topics=())),
        Items("topics", "topics", _topic_answer(
            "OffsetDeleteResponseTopic", "partitions", "OffsetDeleteResponsePartition", "partitions",
            "partition_index", "partition_index"), empty=_empty(error_code=ErrorCode.NONE, topics=())))),
    48: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(error_message=None, entries=None)),)),
    50: Shape((Whole(lambda r: CLUSTER_NAME, _whole_error(error_message=None, results=())),)),
    51: Shape((Whole(lambda r: CLUSTER_NAME, _alter_users_error),)),
    61: Shape((Items("topics", "topics", _topic_answer(
        "TopicResponse", "partitions", "PartitionResponse", "partition_indexes", "partition_index",
        "partition_index", error_message=None, active_producers=()), empty=_empty(topics=())),)),
}

# FindCoordinator v0-3 names one key at the top level: a denied group answers the whole request.
_FIND_COORDINATOR_SINGLE = Whole(_coordinator_key_of, _whole_error(
    error_message=None, node_id=-1, host="", port=-1))


class Guard:
    """The check point of one tenant's handlers (topic ids resolve in its keyspace)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def wrap(self, api_key: int, handler: Handler[Any]) -> Handler[Any]:
        rule = rules.rule_for(api_key)
        if rule is None:
            return _super_users_only(api_key, handler)
        if not rule.needs:
            return handler  # the handler decides (custom) or nothing to decide (SASL, ApiVersions)
        if api_key == 9:
            return self._offset_fetch(rule, handler)
        shape = SHAPES[api_key]
        if len(shape.checks) != len(rule.needs):
            raise ValueError(f"{rule.name}: the shape has {len(shape.checks)} checks for "
                             f"{len(rule.needs)} needs")

        async def guarded(ctx: RequestContext, request: Any) -> Any:
            access = ctx.access
            if not access.enabled:
                return await handler(ctx, request)
            return await self._apply(rule, shape, access, ctx, request, handler)

        return guarded

    async def _apply(self, rule: ApiRule, shape: Shape, access: Access, ctx: RequestContext,
                     request: Any, handler: Handler[Any]) -> Any:
        response_cls = response_type(type(request))
        version = ctx.api_version
        denied: list[tuple[Items, list[tuple[Any, ErrorCode]]]] = []
        for need, shaped in zip(rule.needs, shape.checks, strict=True):
            check = shaped
            if isinstance(check, Items) and rule.name == "FindCoordinator" and not has_field(
                    type(request), "coordinator_keys"):
                check = _FIND_COORDINATOR_SINGLE
            if isinstance(check, Whole):
                name = check.name_of(request)
                if name is not None and not access.allowed(need.operation, need.resource_type, name):
                    return check.respond(response_cls, request, version, need.error)
                continue
            if rule.name == "FindCoordinator" and getattr(request, "key_type", 0) != 0:
                continue
            request, refused = await self._split(need, check, access, request)
            if refused:
                denied.append((check, refused))
        if not denied:
            return await handler(ctx, request)
        self._count_refused(rule, denied)
        remaining = any(getattr(request, c.field(request)) for c, _ in denied)
        if remaining or denied[0][0].empty is None:
            response = await handler(ctx, request)
        else:
            empty = denied[0][0].empty
            assert empty is not None
            response = empty(response_cls, version)
        if isinstance(response, Deferred):
            return Deferred(_merge_later(response.response, denied, response_cls, version),
                            response.waits_on)
        if response is None:
            return None
        return _merge(response, denied, response_cls, version)

    def _count_refused(self, rule: ApiRule, denied: list[tuple[Items, list[tuple[Any, ErrorCode]]]]
                       ) -> None:
        """Produce and Fetch partitions refused here count as the handlers' own errors do
        (korvet_broker_produce_errors / fetch_errors, docs/users/operations.md)."""
        metrics = self.services.metrics
        if rule.name == "Produce":
            count, partitions = metrics.produce_error, "partition_data"
        elif rule.name == "Fetch":
            count, partitions = metrics.fetch_error, "partitions"
        else:
            return
        for _, refused in denied:
            for item, code in refused:
                for _ in getattr(item, partitions, ()) or ():
                    count(int(code))

    async def _split(self, need: Need, check: Items, access: Access,
                     request: Any) -> tuple[Any, list[tuple[Any, ErrorCode]]]:
        field_name = check.field(request)
        items = getattr(request, field_name) or ()
        cluster_grants = need.or_cluster is not None and access.cluster_allowed(need.or_cluster)
        kept, refused = [], []
        for item in items:
            error = None if cluster_grants else await self._item_error(need, check, access, item)
            if error is None:
                kept.append(item)
            else:
                refused.append((item, error))
        if not refused:
            return request, []
        return dataclasses.replace(request, **{field_name: tuple(kept)}), refused

    async def _item_error(self, need: Need, check: Items, access: Access, item: Any) -> ErrorCode | None:
        """The error a denied item answers, None when it is allowed."""
        resource_type, error, name = need.resource_type, need.error, check.name_of(item)
        if check.kind_of is not None:
            kind = check.kind_of(item)
            if kind is None:
                return None  # a resource type the handler refuses on its own
            resource_type = kind
            if kind is ResourceType.CLUSTER:
                name, error = CLUSTER_NAME, rules.CONFIG_BROKER_ERROR
        if name is None:
            topic_id = check.id_of(item)
            if topic_id is None or topic_id.int == 0:
                return None
            found = await self.services.topics.by_id(str(topic_id))
            if found is None:
                return None  # unknown id: the handler answers UNKNOWN_TOPIC_ID
            name = found.name
        return None if access.allowed(need.operation, resource_type, name) else error

    def _offset_fetch(self, rule: ApiRule, handler: Handler[Any]) -> Handler[Any]:
        group_need, topic_need = rule.needs

        async def guarded(ctx: RequestContext, request: Any) -> Any:
            access = ctx.access
            if not access.enabled:
                return await handler(ctx, request)
            return await _offset_fetch(access, group_need, topic_need, ctx, request, handler)

        return guarded


Denied = Sequence[tuple[Items, list[tuple[Any, ErrorCode]]]]


def _merge(response: Any, denied: Denied, response_cls: type[Any], version: int) -> Any:
    if isinstance(response, FetchAnswer):  # the denied topics are added to kio's response
        response = response.to_kio(response_cls)
    for check, items in denied:
        extra = tuple(check.answer(response_cls, item, version, code) for item, code in items)
        current = tuple(getattr(response, check.response_field) or ())
        response = dataclasses.replace(response, **{check.response_field: current + extra})
    return response


async def _merge_later(pending: Awaitable[Any], denied: Denied, response_cls: type[Any],
                       version: int) -> Any:
    response = await pending
    if isinstance(response, ProduceAnswer):  # a Produce response not built as kio's yet
        response = response.to_kio()
    return None if response is None else _merge(response, denied, response_cls, version)


def _super_users_only(api_key: int, handler: Handler[Any]) -> Handler[Any]:
    """An API without a rule (korvet.core.security.rules): nobody but a super user may call it."""

    async def guarded(ctx: RequestContext, request: Any) -> Any:
        access = ctx.access
        if not access.enabled or access.principal in access.policy.super_users:
            return await handler(ctx, request)
        raise CloseConnection(f"api key {api_key} has no authorization rule; only super users may "
                              "call it")

    return guarded


async def _offset_fetch(access: Access, group_need: Need, topic_need: Need, ctx: RequestContext,
                        request: Any, handler: Handler[Any]) -> Any:
    """OffsetFetch: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on each topic
    (its partitions answered TOPIC_AUTHORIZATION_FAILED; left out of an all-topics answer)."""
    response_cls = response_type(type(request))
    grouped = has_field(type(request), "groups")
    suffix = "s" if grouped else ""
    topic_cls = nested(response_cls, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(response_cls, f"OffsetFetchResponsePartition{suffix}")

    def denied_topic(topic: Any) -> Any:
        return make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                 metadata="", error_code=topic_need.error) for p in topic.partition_indexes))

    def topic_ok(name: str) -> bool:
        return access.allowed(topic_need.operation, ResourceType.TOPIC, name)

    def filtered(topics: Any) -> tuple[Any, list[Any]]:
        if topics is None:
            return None, []
        return (tuple(t for t in topics if topic_ok(t.name)), [t for t in topics if not topic_ok(t.name)])

    if not grouped:
        if not access.allowed(group_need.operation, ResourceType.GROUP, request.group_id):
            if has_field(response_cls, "error_code"):
                return make(response_cls, throttle_time=0, error_code=group_need.error, topics=())
            return make(response_cls, throttle_time=0, topics=tuple(
                make(topic_cls, name=t.name, partitions=tuple(
                    make(partition_cls, partition_index=p, committed_offset=-1, metadata="",
                         error_code=group_need.error) for p in t.partition_indexes))
                for t in request.topics or ()))
        kept, refused = filtered(request.topics)
        response: Any = await handler(ctx, dataclasses.replace(request, topics=kept))
        topics = tuple(t for t in response.topics if topic_ok(t.name))
        return dataclasses.replace(response, topics=topics + tuple(denied_topic(t) for t in refused))
    group_cls = nested(response_cls, "OffsetFetchResponseGroup")
    allowed_groups, answers = [], {}
    for group in request.groups:
        if access.allowed(group_need.operation, ResourceType.GROUP, group.group_id):
            kept, refused = filtered(group.topics)
            allowed_groups.append(dataclasses.replace(group, topics=kept))
            answers[group.group_id] = refused
    grouped_response: Any = await handler(ctx, dataclasses.replace(request,
                                                                   groups=tuple(allowed_groups)))
    by_id = {g.group_id: g for g in grouped_response.groups}
    out = []
    for group in request.groups:
        if group.group_id not in answers:
            out.append(make(group_cls, group_id=group.group_id, topics=(),
                            error_code=group_need.error))
            continue
        answered = by_id[group.group_id]
        topics = tuple(t for t in answered.topics if topic_ok(t.name))
        out.append(dataclasses.replace(answered, topics=topics + tuple(
            denied_topic(t) for t in answers[group.group_id])))
    return dataclasses.replace(grouped_response, groups=tuple(out))

