"""`korvet serve`: start Redis (embedded or given), wire the broker, listen, stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import signal
import ssl
import sys
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from korvet.config import Config
from korvet.core.security.listeners import Protocol
from korvet.security_config import RedisAuth, SecuritySettings, client_auth_of
from korvet.server.broker import Broker
from korvet.server.embedded_redis import MIN_REDIS_MAJOR, EmbeddedRedis, RedisStartError
from korvet.server.listener import KafkaListener
from korvet.server.tls import TlsError, redact_url, redis_options, server_context

log = logging.getLogger("korvet")


class StartupError(RuntimeError):
    """The broker cannot start; the message says what to do."""


async def connect_redis(url: str, auth: RedisAuth | None = None) -> aioredis.Redis:
    """A client of the Redis at ``url`` (>= 7), with the ACL user, password and TLS files of
    ``auth``; errors name the URL without its password."""
    shown = redact_url(url)
    try:
        client: aioredis.Redis = aioredis.from_url(url, decode_responses=False,
                                                  **redis_options(auth or RedisAuth(), url))
    except ValueError as exc:
        raise StartupError(f"cannot use the Redis URL {shown}: {exc}") from exc
    try:
        info = await client.info("server")
    except (RedisError, OSError) as exc:
        with contextlib.suppress(Exception):
            await client.aclose()
        raise StartupError(f"cannot reach Redis at {shown}: {exc}") from exc
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


def _listeners(config: Config, settings: SecuritySettings, broker: Broker) -> list[KafkaListener]:
    contexts: dict[str, ssl.SSLContext] = {}
    for spec in settings.listeners:
        if not spec.protocol.tls:
            continue
        mode = client_auth_of(spec, settings.tls)
        try:
            contexts[spec.name] = server_context(settings.tls, mode)
        except TlsError as exc:
            raise StartupError(str(exc)) from exc
    if "PLAIN" in settings.sasl.mechanisms and any(
            s.protocol is Protocol.SASL_PLAINTEXT for s in settings.listeners):
        log.warning("SASL/PLAIN is enabled on a SASL_PLAINTEXT listener: passwords cross the "
                    "network in clear text; use SASL_SSL")
    return [KafkaListener(broker.registry, host=spec.host, port=spec.port,
                          max_request_bytes=config.get_int("broker.max-request-bytes"),
                          name=spec.name, ssl_context=contexts.get(spec.name),
                          gate=broker)
            for spec in settings.listeners]


async def _start_listeners(listeners: list[KafkaListener], settings: SecuritySettings,
                           broker: Broker) -> dict[str, int]:
    ports: dict[str, int] = {}
    for listener, spec in zip(listeners, settings.listeners, strict=True):
        try:
            ports[spec.name] = await listener.start()
        except OSError as exc:
            raise StartupError(f"cannot listen on {spec.host}:{spec.port} ({spec.name}): "
                               f"{exc.strerror or exc}") from exc
        host = spec.advertised_host or ("127.0.0.1" if spec.host in ("0.0.0.0", "", "::")
                                        else spec.host)
        broker.endpoints[spec.name] = (host, spec.advertised_port or ports[spec.name])
    return ports


async def serve(config: Config, *, ready: asyncio.Event | None = None) -> None:
    settings = SecuritySettings.from_config(config)
    embedded: EmbeddedRedis | None = None
    url = config.get_str("redis.url")
    if not url:
        embedded = EmbeddedRedis(
            data_dir=Path(config.get_str("data.dir")),
            binary=config.get_str("redis.server-binary"),
            appendfsync=config.get_str("redis.appendfsync"),
            aof_rewrite_min_mb=config.get_int("redis.aof-rewrite-min-mb"),
        )
        try:
            url = await asyncio.to_thread(embedded.start)
        except RedisStartError as exc:
            raise StartupError(str(exc)) from exc
        log.info("embedded Redis started at %s (data in %s)", url, embedded.redis_dir)
    listeners: list[KafkaListener] = []
    broker: Broker | None = None
    try:
        client = await connect_redis(url, settings.redis if not embedded else None)
        broker = Broker(config, client, redis_url=url, security=settings)
        await broker.start()
        listeners = _listeners(config, settings, broker)
        ports = await _start_listeners(listeners, settings, broker)
        broker.bound_port = ports[settings.listeners[0].name]
        port_file = config.get_str("broker.port-file")
        if port_file:
            Path(port_file).write_text(f"{broker.bound_port}\n")
        listeners_file = config.get_str("broker.listeners-file")
        if listeners_file:
            Path(listeners_file).write_text(json.dumps(ports) + "\n")
        shown = ", ".join(
            f"{s.name}{'' if s.name == s.protocol.value else ' ' + s.protocol.value} "
            f"{s.host}:{ports[s.name]}" for s in settings.listeners)
        log.info("Korvet listening on %s (Redis %s, keyspace '%s'%s%s)", shown, redact_url(url),
                 config.get_str("redis.keyspace"), ", ACLs on" if settings.authorizer else "",
                 f", {len(settings.tenants)} tenant principal(s)" if settings.tenants else "")
        if ready is not None:
            ready.set()
        await _wait_for_stop_signal()
        log.info("stopping")
    finally:
        for listener in listeners:
            await listener.close()
        if broker is not None:
            await broker.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)
            log.info("embedded Redis stopped")


async def _wait_for_stop_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


def tune_garbage_collector() -> None:
    """Fewer cyclic collections. Every fetched record allocates Redis-reply lists, which
    reference counting frees at once; the default thresholds (700, 10, 10) ran a
    generation-2 pass every few fetches, a 30-70 ms pause of the whole broker. Objects
    created at start-up are frozen out of the collector altogether."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def run(config: Config) -> int:
    tune_garbage_collector()
    logging.basicConfig(
        level=config.get_str("log.level").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        asyncio.run(serve(config))
    except StartupError as exc:
        log.error("%s", exc)
        return 2
    return 0
