"""The broker: builds the services, registers every API handler, owns background tasks.

A ``Tenant`` is everything that serves one Redis keyspace: the store, topic cache,
notifier, group coordinator, the Produce and Fetch handlers and the API registry. The
``Broker`` owns the default tenant (``redis.keyspace``) and, with ``security.tenants``,
one more per mapped keyspace, started the first time one of its principals connects:
a tenant's clients see only its topics and groups, and a name another tenant uses is, to
them, a name that does not exist.

The broker is also the listeners' ``Gate``: it starts each connection's authentication
(SASL listeners begin unauthenticated; others know their principal from the transport),
asks the authentication machine before every request whether it may be served, and
routes the connection to its principal's tenant. With ``authorizer.enabled`` every handler
runs behind the check point (korvet/server/authz.py).

The broker owns one ``BrokerMetrics``: every tenant's handlers and coordinator and every
listener report to it (the HTTP endpoint's /metrics, korvet/server/operations.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from kio.schema.errors import ErrorCode

from korvet.config import Config
from korvet.core import coordinator as core
from korvet.core.fetch_session import SessionConfig
from korvet.core.security import rules, sasl
from korvet.core.security.acl import ANONYMOUS
from korvet.core.topic_declarations import exact_names
from korvet.core.topics import TopicConfigError
from korvet.protocol import api_versions
from korvet.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from korvet.protocol.registry import ApiRegistry, CloseConnection, Handler
from korvet.security_config import SecuritySettings
from korvet.server.authz import Guard
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
from korvet.server.handlers import security as security_api
from korvet.server.metrics import BrokerMetrics
from korvet.server.ownership import Membership, Ownership
from korvet.server.security import Security
from korvet.server.services import Services, topic_defaults_for
from korvet.server.test_clock import TestClock
from korvet.server.tls import peer_principal
from korvet.storage.groups import GroupStore
from korvet.storage.leases import BrokerEntry, BrokerRegistry, LeaseStore
from korvet.storage.notifier import AppendNotifier
from korvet.storage.redis_store import CreateOutcome, RedisStore
from korvet.storage.topic_cache import TopicCache

ServiceHandler = Callable[[Services, Connection, Any], Awaitable[Any]]

log = logging.getLogger("korvet.broker")


class Tenant:
    """One keyspace's broker: its services, coordinator, handlers and API registry."""

    def __init__(self, broker: Broker, keyspace: str) -> None:
        config, client = broker.config, broker.redis
        self.config = config
        self.keyspace = keyspace
        store = RedisStore(client, keyspace,
                           wait_replicas=config.get_int("redis.wait-replicas"),
                           wait_timeout_ms=config.get_int("redis.wait-timeout-ms"))
        cache = TopicCache(store, topic_defaults_for(config))
        notifier = AppendNotifier(client, store.append_channel, store.topic_channel,
                                  lambda name: cache.invalidate(name or None),
                                  waiting_key=store.waiting_key)
        self.services = Services(config=config, store=store, topics=cache, notifier=notifier,
                                 bound_port=config.get_int("broker.port"),
                                 endpoints=broker.endpoints, metrics=broker.metrics)
        event_log = config.get_str("groups.event-log")
        if event_log and keyspace != config.get_str("redis.keyspace"):
            event_log = f"{event_log}.{keyspace}"
        # TEST ONLY (groups.test-clock): the coordinator's clock moves when a test says so;
        # one clock for the broker, read by every tenant's coordinator.
        self.test_clock = broker.test_clock
        self.coordinator = GroupCoordinator(
            GroupStore(client, keyspace),
            core.Config(
                min_session_timeout_ms=config.get_int("groups.min-session-timeout-ms"),
                max_session_timeout_ms=config.get_int("groups.max-session-timeout-ms"),
                initial_rebalance_delay_ms=config.get_int("groups.initial-rebalance-delay-ms"),
                group_max_size=config.get_int("groups.max-size"),
            ),
            self.services.partition_ref,
            event_log=event_log,
            clock=self.test_clock,
            on_step=broker.metrics.coordinator_stepped,
            clean_up_every_ms=config.get_int("groups.retention-check-interval-ms"),
            offsets_retention_ms=config.get_int("groups.offsets-retention-ms"),
        )
        self.services.coordinator = self.coordinator
        self.membership: Membership | None = None
        if config.get_bool("cluster.multi-broker"):
            self._share_redis(client)
        self.services.topic_deleted_hooks.append(
            lambda name: self.coordinator.submit_internal(core.TopicDeleted(name)))
        self.services.topic_deleted_hooks.append(broker.metrics.forget_topic)
        self.produce = produce.ProduceHandler(self.services)
        self.fetch = fetch.FetchHandler(
            self.services, SessionConfig(slots=config.get_int("fetch.max-sessions")))
        self.admin = admin.AdminHandler(self.services, broker.redis_url, self.fetch.log_start_moved)
        self._guard = Guard(self.services) if broker.security.authorizer else None
        self.registry: ApiRegistry[Connection] = ApiRegistry()
        self._register_all(broker)

    def register(self, key: int, name: str, versions: range, handler: Handler[Connection]) -> None:
        """Register a handler, behind the authorization check point when there is an authorizer."""
        if self._guard is not None:
            handler = self._guard.wrap(key, handler)
        self.registry.register(key, name, versions, handler)

    def _register_all(self, broker: Broker) -> None:
        services, apis = self.services, broker.security_api

        self.register(api_versions.API_KEY, "ApiVersions", api_versions.VERSIONS,
                      broker.handle_api_versions)
        self.register(produce.API_KEY, "Produce", produce.VERSIONS, self.produce.handle)
        self.register(fetch.API_KEY, "Fetch", fetch.VERSIONS, self.fetch.handle)
        for key, name, versions, admin_handler in (
            (admin.DELETE_RECORDS, "DeleteRecords", admin.DELETE_RECORDS_VERSIONS,
             self.admin.delete_records),
            (admin.DESCRIBE_LOG_DIRS, "DescribeLogDirs", admin.DESCRIBE_LOG_DIRS_VERSIONS,
             self.admin.describe_log_dirs),
            (admin.DESCRIBE_PRODUCERS, "DescribeProducers", admin.DESCRIBE_PRODUCERS_VERSIONS,
             self.admin.describe_producers),
            (admin.DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions",
             admin.DESCRIBE_TOPIC_PARTITIONS_VERSIONS, self.admin.describe_topic_partitions),
            (admin.ELECT_LEADERS, "ElectLeaders", admin.ELECT_LEADERS_VERSIONS,
             self.admin.elect_leaders),
            (admin.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments",
             admin.LIST_PARTITION_REASSIGNMENTS_VERSIONS, self.admin.list_partition_reassignments),
            (admin.LIST_TRANSACTIONS, "ListTransactions", admin.LIST_TRANSACTIONS_VERSIONS,
             self.admin.list_transactions),
        ):
            self.register(key, name, versions, admin_handler)
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
            (configs.DESCRIBE_QUOTAS, "DescribeClientQuotas", configs.DESCRIBE_QUOTAS_VERSIONS,
             configs.describe_client_quotas),
            (cluster.DESCRIBE_CLUSTER, "DescribeCluster", cluster.DESCRIBE_CLUSTER_VERSIONS,
             cluster.describe_cluster),
            (groups.FIND_COORDINATOR, "FindCoordinator", groups.FIND_COORDINATOR_VERSIONS,
             groups.find_coordinator),
        ):
            self._register_service(key, name, versions, handler)
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
            self.register(key, name, versions, partial(group_handler, services, self.coordinator))
        for key, name, versions, api_handler in (
            (security_api.SASL_HANDSHAKE, "SaslHandshake", security_api.HANDSHAKE_VERSIONS,
             apis.sasl_handshake),
            (security_api.SASL_AUTHENTICATE, "SaslAuthenticate", security_api.AUTHENTICATE_VERSIONS,
             apis.sasl_authenticate),
            (security_api.DESCRIBE_ACLS, "DescribeAcls", security_api.ACL_VERSIONS,
             apis.describe_acls),
            (security_api.CREATE_ACLS, "CreateAcls", security_api.ACL_VERSIONS, apis.create_acls),
            (security_api.DELETE_ACLS, "DeleteAcls", security_api.ACL_VERSIONS, apis.delete_acls),
            (security_api.DESCRIBE_USERS, "DescribeUserScramCredentials",
             security_api.USERS_VERSIONS, apis.describe_users),
            (security_api.ALTER_USERS, "AlterUserScramCredentials", security_api.USERS_VERSIONS,
             apis.alter_users),
        ):
            self.register(key, name, versions, api_handler)

    def _share_redis(self, client: aioredis.Redis) -> None:
        """Several brokers on this Redis: the registry and the groups' leases (per keyspace:
        a tenant's groups are leased in its own keyspace)."""
        self.membership = Membership(
            BrokerRegistry(client, self.keyspace), self._registry_entry,
            self.config.get_int("cluster.broker-ttl-ms"))
        self.services.membership = self.membership
        leases = LeaseStore(self.coordinator.store)
        self.coordinator.leases = leases
        self.coordinator.ownership = Ownership(
            leases, str(self.services.node_id), self.config.get_int("cluster.lease-ms"),
            self.config.get_int("cluster.lease-margin-ms"), self.coordinator.adopt,
            self.coordinator.forget,
            needed=lambda group: group in self.coordinator.state.groups)

    def _registry_entry(self) -> BrokerEntry:
        """This broker's registry entry: every listener's advertised address (the first
        one's also as host and port)."""
        services = self.services
        listeners = tuple((name, host, port) for name, (host, port) in services.endpoints.items())
        host, port = ((listeners[0][1], listeners[0][2]) if listeners
                      else (services.advertised_host, services.advertised_port))
        return BrokerEntry(services.node_id, host, port, services.rack, listeners)

    def bind(self, port: int) -> None:
        """The listener is bound: the port is known, so the broker can register."""
        self.services.bound_port = port
        if self.membership is not None:
            self.membership.begin()

    def _register_service(self, key: int, name: str, versions: range, handler: ServiceHandler) -> None:
        self.register(key, name, versions, partial(handler, self.services))

    async def start(self) -> None:
        await self.services.notifier.start()
        await self.coordinator.start()
        if self.coordinator.ownership is not None:
            self.coordinator.ownership.start()
        await self._create_declared_topics()

    async def _create_declared_topics(self) -> None:
        """Topics declared by name (korvet.topics[N].name without '*') exist once the broker
        has started (in a tenant's keyspace once the tenant has started); an existing topic is
        left as it is."""
        for name in exact_names(self.config.topics):
            partitions = self.services.default_partitions(name)
            try:
                outcome, _ = await self.services.create_topic(name, partitions, {})
            except TopicConfigError as exc:
                log.error("declared topic %r is not created: %s", name, exc)
                continue
            if outcome is CreateOutcome.CREATED:
                log.info("created declared topic %r with %d partitions (keyspace %r)", name,
                         partitions, self.keyspace)
            elif outcome is CreateOutcome.COLLIDES:
                log.warning("declared topic %r collides with an existing topic in keyspace %r; "
                            "not created", name, self.keyspace)

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


class Broker:
    def __init__(self, config: Config, client: aioredis.Redis, *, redis_url: str,
                 security: SecuritySettings | None = None) -> None:
        self.config = config
        self.redis = client
        self.redis_url = redis_url
        self.metrics = BrokerMetrics()  # one for the broker: every tenant and listener reports here
        self.test_clock = TestClock() if config.get_bool("groups.test-clock") else None
        self.settings = security or SecuritySettings.from_config(config)
        self.base_keyspace = config.get_str("redis.keyspace")
        self.security = Security(self.settings, client, self.base_keyspace)
        self.security_api = security_api.SecurityHandlers(self.security, self._bind_tenant)
        # listener name -> (host, port) that Metadata advertises; filled once bound
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.default = Tenant(self, self.base_keyspace)
        self.tenants: dict[str, Tenant] = {self.base_keyspace: self.default}
        self._starting: dict[str, asyncio.Task[Tenant]] = {}
        self._listener_protocols = {spec.name: spec.protocol for spec in self.settings.listeners}

    @property
    def services(self) -> Services:
        return self.default.services

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.default.coordinator

    @property
    def registry(self) -> ApiRegistry[Connection]:
        return self.default.registry

    @property
    def bound_port(self) -> int:
        return self.services.bound_port

    @bound_port.setter
    def bound_port(self, port: int) -> None:
        for tenant in self.tenants.values():
            tenant.bind(port)

    async def start(self) -> None:
        await self.security.start()
        await self.default.start()
        self.metrics.name_apis((api.key, api.name) for api in self.registry)

    async def close(self) -> None:
        for task in self._starting.values():
            task.cancel()
        for tenant in list(self.tenants.values()):
            await tenant.close()
        await self.security.close()
        await self.redis.aclose()

    async def tenant_for(self, principal: str) -> Tenant:
        keyspace = self.security.keyspace_of(principal, self.base_keyspace)
        tenant = self.tenants.get(keyspace)
        if tenant is not None:
            return tenant
        starting = self._starting.get(keyspace)
        if starting is None:
            starting = asyncio.create_task(self._start_tenant(keyspace))
            self._starting[keyspace] = starting
        return await asyncio.shield(starting)

    async def _start_tenant(self, keyspace: str) -> Tenant:
        tenant = Tenant(self, keyspace)
        tenant.bind(self.services.bound_port)
        await tenant.start()
        self.tenants[keyspace] = tenant
        return tenant

    # -- the listeners' Gate -------------------------------------------------------------

    def open_connection(self, conn: Connection, listener: str, peercert: Any) -> None:
        conn.security = self.security
        conn.listener_name = listener
        protocol = self._listener_protocols.get(listener)
        if protocol is not None and protocol.sasl:
            conn.state.auth = sasl.sasl_session()
            conn.tenant = self.default
            return
        principal = peer_principal(peercert) if protocol is not None and protocol.tls else ANONYMOUS
        conn.state.auth = sasl.open_session(principal)
        conn.tenant = self.tenants.get(self.security.keyspace_of(principal, self.base_keyspace))

    async def admit(self, conn: Connection, api_key: int, version_supported: bool) -> None:
        session = conn.state.auth
        if api_key in (security_api.SASL_HANDSHAKE, security_api.SASL_AUTHENTICATE):
            return  # their handlers step the machine with the request's content
        if sasl.may_serve_fast(session) and conn.tenant is not None:
            return
        event: sasl.Event = (sasl.ApiVersions(version_supported) if api_key == api_versions.API_KEY
                             else sasl.ApiRequest(api_key))
        result = await self.security.step(session, event)
        conn.state.auth = result.session
        outcome = result.outcome
        if outcome.action is sasl.Action.CLOSE:
            raise CloseConnection(outcome.reason)
        if outcome.action is sasl.Action.FAIL:
            await asyncio.sleep(outcome.delay_ms / 1000)
            raise CloseConnection(outcome.reason)
        if conn.tenant is None:
            await self._bind_tenant(conn)

    async def _bind_tenant(self, conn: Connection) -> None:
        """Serve the connection from its principal's tenant (once it is authenticated)."""
        conn.tenant = await self.tenant_for(conn.principal)

    async def raw_token(self, conn: Connection, token: bytes) -> bytes:
        return await self.security_api.raw_token(conn, token)

    def registry_of(self, conn: Connection) -> ApiRegistry[Connection]:
        tenant = conn.tenant if isinstance(conn.tenant, Tenant) else self.default
        return tenant.registry

    async def handle_api_versions(self, ctx: Connection,
                                  request: ApiVersionsRequest) -> ApiVersionsResponse:
        if not api_versions.valid_client_software(request, ctx.api_version):
            return api_versions.build_response(self.registry, ctx.api_version,
                                               ErrorCode.invalid_request)
        return api_versions.build_response(self.registry, ctx.api_version)


def unlisted_apis(registry: ApiRegistry[Connection]) -> list[str]:
    """Registered APIs without an authorization rule (korvet.core.security.rules)."""
    return [api.name for api in registry if rules.rule_for(api.key) is None]
