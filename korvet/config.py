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
    kafka: str = ""  # Kafka's name for the same setting, accepted too (see kafka_forms)

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")

    @property
    def env(self) -> str:
        return "KORVET_" + self.attr.upper()

    @property
    def kafka_forms(self) -> tuple[str, str, str]:
        """Kafka's name as a YAML key, an environment variable and a flag:
        ``socket.request.max.bytes``, ``KORVET_SOCKET_REQUEST_MAX_BYTES``,
        ``--socket-request-max-bytes``. Empty strings when Kafka has no such setting."""
        if not self.kafka:
            return "", "", ""
        flat = self.kafka.replace(".", "_").replace("-", "_")
        return self.kafka, "KORVET_" + flat.upper(), "--" + flat.replace("_", "-")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace(".", "-").replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """The short aliases first, then the full flag, then Kafka's name; each once."""
        kafka_flag = self.kafka_forms[2]
        return tuple(dict.fromkeys((*self.aliases, self.flag, *((kafka_flag,) if kafka_flag else ()))))


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
            "largest request frame accepted; larger frames close the connection",
            kafka="socket.request.max.bytes"),
    Setting("broker.max-connections", int, 2**31 - 1,
            "open client connections the broker accepts; more are closed at once",
            kafka="max.connections"),
    Setting("broker.max-connections-per-ip", int, 2**31 - 1,
            "open client connections from one address; more are closed at once",
            kafka="max.connections.per.ip"),
    Setting("broker.max-pending-bytes", int, 64 * MiB,
            "bytes of requests and responses in flight on one connection above which the "
            "broker stops reading from it (the original's max-pending-bytes)"),
    Setting("broker.resume-pending-bytes", int, 32 * MiB,
            "a connection stopped by max-pending-bytes is read again below this many bytes"),
    Setting("broker.connections-max-idle-ms", int, 600_000,
            "close a connection with no request and nothing in flight for this long (0: never)",
            kafka="connections.max.idle.ms"),
    Setting("fetch.max-sessions", int, 1000,
            "incremental fetch sessions (KIP-227) the broker keeps; 0 turns sessions off",
            kafka="max.incremental.fetch.session.cache.slots"),
    # -- end of limits ------------------------------------------------------------------------
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
)

_BY_NAME = {s.name: s for s in SETTINGS}
_BY_YAML_KEY = {**{s.kafka: s for s in SETTINGS if s.kafka}, **_BY_NAME}


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
        if isinstance(value, Mapping):
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
        for name, value in _flatten(tree).items():
            if name not in _BY_YAML_KEY:
                raise ConfigError(f"config file {path}: unknown setting {name!r}")
            setting = _BY_YAML_KEY[name]
            values[setting.name] = _coerce(setting, value)
    environ = os.environ if env is None else env
    for setting in SETTINGS:
        for variable in (setting.kafka_forms[1], setting.env):  # Korvet's name wins
            if variable and variable in environ:
                values[setting.name] = _coerce(setting, environ[variable])
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
    _validate_limits(config)
    lo = config.get_int("groups.min-session-timeout-ms")
    hi = config.get_int("groups.max-session-timeout-ms")
    if not 0 < lo <= hi:
        raise ConfigError("groups.min-session-timeout-ms must be positive and <= the max")


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
    if config.get_int("fetch.max-sessions") < 0:
        raise ConfigError("fetch.max-sessions must not be negative")


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
            parser.add_argument(
                *flags, dest=setting.attr, default=None, metavar=setting.kind.__name__.upper(),
                type=setting.kind, help=help_text,
            )


def from_args(args: argparse.Namespace) -> Config:
    overrides = {s.name: getattr(args, s.attr, None) for s in SETTINGS}
    return load(yaml_path=getattr(args, "config", None), overrides=overrides)


def describe(config: Config) -> Sequence[tuple[str, object]]:
    return [(s.name, config[s.name]) for s in SETTINGS]
