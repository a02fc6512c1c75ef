"""How an API answers what the authorization check point denies: its ``Shape``.

The check point (korvet/server/authz.py) applies an API's row of korvet/core/security/rules.py
before its handler runs. The row says what is needed; the shape, declared next to the handler
(korvet/server/api.py), says where in kio's request those resources are and how Kafka answers
a denied one:

- ``Whole``: a request-wide resource (a group id, the cluster, a transactional id); denied,
  the whole request is answered with the API's error and the handler is not called;
- ``Items``: resources that are items of a request list (topics, groups, config resources);
  the denied items are taken out of the request, the handler gets the rest (or is skipped
  if nothing is left), and each denied item is added to the response with the error, as
  Kafka answers them (TOPIC_AUTHORIZATION_FAILED on every partition of a denied topic, ...).

A shape has one check per ``Need`` of the rule, in the same order. The builders below make
the answers of the common layouts; an API whose answer is not one of them writes its own.
This module, with the handler modules' shapes, is the only place that knows kio's request and
response layouts for authorization: the check point (korvet/server/authz.py) decides and asks
the shapes to take items out of a request and to answer them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from korvet.core.errors import ErrorCode
from korvet.core.security.access import Access
from korvet.core.security.acl import ResourceType
from korvet.core.security.rules import (
    CONFIG_BROKER_TYPES,
    CONFIG_GROUP_TYPE,
    CONFIG_TOPIC_TYPE,
    Need,
)
from korvet.protocol.kbuild import make, nested
from korvet.protocol.registry import RequestContext

Respond = Callable[[type[Any], Any, int, ErrorCode], Any]  # (response class, request, version, code)
Answer = Callable[[type[Any], Any, int, ErrorCode], Any]  # (response class, request item, version, code)
Handled = Callable[[RequestContext, Any], Awaitable[Any]]


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

    def items(self, request: Any) -> tuple[Any, ...]:
        """The request's items this check looks at."""
        return tuple(getattr(request, self.field(request)) or ())

    def keeping(self, request: Any, kept: Sequence[Any]) -> Any:
        """The request with only ``kept`` of its items, for the handler."""
        return dataclasses.replace(request, **{self.field(request): tuple(kept)})

    def answered(self, response: Any, response_cls: type[Any], version: int,
                 refused: Sequence[tuple[Any, ErrorCode]]) -> Any:
        """The handler's response with each refused item answered with its error."""
        extra = tuple(self.answer(response_cls, item, version, code) for item, code in refused)
        current = tuple(getattr(response, self.response_field) or ())
        return dataclasses.replace(response, **{self.response_field: current + extra})


Check = Whole | Items

# An API whose check cannot be said with Whole and Items (OffsetFetch's groups, each with its
# topics): (its rule's needs, the connection's access, the request context, the request, the
# handler) -> the response.
CustomCheck = Callable[[tuple[Need, ...], Access, RequestContext, Any, Handled], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class RefusedCount:
    """Partitions denied at the check point count as the handler's own errors do: the metric
    (the broker's metrics and the error code: ``BrokerMetrics.produce_error``) and the field of
    a request topic listing them."""

    metric: Callable[[Any, int], None]
    partitions_field: str

    def partitions(self, topic: Any) -> int:
        """How many partitions a denied request topic names."""
        return len(getattr(topic, self.partitions_field, ()) or ())


@dataclass(frozen=True, slots=True)
class Shape:
    checks: tuple[Check, ...] = ()  # one per Need of the API's rule, in the same order
    # the checks that apply to this request (a version may carry its resource elsewhere:
    # FindCoordinator v0-3 names one key at the top level); default: ``checks``
    checks_for: Callable[[Any], tuple[Check | None, ...]] | None = None
    custom: CustomCheck | None = None  # the whole check, when the API's layout needs its own
    refused_count: RefusedCount | None = None

    def applicable(self, request: Any) -> tuple[Check | None, ...]:
        return self.checks if self.checks_for is None else self.checks_for(request)


# --- builders of the common answers -------------------------------------------------------------

def _partitions(item: Any, field_name: str, index_name: str) -> list[int]:
    found = getattr(item, field_name, ()) or ()
    return [p if isinstance(p, int) else int(getattr(p, index_name)) for p in found]


def topic_answer(topic_cls: str, partitions_field: str, partition_cls: str,
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


def flat_answer(item_cls: str, key_field: str, request_key: str | None = None, **fill: Any) -> Answer:
    """A denied item that is one flat response entry (a topic result, a group result)."""

    def answer(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
        key = item if isinstance(item, str) else getattr(item, request_key or key_field)
        values = {key_field: key, "error_code": code, **fill}
        if not isinstance(item, str):
            values.setdefault("topic_id", getattr(item, "topic_id", None) or uuid.UUID(int=0))
        return make(nested(response_cls, item_cls), **values)

    return answer


def config_answer(item_cls: str) -> Answer:
    """A denied config resource (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs)."""
    def answer(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
        return make(nested(response_cls, item_cls), error_code=code, error_message=None,
                    resource_type=item.resource_type, resource_name=item.resource_name, configs=())
    return answer


def config_kind(item: Any) -> ResourceType | None:
    """What a config resource is authorized as: a topic, the cluster (the broker and its
    loggers), a group, or nothing the check point decides (a type the handler refuses on its
    own)."""
    if item.resource_type == CONFIG_TOPIC_TYPE:
        return ResourceType.TOPIC
    if item.resource_type in CONFIG_BROKER_TYPES:
        return ResourceType.CLUSTER
    if item.resource_type == CONFIG_GROUP_TYPE:
        return ResourceType.GROUP
    return None


def config_resources(answer_cls: str, response_field: str) -> Items:
    """The configs APIs' one check: each resource, a topic or the broker."""
    return Items("resources", response_field, config_answer(answer_cls),
                 name_of=lambda r: r.resource_name, kind_of=config_kind,
                 empty=empty(**{response_field: ()}))


def empty(**values: Any) -> Callable[[type[Any], int], Any]:
    """The response to merge denied items into when none is left for the handler."""
    return lambda response_cls, version: make(response_cls, throttle_time=0, **values)


def group_id(request: Any) -> str | None:
    """The request's one group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, ...)."""
    return str(request.group_id)


def whole_error(**values: Any) -> Respond:
    """The whole request answered with the error in its top-level ``error_code``."""
    return lambda response_cls, request, version, code: make(
        response_cls, throttle_time=0, error_code=code, **values)


def every_partition(topic_cls: str, partition_cls: str, request_partitions: str, request_index: str,
                    index_name: str, topics_field: str = "topics", **fill: Any) -> Respond:
    """The whole request denied: every topic and partition it names answered ``code``."""
    answer = topic_answer(topic_cls, "partitions", partition_cls, request_partitions, request_index,
                          index_name, **fill)

    def respond(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
        return make(response_cls, throttle_time=0, **{topics_field: tuple(
            answer(response_cls, item, version, code) for item in request.topics)})
    return respond


def per_item(item_cls: str, items_field: str, response_field: str, **fill: Any) -> Respond:
    """The whole request denied, answered on each of its items (CreateAcls, DeleteAcls, ...)."""
    def respond(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
        return make(response_cls, throttle_time=0, **{response_field: tuple(
            make(nested(response_cls, item_cls), error_code=code, error_message=None, **fill)
            for _ in getattr(request, items_field))})
    return respond
