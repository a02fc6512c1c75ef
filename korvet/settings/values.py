"""Every broker setting, declared once, and the raw values one load resolved.

``SETTINGS`` names each setting, its kind, default and help; the YAML key, the environment
variable and the flag are derived from its dotted name, so ``broker.port`` is
``broker: {port: ...}`` in YAML, ``KORVET_BROKER_PORT`` in the environment and
``--broker-port`` (or a short alias such as ``--port``) on the command line (load.py reads
them). ``Config`` holds the values by dotted name with where each came from: the raw layer
that load.py fills and validate.py checks. The broker reads none of it by name: it reads the
typed settings that validate.py builds from it (typed.py).

This is the settings floor's ground: it imports only ``korvet.core`` (pyproject.toml's
import contracts), so the server and the tools stand on it, never the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.core.topic_declarations import TopicDeclaration


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
    def section(self) -> str:
        """The typed settings' group this setting belongs to: ``redis`` for redis.wait-replicas."""
        return self.name.split(".", 1)[0]

    @property
    def field_name(self) -> str:
        """Its attribute in that group: ``wait_replicas`` (typed.py)."""
        return self.name.split(".", 1)[1].replace(".", "_").replace("-", "_")

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
        return tuple(env_of(n) for n in self.names)


def env_of(dotted: str) -> str:
    return "KORVET_" + dotted.replace(".", "_").replace("-", "_").upper()


MiB = 1024 * 1024

# Redis keeps a stream as a tree of listpack nodes of at most stream-node-max-bytes (its
# default 4096) and 100 entries each. An entry of a batches topic is a whole record batch (16
# KiB and more), so at 4096 every entry took a node of its own: Redis' XADD of a 15 KiB batch
# cost 9.2 µs against 7.1 in 1 MiB nodes, and the stream 5 % more memory (docs/performance.md).
# A node can pass the limit by one entry, so the largest batch bounds it too. The embedded
# Redis (server/embedded_redis.py) is started with the setting's value.
STREAM_NODE_MAX_BYTES = 1024 * 1024
STREAM_NODE_MAX_BYTES_LIMIT = 1024 * 1024 * 1024  # ours: a bigger node only costs copies

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
    Setting("share.record-lock-duration-ms", int, 30_000,
            "how long a share consumer holds the records a ShareFetch acquired before they are "
            "offered again (Kafka's group.share.record.lock.duration.ms; Kafka allows 15 s..60 s, "
            "Korvet any positive time, so tests need not wait 30 s)", unit="ms",
            also=("group.share.record.lock.duration.ms",)),
    Setting("share.min-record-lock-duration-ms", int, 15_000,
            "the least share.record.lock.duration.ms a group config may set (Kafka's "
            "group.share.min.record.lock.duration.ms; lower it to test lock expiry quickly)",
            unit="ms", also=("group.share.min.record.lock.duration.ms",)),
    Setting("share.max-record-lock-duration-ms", int, 60_000,
            "the largest share.record.lock.duration.ms a group config may set (Kafka's "
            "group.share.max.record.lock.duration.ms)",
            unit="ms", also=("group.share.max.record.lock.duration.ms",)),
    Setting("share.delivery-count-limit", int, 5,
            "deliveries of a record to a share group after which it is archived, never offered "
            "again (Kafka's group.share.delivery.count.limit)",
            also=("group.share.delivery.count.limit",)),
    Setting("share.partition-max-record-locks", int, 2000,
            "records of one share partition acquired at once; fetches acquire nothing more "
            "until some are acknowledged or released (Kafka's "
            "group.share.partition.max.record.locks; Korvet counts records, not offsets)",
            also=("group.share.partition.max.record.locks",)),
    Setting("share.auto-offset-reset", str, "latest",
            "where a share group starts on a partition it never read: 'latest' or 'earliest' "
            "(Kafka's share.auto.offset.reset group config)"),
    Setting("share.max-sessions", int, 2000,
            "share sessions the broker keeps (Kafka's group.share.max.share.sessions)",
            also=("group.share.max.share.sessions",)),
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
    # --- a Redis that may lose keys (korvet/server/redis_memory.py) ----------------------------
    Setting("redis.accept-eviction", bool, False,
            "start and serve on a Redis whose maxmemory-policy may evict the broker's keys "
            "(allkeys-lru, allkeys-lfu, allkeys-random): acknowledged records and committed "
            "offsets can then disappear without a word. Default: such a Redis is refused at "
            "start and makes readiness DOWN while running (fix: CONFIG SET maxmemory-policy "
            "noeviction)"),
    Setting("redis.memory-check-interval-ms", int, 10_000,
            "every this often the broker reads Redis' maxmemory-policy and memory (INFO "
            "memory) for readiness and metrics; a full Redis (appends refused with OOM) is "
            "logged at most once per interval", unit="ms"),
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
    Setting("topics.offset-scheme", str, "dense",
            "offset scheme of new topics (their korvet.offset.scheme): 'dense', Kafka's offsets "
            "that count records (0, 1, 2, ...), or 'time', the entry id packed as "
            "ms * 2^sequence-bits + seq; a topic keeps the scheme it was created with"),
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
    Setting("groups.share-session-timeout-ms", int, 45_000,
            "a share-group member not heard from for this long leaves its group, as Kafka's "
            "group.share.session.timeout.ms", unit="ms", also=("group.share.session.timeout.ms",)),
    Setting("groups.share-heartbeat-interval-ms", int, 5_000,
            "how often share-group members are told to heartbeat, as Kafka's "
            "group.share.heartbeat.interval.ms", unit="ms",
            also=("group.share.heartbeat.interval.ms",)),
    Setting("groups.share-min-session-timeout-ms", int, 45_000,
            "the least share.session.timeout.ms a group config may set (Kafka's "
            "group.share.min.session.timeout.ms)", unit="ms",
            also=("group.share.min.session.timeout.ms",)),
    Setting("groups.share-min-heartbeat-interval-ms", int, 5_000,
            "the least share.heartbeat.interval.ms a group config may set (Kafka's "
            "group.share.min.heartbeat.interval.ms)", unit="ms",
            also=("group.share.min.heartbeat.interval.ms",)),
    Setting("groups.share-max-size", int, 200,
            "members a share group may have; more joins answer GROUP_MAX_SIZE_REACHED (Kafka's "
            "group.share.max.size)", also=("group.share.max.size",)),
    Setting("groups.retention-check-interval-ms", int, 600_000,
            "every this often, delete the empty groups that have no committed offsets, as "
            "Kafka's offsets.retention.check.interval.ms does (0: never); the same rounds "
            "expire committed offsets (groups.offsets-retention-ms)", unit="ms"),
    # -- transactions (server/transactions.py) --------------------------------------------
    Setting("transactions.max-timeout-ms", int, 900_000,
            "the longest transaction.timeout.ms a transactional producer may ask for "
            "(InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it), as Kafka's "
            "transaction.max.timeout.ms", unit="ms", also=("transaction.max.timeout.ms",)),
    Setting("transactions.id-expiration-ms", int, 604_800_000,
            "a transactional id with no transaction open and no use for this long is removed "
            "(its next producer gets a new producer id), as Kafka's "
            "transactional.id.expiration.ms", unit="ms",
            also=("transactional.id.expiration.ms",)),
    Setting("transactions.version", int, 2,
            "the transaction.version feature ApiVersions finalizes: 2, clients use "
            "transactions v2 (KIP-890: the epoch bumped at every decision, partitions added "
            "with the write), as Kafka 4 does; 0 or 1, the older protocol (explicit "
            "AddPartitionsToTxn, one epoch across transactions)"),
    Setting("transactions.check-interval-ms", int, 10_000,
            "every this often, abort the transactions past their timeout, finish decided ones "
            "whose markers are not all written (a broker stopped while writing them) and "
            "expire idle transactional ids, as Kafka's "
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", unit="ms",
            also=("transaction.abort.timed.out.transaction.cleanup.interval.ms",)),
    # -- the log cleaner of compacted topics (server/cleaner.py) --------------------------
    Setting("cleaner.enable", bool, True,
            "run the log cleaner: compacted topics (cleanup.policy compact) keep the latest "
            "record of each key, as Kafka's log.cleaner.enable", also=("log.cleaner.enable",)),
    Setting("cleaner.backoff-ms", int, 15_000,
            "the log cleaner's pause between two rounds over the compacted partitions, as "
            "Kafka's log.cleaner.backoff.ms", unit="ms", also=("log.cleaner.backoff.ms",)),
    Setting("cleaner.chunk-entries", int, 250,
            "stream entries one call of the cleaner's script reads at most: a longer chunk "
            "makes a pass take fewer calls, each blocking Redis longer"),
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

BY_NAME = {s.name: s for s in SETTINGS}
BY_ANY_NAME = {n: s for s in SETTINGS for n in s.names}
BY_ENV = {e: s for s in SETTINGS for e in s.envs}


@dataclass(frozen=True, slots=True)
class Config:
    """The resolved values by dotted name, one per entry of SETTINGS, with where each came
    from, the declared topics, and the warnings loading gave. Read by name only inside this
    package: the broker reads ``BrokerSettings`` (typed.py)."""

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


def describe(config: Config) -> Sequence[tuple[str, object]]:
    """Every setting and its value as it may be printed: secrets as ****."""
    return [(s.name, "****" if s.secret and config[s.name] else config[s.name]) for s in SETTINGS]
