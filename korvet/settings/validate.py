"""Checking the loaded values, and building the typed settings from them once they pass.

Every refusal names the setting (and, where it helps, where its value came from), so
``korvet serve`` stops before anything starts. The security settings are parsed here
(security.py) and the parsed form is kept in the ``BrokerSettings`` returned: the broker
never parses them again.
"""

from __future__ import annotations

from korvet.core import topics as topic_rules
from korvet.settings.security import SecuritySettings, SecuritySettingsError
from korvet.settings.typed import BrokerSettings
from korvet.settings.values import STREAM_NODE_MAX_BYTES_LIMIT, Config, ConfigError


def validate(config: Config) -> BrokerSettings:
    """The settings the broker runs with, if every value of ``config`` is one it can use;
    ``ConfigError`` naming the first that is not."""
    _validate_values(config)
    try:
        security = SecuritySettings.from_config(config)
    except SecuritySettingsError as exc:
        raise ConfigError(str(exc)) from None
    return BrokerSettings.build(config, security)


def _validate_values(config: Config) -> None:
    _validate_topic_defaults(config)
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
    if config.get_int("redis.memory-check-interval-ms") < 100:
        raise ConfigError("redis.memory-check-interval-ms must be at least 100")
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
    _validate_group_settings(config)
    if config.get_bool("redis.cluster") and not config.get_str("redis.url"):
        raise ConfigError(
            f"redis.cluster is true ({config.source('redis.cluster')}) but no redis.url names a "
            "node of the cluster (the embedded Redis is a single server): set redis.url "
            "(--redis-url, KORVET_REDIS_URI) to one of its nodes")


def _validate_topic_defaults(config: Config) -> None:
    bits = config.get_int("topics.sequence-bits")
    if not 1 <= bits <= 22:
        raise ConfigError(f"topics.sequence-bits must be within 1..22, got {bits}")
    for name, choices in (("topics.storage-format", topic_rules.STORAGE_FORMATS),
                          ("topics.offset-scheme", topic_rules.OFFSET_SCHEMES)):
        chosen = config.get_str(name)
        if chosen not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {chosen!r}")


def _validate_group_settings(config: Config) -> None:
    for name in ("groups.share-session-timeout-ms", "groups.share-heartbeat-interval-ms",
                 "groups.share-min-session-timeout-ms", "groups.share-min-heartbeat-interval-ms",
                 "groups.share-max-size"):
        if config.get_int(name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    if config.get_int("groups.retention-check-interval-ms") < 0:
        raise ConfigError("groups.retention-check-interval-ms must be at least 0 (0: never)")
    retention = config.get_int("groups.offsets-retention-ms")
    if retention < 1 and retention != -1:
        raise ConfigError(f"groups.offsets-retention-ms must be at least 1, or -1 (keep "
                          f"offsets until their group is deleted), got {retention}")


def _validate_limits(config: Config) -> None:
    if config.get_int("broker.max-request-bytes") < 1024:
        raise ConfigError("broker.max-request-bytes (socket.request.max.bytes) must be at least 1024")
    for name in ("broker.max-connections", "broker.max-connections-per-ip",
                 "transactions.max-timeout-ms", "transactions.id-expiration-ms",
                 "transactions.check-interval-ms", "cleaner.backoff-ms",
                 "cleaner.chunk-entries"):
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
    if not 0 <= config.get_int("transactions.version") <= 2:
        raise ConfigError("transactions.version must be 0, 1 or 2")
    if config.get_int("fetch.max-sessions") < 0:
        raise ConfigError("fetch.max-sessions must not be negative")
    _validate_share(config)


def _validate_share(config: Config) -> None:
    if not 1 <= config.get_int("share.min-record-lock-duration-ms") \
            <= config.get_int("share.max-record-lock-duration-ms"):
        raise ConfigError("share.min-record-lock-duration-ms must be at least 1 and at most "
                          "share.max-record-lock-duration-ms")
    for name in ("share.record-lock-duration-ms", "share.delivery-count-limit",
                 "share.partition-max-record-locks", "share.max-sessions"):
        if config.get_int(name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    if config.get_str("share.auto-offset-reset") not in ("latest", "earliest"):
        raise ConfigError("share.auto-offset-reset must be 'latest' or 'earliest'")

