"""What every API handler shares: settings, the Redis store, caches, the node's identity."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from korvet.config import Config
from korvet.core import topics as topic_rules
from korvet.core.topics import TopicInfo
from korvet.protocol.registry import RequestContext
from korvet.server.metrics import BrokerMetrics
from korvet.storage.groups import PartitionRef
from korvet.storage.notifier import AppendNotifier
from korvet.storage.redis_store import CreateOutcome, RedisStore
from korvet.storage.topic_cache import TopicCache

if TYPE_CHECKING:
    from korvet.server.coordinator import GroupCoordinator
    from korvet.server.ownership import Membership


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Services:
    config: Config
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

    @property
    def node_id(self) -> int:
        return self.config.get_int("broker.id")

    @property
    def cluster_id(self) -> str:
        return self.config.get_str("broker.cluster-id")

    @property
    def advertised_host(self) -> str:
        host = self.config.get_str("broker.advertised-host")
        if host:
            return host
        bound = self.config.get_str("broker.host")
        return "127.0.0.1" if bound in ("0.0.0.0", "", "::") else bound

    @property
    def advertised_port(self) -> int:
        return self.config.get_int("broker.advertised-port") or self.bound_port

    def endpoint(self, ctx: RequestContext) -> tuple[str, int]:
        """The address advertised to a client of the listener the request came in on."""
        found = self.endpoints.get(ctx.listener_name)
        if found is not None:
            return found
        return self.advertised_host, self.advertised_port

    @property
    def rack(self) -> str | None:
        return self.config.get_str("broker.rack") or None

    def now_ms(self) -> int:
        return now_ms()

    def partition_ref(self, topic: str, partition: int) -> PartitionRef | None:
        """The stream of a topic partition, from the topic cache (no Redis round trip)."""
        info = self.topics.peek(topic)
        if info is None:
            return None
        return PartitionRef(topic, partition, self.store.stream_key(topic, partition),
                            info.config.sequence_bits)

    async def on_topic_deleted(self, name: str) -> None:
        for hook in self.topic_deleted_hooks:
            await hook(name)

    def default_partitions(self, name: str) -> int:
        """Partitions of a topic created without a count: its declaration's, else the broker's."""
        declared = self.config.declared(name).partitions
        return declared if declared is not None else self.config.get_int("topics.default-partitions")

    def sequence_bits(self, name: str) -> str:
        declared = self.config.declared(name).configs.get("korvet.sequence.bits")
        return declared or str(self.config.get_int("topics.sequence-bits"))

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create a topic a client asked for, if auto-creation is on for it (its declaration's
        auto-create, else topics.auto-create) and the name is valid."""
        declared = self.config.declared(name).auto_create
        if not (declared if declared is not None else self.config.get_bool("topics.auto-create")):
            return None
        topic_rules.validate_topic_name(name)
        outcome, _ = await self.create_topic(name, self.default_partitions(name), {})
        if outcome is CreateOutcome.COLLIDES:
            return None
        return await self.topics.get(name)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                           validate_only: bool = False) -> tuple[CreateOutcome, str]:
        """Create a topic. The sequence width is always stored with the topic: offsets of
        existing topics must never change meaning when the broker default changes."""
        explicit = dict(configs)
        explicit.setdefault("korvet.sequence.bits", self.sequence_bits(name))
        result = await self.store.create_topic(name, partitions, explicit, self.now_ms(),
                                               validate_only=validate_only)
        self.topics.invalidate(name)
        return result


def topic_defaults_for(config: Config) -> Callable[[str], Mapping[str, str]]:
    """Broker-level config defaults of a topic: the broker settings, then what the topic
    declarations matching its name say (korvet.topics[N], core/topic_declarations.py)."""
    base = topic_defaults(config)
    if not config.topics:
        return lambda name: base

    def defaults(name: str) -> Mapping[str, str]:
        declared = config.declared(name).configs
        return {**base, **declared} if declared else base
    return defaults


def topic_defaults(config: Config) -> dict[str, str]:
    """Broker-level defaults for topic configs (DescribeConfigs source 'broker')."""
    defaults = {
        "retention.ms": str(config.get_int("topics.retention-ms")),
        "message.timestamp.after.max.ms": str(config.get_int("topics.timestamp-after-max-ms")),
    }
    return {k: v for k, v in defaults.items() if v != topic_rules.CONFIGS[k].default}
