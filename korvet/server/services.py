"""What every API handler of one tenant shares: settings, the Redis store, caches, the node's
identity, the coordinator, and the state of handlers that keep some (``part``).

Every handler takes the tenant's ``Services`` as its first argument (korvet/server/api.py).
A handler module that keeps state across requests (Produce's unanswered acks=0 appends,
Fetch's sessions) keeps it in a class of its own, made once per tenant by ``part`` and
closed with the tenant: no handler keeps it in module globals, and nothing has to list it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from korvet.core import topics as topic_rules
from korvet.core.topics import TopicInfo
from korvet.protocol.registry import ApiRegistry, RequestContext
from korvet.server.metrics import BrokerMetrics
from korvet.settings import BrokerSettings
from korvet.settings.typed import TopicsSection
from korvet.storage.groups import PartitionRef
from korvet.storage.notifier import AppendNotifier
from korvet.storage.redis_store import CreateOutcome, RedisStore
from korvet.storage.topic_cache import TopicCache

if TYPE_CHECKING:
    from korvet.server.connection import Connection
    from korvet.server.coordinator import GroupCoordinator
    from korvet.server.ownership import Membership
    from korvet.server.redis_memory import RedisMemoryGuard
    from korvet.server.security import Security

Part = TypeVar("Part")

log = logging.getLogger("korvet.topics")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Services:
    settings: BrokerSettings
    store: RedisStore
    topics: TopicCache
    notifier: AppendNotifier
    bound_port: int = 0
    coordinator: GroupCoordinator | None = None
    # Several brokers on one Redis (cluster.multi-broker): the live brokers
    membership: Membership | None = None
    # listener name -> the (host, port) its clients are told (shared by the tenants)
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)
    # Called after a topic is deleted (the group coordinator drops its committed offsets).
    topic_deleted_hooks: list[Callable[[str], Awaitable[None]]] = field(default_factory=list)
    # The broker's watch on Redis' memory (shared by the tenants): appends refused with OOM
    # are counted and logged there, once per interval.
    redis_memory: RedisMemoryGuard | None = None
    # The Redis the broker was started on (DescribeLogDirs names its log dir after it).
    redis_url: str = ""
    # The broker's authentication and ACLs (shared by its tenants), and what to do once a
    # connection has authenticated (serve it from its principal's tenant).
    security: Security | None = None
    on_authenticated: Callable[[Connection], Awaitable[None]] | None = None
    # The tenant's API table (ApiVersions answers from it).
    apis: ApiRegistry[Connection] = field(default_factory=ApiRegistry)
    _parts: dict[Callable[[Services], Any], Any] = field(default_factory=dict)

    def part(self, kind: Callable[[Services], Part]) -> Part:
        """The tenant's one instance of a handler's state class, made at first use."""
        found = self._parts.get(kind)
        if found is None:
            found = self._parts[kind] = kind(self)
        return cast(Part, found)

    async def close_parts(self) -> None:
        """Close the handlers' state (in the order it was made): what they still run ends."""
        for part in list(self._parts.values()):
            close = getattr(part, "close", None)
            if close is not None:
                await close()

    @property
    def groups(self) -> GroupCoordinator:
        """The tenant's group coordinator (made with the tenant, before any request)."""
        if self.coordinator is None:
            raise RuntimeError("the tenant has no group coordinator yet")
        return self.coordinator

    @property
    def node_id(self) -> int:
        return self.settings.broker.id

    @property
    def cluster_id(self) -> str:
        return self.settings.broker.cluster_id

    @property
    def advertised_host(self) -> str:
        host = self.settings.broker.advertised_host
        if host:
            return host
        bound = self.settings.broker.host
        return "127.0.0.1" if bound in ("0.0.0.0", "", "::") else bound

    @property
    def advertised_port(self) -> int:
        return self.settings.broker.advertised_port or self.bound_port

    def endpoint(self, ctx: RequestContext) -> tuple[str, int]:
        """The address advertised to a client of the listener the request came in on."""
        found = self.endpoints.get(ctx.listener_name)
        if found is not None:
            return found
        return self.advertised_host, self.advertised_port

    @property
    def rack(self) -> str | None:
        return self.settings.broker.rack or None

    def now_ms(self) -> int:
        return now_ms()

    def partition_ref(self, topic: str, partition: int) -> PartitionRef | None:
        """The stream of a topic partition, from the topic cache (no Redis round trip)."""
        info = self.topics.peek(topic)
        if info is None:
            return None
        return PartitionRef(topic, partition, self.store.stream_key(topic, partition),
                            info.config.codec_bits)

    async def on_topic_deleted(self, name: str) -> None:
        for hook in self.topic_deleted_hooks:
            await hook(name)

    def default_partitions(self, name: str) -> int:
        """Partitions of a topic created without a count: its declaration's, else the broker's."""
        declared = self.settings.topics.declared(name).partitions
        return declared if declared is not None else self.settings.topics.default_partitions

    def sequence_bits(self, name: str) -> str:
        declared = self.settings.topics.declared(name).configs.get("korvet.sequence.bits")
        return declared or str(self.settings.topics.sequence_bits)

    def storage_format(self, name: str) -> str:
        declared = self.settings.topics.declared(name).configs.get(topic_rules.STORAGE_FORMAT)
        return declared or self.settings.topics.storage_format

    def offset_scheme(self, name: str) -> str:
        declared = self.settings.topics.declared(name).configs.get(topic_rules.OFFSET_SCHEME)
        return declared or self.settings.topics.offset_scheme

    def fixed_at_creation(self, name: str) -> dict[str, str]:
        """The settings stored with every new topic, from its declaration or the broker's
        defaults: they fix what its stored entries mean, so a later change of the broker's
        default must not reach existing topics."""
        return {"korvet.sequence.bits": self.sequence_bits(name),
                topic_rules.STORAGE_FORMAT: self.storage_format(name),
                topic_rules.OFFSET_SCHEME: self.offset_scheme(name)}

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create a topic a client asked for, if auto-creation is on for it (its declaration's
        auto-create, else topics.auto-create) and the name is valid."""
        declared = self.settings.topics.declared(name).auto_create
        if not (declared if declared is not None else self.settings.topics.auto_create):
            return None
        topic_rules.validate_topic_name(name)
        try:
            outcome, _ = await self.create_topic(name, self.default_partitions(name), {})
        except topic_rules.TopicConfigError as exc:
            log.warning("topic %s is not created: %s", name, exc)
            return None
        if outcome is CreateOutcome.COLLIDES:
            return None
        return await self.topics.get(name)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                           validate_only: bool = False) -> tuple[CreateOutcome, str]:
        """Create a topic. The sequence width and the storage format are always stored with the
        topic: offsets and entries of existing topics must never change meaning when the
        broker default changes."""
        explicit = {**self.fixed_at_creation(name), **configs}
        topic_rules.check_combination(topic_rules.TopicConfig(explicit, self.topics.defaults_for(name)))
        result = await self.store.create_topic(name, partitions, explicit, self.now_ms(),
                                               validate_only=validate_only)
        self.topics.invalidate(name)
        return result


def topic_defaults_for(topics: TopicsSection) -> Callable[[str], Mapping[str, str]]:
    """Broker-level config defaults of a topic: the broker settings, then what the topic
    declarations matching its name say (korvet.topics[N], core/topic_declarations.py)."""
    base = topic_defaults(topics)
    if not topics.declarations:
        return lambda name: base

    def defaults(name: str) -> Mapping[str, str]:
        declared = topics.declared(name).configs
        return {**base, **declared} if declared else base
    return defaults


def topic_defaults(topics: TopicsSection) -> dict[str, str]:
    """Broker-level defaults for topic configs (DescribeConfigs source 'broker')."""
    defaults = {
        "retention.ms": str(topics.retention_ms),
        "message.timestamp.after.max.ms": str(topics.timestamp_after_max_ms),
        # fixed at creation: what a new topic of this broker is given (each topic keeps its
        # own, stored with it; DescribeConfigs reports a value equal to this as the default)
        "korvet.sequence.bits": str(topics.sequence_bits),
        topic_rules.STORAGE_FORMAT: topics.storage_format,
        topic_rules.OFFSET_SCHEME: topics.offset_scheme,
    }
    return {k: v for k, v in defaults.items() if v != topic_rules.CONFIGS[k].default}
