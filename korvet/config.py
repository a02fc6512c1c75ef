"""Broker settings: defaults < YAML file < ``KORVET_*`` environment < command-line flags.

Every setting is declared once in ``SETTINGS``; the YAML key, the environment
variable and the flag are derived from its dotted name, so ``broker.port`` is
``broker: {port: ...}`` in YAML, ``KORVET_BROKER_PORT`` in the environment and
``--broker-port`` (or a short alias such as ``--port``) on the command line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A setting has a value the broker cannot use."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # dotted, e.g. "broker.port"
    kind: type  # int, str, bool or float
    default: object
    help: str
    aliases: tuple[str, ...] = ()

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
        """The short aliases first, then the full flag; each once."""
        return tuple(dict.fromkeys((*self.aliases, self.flag)))


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
    Setting("broker.max-request-bytes", int, 100 * MiB,
            "largest request frame accepted; larger frames close the connection"),
    Setting("broker.port-file", str, "",
            "write the bound port to this file once listening (for scripts and tests)",
            ("--port-file",)),
    Setting("redis.url", str, "",
            "use this Redis (>= 7) instead of starting the embedded one, e.g. redis://host:6379/0",
            ("--redis-url",)),
    Setting("redis.keyspace", str, "korvet", "prefix of every Redis key the broker writes",
            ("--keyspace",)),
    Setting("redis.server-binary", str, "redis-server", "redis-server used for the embedded Redis"),
    Setting("redis.appendfsync", str, "everysec",
            "embedded Redis: AOF fsync policy (always, everysec, no) or 'off' for no persistence"),
    Setting("redis.aof-rewrite-min-mb", int, 1024,
            "embedded Redis: no AOF rewrite before the AOF reaches this many MiB (Redis' "
            "auto-aof-rewrite-min-size; Redis' own default, 64, forks a rewrite every few "
            "seconds under a steady produce load, which shows in the latency tail)"),
    Setting("data.dir", str, "data", "folder for the embedded Redis' data and the broker's files",
            ("--data-dir",)),
    Setting("topics.auto-create", bool, True,
            "create a topic when a client asks for one that does not exist"),
    Setting("topics.default-partitions", int, 1, "partitions of an auto-created topic"),
    Setting("topics.sequence-bits", int, 10,
            "default offset sequence bits (1..22) for new topics: entries per ms = 2^bits"),
    Setting("topics.retention-ms", int, 604_800_000,
            "default retention.ms of new topics (-1: keep forever)"),
    Setting("topics.timestamp-after-max-ms", int, 3_600_000,
            "reject records whose CreateTime is this far ahead of the broker clock "
            "(Kafka's log.message.timestamp.after.max.ms)"),
    Setting("groups.initial-rebalance-delay-ms", int, 3000,
            "wait this long for more members before the first rebalance of an empty group"),
    Setting("groups.min-session-timeout-ms", int, 6000, "smallest session timeout a member may ask"),
    Setting("groups.max-session-timeout-ms", int, 1_800_000,
            "largest session timeout a member may ask"),
    Setting("groups.max-size", int, 2**31 - 1,
            "members a group may have; more joins answer GROUP_MAX_SIZE_REACHED"),
    Setting("groups.event-log", str, "",
            "append every coordinator input and output to this file (NDJSON); empty: off"),
    Setting("log.level", str, "INFO", "log level (DEBUG, INFO, WARNING, ERROR)",
            ("--log-level",)),
    # the security settings follow (SECURITY_SETTINGS)
)

# --- security (docs/users/security.md) ------------------------------------------------------
# Listeners, TLS, SASL, ACLs, tenants and the Redis connection's credentials. The names
# follow the original product's (korvet.broker.tls, cert-file, key-file, client-auth-required,
# trust-cert-file, sasl.enabled, sasl.mechanisms: their KORVET_BROKER_* variables are these
# settings' variables) and Kafka's (listeners, advertised.listeners, super.users, ...: the
# YAML keys in KAFKA_STYLE_NAMES). ``list`` settings take a comma-separated string or, in
# YAML, a list (or a mapping, for security.tenants).
SECURITY_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.listeners", list, "",
            "listeners as NAME://host:port, comma-separated (Kafka's `listeners`; a NAME that is "
            "not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL takes its protocol from "
            "broker.listener-security-protocol-map); empty: one listener on broker.host:"
            "broker.port, PLAINTEXT unless broker.tls / broker.sasl.enabled say otherwise",
            ("--listeners",)),
    Setting("broker.advertised-listeners", str, "",
            "NAME://host:port per listener: the address Metadata gives that listener's clients "
            "(Kafka's `advertised.listeners`; default: the listener's own address)"),
    Setting("broker.listener-security-protocol-map", str, "",
            "NAME:PROTOCOL pairs, e.g. INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL "
            "(Kafka's `listener.security.protocol.map`)"),
    Setting("broker.listeners-file", str, "",
            "write {listener name: bound port} as JSON to this file once listening (scripts, tests)"),
    Setting("broker.tls", bool, False,
            "the default listener (no broker.listeners) speaks TLS: SSL, or SASL_SSL with "
            "broker.sasl.enabled"),
    Setting("broker.cert-file", str, "", "PEM certificate chain of the broker (TLS listeners)"),
    Setting("broker.key-file", str, "", "PEM private key of broker.cert-file"),
    Setting("broker.key-password", str, "", "password of broker.key-file, if it is encrypted"),
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
            "broker.client-auth-required=true)"),
    Setting("broker.sasl.enabled", bool, False,
            "the default listener (no broker.listeners) requires SASL: SASL_PLAINTEXT, or "
            "SASL_SSL with broker.tls"),
    Setting("broker.sasl.mechanisms", list, "SCRAM-SHA-256,SCRAM-SHA-512",
            "SASL mechanisms SASL listeners accept: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
            "(Kafka's sasl.enabled.mechanisms); PLAIN checks the password against the user's "
            "SCRAM credential"),
    Setting("broker.connections-max-reauth-ms", int, 0,
            "a SASL session lasts this long; the client re-authenticates on its connection "
            "before it ends, or is disconnected (KIP-368; 0: sessions never end)"),
    Setting("broker.failed-authentication-delay-ms", int, 100,
            "answer a failed authentication this much later, then close "
            "(Kafka's connections.failed.authentication.delay.ms)"),
    Setting("authorizer.enabled", bool, False,
            "enforce ACLs (Kafka's StandardAuthorizer): a principal may do only what an ACL "
            "allows; manage them with kafka-acls (CreateAcls/DescribeAcls/DeleteAcls)"),
    Setting("authorizer.super-users", list, "",
            "principals allowed everything, ';'-separated as Kafka's super.users "
            "(e.g. User:admin;User:CN=ops,O=acme)"),
    Setting("authorizer.allow-everyone-if-no-acl-found", bool, False,
            "with the authorizer on, allow a resource no ACL names "
            "(Kafka's allow.everyone.if.no.acl.found)"),
    Setting("security.tenants", list, "",
            "principal=keyspace pairs: each principal's topics and groups live in its own Redis "
            "keyspace, invisible to others (e.g. User:alice=acme,User:bob=globex; in YAML a "
            "mapping, needed for certificate principals); other principals use redis.keyspace"),
    Setting("redis.username", str, "", "Redis ACL user (AUTH username password)"),
    Setting("redis.password", str, "", "password of redis.username (or of Redis' default user); "
            "never logged"),
    Setting("redis.tls-ca-file", str, "",
            "PEM CA certificates that sign the Redis server's certificate (rediss:// URLs)"),
    Setting("redis.tls-cert-file", str, "", "PEM client certificate for Redis (rediss://, mTLS)"),
    Setting("redis.tls-key-file", str, "", "PEM private key of redis.tls-cert-file"),
)

# Kafka's own names, accepted as top-level YAML keys.
KAFKA_STYLE_NAMES: dict[str, str] = {
    "listeners": "broker.listeners",
    "advertised.listeners": "broker.advertised-listeners",
    "listener.security.protocol.map": "broker.listener-security-protocol-map",
    "sasl.enabled.mechanisms": "broker.sasl.mechanisms",
    "connections.max.reauth.ms": "broker.connections-max-reauth-ms",
    "connections.failed.authentication.delay.ms": "broker.failed-authentication-delay-ms",
    "ssl.client.auth": "broker.client-auth",
    "super.users": "authorizer.super-users",
    "allow.everyone.if.no.acl.found": "authorizer.allow-everyone-if-no-acl-found",
}

SETTINGS = (*SETTINGS, *SECURITY_SETTINGS)
# --- end of security settings ---------------------------------------------------------------

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True, slots=True)
class Config:
    """The resolved settings, one attribute per entry of SETTINGS."""

    values: Mapping[str, Any]

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

    def replace(self, **changes: object) -> Config:
        merged = dict(self.values)
        for attr, value in changes.items():
            name = _attr_to_name(attr)
            merged[name] = _coerce(_BY_NAME[name], value)
        return Config(merged)


def _attr_to_name(attr: str) -> str:
    for setting in SETTINGS:
        if attr in (setting.attr, setting.name):
            return setting.name
    raise ConfigError(f"unknown setting {attr!r}")


def _coerce(setting: Setting, value: object) -> object:
    if setting.kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{setting.name}: expected true or false, got {value!r}")
    if setting.kind is list:  # kept as given: a string, or a YAML list or mapping
        if value is None:
            return ""
        if isinstance(value, str | list | tuple | Mapping):
            return value
        return str(value)
    if setting.kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"{setting.name}: expected an integer, got {value!r}")
        try:
            return int(str(value).replace("_", ""))
        except ValueError:
            raise ConfigError(f"{setting.name}: expected an integer, got {value!r}") from None
    if value is None:
        return ""
    return str(value)


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name not in _BY_NAME:  # a list setting may be a mapping
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def load(
    *,
    yaml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    values: dict[str, object] = {s.name: s.default for s in SETTINGS}
    if yaml_path:
        path = Path(yaml_path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        tree = yaml.safe_load(path.read_text()) or {}
        if not isinstance(tree, Mapping):
            raise ConfigError(f"config file {path}: expected a mapping at the top")
        for raw_name, value in _flatten(tree).items():
            name = KAFKA_STYLE_NAMES.get(raw_name, raw_name)
            if name not in _BY_NAME:
                raise ConfigError(f"config file {path}: unknown setting {name!r}")
            values[name] = _coerce(_BY_NAME[name], value)
    environ = os.environ if env is None else env
    for setting in SETTINGS:
        if setting.env in environ:
            values[setting.name] = _coerce(setting, environ[setting.env])
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        key = _attr_to_name(name)
        values[key] = _coerce(_BY_NAME[key], value)
    config = Config(values)
    validate(config)
    return config


def validate(config: Config) -> None:
    bits = config.get_int("topics.sequence-bits")
    if not 1 <= bits <= 22:
        raise ConfigError(f"topics.sequence-bits must be within 1..22, got {bits}")
    port = config.get_int("broker.port")
    if not 0 <= port <= 65535:
        raise ConfigError(f"broker.port must be within 0..65535, got {port}")
    if config.get_int("topics.default-partitions") < 1:
        raise ConfigError("topics.default-partitions must be at least 1")
    if config.get_str("redis.appendfsync") not in ("always", "everysec", "no", "off"):
        raise ConfigError("redis.appendfsync must be one of always, everysec, no, off")
    if config.get_int("redis.aof-rewrite-min-mb") < 1:
        raise ConfigError("redis.aof-rewrite-min-mb must be at least 1")
    if config.get_int("broker.max-request-bytes") < 1024:
        raise ConfigError("broker.max-request-bytes must be at least 1024")
    lo = config.get_int("groups.min-session-timeout-ms")
    hi = config.get_int("groups.max-session-timeout-ms")
    if not 0 < lo <= hi:
        raise ConfigError("groups.min-session-timeout-ms must be positive and <= the max")
    validate_security(config)


def validate_security(config: Config) -> None:
    """Parse what the broker will parse again at start, so a bad value fails here, named."""
    from korvet.security_config import SecuritySettings, SecuritySettingsError

    try:
        SecuritySettings.from_config(config)
    except SecuritySettingsError as exc:
        raise ConfigError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; help shows the default and the environment variable."""
    parser.add_argument("--config", metavar="FILE", help="YAML file with settings (see docs/)")
    for setting in SETTINGS:
        flags = list(setting.flags)
        default_text = repr(setting.default) if setting.default != "" else "unset"
        help_text = f"{setting.help} [default: {default_text}; env {setting.env}]"
        if setting.kind is bool:
            parser.add_argument(
                *flags, dest=setting.attr, default=None,
                action=argparse.BooleanOptionalAction, help=help_text,
            )
        else:
            kind = str if setting.kind is list else setting.kind
            parser.add_argument(
                *flags, dest=setting.attr, default=None, metavar=kind.__name__.upper(),
                type=kind, help=help_text,
            )


def from_args(args: argparse.Namespace) -> Config:
    overrides = {s.name: getattr(args, s.attr, None) for s in SETTINGS}
    return load(yaml_path=getattr(args, "config", None), overrides=overrides)


SECRET_SETTINGS = frozenset({"redis.password", "broker.key-password"})


def describe(config: Config) -> Sequence[tuple[str, object]]:
    """(name, value) of every setting; secrets show as '***' when set."""
    return [(s.name, "***" if s.name in SECRET_SETTINGS and config[s.name] else config[s.name])
            for s in SETTINGS]
