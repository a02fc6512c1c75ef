"""DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92):
a share group's position on each partition, as `kafka-share-groups --describe`,
`--reset-offsets` and `--delete-offsets` (and Admin.listShareGroupOffsets,
alterShareGroupOffsets, deleteShareGroupOffsets) ask for it.

A share group's state on a partition is its Redis consumer group there (korvet/storage/shares.py,
korvet/core/share_offsets.py reads it as Kafka's start offset and lag). Describing reads it;
altering restarts the group at the given offsets (what it had in flight dropped, as Kafka
re-initialises the share partition); deleting removes it, so the group starts anew there per
its `share.auto.offset.reset`. Altering and deleting need the group empty (NON_EMPTY_GROUP,
as Kafka), so no consumer holds records the change would drop. Ids no share group has are
answered as Kafka answers them (docs/implementers/share-groups.md). The group's coordinator
answers (NOT_COORDINATOR elsewhere), since only it knows the members.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from korvet.core import share_offsets as rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, ResourceType
from korvet.core.share_group import ShareGroup
from korvet.core.topics import TopicInfo
from korvet.protocol.denials import Items, Shape, Whole, empty, group_id, whole_error
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.services import Services
from korvet.server.share_groups import ShareGroups, share_store
from korvet.storage.shares import ShareStore

log = logging.getLogger("korvet.share")

UNINITIALIZED = -1  # a partition the group has no state on (Kafka's answer too)


async def _lookup(services: Services, group: str) -> ShareGroup | ErrorCode | None:
    """The share group (None: no group has the id), or why it cannot be answered here: not
    its coordinator, Redis unreachable, a classic group's id (GROUP_ID_NOT_FOUND)."""
    shares = services.part(ShareGroups)
    found = await shares.describe(group)
    if found is None and shares.is_classic(group):
        return ErrorCode.GROUP_ID_NOT_FOUND
    return found


async def _describe_partition(services: Services, store: ShareStore, cls: type[Any],
                              group: str, topic: TopicInfo, index: int, listed: bool) -> Any:
    partition_cls = nested(cls, "DescribeShareGroupOffsetsResponsePartition")
    state = await store.state(topic, index, group)
    if state is None and not listed:
        return None
    epochs = await services.store.epochs(topic, index)
    epoch = epochs.current if topic.config.dense else 0
    if state is None:
        return make(partition_cls, partition_index=index, start_offset=UNINITIALIZED,
                    leader_epoch=epoch, lag=-1, error_code=ErrorCode.NONE, error_message=None)
    log_start, end = await services.store.offsets(topic, index)
    codec = topic.config.codec
    start = rules.start_offset(codec, state.last_delivered, state.lowest_pending, log_start)
    return make(partition_cls, partition_index=index, start_offset=start, leader_epoch=epoch,
                lag=rules.lag(start, end, state.pending, state.lag, dense=topic.config.dense),
                error_code=ErrorCode.NONE,
                error_message=None)


async def _describe_group(services: Services, ctx: RequestContext, cls: type[Any],
                          wanted: Any) -> Any:
    group_cls = nested(cls, "DescribeShareGroupOffsetsResponseGroup")
    topic_cls = nested(cls, "DescribeShareGroupOffsetsResponseTopic")
    partition_cls = nested(cls, "DescribeShareGroupOffsetsResponsePartition")
    group = str(wanted.group_id)
    found = await _lookup(services, group)
    if isinstance(found, ErrorCode):
        return make(group_cls, group_id=group, topics=(), error_code=found, error_message=None)
    if found is None:
        # no group of that id: Kafka answers as for a group with no state anywhere (every
        # partition named, known topic or not, uninitialized; none when all are asked for)
        return make(group_cls, group_id=group, error_code=ErrorCode.NONE, error_message=None,
                    topics=tuple(make(topic_cls, topic_name=str(t.topic_name), topic_id=None,
                                      partitions=tuple(make(
                                          partition_cls, partition_index=int(p),
                                          start_offset=UNINITIALIZED, leader_epoch=-1, lag=-1,
                                          error_code=ErrorCode.NONE, error_message=None)
                                          for p in t.partitions))
                                 for t in wanted.topics or ()))
    store = services.part(share_store)
    asked: list[tuple[str, tuple[int, ...] | None]] = (
        [(t.name, None) for t in await services.topics.all()] if wanted.topics is None
        else [(str(t.topic_name), tuple(int(p) for p in t.partitions)) for t in wanted.topics])
    topics = []
    for name, indexes in asked:
        topic = await services.topics.get(name)
        allowed = ctx.access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)
        if topic is None or not allowed:
            if indexes is None:
                continue  # all topics: those the client may not see are left out
            code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if not allowed
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            topics.append(make(topic_cls, topic_name=name, topic_id=None, partitions=tuple(
                make(partition_cls, partition_index=p, start_offset=UNINITIALIZED,
                     leader_epoch=-1, lag=-1, error_code=code, error_message=None)
                for p in indexes)))
            continue
        parts = []
        for index in (indexes if indexes is not None else range(topic.partitions)):
            if not 0 <= index < topic.partitions:
                parts.append(make(partition_cls, partition_index=index,
                                  start_offset=UNINITIALIZED, leader_epoch=-1, lag=-1,
                                  error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  error_message=None))
                continue
            described = await _describe_partition(services, store, cls, group, topic, index,
                                                  listed=indexes is not None)
            if described is not None:
                parts.append(described)
        if parts or indexes is not None:
            topics.append(make(topic_cls, topic_name=name, topic_id=uuid.UUID(topic.topic_id),
                               partitions=tuple(parts)))
    return make(group_cls, group_id=group, topics=tuple(topics), error_code=ErrorCode.NONE,
                error_message=None)


async def describe_share_group_offsets(services: Services, ctx: RequestContext,
                                       request: DescribeShareGroupOffsetsRequest) -> Any:
    cls = response_type(type(request))
    groups = []
    for wanted in request.groups:
        try:
            groups.append(await _describe_group(services, ctx, cls, wanted))
        except (RedisError, OSError) as exc:
            log.warning("describing share group %r's offsets: %s", wanted.group_id, exc)
            groups.append(make(nested(cls, "DescribeShareGroupOffsetsResponseGroup"),
                               group_id=wanted.group_id, topics=(),
                               error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               error_message=None))
    return make(cls, throttle_time=0, groups=tuple(groups))


class _Refused(Exception):
    """The whole request refused half-way (the group could not be created)."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


async def _change_empty_group(services: Services, cls: type[Any], group: str, doing: str,
                              change: Callable[[], Awaitable[list[Any]]], *,
                              absent: ErrorCode) -> Any:
    """Alter and Delete: ``change`` (the per-topic answers) runs only on the coordinator of
    an empty share group, or where no group has the id when ``absent`` is NONE (altering
    creates the group once a topic is named, as Kafka); Redis unreachable is
    COORDINATOR_NOT_AVAILABLE for the request."""
    try:
        found = await _lookup(services, group)
        error = (found if isinstance(found, ErrorCode) else absent if found is None
                 else ErrorCode.NON_EMPTY_GROUP if found.members else ErrorCode.NONE)
        responses = await change() if error is ErrorCode.NONE else []
    except _Refused as refused:
        error, responses = refused.error, []
    except (RedisError, OSError) as exc:
        log.warning("%s share group %r's offsets: %s", doing, group, exc)
        error, responses = ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    return make(cls, throttle_time=0, error_code=error, error_message=None,
                responses=tuple(responses))


async def alter_share_group_offsets(services: Services, ctx: RequestContext,
                                    request: AlterShareGroupOffsetsRequest) -> Any:
    cls = response_type(type(request))
    topic_cls = nested(cls, "AlterShareGroupOffsetsResponseTopic")
    partition_cls = nested(cls, "AlterShareGroupOffsetsResponsePartition")
    group = str(request.group_id)
    store = services.part(share_store)

    async def alter() -> list[Any]:
        # Kafka answers the topics it refuses (unknown, not authorized) before the others
        refused: list[Any] = []
        responses: list[Any] = []
        named: dict[str, list[Any]] = {}  # a topic named twice is answered once (Kafka)
        for wanted in request.topics:
            named.setdefault(str(wanted.topic_name), []).extend(wanted.partitions)
        known = {name: (await services.topics.get(name),
                        ctx.access.allowed(Operation.READ, ResourceType.TOPIC, name))
                 for name in named}
        if any(topic is not None and allowed for topic, allowed in known.values()):
            # an id no group has becomes a share group once a topic of it is named
            created = await services.part(ShareGroups).ensure(group)
            if created is not ErrorCode.NONE:
                raise _Refused(created)
        for name, partitions in named.items():
            topic, allowed = known[name]
            parts = []
            for p in partitions:
                index, offset = int(p.partition_index), int(p.start_offset)
                code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if not allowed
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if topic is None or not 0 <= index < topic.partitions
                        else ErrorCode.INVALID_REQUEST if offset < 0 else ErrorCode.NONE)
                if code is ErrorCode.NONE and topic is not None:
                    log_start, _ = await services.store.offsets(topic, index)
                    after = rules.entry_before(topic.config.codec, max(offset, log_start))
                    await store.reset(topic, index, group, after)
                parts.append(make(partition_cls, partition_index=index, error_code=code,
                                  error_message=None))
            if parts or topic is not None:  # an unknown one named with none: no answer (Kafka)
                answer = make(topic_cls, topic_name=name, topic_id=_topic_id(topic),
                              partitions=tuple(parts))
                (responses if topic is not None and allowed else refused).append(answer)
        return refused + responses

    return await _change_empty_group(services, cls, group, "altering", alter,
                                     absent=ErrorCode.NONE)


async def delete_share_group_offsets(services: Services, ctx: RequestContext,
                                     request: DeleteShareGroupOffsetsRequest) -> Any:
    cls = response_type(type(request))
    topic_cls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")
    group = str(request.group_id)
    store = services.part(share_store)

    async def delete() -> list[Any]:
        responses = []
        for wanted in request.topics:
            name = str(wanted.topic_name)
            topic = await services.topics.get(name)
            code = ErrorCode.NONE
            if not ctx.access.allowed(Operation.READ, ResourceType.TOPIC, name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                deleted = [await store.delete(topic, index, group)
                           for index in range(topic.partitions)]
                if not any(deleted):  # the group has no state there: as an unknown topic (Kafka)
                    code, topic = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            responses.append(make(topic_cls, topic_name=name, topic_id=_topic_id(topic),
                                  error_code=code, error_message=None))
        return responses

    return await _change_empty_group(services, cls, group, "deleting", delete,
                                     absent=ErrorCode.GROUP_ID_NOT_FOUND)


def _topic_id(topic: TopicInfo | None) -> uuid.UUID | None:
    return uuid.UUID(topic.topic_id) if topic is not None else None


def _describe_denied(response_cls: type[Any], item: Any, version: int, code: ErrorCode) -> Any:
    return make(nested(response_cls, "DescribeShareGroupOffsetsResponseGroup"),
                group_id=item.group_id, topics=(), error_code=code, error_message=None)


APIS = (
    Api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, range(0, 2), describe_share_group_offsets,
        "a share group's start offset and lag per partition, read off its Redis consumer "
        "group (the pending entries and the last delivered id)",
        Shape((Items("groups", "groups", _describe_denied, name_of=lambda g: str(g.group_id),
                     empty=empty(groups=())),))),
    Api(ApiKey.ALTER_SHARE_GROUP_OFFSETS, range(0, 1), alter_share_group_offsets,
        "an empty share group restarts at the given offsets (XGROUP DESTROY and CREATE at the "
        "id before each)",
        Shape((Whole(group_id, whole_error(error_message=None, responses=())),))),
    Api(ApiKey.DELETE_SHARE_GROUP_OFFSETS, range(0, 1), delete_share_group_offsets,
        "an empty share group's state on the topics' partitions removed (XGROUP DESTROY)",
        Shape((Whole(group_id, whole_error(error_message=None, responses=())),))),
)
