"""Loading the settings: defaults < YAML file < ``KORVET_*`` environment < command-line flags.

Each layer is read into the raw ``Config`` (values.py) by dotted name, coerced to the
setting's kind as it is read, with where each value came from; the original product's names
and layout (``korvet:``-wrapped, camelCase keys, ``korvet.topics[N]``) are accepted, and an
unknown ``KORVET_*`` variable or YAML key is a warning naming the closest setting. ``load``
then has validate.py check the values and build the typed ``BrokerSettings`` the broker runs
with, once.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from korvet.core import topics as topic_rules
from korvet.core.topic_declarations import TopicDeclaration
from korvet.settings.typed import BrokerSettings
from korvet.settings.validate import validate
from korvet.settings.values import (
    BY_ANY_NAME,
    BY_ENV,
    BY_NAME,
    SETTINGS,
    Config,
    ConfigError,
    Setting,
    env_of,
)

# --- compatibility with the original product's configuration (issue 15) ------------------
#
# The original (Spring Boot) reads ``korvet.a.b-c`` from YAML and ``KORVET_A_B_C`` from the
# environment; ``korvet.topics[N].field`` / ``KORVET_TOPICS_<N>_FIELD`` declare topics. The
# settings of values.py that the original also has carry its names in ``also``; the ones below
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
    "offset-scheme": ("korvet.offset.scheme", "str"),
    "retention-records": ("korvet.retention.records", "int"),
}
TOPIC_INERT_FIELDS: Mapping[str, str] = {
    "value-type": "Korvet stores keys and values as opaque bytes, as the original does since 0.18",
}

_TOPIC_KEY = re.compile(r"topics\.(\d+)\.(.+)")
_TOPIC_ENV = re.compile(r"KORVET_TOPICS_(\d+)_([A-Z0-9_]+)")


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
    """Kept as given: a string, or a YAML list or mapping (security.py reads them)."""
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
        if isinstance(value, Mapping) and name not in BY_ANY_NAME:  # a list setting may be one
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
                _put(layer, BY_NAME["http.port"], value, f"{path} key {key}")
            else:
                loading.notes.append(f"{path} key {key}: not under korvet:, ignored")
        entries, prefix = _flatten(wrapped), "korvet."
    known = [*BY_ANY_NAME, "topics[N]." + "|".join(TOPIC_FIELDS)]
    for key, value in entries.items():
        origin = f"{path} key {prefix}{key}"
        topic = _TOPIC_KEY.fullmatch(key)
        if topic is not None:
            loading.topic_field(int(topic.group(1)), topic.group(2), value, origin)
        elif key in BY_ANY_NAME:
            _put(layer, BY_ANY_NAME[key], value, origin)
        elif (why := _inert_reason(key)) is not None:
            loading.notes.append(f"{origin}: no effect in Korvet (Python): {why}")
        else:
            loading.unknown.append(f"{origin}: unknown setting {key!r}{_closest(key, known)}")
    loading.apply(layer)


def _read_env(environ: Mapping[str, str], loading: _Loading) -> None:
    layer: dict[str, tuple[object, str]] = {}
    inert_envs = {env_of(name): why for name, why in INERT.items()}
    known = [*BY_ENV, "KORVET_TOPICS_<N>_<FIELD>"]
    for var in sorted(environ):
        if not var.startswith("KORVET_") or var in TOOL_VARIABLES:
            continue
        origin = f"environment variable {var}"
        topic = _TOPIC_ENV.fullmatch(var)
        if var in BY_ENV:
            _put(layer, BY_ENV[var], environ[var], origin)
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


def _read(
    *,
    yaml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> tuple[Config, list[str]]:
    """The raw values of defaults < YAML file < ``KORVET_*`` environment < ``overrides`` (flags,
    by dotted name or flag attribute), not yet validated, and the unknown names met. A value
    that is not of its setting's kind is ``ConfigError`` already."""
    loading = _Loading({s.name: s.default for s in SETTINGS})
    if yaml_path:
        _read_yaml(Path(yaml_path), loading)
    _read_env(os.environ if env is None else env, loading)
    flags: dict[str, tuple[object, str]] = {}
    for name, value in (overrides or {}).items():
        if value is not None:
            setting = BY_NAME[_attr_to_name(name)]
            _put(flags, setting, value, f"command-line flag {setting.flags[0]}")
    loading.apply(flags)
    config = Config(loading.values, loading.sources, _declarations(loading.topic_fields),
                    tuple(loading.unknown + loading.notes + _redis_notes(loading.values)))
    return config, loading.unknown


def load(
    *,
    yaml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> BrokerSettings:
    """The settings from defaults < YAML file < ``KORVET_*`` environment < ``overrides``
    (flags), checked and typed. Unknown variables and keys are warnings in
    ``BrokerSettings.warnings`` (errors with ``config.strict``); bad values are
    ``ConfigError``."""
    config, unknown = _read(yaml_path=yaml_path, env=env, overrides=overrides)
    settings = validate(config)
    if settings.config.strict and unknown:
        raise ConfigError("unknown settings (config.strict is on):\n  " + "\n  ".join(unknown))
    return settings


def _redis_notes(values: Mapping[str, object]) -> list[str]:
    if values["redis.url"] or not (values["redis.username"] or values["redis.password"]):
        return []
    return ["redis.username/redis.password are ignored: without redis.url the broker starts "
            "its own embedded Redis, which has no password"]


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


def from_args(args: argparse.Namespace) -> BrokerSettings:
    """The settings of a command line parsed with ``add_arguments``."""
    overrides = {s.name: getattr(args, s.attr, None) for s in SETTINGS}
    return load(yaml_path=getattr(args, "config", None), overrides=overrides)

