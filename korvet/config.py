"""Broker settings: defaults < YAML file < ``KORVET_*`` environment < command-line flags.

Every setting is declared once in ``SETTINGS``; the YAML key, the environment
variable and the flag are derived from its dotted name, so ``broker.port`` is
``broker: {port: ...}`` in YAML, ``KORVET_BROKER_PORT`` in the environment and
``--broker-port`` (or a short alias such as ``--port``) on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from korvet.core import topics as topic_rules
from korvet.core.topic_declarations import Declared, TopicDeclaration, resolve
from korvet.server.embedded_redis import STREAM_NODE_MAX_BYTES, STREAM_NODE_MAX_BYTES_LIMIT


class ConfigError(ValueError):
    """A setting has a value the broker cannot use."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # dotted, e.g. "broker.port"
    kind: type  # int, str, bool, float or list (a string or a YAML list/mapping, kept as given)
    default: object
    help: str
    aliases: tuple[str, ...] = ()  # short command-line flags
    also: tuple[str, ...] = ()  # other dotted names (the original product's): YAML keys and variables
    unit: str = ""  # "bytes" or "ms": also accepts 1MB, 7d ... (the original's Spring notation)
    secret: bool = False  # never printed
    hidden: bool = False  # test-only: left out of --help and the configuration page

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")

    @property
    def env(self) -> str:
        return "KORVET_" + self.attr.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace(".", "-").replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """The short aliases first, then the full flag, then one flag per other name of the
        setting (Kafka's `socket.request.max.bytes` is `--socket-request-max-bytes`); each once."""
        others = ("--" + n.replace(".", "-").replace("_", "-") for n in self.also)
        return tuple(dict.fromkeys((*self.aliases, self.flag, *others)))

    @property
    def names(self) -> tuple[str, ...]:
        """The dotted name, then the original product's names for the same setting."""
        return (self.name, *self.also)

    @property
    def envs(self) -> tuple[str, ...]:
        return tuple(_env_of(n) for n in self.names)


def _env_of(dotted: str) -> str:
    return "KORVET_" + dotted.replace(".", "_").replace("-", "_").upper()


MiB = 1024 * 1024

SETTINGS: tuple[Setting, ...] = (
    Setting("broker.host", str, "127.0.0.1", "address to listen on", ("--host",)),
    Setting("broker.port", int, 9092, "Kafka port to listen on (0 picks a free port)", ("--port",)),
    Setting("broker.advertised-host", str, "",
            "host clients are told to connect to (default: broker.host)", ("--advertised-host",)),
    Setting("broker.advertised-port", int, 0,
            "port clients are told to connect to (default: the bound port)", ("--advertised-port",)),
    Setting("broker.id", int, 0, "node id of this broker in Metadata responses"),
    Setting("broker.cluster-id", str, "korvet-cluster", "cluster id in Metadata responses"),
    Setting("broker.rack", str, "", "rack id in Metadata responses (empty: none)"),
    # -- limits and backpressure (server/limits.py; Kafka's names accepted too) --------------
    Setting("broker.max-request-bytes", int, 100 * MiB,
            "largest request frame accepted; larger frames close the connection", unit="bytes",
            also=("socket.request.max.bytes",)),
    Setting("broker.max-connections", int, 2**31 - 1,
            "open client connections the broker accepts; more are closed at once",
            also=("max.connections",)),
    Setting("broker.max-connections-per-ip", int, 2**31 - 1,
            "open client connections from one address; more are closed at once",
            also=("max.connections.per.ip",)),
    Setting("broker.max-pending-bytes", int, 64 * MiB,
            "bytes of requests and responses in flight on one connection above which the "
            "broker stops reading from it (the original's max-pending-bytes)", unit="bytes",
            also=("server.max-pending-bytes",)),
    Setting("broker.resume-pending-bytes", int, 32 * MiB,
            "a connection stopped by max-pending-bytes is read again below this many bytes",
            unit="bytes", also=("server.resume-pending-bytes",)),
    Setting("broker.connections-max-idle-ms", int, 600_000,
            "close a connection with no request and nothing in flight for this long (0: never)",
            unit="ms", also=("connections.max.idle.ms",)),
    Setting("fetch.max-sessions", int, 1000,
            "incremental fetch sessions (KIP-227) the broker keeps; 0 turns sessions off",
            also=("max.incremental.fetch.session.cache.slots",)),
    Setting("broker.port-file", str, "",
            "write the bound port to this file once listening (for scripts and tests)",
            ("--port-file",)),
    Setting("redis.url", str, "",
            "use this Redis (>= 7) instead of starting the embedded one, e.g. redis://host:6379/0 "
            "(the original's redis.uri / KORVET_REDIS_URI is the same setting)",
            ("--redis-url", "--redis-uri"), also=("redis.uri",)),
    Setting("redis.username", str, "",
            "Redis ACL user name (overrides one in redis.url); needs redis.url"),
    Setting("redis.password", str, "",
            "Redis password (overrides one in redis.url); needs redis.url", secret=True),
    Setting("redis.cluster", bool, False,
            "redis.url is one node of a Redis Cluster (or a Redis Enterprise database with the OSS "
            "Cluster API): the broker discovers the others and follows failovers; needs redis.url"),
    Setting("redis.pool-size", int, 256,
            "most connections the broker opens to Redis (to each node of a Redis Cluster) for "
            "its requests; a request that finds them all busy waits up to "
            "redis.pool-max-wait for one (appends have a connection of their own)"),
    Setting("redis.pool-max-wait", int, 10_000,
            "how long a request waits for a free Redis connection when all redis.pool-size "
            "are busy, before it fails (its client retries); not on a Redis Cluster, whose "
            "client fails at once", unit="ms"),
    Setting("redis.wait-replicas", int, 0,
            "answer an acks=all produce only once this many replicas of the partition's Redis "
            "master have the batch (Redis' WAIT; batches written together share one WAIT), "
            "else NOT_ENOUGH_REPLICAS_AFTER_APPEND (retriable). 0: once the master has it "
            "(Redis replicates asynchronously: a master's crash can lose it)"),
    Setting("redis.wait-timeout-ms", int, 1000,
            "how long an acks=all produce waits for redis.wait-replicas replicas"),
    Setting("redis.keyspace", str, "korvet",
            "prefix of every Redis key the broker writes (the original's korvet.namespace)",
            ("--keyspace",), also=("namespace", "broker.keyspace")),
    Setting("redis.server-binary", str, "redis-server", "redis-server used for the embedded Redis"),
    Setting("redis.embedded-port", int, 0,
            "loopback port of the embedded Redis (0: a free one, chosen at each start)"),
    Setting("redis.appendfsync", str, "everysec",
            "embedded Redis: AOF fsync policy (always, everysec, no) or 'off' for no persistence"),
    Setting("redis.aof-rewrite-min-mb", int, 1024,
            "embedded Redis: no AOF rewrite before the AOF reaches this many MiB (Redis' "
            "auto-aof-rewrite-min-size; Redis' own default, 64, forks a rewrite every few "
            "seconds under a steady produce load, which shows in the latency tail)"),
    Setting("redis.stream-node-max-bytes", int, STREAM_NODE_MAX_BYTES,
            "embedded Redis: bytes of one node of a stream (Redis' stream-node-max-bytes, whose "
            "own default is 4096): a node holds up to 100 entries within this size; a "
            "batches topic's entries (whole record batches, 16 KiB and more) each took a node "
            "of their own at 4096, and cost Redis more CPU and memory (docs/performance.md); "
            "0: no limit but the 100 entries"),
    Setting("data.dir", str, "data", "folder for the embedded Redis' data and the broker's files",
            ("--data-dir",)),
    Setting("topics.auto-create", bool, True,
            "create a topic when a client asks for one that does not exist"),
    Setting("topics.default-partitions", int, 1, "partitions of an auto-created topic"),
    Setting("topics.sequence-bits", int, 10,
            "default offset sequence bits (1..22) for new topics: entries per ms = 2^bits"),
    Setting("topics.storage-format", str, "records",
            "storage format of new topics (their korvet.storage.format): 'records', one stream "
            "entry per record, or 'batches', one entry per produced record batch as the "
            "producer sent it; a topic keeps the format it was created with"),
    Setting("topics.retention-ms", int, 604_800_000,
            "default retention.ms of new topics (-1: keep forever)", unit="ms"),
    Setting("topics.timestamp-after-max-ms", int, 3_600_000,
            "reject records whose CreateTime is this far ahead of the broker clock "
            "(Kafka's log.message.timestamp.after.max.ms)", unit="ms"),
    Setting("groups.initial-rebalance-delay-ms", int, 3000,
            "wait this long for more members before the first rebalance of an empty group"),
    Setting("groups.min-session-timeout-ms", int, 6000, "smallest session timeout a member may ask"),
    Setting("groups.max-session-timeout-ms", int, 1_800_000,
            "largest session timeout a member may ask"),
    Setting("groups.max-size", int, 2**31 - 1,
            "members a group may have; more joins answer GROUP_MAX_SIZE_REACHED"),
    Setting("groups.retention-check-interval-ms", int, 600_000,
            "every this often, delete the empty groups that have no committed offsets, as "
            "Kafka's offsets.retention.check.interval.ms does (0: never); the same rounds "
            "expire committed offsets (groups.offsets-retention-ms)", unit="ms"),
    Setting("groups.offsets-retention-ms", int, 604_800_000,
            "committed offsets of a group that has been empty (no members) this long are "
            "deleted with the group at the next clean-up round, as Kafka's "
            "offsets.retention.minutes does (7 days; -1: keep them until the group is "
            "deleted)", unit="ms"),
    Setting("groups.event-log", str, "",
            "append every coordinator input and output to this file (NDJSON); empty: off"),
    # Test-only (korvet spec test-live): the coordinator's clock stands still and moves only
    # when POST /test/groups-clock on the HTTP endpoint says so. Never set in production.
    Setting("groups.test-clock", bool, False,
            "TEST ONLY: the group coordinator's clock stands still until POST "
            "/test/groups-clock?advance_ms=N moves it (korvet spec test-live)", hidden=True),
    # --- several brokers on one Redis (korvet/server/ownership.py) ------------------------------
    Setting("cluster.multi-broker", bool, False,
            "several brokers share this Redis: register in it, list the live brokers in "
            "Metadata, and coordinate a group only while holding its lease in Redis",
            ("--multi-broker",)),
    Setting("cluster.broker-ttl-ms", int, 6000,
            "a broker not heard from for this long leaves Metadata (heartbeat every third)",
            unit="ms"),
    Setting("cluster.lease-ms", int, 10000,
            "a group's coordinator lease: another broker takes the group this long after its "
            "owner stopped renewing (renewed every third)", unit="ms"),
    Setting("cluster.lease-margin-ms", int, 1000,
            "the owner stops acting this long before its lease ends (covers clock drift)",
            unit="ms"),
    Setting("log.level", str, "INFO", "log level (DEBUG, INFO, WARNING, ERROR)",
            ("--log-level",)),
    # --- operations (issue 15): the HTTP endpoint for probes and metrics ---------------------
    Setting("http.enabled", bool, True,
            "serve health probes (/actuator/health, /health/liveness, /health/readiness) and "
            "Prometheus metrics (/metrics, /actuator/prometheus) over HTTP"),
    Setting("http.host", str, "", "address of the HTTP endpoint (default: broker.host)"),
    Setting("http.port", int, 8080, "port of the HTTP endpoint (0 picks a free port)",
            ("--http-port",)),
    Setting("http.port-file", str, "",
            "write the HTTP endpoint's bound port to this file once listening"),
    Setting("config.strict", bool, False,
            "refuse to start on an unknown KORVET_* variable or YAML key (default: a warning)",
            ("--strict-config",)),
    # the security settings follow (SECURITY_SETTINGS)
)

# --- security (docs/users/security.md) ------------------------------------------------------
# Listeners, TLS, SASL, ACLs, tenants and the Redis connection's TLS files (its user and
# password are redis.username / redis.password above). The names
# follow the original product's (korvet.broker.tls, cert-file, key-file, client-auth-required,
# trust-cert-file, sasl.enabled, sasl.mechanisms: their KORVET_BROKER_* variables are these
# settings' variables) and Kafka's (listeners, advertised.listeners, super.users, ...: in
# ``also``, so each is a YAML key, a KORVET_ variable and a flag too). ``list`` settings
# take a comma-separated string or, in YAML, a list (or a mapping, for security.tenants).
SECURITY_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.listeners", list, "",
            "listeners as NAME://host:port, comma-separated (Kafka's `listeners`; a NAME that is "
            "not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL takes its protocol from "
            "broker.listener-security-protocol-map); empty: one listener on broker.host:"
            "broker.port, PLAINTEXT unless broker.tls / broker.sasl.enabled say otherwise",
            ("--listeners",), also=("listeners",)),
    Setting("broker.advertised-listeners", str, "",
            "NAME://host:port per listener: the address Metadata gives that listener's clients "
            "(Kafka's `advertised.listeners`; default: the listener's own address)",
            also=("advertised.listeners",)),
    Setting("broker.listener-security-protocol-map", str, "",
            "NAME:PROTOCOL pairs, e.g. INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL "
            "(Kafka's `listener.security.protocol.map`)",
            also=("listener.security.protocol.map",)),
    Setting("broker.listeners-file", str, "",
            "write {listener name: bound port} as JSON to this file once listening (scripts, tests)"),
    Setting("broker.tls", bool, False,
            "the default listener (no broker.listeners) speaks TLS: SSL, or SASL_SSL with "
            "broker.sasl.enabled"),
    Setting("broker.cert-file", str, "", "PEM certificate chain of the broker (TLS listeners)"),
    Setting("broker.key-file", str, "", "PEM private key of broker.cert-file"),
    Setting("broker.key-password", str, "", "password of broker.key-file, if it is encrypted",
            secret=True, also=("ssl.key.password",)),
    Setting("broker.trust-cert-file", str, "",
            "PEM CA certificates that sign client certificates (mTLS on TLS listeners)"),
    Setting("broker.client-auth-required", bool, False,
            "TLS listeners require a client certificate signed by broker.trust-cert-file "
            "(Kafka's ssl.client.auth=required); an SSL listener's principal is then the "
            "certificate's subject, User:CN=...,O=..."),
    Setting("broker.listener-client-auth", str, "",
            "client authentication per TLS listener, e.g. MTLS:required,EXTERNAL:none (Kafka's "
            "listener.name.<name>.ssl.client.auth; default: broker.client-auth)"),
    Setting("broker.client-auth", str, "",
            "none, requested or required (Kafka's ssl.client.auth; required is also "
            "broker.client-auth-required=true)",
            also=("ssl.client.auth",)),
    Setting("broker.sasl.enabled", bool, False,
            "the default listener (no broker.listeners) requires SASL: SASL_PLAINTEXT, or "
            "SASL_SSL with broker.tls"),
    Setting("broker.sasl.mechanisms", list, "SCRAM-SHA-256,SCRAM-SHA-512",
            "SASL mechanisms SASL listeners accept: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
            "(Kafka's sasl.enabled.mechanisms); PLAIN checks the password against the user's "
            "SCRAM credential",
            also=("sasl.enabled.mechanisms",)),
    Setting("broker.connections-max-reauth-ms", int, 0,
            "a SASL session lasts this long; the client re-authenticates on its connection "
            "before it ends, or is disconnected (KIP-368; 0: sessions never end)",
            unit="ms", also=("connections.max.reauth.ms",)),
    Setting("broker.failed-authentication-delay-ms", int, 100,
            "answer a failed authentication this much later, then close "
            "(Kafka's connections.failed.authentication.delay.ms)",
            unit="ms", also=("connections.failed.authentication.delay.ms",)),
    Setting("authorizer.enabled", bool, False,
            "enforce ACLs (Kafka's StandardAuthorizer): a principal may do only what an ACL "
            "allows; manage them with kafka-acls (CreateAcls/DescribeAcls/DeleteAcls)"),
    Setting("authorizer.super-users", list, "",
            "principals allowed everything, ';'-separated as Kafka's super.users "
            "(e.g. User:admin;User:CN=ops,O=acme)",
            also=("super.users",)),
    Setting("authorizer.allow-everyone-if-no-acl-found", bool, False,
            "with the authorizer on, allow a resource no ACL names "
            "(Kafka's allow.everyone.if.no.acl.found)",
            also=("allow.everyone.if.no.acl.found",)),
    Setting("security.tenants", list, "",
            "principal=keyspace pairs: each principal's topics and groups live in its own Redis "
            "keyspace, invisible to others (e.g. User:alice=acme,User:bob=globex; in YAML a "
            "mapping, needed for certificate principals); other principals use redis.keyspace"),
    Setting("redis.tls-ca-file", str, "",
            "PEM CA certificates that sign the Redis server's certificate (rediss:// URLs)"),
    Setting("redis.tls-cert-file", str, "", "PEM client certificate for Redis (rediss://, mTLS)"),
    Setting("redis.tls-key-file", str, "", "PEM private key of redis.tls-cert-file"),
)

SETTINGS = (*SETTINGS, *SECURITY_SETTINGS)
# --- end of security settings ---------------------------------------------------------------

_BY_NAME = {s.name: s for s in SETTINGS}
_BY_ANY_NAME = {n: s for s in SETTINGS for n in s.names}
_BY_ENV = {e: s for s in SETTINGS for e in s.envs}

# --- compatibility with the original product's configuration (issue 15) ------------------
#
# The original (Spring Boot) reads ``korvet.a.b-c`` from YAML and ``KORVET_A_B_C`` from the
# environment; ``korvet.topics[N].field`` / ``KORVET_TOPICS_<N>_FIELD`` declare topics. The
# settings above that the original also has carry its names in ``also``; the ones below
# are the original's settings Korvet (Python) knows but does not act on: naming one is a
# note, not the "unknown setting" warning a typo gets.

INERT: Mapping[str, str] = {
    "redis.metadata-pool-size": "one pool of redis.pool-size connections serves every request",
    "redis.committed-offset-pool-size": "one pool of redis.pool-size connections serves every request",
    "redis.archival-source-pool-size": "one pool of redis.pool-size connections serves every request",
    "redis.io-threads": "one asyncio event loop does all Redis I/O",
    "redis.metrics.enabled": "Redis round-trip latency is always exported (korvet_redis_*)",
    "redis.metrics.histogram": "Redis round-trip latency is always exported (korvet_redis_*)",
    "broker.worker-threads": "one asyncio event loop serves every connection",
    "broker.boss-threads": "one asyncio event loop serves every connection",
}
INERT_PREFIXES: Mapping[str, str] = {
    "storage.": "Korvet (Python) has no tiered storage: retention trims at write time",
    "archiver.": "Korvet (Python) has no tiered storage",
}

# Variables read by Korvet's own tools and tests, not by the broker.
TOOL_VARIABLES = frozenset({"KORVET_JAR_DIR", "KORVET_HYPOTHESIS_PROFILE", "KORVET_REPLAY_MODELS"})

# korvet.topics[N].<field>: the original's field names -> (what it sets, how it is read).
# A target with a dot is a Kafka topic config; the others are the declaration's own fields.
TOPIC_FIELDS: Mapping[str, tuple[str, str]] = {
    "name": ("name", "str"),
    "partitions": ("partitions", "int"),
    "auto-create": ("auto_create", "bool"),
    "retention-time": ("retention.ms", "ms"),
    "retention-ms": ("retention.ms", "ms"),
    "retention-bytes": ("retention.bytes", "bytes"),
    "local-retention-time": ("local.retention.ms", "ms"),
    "local-retention-ms": ("local.retention.ms", "ms"),
    "local-retention-bytes": ("local.retention.bytes", "bytes"),
    "segment-time": ("segment.ms", "ms"),
    "segment-ms": ("segment.ms", "ms"),
    "segment-bytes": ("segment.bytes", "bytes"),
    "max-message-bytes": ("max.message.bytes", "bytes"),
    "compression": ("compression.type", "compression"),
    "remote-storage-enabled": ("remote.storage.enable", "bool"),
    "log-append-timestamp-header": ("log.append.timestamp.header", "bool"),
    "timestamp-type": ("message.timestamp.type", "str"),
    "sequence-bits": ("korvet.sequence.bits", "int"),
    "storage-format": ("korvet.storage.format", "str"),
    "retention-records": ("korvet.retention.records", "int"),
}
TOPIC_INERT_FIELDS: Mapping[str, str] = {
    "value-type": "Korvet stores keys and values as opaque bytes, as the original does since 0.18",
}

_TOPIC_KEY = re.compile(r"topics\.(\d+)\.(.+)")
_TOPIC_ENV = re.compile(r"KORVET_TOPICS_(\d+)_([A-Z0-9_]+)")


@dataclass(frozen=True, slots=True)
class Config:
    """The resolved settings, one attribute per entry of SETTINGS, with where each came from,
    the declared topics, and the warnings loading gave."""

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)
    topics: tuple[TopicDeclaration, ...] = ()
    warnings: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get_int(self, name: str) -> int:
        value = self.values[name]
        assert isinstance(value, int)
        return value

    def get_str(self, name: str) -> str:
        value = self.values[name]
        assert isinstance(value, str)
        return value

    def get_bool(self, name: str) -> bool:
        value = self.values[name]
        assert isinstance(value, bool)
        return value

    def source(self, name: str) -> str:
        """Where a setting's value came from: 'default', a flag, a variable or a file key."""
        return self.sources.get(name, "default")

    def declared(self, topic: str) -> Declared:
        return resolve(self.topics, topic)

    def replace(self, **changes: object) -> Config:
        merged = dict(self.values)
        sources = dict(self.sources)
        for attr, value in changes.items():
            name = _attr_to_name(attr)
            merged[name] = _coerce(_BY_NAME[name], value)
            sources[name] = "set by the program"
        return dataclasses.replace(self, values=merged, sources=sources)


def _attr_to_name(attr: str) -> str:
    for setting in SETTINGS:
        if attr in (setting.attr, setting.name):
            return setting.name
    raise ConfigError(f"unknown setting {attr!r}")


_SIZE = re.compile(r"\s*(-?\d+)\s*([KMGT]?B)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_DURATION = re.compile(r"\s*(-?\d+)\s*(ns|us|ms|s|m|h|d)?\s*", re.IGNORECASE)
_DURATION_MS = {"ns": 1e-6, "us": 1e-3, "": 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000,
                "d": 86_400_000}
_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?",
                           re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``1048576``, ``512KB``, ``1MB``, ``2GB`` (binary units, as Spring's DataSize)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"expected a size such as 1048576, 512KB or 1MB, got {text!r}")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").upper()]


def parse_duration_ms(text: str) -> int:
    """Milliseconds from ``60000``, ``500ms``, ``30s``, ``5m``, ``1h``, ``7d`` or ISO ``PT1H``."""
    match = _DURATION.fullmatch(text)
    if match is not None:
        return int(int(match.group(1)) * _DURATION_MS[(match.group(2) or "").lower()])
    iso = _ISO_DURATION.fullmatch(text.strip())
    if iso is not None and any(iso.groups()):
        days, hours, minutes, seconds = (float(g or 0) for g in iso.groups())
        return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    raise ValueError(f"expected a duration such as 60000, 30s, 1h, 7d or PT1H, got {text!r}")


def _coerce_bool(setting: Setting, value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{setting.name}: expected true or false, got {value!r}{where}")


def _coerce_list(value: object) -> object:
    """Kept as given: a string, or a YAML list or mapping (security_config.py reads them)."""
    if value is None:
        return ""
    if isinstance(value, str | list | tuple | Mapping):
        return value
    return str(value)


def _coerce(setting: Setting, value: object, origin: str = "") -> object:
    where = f" ({origin})" if origin else ""
    if setting.kind is bool:
        return _coerce_bool(setting, value, where)
    if setting.kind is list:
        return _coerce_list(value)
    if setting.kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"{setting.name}: expected an integer, got {value!r}{where}")
        if isinstance(value, int):
            return value
        text = str(value).replace("_", "")
        try:
            if setting.unit == "bytes":
                return parse_size(text)
            if setting.unit == "ms":
                return parse_duration_ms(text)
            return int(text)
        except ValueError:
            raise ConfigError(f"{setting.name}: expected an integer, got {value!r}{where}") from None
    if value is None:
        return ""
    return str(value)


def _kebab(key: str) -> str:
    """Spring's relaxed binding: advertisedHost, advertised_host and advertised-host agree."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", key).lower().replace("_", "-")


def _flatten(tree: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a YAML tree; a list (``topics:``) becomes indexed keys ``topics.0.name``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{_kebab(str(key))}"
        if isinstance(value, Mapping) and name not in _BY_ANY_NAME:  # a list setting may be one
            if name.endswith("configs") and _TOPIC_KEY.fullmatch(name):
                flat.update({f"{name}.{k}": v for k, v in value.items()})  # Kafka names as-is
            else:
                flat.update(_flatten(value, name + "."))
        elif isinstance(value, list) and name == "topics":
            for index, item in enumerate(value):
                if isinstance(item, Mapping):
                    flat.update(_flatten(item, f"{name}.{index}."))
                else:
                    flat[f"{name}.{index}"] = item
        else:
            flat[name] = value
    return flat


def _inert_reason(name: str) -> str | None:
    if name in INERT:
        return INERT[name]
    return next((why for prefix, why in INERT_PREFIXES.items() if name.startswith(prefix)), None)


def _closest(word: str, candidates: Iterable[str]) -> str:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {found[0]}?" if found else ""


_TopicFields = dict[int, dict[str, tuple[object, str]]]


@dataclass
class _Loading:
    """What one load collects, layer by layer (defaults < YAML < environment < flags)."""

    values: dict[str, object]
    sources: dict[str, str] = field(default_factory=dict)
    topic_fields: _TopicFields = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def apply(self, layer: dict[str, tuple[object, str]]) -> None:
        for name, (value, origin) in layer.items():
            self.values[name] = value
            self.sources[name] = origin

    def topic_field(self, index: int, key: str, value: object, origin: str) -> None:
        if key in TOPIC_INERT_FIELDS:
            self.notes.append(f"{origin}: no effect in Korvet (Python): {TOPIC_INERT_FIELDS[key]}")
            return
        config_key = key.removeprefix("configs.")
        if key not in TOPIC_FIELDS and not (key.startswith("configs.")
                                            and config_key in topic_rules.CONFIGS):
            known = [*TOPIC_FIELDS, *(f"configs.{c}" for c in topic_rules.CONFIGS)]
            self.unknown.append(f"{origin}: unknown topic field {key!r}{_closest(key, known)}")
            return
        self.topic_fields.setdefault(index, {})[key] = (value, origin)


def _put(layer: dict[str, tuple[object, str]], setting: Setting, raw: object, origin: str) -> None:
    value = _coerce(setting, raw, origin)
    prior = layer.get(setting.name)
    if prior is not None and prior[0] != value:
        raise ConfigError(f"{setting.name} is set twice, differently: by {prior[1]} and by {origin}")
    layer[setting.name] = (value, origin)


def _read_yaml(path: Path, loading: _Loading) -> None:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
    if not isinstance(tree, Mapping):
        raise ConfigError(f"config file {path}: expected a mapping at the top")
    # The original's files put everything under `korvet:`; ours need not. Beside `korvet:`,
    # a Spring application file has other frameworks' keys: only the Actuator's port is ours.
    wrapped = tree.get("korvet")
    layer: dict[str, tuple[object, str]] = {}
    entries = _flatten({k: v for k, v in tree.items() if k != "korvet"})
    prefix = ""
    if isinstance(wrapped, Mapping):
        for key, value in entries.items():
            if key in ("server.port", "management.server.port"):
                _put(layer, _BY_NAME["http.port"], value, f"{path} key {key}")
            else:
                loading.notes.append(f"{path} key {key}: not under korvet:, ignored")
        entries, prefix = _flatten(wrapped), "korvet."
    known = [*_BY_ANY_NAME, "topics[N]." + "|".join(TOPIC_FIELDS)]
    for key, value in entries.items():
        origin = f"{path} key {prefix}{key}"
        topic = _TOPIC_KEY.fullmatch(key)
        if topic is not None:
            loading.topic_field(int(topic.group(1)), topic.group(2), value, origin)
        elif key in _BY_ANY_NAME:
            _put(layer, _BY_ANY_NAME[key], value, origin)
        elif (why := _inert_reason(key)) is not None:
            loading.notes.append(f"{origin}: no effect in Korvet (Python): {why}")
        else:
            loading.unknown.append(f"{origin}: unknown setting {key!r}{_closest(key, known)}")
    loading.apply(layer)


def _read_env(environ: Mapping[str, str], loading: _Loading) -> None:
    layer: dict[str, tuple[object, str]] = {}
    inert_envs = {_env_of(name): why for name, why in INERT.items()}
    known = [*_BY_ENV, "KORVET_TOPICS_<N>_<FIELD>"]
    for var in sorted(environ):
        if not var.startswith("KORVET_") or var in TOOL_VARIABLES:
            continue
        origin = f"environment variable {var}"
        topic = _TOPIC_ENV.fullmatch(var)
        if var in _BY_ENV:
            _put(layer, _BY_ENV[var], environ[var], origin)
        elif topic is not None:
            loading.topic_field(int(topic.group(1)), topic.group(2).lower().replace("_", "-"),
                                environ[var], origin)
        elif var in inert_envs:
            loading.notes.append(f"{origin}: no effect in Korvet (Python): {inert_envs[var]}")
        elif var.startswith(("KORVET_STORAGE_", "KORVET_ARCHIVER_")):
            loading.notes.append(f"{origin}: no effect in Korvet (Python): "
                                 f"{INERT_PREFIXES['storage.']}")
        else:
            loading.unknown.append(f"{origin}: unknown setting{_closest(var, known)}")
    loading.apply(layer)


def _topic_value(key: str, raw: object, origin: str) -> tuple[str, object]:
    target, kind = TOPIC_FIELDS.get(key, (key.removeprefix("configs."), "str"))
    text = str(raw).strip() if not isinstance(raw, bool) else str(raw).lower()
    try:
        if kind == "int":
            return target, int(text)
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"expected true or false, got {raw!r}")
            return target, text.lower() == "true" if target == "auto_create" else text.lower()
        if kind == "bytes":
            return target, str(parse_size(text))
        if kind == "ms":
            return target, str(parse_duration_ms(text))
        if kind == "compression":
            return target, "uncompressed" if text.lower() == "none" else text.lower()
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    return target, text


def _declarations(fields: _TopicFields) -> tuple[TopicDeclaration, ...]:
    declarations = []
    for index in sorted(fields):
        entry = fields[index]
        if "name" not in entry:
            origins = ", ".join(origin for _, origin in entry.values())
            raise ConfigError(f"topics[{index}] has no name (set by {origins}); use '*' for "
                              "defaults of every topic")
        name = str(entry["name"][0])
        partitions: int | None = None
        auto_create: bool | None = None
        configs: dict[str, str] = {}
        for key, (raw, origin) in entry.items():
            target, value = _topic_value(key, raw, origin)
            if target == "partitions":
                assert isinstance(value, int)
                try:
                    partitions = topic_rules.validate_partition_count(value)
                except topic_rules.PartitionCountError as exc:
                    raise ConfigError(f"{origin}: {exc}") from None
            elif target == "auto_create":
                auto_create = bool(value)
            elif target != "name":
                try:
                    configs[target] = topic_rules.validate_config(target, str(value))
                except topic_rules.TopicConfigError as exc:
                    raise ConfigError(f"{origin}: {exc}") from None
        if "*" not in name:
            try:
                topic_rules.validate_topic_name(name)
            except topic_rules.TopicNameError as exc:
                raise ConfigError(f"{entry['name'][1]}: {exc}") from None
        declarations.append(TopicDeclaration(index, name, partitions, auto_create, configs))
    return tuple(declarations)


def load(
    *,
    yaml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Settings from defaults < YAML file < ``KORVET_*`` environment < ``overrides`` (flags).
    Unknown variables and keys are warnings in ``Config.warnings`` (errors with
    ``config.strict``); bad values are ``ConfigError``."""
    loading = _Loading({s.name: s.default for s in SETTINGS})
    if yaml_path:
        _read_yaml(Path(yaml_path), loading)
    _read_env(os.environ if env is None else env, loading)
    flags: dict[str, tuple[object, str]] = {}
    for name, value in (overrides or {}).items():
        if value is not None:
            setting = _BY_NAME[_attr_to_name(name)]
            _put(flags, setting, value, f"command-line flag {setting.flags[0]}")
    loading.apply(flags)
    config = Config(loading.values, loading.sources, _declarations(loading.topic_fields),
                    tuple(loading.unknown + loading.notes + _redis_notes(loading.values)))
    validate(config)
    if config.get_bool("config.strict") and loading.unknown:
        raise ConfigError("unknown settings (config.strict is on):\n  "
                          + "\n  ".join(loading.unknown))
    return config


def _redis_notes(values: Mapping[str, object]) -> list[str]:
    if values["redis.url"] or not (values["redis.username"] or values["redis.password"]):
        return []
    return ["redis.username/redis.password are ignored: without redis.url the broker starts "
            "its own embedded Redis, which has no password"]


def validate(config: Config) -> None:
    bits = config.get_int("topics.sequence-bits")
    if not 1 <= bits <= 22:
        raise ConfigError(f"topics.sequence-bits must be within 1..22, got {bits}")
    storage_format = config.get_str("topics.storage-format")
    if storage_format not in topic_rules.STORAGE_FORMATS:
        raise ConfigError("topics.storage-format must be one of "
                          f"{', '.join(topic_rules.STORAGE_FORMATS)}, got {storage_format!r}")
    for name in ("broker.port", "http.port"):
        port = config.get_int(name)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{name} must be within 0..65535, got {port}")
    if config.get_int("topics.default-partitions") < 1:
        raise ConfigError("topics.default-partitions must be at least 1")
    if config.get_str("redis.appendfsync") not in ("always", "everysec", "no", "off"):
        raise ConfigError("redis.appendfsync must be one of always, everysec, no, off")
    if config.get_int("redis.wait-replicas") < 0 or config.get_int("redis.wait-timeout-ms") < 1:
        raise ConfigError("redis.wait-replicas must be at least 0 and redis.wait-timeout-ms "
                          "at least 1")
    if config.get_int("redis.aof-rewrite-min-mb") < 1:
        raise ConfigError("redis.aof-rewrite-min-mb must be at least 1")
    if not 0 <= config.get_int("redis.stream-node-max-bytes") <= STREAM_NODE_MAX_BYTES_LIMIT:
        raise ConfigError("redis.stream-node-max-bytes must be within 0.."
                          f"{STREAM_NODE_MAX_BYTES_LIMIT}")
    _validate_limits(config)
    lo = config.get_int("groups.min-session-timeout-ms")
    hi = config.get_int("groups.max-session-timeout-ms")
    if not 0 < lo <= hi:
        raise ConfigError("groups.min-session-timeout-ms must be positive and <= the max")
    _validate_group_retention(config)
    if config.get_bool("redis.cluster") and not config.get_str("redis.url"):
        raise ConfigError(
            f"redis.cluster is true ({config.source('redis.cluster')}) but no redis.url names a "
            "node of the cluster (the embedded Redis is a single server): set redis.url "
            "(--redis-url, KORVET_REDIS_URI) to one of its nodes")
    validate_security(config)


def validate_security(config: Config) -> None:
    """Parse what the broker will parse again at start, so a bad value fails here, named."""
    from korvet.security_config import SecuritySettings, SecuritySettingsError

    try:
        SecuritySettings.from_config(config)
    except SecuritySettingsError as exc:
        raise ConfigError(str(exc)) from None


def _validate_group_retention(config: Config) -> None:
    if config.get_int("groups.retention-check-interval-ms") < 0:
        raise ConfigError("groups.retention-check-interval-ms must be at least 0 (0: never)")
    retention = config.get_int("groups.offsets-retention-ms")
    if retention < 1 and retention != -1:
        raise ConfigError(f"groups.offsets-retention-ms must be at least 1, or -1 (keep "
                          f"offsets until their group is deleted), got {retention}")


def _validate_limits(config: Config) -> None:
    if config.get_int("broker.max-request-bytes") < 1024:
        raise ConfigError("broker.max-request-bytes (socket.request.max.bytes) must be at least 1024")
    for name in ("broker.max-connections", "broker.max-connections-per-ip"):
        if config.get_int(name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    high = config.get_int("broker.max-pending-bytes")
    low = config.get_int("broker.resume-pending-bytes")
    if not 0 <= low <= high:
        raise ConfigError("broker.resume-pending-bytes must be within 0..broker.max-pending-bytes")
    if not 0 <= config.get_int("redis.embedded-port") <= 65535:
        raise ConfigError("redis.embedded-port must be within 0..65535")
    if config.get_int("redis.pool-size") < 1 or config.get_int("redis.pool-max-wait") < 0:
        raise ConfigError("redis.pool-size must be at least 1 and redis.pool-max-wait at least 0")
    if config.get_int("fetch.max-sessions") < 0:
        raise ConfigError("fetch.max-sessions must not be negative")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; help shows the default and the environment variable."""
    parser.add_argument("--config", metavar="FILE", help="YAML file with settings (see docs/)")
    for setting in SETTINGS:
        flags = list(setting.flags)
        default_text = repr(setting.default) if setting.default != "" else "unset"
        also = "".join(f", {env}" for env in setting.envs[1:])
        help_text = f"{setting.help} [default: {default_text}; env {setting.env}{also}]"
        if setting.hidden:
            help_text = argparse.SUPPRESS
        if setting.kind is bool:
            parser.add_argument(
                *flags, dest=setting.attr, default=None,
                action=argparse.BooleanOptionalAction, help=help_text,
            )
        else:
            kind = str if setting.kind is list else setting.kind
            parser.add_argument(
                *flags, dest=setting.attr, default=None, metavar=kind.__name__.upper(),
                type=str if setting.unit else kind, help=help_text,
            )


def from_args(args: argparse.Namespace) -> Config:
    overrides = {s.name: getattr(args, s.attr, None) for s in SETTINGS}
    return load(yaml_path=getattr(args, "config", None), overrides=overrides)


def describe(config: Config) -> Sequence[tuple[str, object]]:
    return [(s.name, "****" if s.secret and config[s.name] else config[s.name]) for s in SETTINGS]
