"""`korvet serve`: start Redis (embedded or given), wire the broker, listen, stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import signal
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from korvet.core.limits import Limits
from korvet.core.security.listeners import Protocol
from korvet.server import test_clock
from korvet.server.broker import Broker
from korvet.server.claim import BrokerClaim, ClaimRefused
from korvet.server.embedded_redis import MIN_REDIS_MAJOR, EmbeddedRedis, RedisStartError
from korvet.server.http import HttpServer, Route
from korvet.server.limits import ListenerLimits, raise_open_files_limit
from korvet.server.listener import KafkaListener
from korvet.server.operations import Health, Scraper, routes
from korvet.server.redis_memory import EvictionRefused
from korvet.server.redis_urls import join_seeds, split_seeds
from korvet.server.tls import TlsError, redis_options, server_context
from korvet.settings import BrokerSettings, SecuritySettings
from korvet.settings.security import RedisAuth, client_auth_of
from korvet.storage.connections import connection_class_for, use_safe_connections
from korvet.storage.redis_store import OldLayoutError

log = logging.getLogger("korvet")


class RedisLost(RuntimeError):
    """The embedded redis-server exited while the broker served: the broker stops (exit 1)
    so that whatever supervises it starts it again, Redis with it."""


class ClaimLost(RuntimeError):
    """Another broker took this broker's claim on the keyspace while it was paused or cut
    off from Redis: the broker stops (exit 1) so that only one coordinates each group."""


class StartupError(RuntimeError):
    """The broker cannot start; the message says what to do."""


def with_credentials(url: str, username: str = "", password: str = "") -> str:
    """``url`` with redis.username / redis.password in it (they override the URL's own)."""
    if not username and not password:
        return url
    url, seeds = split_seeds(url)
    return join_seeds(_with_credentials(url, username, password), seeds)


def _with_credentials(url: str, username: str, password: str) -> str:
    parts = urlsplit(url)
    user = quote(username, safe="") if username else (parts.username or "")
    secret = quote(password, safe="") if password else (parts.password or "")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:{secret}@{host}" if secret else f"{user}@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def masked(url: str) -> str:
    """The URL as it may be printed: any password replaced by ****."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:****@{netloc[-1]}", parts.path, parts.query,
                       parts.fragment))


def redis_choice(settings: BrokerSettings) -> str:
    """Which Redis the broker uses and why, as `korvet serve` prints it at start."""
    url = settings.redis.url
    if url:
        return f"Redis at {masked(url)} (from {settings.redis.url_from})"
    return ("embedded Redis (the default: no redis.url was given by --redis-url, "
            "KORVET_REDIS_URI/KORVET_REDIS_URL or korvet.redis.uri in a --config file)")


# How much redis-py's asyncio parser asks its socket for at a time (its default: 64 KiB).
# A fetch's XRANGE replies run to megabytes; with 64 KiB reads every reply takes several trips
# through the event loop. 1 MiB: librdkafka consume of 1 KiB records in the batches format,
# four alternated bench runs each, 205K -> 242K records/s and 3.45 -> 2.8 µs of broker CPU per
# record (Java's consume did not change). redis-py's async parser allocates nothing of that
# size: a read returns what the stream holds, up to this much.
REDIS_SOCKET_READ_SIZE = 1 << 20


async def connect_redis(url: str, auth: RedisAuth | None = None, *,
                        cluster: bool = False, pool_size: int = 256,
                        pool_wait_ms: int = 10_000) -> aioredis.Redis:
    """A client of the Redis at ``url`` (>= 7), with the ACL user and password of ``auth``
    put into the URL (``with_credentials``) and its TLS files (``rediss://``); errors name
    the URL without its password. With ``cluster``, a client of the Redis Cluster that
    ``url`` is one node of (redis-py's RedisCluster: it reads the slot table from that node
    and follows MOVED redirects and failovers). RedisCluster has the same command methods;
    the storage layer checks ``isinstance(client, RedisCluster)`` where a cluster differs
    (per node pipes for appends, one transaction per group, SCAN on every master).

    At most ``pool_size`` connections (per node of a cluster); with one Redis a request
    that finds them all busy waits ``pool_wait_ms`` for one (redis-py's blocking pool: its
    default pool of 100 refused the 101st at once, and a burst of 200 consumers starting
    together had connections closed). A ``max_connections`` in the URL wins."""
    auth = auth or RedisAuth()
    shown = masked(url)
    try:
        url, seeds = split_seeds(with_credentials(url, auth.username, auth.password))
    except ValueError as exc:
        raise StartupError(f"cannot use the Redis URL {shown}: {exc}") from exc
    if seeds and not cluster:
        raise StartupError(f"the Redis URL {shown} names several nodes: that is for a Redis "
                           "Cluster (--redis-cluster, KORVET_REDIS_CLUSTER=true)")
    client: aioredis.Redis
    try:
        if cluster:
            nodes = RedisCluster.from_url(
                url, decode_responses=False, socket_read_size=REDIS_SOCKET_READ_SIZE,
                startup_nodes=[ClusterNode(host, port) for host, port in seeds] or None,
                max_connections=pool_size, **redis_options(auth, url))
            use_safe_connections(nodes)
            client = cast(aioredis.Redis, nodes)
        else:
            pool = aioredis.BlockingConnectionPool.from_url(
                url, decode_responses=False, socket_read_size=REDIS_SOCKET_READ_SIZE,
                max_connections=pool_size, timeout=pool_wait_ms / 1000,
                **redis_options(auth, url))
            pool.connection_class = connection_class_for(url) or pool.connection_class
            client = aioredis.Redis.from_pool(pool)
    except ValueError as exc:
        raise StartupError(f"cannot use the Redis URL {shown}: {exc}") from exc
    try:
        info = await client.info("server")
    except (RedisError, RedisClusterException, OSError) as exc:
        with contextlib.suppress(Exception):
            await client.aclose()
        hint = (" (with --redis-cluster the URL may name several seed nodes: "
                "redis://host1:port1,host2:port2)" if cluster else "")
        raise StartupError(f"cannot reach Redis at {shown}: {exc}{hint}") from exc
    version = str(info.get("redis_version", "0"))
    head = version.split(".", 1)[0]
    major = int(head) if head.isdigit() else 0
    if major < MIN_REDIS_MAJOR:
        await client.aclose()
        raise StartupError(
            f"Redis at {shown} is version {version}; Korvet needs Redis >= {MIN_REDIS_MAJOR} "
            "(XADD with explicit ids, XINFO STREAM fields and functions it relies on)"
        )
    return client


def listener_limits(settings: BrokerSettings) -> ListenerLimits:
    broker = settings.broker
    limits = Limits(
        max_connections=broker.max_connections,
        max_connections_per_ip=broker.max_connections_per_ip,
        max_pending_bytes=broker.max_pending_bytes,
        resume_pending_bytes=broker.resume_pending_bytes,
        idle_ms=broker.connections_max_idle_ms,
    )
    admitted = raise_open_files_limit(limits.max_connections,
                                      redis_pool=settings.redis.pool_size)
    if admitted < limits.max_connections:
        limits = dataclasses.replace(limits, max_connections=admitted)
    return ListenerLimits(limits, max_request_bytes=broker.max_request_bytes)


def _listeners(settings: BrokerSettings, broker: Broker) -> list[KafkaListener]:
    """One KafkaListener per configured listener; they share one ListenerLimits, so
    max.connections and max.connections.per.ip count the broker's connections (as Kafka's
    broker-wide settings do)."""
    limits = listener_limits(settings)
    security = settings.security
    contexts: dict[str, ssl.SSLContext] = {}
    for spec in security.listeners:
        if not spec.protocol.tls:
            continue
        mode = client_auth_of(spec, security.tls)
        try:
            contexts[spec.name] = server_context(security.tls, mode)
        except TlsError as exc:
            raise StartupError(str(exc)) from exc
    if "PLAIN" in security.sasl.mechanisms and any(
            s.protocol is Protocol.SASL_PLAINTEXT for s in security.listeners):
        log.warning("SASL/PLAIN is enabled on a SASL_PLAINTEXT listener: passwords cross the "
                    "network in clear text; use SASL_SSL")
    return [KafkaListener(broker.registry, host=spec.host, port=spec.port,
                          name=spec.name, ssl_context=contexts.get(spec.name),
                          gate=broker, metrics=broker.metrics, limits=limits)
            for spec in security.listeners]


async def _start_listeners(listeners: list[KafkaListener], security: SecuritySettings,
                           broker: Broker) -> dict[str, int]:
    ports: dict[str, int] = {}
    for listener, spec in zip(listeners, security.listeners, strict=True):
        try:
            ports[spec.name] = await listener.start()
        except OSError as exc:
            raise StartupError(f"cannot listen on {spec.host}:{spec.port} ({spec.name}): "
                               f"{exc.strerror or exc}") from exc
        host = spec.advertised_host or ("127.0.0.1" if spec.host in ("0.0.0.0", "", "::")
                                        else spec.host)
        broker.endpoints[spec.name] = (host, spec.advertised_port or ports[spec.name])
    return ports


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees either no file or all of it."""
    aside = path.with_name(path.name + ".part")
    aside.write_text(text)
    aside.replace(path)


def _announce(settings: BrokerSettings, ports: dict[str, int], url: str) -> None:
    """Write the port files and log where the broker listens."""
    security = settings.security
    # The listeners file first, and each file whole (written aside, then renamed): whoever
    # waits for the port file may read the listeners file as soon as it sees it.
    listeners_file = settings.broker.listeners_file
    if listeners_file:
        _write_whole(Path(listeners_file), json.dumps(ports) + "\n")
    port_file = settings.broker.port_file
    if port_file:
        _write_whole(Path(port_file), f"{ports[security.listeners[0].name]}\n")
    shown = ", ".join(
        f"{s.name}{'' if s.name == s.protocol.value else ' ' + s.protocol.value} "
        f"{s.host}:{ports[s.name]}" for s in security.listeners)
    log.info("Korvet listening on %s (Redis %s, keyspace '%s'%s%s)", shown, masked(url),
             settings.redis.keyspace, ", ACLs on" if security.authorizer else "",
             f", {len(security.tenants)} tenant principal(s)" if security.tenants else "")


class _AcceptErrors:
    """asyncio's handler for errors it cannot raise, with one difference: a failed accept()
    for want of file descriptors (asyncio logs one per attempt, thousands a second, when
    the open-files limit is reached) is logged once per 10 s with a count and a hint."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at = -10.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != "socket.accept() out of system resource":
            loop.default_exception_handler(context)
            return
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= 10.0:
            log.error("could not accept %d connection(s) in 10 s: %s (out of file descriptors "
                      "or memory: raise the open-files limit, ulimit -n, or set "
                      "broker.max-connections lower)", self.count, context.get("exception"))
            self.logged_at, self.count = now, 0


async def serve(settings: BrokerSettings, *, ready: asyncio.Event | None = None) -> None:
    asyncio.get_running_loop().set_exception_handler(_AcceptErrors())
    security, redis = settings.security, settings.redis
    embedded: EmbeddedRedis | None = None
    url = redis.url
    print(f"korvet: using {redis_choice(settings)}", file=sys.stderr, flush=True)
    if url:
        try:
            url = with_credentials(url, redis.username, redis.password)
        except ValueError as exc:  # a seed node that is no host:port
            raise StartupError(f"cannot use the Redis URL {masked(url)}: {exc}") from exc
    else:
        embedded = EmbeddedRedis(
            data_dir=Path(settings.data.dir),
            binary=redis.server_binary,
            appendfsync=redis.appendfsync,
            aof_rewrite_min_mb=redis.aof_rewrite_min_mb,
            stream_node_max_bytes=redis.stream_node_max_bytes,
            port=redis.embedded_port,
        )
        try:
            url = await asyncio.to_thread(embedded.start)
        except RedisStartError as exc:
            raise StartupError(str(exc)) from exc
        log.info("embedded Redis started at %s (data in %s)", url, embedded.redis_dir)
    listeners: list[KafkaListener] = []
    broker: Broker | None = None
    http: HttpServer | None = None
    try:
        client = await connect_redis(url, security.redis if not embedded else None,
                                     cluster=redis.cluster, pool_size=redis.pool_size,
                                     pool_wait_ms=redis.pool_max_wait)
        broker = Broker(settings, client, redis_url=url)
        await _start_broker(broker)
        listeners = _listeners(settings, broker)
        ports = await _start_listeners(listeners, security, broker)
        broker.bound_port = ports[security.listeners[0].name]
        if settings.http.enabled:
            serving = listeners
            http = await _start_http(settings, broker, lambda: all(one.serving for one in serving))
        # Written last: once the files exist, the Kafka ports and the HTTP endpoint all answer.
        _announce(settings, ports, url)
        if ready is not None:
            ready.set()
        lost = await _wait_for_stop_signal(embedded, broker.claim)
        if lost is not None:
            raise (ClaimLost(lost) if broker.claim.lost else RedisLost(lost))
        log.info("stopping")
    finally:
        if http is not None:
            await http.close()
        for listener in listeners:
            await listener.close()
        if broker is not None:
            await broker.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)
            log.info("embedded Redis stopped")


async def _start_broker(broker: Broker) -> None:
    """Start the broker, unless Redis holds data in a key layout this version cannot read."""
    try:
        await broker.services.store.check_layout()
    except OldLayoutError as exc:
        raise StartupError(str(exc)) from exc
    try:
        await broker.start()
    except (ClaimRefused, EvictionRefused) as exc:
        raise StartupError(f"this broker does not start: {exc}") from exc


async def _start_http(settings: BrokerSettings, broker: Broker,
                      live: Callable[[], bool]) -> HttpServer:
    host = settings.http.host or settings.broker.host
    health = Health(broker.services, live)
    table = routes(health, Scraper(broker.services, broker.metrics, health), broker.metrics)
    post_table: dict[str, Route] = {}
    if broker.test_clock is not None:
        log.warning("groups.test-clock is on: the group coordinator's clock stands still until "
                    "POST %s moves it (for tests only)", test_clock.PATH)
        clock_get, post_table = test_clock.routes(broker.test_clock,
                                                  broker.coordinator.run_due_timers)
        table = {**table, **clock_get}
    server = HttpServer(table, host=host, port=settings.http.port,
                        post_routes=post_table)
    try:
        port = await server.start()
    except OSError as exc:
        raise StartupError(
            f"cannot serve HTTP (probes and /metrics) on {host}:{settings.http.port}: "
            f"{exc.strerror or exc}; set http.port (--http-port, KORVET_HTTP_PORT; 0 picks a "
            "free port) or turn the endpoint off with --no-http-enabled") from exc
    port_file = settings.http.port_file
    if port_file:
        _write_whole(Path(port_file), f"{port}\n")
    log.info("HTTP endpoint on http://%s:%d (/health/liveness, /health/readiness, /metrics)",
             host, port)
    return server


async def _wait_for_stop_signal(embedded: EmbeddedRedis | None = None,
                                claim: BrokerClaim | None = None) -> str | None:
    """Wait for SIGINT or SIGTERM; None then. With the embedded Redis, also watch its
    process: if it exits (killed, out of memory), say why, as the text returned; so too if
    the broker lost its claim on the keyspace."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _EMBEDDED_WATCH_SECONDS)
            if stop.is_set():
                return None
            if claim is not None and claim.lost is not None:
                return claim.lost
            process = embedded.process if embedded is not None else None
            if process is not None and (code := process.poll()) is not None:
                assert embedded is not None
                return (f"the embedded Redis exited (exit code {code}) while the broker served; "
                        f"the broker stops so that it is restarted with it. Its log ends:\n"
                        f"{embedded.log_tail()}")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


_EMBEDDED_WATCH_SECONDS = 0.5


def tune_garbage_collector() -> None:
    """Fewer cyclic collections. Every fetched record allocates Redis-reply lists, which
    reference counting frees at once; the default thresholds (700, 10, 10) ran a
    generation-2 pass every few fetches, a 30-70 ms pause of the whole broker. Objects
    created at start-up are frozen out of the collector altogether."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def run(settings: BrokerSettings) -> int:
    tune_garbage_collector()
    logging.basicConfig(
        level=settings.log.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        asyncio.run(serve(settings))
    except StartupError as exc:
        log.error("%s", exc)
        return 2
    except (RedisLost, ClaimLost) as exc:
        log.error("%s", exc)
        return 1
    return 0
