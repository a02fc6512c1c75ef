"""The broker: builds the services, registers every API handler, owns background tasks."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from kio.schema.errors import ErrorCode

from korvet.config import Config
from korvet.core import coordinator as core
from korvet.core.fetch_session import SessionConfig
from korvet.core.topic_declarations import exact_names
from korvet.protocol import api_versions
from korvet.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from korvet.protocol.registry import ApiRegistry
from korvet.server.connection import Connection
from korvet.server.coordinator import GroupCoordinator
from korvet.server.handlers import (
    admin,
    cluster,
    configs,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    topics,
)
from korvet.server.metrics import BrokerMetrics
from korvet.server.ownership import Membership, Ownership
from korvet.server.services import Services, topic_defaults_for
from korvet.server.test_clock import TestClock
from korvet.storage.groups import GroupStore
from korvet.storage.leases import BrokerEntry, BrokerRegistry, LeaseStore
from korvet.storage.notifier import AppendNotifier
from korvet.storage.redis_store import CreateOutcome, RedisStore
from korvet.storage.topic_cache import TopicCache

ServiceHandler = Callable[[Services, Connection, Any], Awaitable[Any]]

log = logging.getLogger("korvet.broker")


class Broker:
    def __init__(self, config: Config, client: aioredis.Redis, *, redis_url: str) -> None:
        self.config = config
        self.redis = client
        self.redis_url = redis_url
        self.metrics = BrokerMetrics()
        store = RedisStore(client, config.get_str("redis.keyspace"))
        cache = TopicCache(store, topic_defaults_for(config))
        notifier = AppendNotifier(client, store.append_channel, store.topic_channel,
                                  lambda name: cache.invalidate(name or None),
                                  waiting_key=store.waiting_key)
        self.services = Services(config=config, store=store, topics=cache, notifier=notifier,
                                 bound_port=config.get_int("broker.port"), metrics=self.metrics)
        # TEST ONLY (groups.test-clock): the coordinator's clock moves when a test says so.
        self.test_clock = TestClock() if config.get_bool("groups.test-clock") else None
        self.coordinator = GroupCoordinator(
            GroupStore(client, config.get_str("redis.keyspace")),
            core.Config(
                min_session_timeout_ms=config.get_int("groups.min-session-timeout-ms"),
                max_session_timeout_ms=config.get_int("groups.max-session-timeout-ms"),
                initial_rebalance_delay_ms=config.get_int("groups.initial-rebalance-delay-ms"),
                group_max_size=config.get_int("groups.max-size"),
            ),
            self.services.partition_ref,
            event_log=config.get_str("groups.event-log"),
            clock=self.test_clock,
            on_step=self.metrics.coordinator_stepped,
        )
        self.services.coordinator = self.coordinator
        self.membership: Membership | None = None
        if config.get_bool("cluster.multi-broker"):
            self._share_redis(client, config)
        self.services.topic_deleted_hooks.append(
            lambda name: self.coordinator.submit_internal(core.TopicDeleted(name)))
        self.services.topic_deleted_hooks.append(self.metrics.forget_topic)
        self.produce = produce.ProduceHandler(self.services)
        self.fetch = fetch.FetchHandler(
            self.services, SessionConfig(slots=config.get_int("fetch.max-sessions")))
        self.registry: ApiRegistry[Connection] = ApiRegistry()
        self.registry.register(api_versions.API_KEY, "ApiVersions", api_versions.VERSIONS,
                               self.handle_api_versions)
        self.registry.register(produce.API_KEY, "Produce", produce.VERSIONS, self.produce.handle)
        self.registry.register(fetch.API_KEY, "Fetch", fetch.VERSIONS, self.fetch.handle)
        self.admin = admin.AdminHandler(self.services, redis_url, self.fetch.log_start_moved)
        for key, name, versions, admin_handler in (
            (admin.DELETE_RECORDS, "DeleteRecords", admin.DELETE_RECORDS_VERSIONS,
             self.admin.delete_records),
            (admin.DESCRIBE_LOG_DIRS, "DescribeLogDirs", admin.DESCRIBE_LOG_DIRS_VERSIONS,
             self.admin.describe_log_dirs),
            (admin.DESCRIBE_PRODUCERS, "DescribeProducers", admin.DESCRIBE_PRODUCERS_VERSIONS,
             self.admin.describe_producers),
            (admin.DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions",
             admin.DESCRIBE_TOPIC_PARTITIONS_VERSIONS, self.admin.describe_topic_partitions),
        ):
            self.registry.register(key, name, versions, admin_handler)
        for key, name, versions, handler in (
            (offsets.LIST_OFFSETS, "ListOffsets", offsets.LIST_VERSIONS, offsets.list_offsets),
            (metadata.API_KEY, "Metadata", metadata.VERSIONS, metadata.handle),
            (topics.CREATE_TOPICS, "CreateTopics", topics.CREATE_VERSIONS, topics.create_topics),
            (topics.DELETE_TOPICS, "DeleteTopics", topics.DELETE_VERSIONS, topics.delete_topics),
            (cluster.INIT_PRODUCER_ID, "InitProducerId", cluster.INIT_VERSIONS,
             cluster.init_producer_id),
            (offsets.LEADER_EPOCH, "OffsetForLeaderEpoch", offsets.LEADER_EPOCH_VERSIONS,
             offsets.offset_for_leader_epoch),
            (configs.DESCRIBE, "DescribeConfigs", configs.DESCRIBE_VERSIONS,
             configs.describe_configs),
            (configs.ALTER, "AlterConfigs", configs.ALTER_VERSIONS, configs.alter_configs),
            (topics.CREATE_PARTITIONS, "CreatePartitions", topics.PARTITION_VERSIONS,
             topics.create_partitions),
            (configs.INCREMENTAL_ALTER, "IncrementalAlterConfigs", configs.INCREMENTAL_VERSIONS,
             configs.incremental_alter_configs),
            (cluster.DESCRIBE_CLUSTER, "DescribeCluster", cluster.DESCRIBE_CLUSTER_VERSIONS,
             cluster.describe_cluster),
        ):
            self.register(key, name, versions, handler)
        self.register(groups.FIND_COORDINATOR, "FindCoordinator", groups.FIND_COORDINATOR_VERSIONS,
                      groups.find_coordinator)
        for key, name, versions, group_handler in (
            (groups.OFFSET_COMMIT, "OffsetCommit", groups.OFFSET_COMMIT_VERSIONS,
             groups.offset_commit),
            (groups.OFFSET_FETCH, "OffsetFetch", groups.OFFSET_FETCH_VERSIONS, groups.offset_fetch),
            (groups.JOIN_GROUP, "JoinGroup", groups.JOIN_GROUP_VERSIONS, groups.join_group),
            (groups.HEARTBEAT, "Heartbeat", groups.HEARTBEAT_VERSIONS, groups.heartbeat),
            (groups.LEAVE_GROUP, "LeaveGroup", groups.LEAVE_GROUP_VERSIONS, groups.leave_group),
            (groups.SYNC_GROUP, "SyncGroup", groups.SYNC_GROUP_VERSIONS, groups.sync_group),
            (groups.DESCRIBE_GROUPS, "DescribeGroups", groups.DESCRIBE_GROUPS_VERSIONS,
             groups.describe_groups),
            (groups.LIST_GROUPS, "ListGroups", groups.LIST_GROUPS_VERSIONS, groups.list_groups),
            (groups.DELETE_GROUPS, "DeleteGroups", groups.DELETE_GROUPS_VERSIONS,
             groups.delete_groups),
            (groups.OFFSET_DELETE, "OffsetDelete", groups.OFFSET_DELETE_VERSIONS,
             groups.offset_delete),
        ):
            self.registry.register(key, name, versions,
                                   partial(group_handler, self.services, self.coordinator))

    def _share_redis(self, client: aioredis.Redis, config: Config) -> None:
        """Several brokers on this Redis: the registry and the groups' leases."""
        keyspace = config.get_str("redis.keyspace")
        self.membership = Membership(
            BrokerRegistry(client, keyspace),
            lambda: BrokerEntry(self.services.node_id, self.services.advertised_host,
                                self.services.advertised_port, self.services.rack),
            config.get_int("cluster.broker-ttl-ms"))
        self.services.membership = self.membership
        leases = LeaseStore(self.coordinator.store)
        self.coordinator.leases = leases
        self.coordinator.ownership = Ownership(
            leases, str(self.services.node_id), config.get_int("cluster.lease-ms"),
            config.get_int("cluster.lease-margin-ms"), self.coordinator.adopt,
            self.coordinator.forget)

    def register(self, key: int, name: str, versions: range, handler: ServiceHandler) -> None:
        self.registry.register(key, name, versions, partial(handler, self.services))

    @property
    def bound_port(self) -> int:
        return self.services.bound_port

    @bound_port.setter
    def bound_port(self, port: int) -> None:
        self.services.bound_port = port
        if self.membership is not None:
            self.membership.begin()

    async def start(self) -> None:
        await self.services.notifier.start()
        await self.coordinator.start()
        if self.coordinator.ownership is not None:
            self.coordinator.ownership.start()
        await self._create_declared_topics()
        self.metrics.name_apis((api.key, api.name) for api in self.registry)

    async def _create_declared_topics(self) -> None:
        """Topics declared by name (korvet.topics[N].name without '*') exist once the broker
        has started; an existing topic is left as it is."""
        for name in exact_names(self.config.topics):
            partitions = self.services.default_partitions(name)
            outcome, _ = await self.services.create_topic(name, partitions, {})
            if outcome is CreateOutcome.CREATED:
                log.info("created declared topic %r with %d partitions", name, partitions)
            elif outcome is CreateOutcome.COLLIDES:
                log.warning("declared topic %r collides with an existing topic; not created", name)

    async def close(self) -> None:
        await self.produce.close()
        await self.fetch.close()
        await self.coordinator.close()
        if self.coordinator.ownership is not None:
            await self.coordinator.ownership.close()
        if self.membership is not None:
            await self.membership.close()
        await self.services.notifier.close()
        await self.services.store.close()
        await self.redis.aclose()

    async def handle_api_versions(self, ctx: Connection,
                                  request: ApiVersionsRequest) -> ApiVersionsResponse:
        if not api_versions.valid_client_software(request, ctx.api_version):
            return api_versions.build_response(self.registry, ctx.api_version,
                                               ErrorCode.invalid_request)
        return api_versions.build_response(self.registry, ctx.api_version)
