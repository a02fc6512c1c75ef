"""The authorization check point: every handler of a broker with an authorizer runs behind it.

``Guard.wrap(key, shape, handler)`` applies the API's row of korvet.core.security.rules with
the connection's ``access`` before the handler runs, without the handler knowing:

- a request-wide resource (a group id, the cluster, a transactional id) that is denied
  answers the whole request with the API's error, and the handler is not called;
- per-item resources (topics, groups, config resources) that are denied are taken out of
  the request; the handler gets the rest (or is skipped if nothing is left), and the
  denied items are added to its response with the error, as Kafka answers them
  (TOPIC_AUTHORIZATION_FAILED on every partition of a denied topic, ...).

Which fields hold the items, and how a denied item is answered, is the API's ``Shape``
(korvet/protocol/denials.py), declared by its handler module beside the handler
(korvet/server/api.py). A topic named by id is authorized by the name the id resolves to; an
unknown id goes to the handler, which answers UNKNOWN_TOPIC_ID. Without an authorizer the
broker does not wrap at all: no check, no cost.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security import rules
from korvet.core.security.access import Access
from korvet.core.security.acl import CLUSTER_NAME, ResourceType
from korvet.core.security.rules import ApiRule, Need
from korvet.protocol.denials import Items, Shape, Whole
from korvet.protocol.fetch_response import FetchAnswer
from korvet.protocol.kbuild import response_type
from korvet.protocol.registry import CloseConnection, Deferred, Handler, RequestContext
from korvet.protocol.response_templates import ProduceAnswer
from korvet.server.services import Services

log = logging.getLogger("korvet.authz")


class Guard:
    """The check point of one tenant's handlers (topic ids resolve in its keyspace)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def wrap(self, key: ApiKey, shape: Shape | None, handler: Handler[Any]) -> Handler[Any]:
        rule = rules.rule_for(key)
        if rule is None:
            return _super_users_only(key, handler)
        if not rule.needs:
            return handler  # the handler decides (custom) or nothing to decide (SASL, ApiVersions)
        if shape is None:
            raise ValueError(f"{rule.name}: its rule has needs but its handler declares no shape")
        if shape.custom is not None:
            return _custom(rule, shape, handler)
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
        for need, check in zip(rule.needs, shape.applicable(request), strict=True):
            if check is None:
                continue  # the need does not apply to this request
            if isinstance(check, Whole):
                name = check.name_of(request)
                if name is not None and not access.allowed(need.operation, need.resource_type, name):
                    return check.respond(response_cls, request, version, need.error)
                continue
            request, refused = await self._split(need, check, access, request)
            if refused:
                denied.append((check, refused))
        if not denied:
            return await handler(ctx, request)
        self._count_refused(shape, denied)
        remaining = any(check.items(request) for check, _ in denied)
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

    def _count_refused(self, shape: Shape, denied: list[tuple[Items, list[tuple[Any, ErrorCode]]]]
                       ) -> None:
        """Produce and Fetch partitions refused here count as the handlers' own errors do
        (korvet_broker_produce_errors / fetch_errors, docs/users/operations.md)."""
        counted = shape.refused_count
        if counted is None:
            return
        for _, refused in denied:
            for item, code in refused:
                for _ in range(counted.partitions(item)):
                    counted.metric(self.services.metrics, int(code))

    async def _split(self, need: Need, check: Items, access: Access,
                     request: Any) -> tuple[Any, list[tuple[Any, ErrorCode]]]:
        items = check.items(request)
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
        return check.keeping(request, kept), refused

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
            elif kind is ResourceType.GROUP:
                error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        if name is None:
            topic_id = check.id_of(item)
            if topic_id is None or topic_id.int == 0:
                return None
            found = await self.services.topics.by_id(str(topic_id))
            if found is None:
                return None  # unknown id: the handler answers UNKNOWN_TOPIC_ID
            name = found.name
        return None if access.allowed(need.operation, resource_type, name) else error

Denied = Sequence[tuple[Items, list[tuple[Any, ErrorCode]]]]


def _merge(response: Any, denied: Denied, response_cls: type[Any], version: int) -> Any:
    if isinstance(response, FetchAnswer):  # the denied topics are added to kio's response
        response = response.to_kio(response_cls)
    for check, refused in denied:
        response = check.answered(response, response_cls, version, refused)
    return response


async def _merge_later(pending: Awaitable[Any], denied: Denied, response_cls: type[Any],
                       version: int) -> Any:
    response = await pending
    if isinstance(response, ProduceAnswer):  # a Produce response not built as kio's yet
        response = response.to_kio()
    return None if response is None else _merge(response, denied, response_cls, version)


def _custom(rule: ApiRule, shape: Shape, handler: Handler[Any]) -> Handler[Any]:
    """An API that checks its own layout (``Shape.custom``), when there is an authorizer."""
    check = shape.custom
    assert check is not None

    async def guarded(ctx: RequestContext, request: Any) -> Any:
        access = ctx.access
        if not access.enabled:
            return await handler(ctx, request)
        return await check(rule.needs, access, ctx, request, handler)

    return guarded


def _super_users_only(key: ApiKey, handler: Handler[Any]) -> Handler[Any]:
    """An API without a rule (korvet.core.security.rules): nobody but a super user may call it."""

    async def guarded(ctx: RequestContext, request: Any) -> Any:
        access = ctx.access
        if not access.enabled or access.principal in access.policy.super_users:
            return await handler(ctx, request)
        raise CloseConnection(f"{key.kafka_name} (api key {int(key)}) has no authorization rule; "
                              "only super users may call it")

    return guarded


