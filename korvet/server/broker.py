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
from typing import Any

import redis.asyncio as aioredis

from korvet.core import coordinator as core
from korvet.core.api_keys import ApiKey
from korvet.core.security import rules, sasl
from korvet.core.security.acl import ANONYMOUS
from korvet.core.topic_declarations import exact_names
from korvet.core.topics import TopicConfigError
from korvet.protocol.registry import ApiRegistry, CloseConnection
from korvet.server.api import Api, bind, declared_apis
from korvet.server.authz import Guard
from korvet.server.claim import BrokerClaim
from korvet.server.cleaner import LogCleaner
from korvet.server.connection import Connection
from korvet.server.coordinator import GroupCoordinator
from korvet.server.handlers.security import SecurityHandlers
from korvet.server.metrics import BrokerMetrics
from korvet.server.ownership import Membership, Ownership
from korvet.server.redis_memory import RedisMemoryGuard
from korvet.server.security import Security
from korvet.server.services import Services, topic_defaults_for
from korvet.server.test_clock import TestClock
from korvet.server.tls import peer_principal
from korvet.settings import BrokerSettings
from korvet.storage.claims import ClaimStore
from korvet.storage.groups import GroupStore
from korvet.storage.leases import BrokerEntry, BrokerRegistry, LeaseStore
from korvet.storage.notifier import AppendNotifier
from korvet.storage.redis_store import CreateOutcome, RedisStore
from korvet.storage.topic_cache import TopicCache

log = logging.getLogger("korvet.broker")


class Tenant:
    """One keyspace's broker: its services, coordinator, handlers and API registry."""

    def __init__(self, broker: Broker, keyspace: str) -> None:
        settings, client = broker.settings, broker.redis
        self.settings = settings
        self.keyspace = keyspace
        store = RedisStore(client, keyspace,
                           wait_replicas=settings.redis.wait_replicas,
                           wait_timeout_ms=settings.redis.wait_timeout_ms)
        cache = TopicCache(store, topic_defaults_for(settings.topics))
        notifier = AppendNotifier(client, store.append_channel, store.topic_channel,
                                  lambda name: cache.invalidate(name or None),
                                  waiting_key=store.waiting_key)
        self.services = Services(settings=settings, store=store, topics=cache, notifier=notifier,
                                 bound_port=settings.broker.port,
                                 endpoints=broker.endpoints, metrics=broker.metrics)
        event_log = settings.groups.event_log
        if event_log and keyspace != settings.redis.keyspace:
            event_log = f"{event_log}.{keyspace}"
        # TEST ONLY (groups.test-clock): the coordinator's clock moves when a test says so;
        # one clock for the broker, read by every tenant's coordinator.
        self.test_clock = broker.test_clock
        self.coordinator = GroupCoordinator(
            GroupStore(client, keyspace),
            core.Config(
                min_session_timeout_ms=settings.groups.min_session_timeout_ms,
                max_session_timeout_ms=settings.groups.max_session_timeout_ms,
                initial_rebalance_delay_ms=settings.groups.initial_rebalance_delay_ms,
                group_max_size=settings.groups.max_size,
            ),
            self.services.partition_ref,
            event_log=event_log,
            clock=self.test_clock,
            on_step=broker.metrics.coordinator_stepped,
            clean_up_every_ms=settings.groups.retention_check_interval_ms,
            offsets_retention_ms=settings.groups.offsets_retention_ms,
        )
        self.services.coordinator = self.coordinator
        self.membership: Membership | None = None
        if settings.cluster.multi_broker:
            self._share_redis(client)
        else:  # the single broker coordinates only while it holds its claim
            self.coordinator.may_write = broker.claim.believes
        self.services.topic_deleted_hooks.append(
            lambda name: self.coordinator.submit_internal(core.TopicDeleted(name)))
        self.services.topic_deleted_hooks.append(broker.metrics.forget_topic)
        self.services.redis_url = broker.redis_url
        self.services.redis_memory = broker.redis_memory
        self.services.security = broker.security
        self.services.on_authenticated = broker.bind_tenant
        self._guard = Guard(self.services) if broker.security.authorizer else None
        self.cleaner = LogCleaner(store, cache, broker.metrics, broker=str(settings.broker.id),
                                  backoff_ms=settings.cleaner.backoff_ms,
                                  chunk=settings.cleaner.chunk_entries) \
            if settings.cleaner.enable else None
        self.registry: ApiRegistry[Connection] = self.services.apis
        for api in declared_apis():
            self.register(api)

    def register(self, api: Api) -> None:
        """Serve an API a handler module declares, bound to this tenant's services, behind the
        authorization check point when there is an authorizer."""
        handler = bind(api.handle, self.services)
        if self._guard is not None:
            handler = self._guard.wrap(api.key, api.shape, handler)
        self.registry.register(api.key, api.versions, handler)

    def _share_redis(self, client: aioredis.Redis) -> None:
        """Several brokers on this Redis: the registry and the groups' leases (per keyspace:
        a tenant's groups are leased in its own keyspace)."""
        self.membership = Membership(
            BrokerRegistry(client, self.keyspace), self._registry_entry,
            self.settings.cluster.broker_ttl_ms)
        self.services.membership = self.membership
        leases = LeaseStore(self.coordinator.store)
        self.coordinator.leases = leases
        self.coordinator.ownership = Ownership(
            leases, str(self.services.node_id), self.settings.cluster.lease_ms,
            self.settings.cluster.lease_margin_ms, self.coordinator.adopt,
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

    async def start(self) -> None:
        await self.services.notifier.start()
        await self.coordinator.start()
        if self.coordinator.ownership is not None:
            self.coordinator.ownership.start()
        if self.cleaner is not None:
            self.cleaner.start()
        await self._create_declared_topics()

    async def _create_declared_topics(self) -> None:
        """Topics declared by name (korvet.topics[N].name without '*') exist once the broker
        has started (in a tenant's keyspace once the tenant has started); an existing topic is
        left as it is."""
        for name in exact_names(self.settings.topics.declarations):
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
        if self.cleaner is not None:
            await self.cleaner.close()
        await self.services.close_parts()
        await self.coordinator.close()
        if self.coordinator.ownership is not None:
            await self.coordinator.ownership.close()
        if self.membership is not None:
            await self.membership.close()
        await self.services.notifier.close()
        await self.services.store.close()


class Broker:
    def __init__(self, settings: BrokerSettings, client: aioredis.Redis, *, redis_url: str) -> None:
        self.settings = settings
        self.redis = client
        self.redis_url = redis_url
        self.metrics = BrokerMetrics()  # one for the broker: every tenant and listener reports here
        self.test_clock = TestClock() if settings.groups.test_clock else None
        self.base_keyspace = settings.redis.keyspace
        self.security = Security(settings.security, client, self.base_keyspace)
        # listener name -> (host, port) that Metadata advertises; filled once bound
        self.endpoints: dict[str, tuple[str, int]] = {}
        cluster = settings.cluster
        # One Redis, one watch on its memory: readiness, metrics, the refusal of an evicting one
        self.redis_memory = RedisMemoryGuard(
            client, self.base_keyspace, accept=settings.redis.accept_eviction,
            interval_ms=settings.redis.memory_check_interval_ms)
        self.metrics.registry.register(self.redis_memory)
        # Every broker claims its id in its keyspace, whatever its settings (server/claim.py);
        # the embedded Redis was started by this broker, so nobody else can hold a live claim.
        self.claim = BrokerClaim(
            ClaimStore(client, self.base_keyspace), settings.broker.id, self.base_keyspace,
            single=not cluster.multi_broker, ttl_ms=cluster.broker_ttl_ms,
            margin_ms=cluster.lease_margin_ms, force=not settings.redis.url,
            address=lambda: (self.services.advertised_host, self.services.advertised_port))
        self.default = Tenant(self, self.base_keyspace)
        self.tenants: dict[str, Tenant] = {self.base_keyspace: self.default}
        self._starting: dict[str, asyncio.Task[Tenant]] = {}
        self._listener_protocols = {spec.name: spec.protocol
                                    for spec in settings.security.listeners}

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
        """Check Redis' eviction policy (``EvictionRefused``), claim the keyspace
        (``ClaimRefused`` if another broker holds it), then serve."""
        await self.redis_memory.check_at_start()
        self.redis_memory.start()
        await self.claim.take()
        self.claim.start()
        await self.security.start()
        await self.default.start()
        self.metrics.name_apis(api.key for api in self.registry)

    async def close(self) -> None:
        for task in self._starting.values():
            task.cancel()
        for tenant in list(self.tenants.values()):
            await tenant.close()
        await self.claim.close()  # after the coordinators' last writes
        await self.redis_memory.close()
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
            conn.tenant = self.default.registry
            return
        principal = peer_principal(peercert) if protocol is not None and protocol.tls else ANONYMOUS
        conn.state.auth = sasl.open_session(principal)
        tenant = self.tenants.get(self.security.keyspace_of(principal, self.base_keyspace))
        conn.tenant = tenant.registry if tenant is not None else None

    async def admit(self, conn: Connection, api_key: int, version_supported: bool) -> None:
        session = conn.state.auth
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return  # their handlers step the machine with the request's content
        if sasl.may_serve_fast(session) and conn.tenant is not None:
            return
        event: sasl.Event = (sasl.ApiVersions(version_supported) if api_key == ApiKey.API_VERSIONS
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
            await self.bind_tenant(conn)

    async def bind_tenant(self, conn: Connection) -> None:
        """Serve the connection from its principal's tenant (once it is authenticated)."""
        conn.tenant = (await self.tenant_for(conn.principal)).registry

    async def raw_token(self, conn: Connection, token: bytes) -> bytes:
        return await self.default.services.part(SecurityHandlers).raw_token(conn, token)

    def registry_of(self, conn: Connection) -> ApiRegistry[Connection]:
        return conn.tenant if conn.tenant is not None else self.default.registry


def unlisted_apis(registry: ApiRegistry[Connection]) -> list[str]:
    """Registered APIs without an authorization rule (korvet.core.security.rules)."""
    return [api.name for api in registry if rules.rule_for(api.key) is None]
