"""The settings the broker runs with: one frozen, typed object, built once they are valid.

``BrokerSettings`` has one section per first part of the settings' dotted names, and each
section one attribute per setting: ``redis.wait-replicas`` is ``settings.redis.wait_replicas``
(an ``int``), ``cluster.multi-broker`` is ``settings.cluster.multi_broker``. mypy checks every
read; nothing outside this package reads a setting by its name (tests/unit/settings holds
that). The four settings whose values are lists (listeners, SASL mechanisms, super users,
tenants) are read only in their parsed form, ``settings.security`` (security.py), with the
rest of the security settings parsed and checked.

Sections are filled from the loaded values by name in one place, ``_section``: a field that
names no setting fails every load, and a setting no field names fails the unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from korvet.core.topic_declarations import Declared, TopicDeclaration, resolve
from korvet.settings.security import SecuritySettings
from korvet.settings.values import BY_NAME, SETTINGS, Config, Setting

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@dataclass(frozen=True, slots=True)
class BrokerSection:
    """``broker.*``: the listener, this node's identity, connection limits, and the raw
    TLS/SASL settings (parsed: ``BrokerSettings.security``)."""

    host: str
    port: int
    advertised_host: str
    advertised_port: int
    id: int
    cluster_id: str
    rack: str
    max_request_bytes: int
    max_connections: int
    max_connections_per_ip: int
    max_pending_bytes: int
    resume_pending_bytes: int
    connections_max_idle_ms: int
    port_file: str
    listeners_file: str
    advertised_listeners: str
    listener_security_protocol_map: str
    tls: bool
    cert_file: str
    key_file: str
    key_password: str = field(repr=False)
    trust_cert_file: str
    client_auth_required: bool
    listener_client_auth: str
    client_auth: str
    sasl_enabled: bool
    connections_max_reauth_ms: int
    failed_authentication_delay_ms: int


@dataclass(frozen=True, slots=True)
class RedisSection:
    """``redis.*``: which Redis, how the broker talks to it, and the embedded one's options."""

    url: str
    url_from: str  # where redis.url came from ('default', a flag, a variable, a file key)
    username: str
    password: str = field(repr=False)
    cluster: bool
    pool_size: int
    pool_max_wait: int
    wait_replicas: int
    wait_timeout_ms: int
    accept_eviction: bool
    memory_check_interval_ms: int
    keyspace: str
    server_binary: str
    embedded_port: int
    appendfsync: str
    aof_rewrite_min_mb: int
    stream_node_max_bytes: int
    tls_ca_file: str
    tls_cert_file: str
    tls_key_file: str


@dataclass(frozen=True, slots=True)
class TopicsSection:
    """``topics.*``: the defaults of new topics, and the topics declared by name or pattern
    (``korvet.topics[N]``, core/topic_declarations.py)."""

    auto_create: bool
    default_partitions: int
    sequence_bits: int
    storage_format: str
    offset_scheme: str
    retention_ms: int
    timestamp_after_max_ms: int
    declarations: tuple[TopicDeclaration, ...]

    def declared(self, topic: str) -> Declared:
        """What the declarations matching ``topic`` say of it."""
        return resolve(self.declarations, topic)


@dataclass(frozen=True, slots=True)
class GroupsSection:
    """``groups.*``: the group coordinator's limits and clean-up rounds."""

    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_size: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_min_session_timeout_ms: int
    share_min_heartbeat_interval_ms: int
    share_max_size: int
    retention_check_interval_ms: int
    offsets_retention_ms: int
    event_log: str
    test_clock: bool


@dataclass(frozen=True, slots=True)
class TransactionsSection:
    """``transactions.*``: the transaction coordinator's limits and its checks."""

    max_timeout_ms: int
    id_expiration_ms: int
    version: int
    check_interval_ms: int


@dataclass(frozen=True, slots=True)
class CleanerSection:
    """``cleaner.*``: the log cleaner of compacted topics (server/cleaner.py)."""

    enable: bool
    backoff_ms: int
    chunk_entries: int


@dataclass(frozen=True, slots=True)
class FetchSection:
    """``fetch.*``: incremental fetch sessions."""

    max_sessions: int


@dataclass(frozen=True, slots=True)
class ShareSection:
    """``share.*``: share groups' partitions (KIP-932, server/handlers/share.py)."""

    record_lock_duration_ms: int
    min_record_lock_duration_ms: int
    max_record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    auto_offset_reset: str
    max_sessions: int


@dataclass(frozen=True, slots=True)
class ClusterSection:
    """``cluster.*``: several brokers on one Redis (server/ownership.py)."""

    multi_broker: bool
    broker_ttl_ms: int
    lease_ms: int
    lease_margin_ms: int


@dataclass(frozen=True, slots=True)
class HttpSection:
    """``http.*``: the endpoint of health probes and metrics."""

    enabled: bool
    host: str
    port: int
    port_file: str


@dataclass(frozen=True, slots=True)
class AuthorizerSection:
    """``authorizer.*`` (its super users are parsed: ``BrokerSettings.security.policy``)."""

    enabled: bool
    allow_everyone_if_no_acl_found: bool


@dataclass(frozen=True, slots=True)
class DataSection:
    """``data.*``: the folder of the embedded Redis' data and the broker's files."""

    dir: str


@dataclass(frozen=True, slots=True)
class LogSection:
    """``log.*``."""

    level: str


@dataclass(frozen=True, slots=True)
class ConfigSection:
    """``config.*``: how loading treats unknown names."""

    strict: bool


class KafkaConfig(NamedTuple):
    """A broker setting as DescribeConfigs answers it: Kafka's name, the value as Kafka
    writes it, and how to set it."""

    name: str
    value: str
    documentation: str


# DescribeConfigs (resource type BROKER) answers these settings under Kafka's names.
KAFKA_NAMES: tuple[tuple[str, Setting], ...] = tuple((kafka, BY_NAME[name]) for kafka, name in (
    ("broker.id", "broker.id"),
    ("auto.create.topics.enable", "topics.auto-create"),
    ("num.partitions", "topics.default-partitions"),
    ("log.retention.ms", "topics.retention-ms"),
    ("log.message.timestamp.after.max.ms", "topics.timestamp-after-max-ms"),
    ("socket.request.max.bytes", "broker.max-request-bytes"),
    ("max.connections", "broker.max-connections"),
    ("max.connections.per.ip", "broker.max-connections-per-ip"),
    ("connections.max.idle.ms", "broker.connections-max-idle-ms"),
    ("max.incremental.fetch.session.cache.slots", "fetch.max-sessions"),
    ("group.share.record.lock.duration.ms", "share.record-lock-duration-ms"),
    ("group.share.min.record.lock.duration.ms", "share.min-record-lock-duration-ms"),
    ("group.share.max.record.lock.duration.ms", "share.max-record-lock-duration-ms"),
    ("group.share.delivery.count.limit", "share.delivery-count-limit"),
    ("group.share.partition.max.record.locks", "share.partition-max-record-locks"),
    ("group.share.max.share.sessions", "share.max-sessions"),
    ("group.initial.rebalance.delay.ms", "groups.initial-rebalance-delay-ms"),
    ("group.min.session.timeout.ms", "groups.min-session-timeout-ms"),
    ("group.max.session.timeout.ms", "groups.max-session-timeout-ms"),
    ("group.max.size", "groups.max-size"),
    ("group.share.session.timeout.ms", "groups.share-session-timeout-ms"),
    ("group.share.heartbeat.interval.ms", "groups.share-heartbeat-interval-ms"),
    ("group.share.min.session.timeout.ms", "groups.share-min-session-timeout-ms"),
    ("group.share.min.heartbeat.interval.ms", "groups.share-min-heartbeat-interval-ms"),
    ("group.share.max.size", "groups.share-max-size"),
    ("transaction.max.timeout.ms", "transactions.max-timeout-ms"),
    ("transactional.id.expiration.ms", "transactions.id-expiration-ms"),
    ("log.cleaner.enable", "cleaner.enable"),
    ("log.cleaner.backoff.ms", "cleaner.backoff-ms"),
))


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Every setting of ``korvet serve``, typed, checked, and never changed once built."""

    broker: BrokerSection
    redis: RedisSection
    topics: TopicsSection
    groups: GroupsSection
    transactions: TransactionsSection
    cleaner: CleanerSection
    fetch: FetchSection
    share: ShareSection
    cluster: ClusterSection
    http: HttpSection
    authorizer: AuthorizerSection
    data: DataSection
    log: LogSection
    config: ConfigSection
    security: SecuritySettings
    # The values by dotted name with their sources: for printing them (values.describe) and
    # for DescribeConfigs, never for the broker to read a setting by.
    raw: Config = field(repr=False, compare=False)

    @classmethod
    def build(cls, config: Config, security: SecuritySettings) -> BrokerSettings:
        """The settings of values validate.py has checked, with their parsed security."""
        return cls(
            broker=_section(BrokerSection, config),
            redis=_section(RedisSection, config, url_from=config.source("redis.url")),
            topics=_section(TopicsSection, config, declarations=config.topics),
            groups=_section(GroupsSection, config),
            transactions=_section(TransactionsSection, config),
            cleaner=_section(CleanerSection, config),
            fetch=_section(FetchSection, config),
            share=_section(ShareSection, config),
            cluster=_section(ClusterSection, config),
            http=_section(HttpSection, config),
            authorizer=_section(AuthorizerSection, config),
            data=_section(DataSection, config),
            log=_section(LogSection, config),
            config=_section(ConfigSection, config),
            security=security,
            raw=config,
        )

    @property
    def warnings(self) -> tuple[str, ...]:
        """What loading noticed but accepted: unknown names, the original's inert settings."""
        return self.raw.warnings

    def kafka_configs(self) -> tuple[KafkaConfig, ...]:
        """The settings Kafka's brokers have too, under Kafka's names (KAFKA_NAMES)."""
        return tuple(KafkaConfig(kafka, _kafka_text(self.raw[setting.name]),
                                 f"korvet serve {setting.flag}")
                     for kafka, setting in KAFKA_NAMES)


def _kafka_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


S = TypeVar("S", bound="DataclassInstance")

# (section, field) -> the setting: ("redis", "wait_replicas") -> redis.wait-replicas
SETTING_OF: dict[tuple[str, str], Setting] = {(s.section, s.field_name): s for s in SETTINGS}
# BrokerSettings' field of each section class
SECTIONS: dict[type[Any], str] = {
    BrokerSection: "broker", RedisSection: "redis", TopicsSection: "topics",
    GroupsSection: "groups", TransactionsSection: "transactions", FetchSection: "fetch",
    CleanerSection: "cleaner", ShareSection: "share",
    ClusterSection: "cluster",
    HttpSection: "http", AuthorizerSection: "authorizer", DataSection: "data", LogSection: "log",
    ConfigSection: "config",
}


def _section(cls: type[S], config: Config, **derived: object) -> S:
    """A section of ``config``'s values: each field the setting it names, unless ``derived``
    gives it (a value that is no setting of its own)."""
    name = SECTIONS[cls]
    values = {f.name: derived[f.name] if f.name in derived
              else config[SETTING_OF[name, f.name].name] for f in fields(cls)}
    return cls(**values)
