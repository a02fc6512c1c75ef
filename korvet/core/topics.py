"""Topic rules: Kafka's name rules and the topic configurations the broker supports.

Pure: no I/O. The protocol layer maps the errors here to Kafka error codes
(TopicNameError -> INVALID_TOPIC_EXCEPTION, TopicConfigError -> INVALID_CONFIG,
PartitionCountError -> INVALID_PARTITIONS).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from korvet.core.offsets import (
    DEFAULT_SEQUENCE_BITS,
    MAX_SEQUENCE_BITS,
    MIN_SEQUENCE_BITS,
    Codec,
    OffsetCodec,
)
from korvet.core.offsets import DENSE as DENSE_CODEC

MAX_TOPIC_NAME_LENGTH = 249
APPEND_TIMESTAMP_HEADER = "korvet.log.append.timestamp.ms"
MAX_PARTITIONS = 10_000  # a sanity bound: every partition is a Redis stream key
STORAGE_FORMAT = "korvet.storage.format"
OFFSET_SCHEME = "korvet.offset.scheme"
DENSE, TIME = "dense", "time"
OFFSET_SCHEMES = (DENSE, TIME)
RECORDS, BATCHES = "records", "batches"
STORAGE_FORMATS = (RECORDS, BATCHES)
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class TopicNameError(ValueError):
    pass


class TopicConfigError(ValueError):
    pass


class PartitionCountError(ValueError):
    pass


def validate_topic_name(name: str | None) -> str:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if name is None or name == "":
        raise TopicNameError("topic name is empty")
    if name in (".", ".."):
        raise TopicNameError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise TopicNameError(
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        raise TopicNameError(
            f"topic name {name!r} contains a character other than ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return name


def is_internal(name: str) -> bool:
    return name.startswith("__")


def collides(a: str, b: str) -> bool:
    """Kafka forbids two topics whose names differ only by '.' versus '_'."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")


def validate_partition_count(count: int) -> int:
    if count < 1:
        raise PartitionCountError(f"number of partitions must be at least 1, got {count}")
    if count > MAX_PARTITIONS:
        raise PartitionCountError(f"at most {MAX_PARTITIONS} partitions per topic, got {count}")
    return count


# --- topic configuration -------------------------------------------------------------

# Values are read as Kafka's ConfigDef reads them (Kafka 4.3.1, ``ConfigDef.parseType``): the
# text is trimmed as Java's String.trim does (every character up to U+0020), an INT or LONG is
# Java's parseInt/parseLong (an optional sign and digits: no '_', no spaces inside, within the
# type's range), a BOOLEAN is true or false in any case, a STRING is compared as it is, and a
# LIST is split at commas with the spaces around them. tests/integration/test_topic_config_defs.py
# holds these rules equal to Kafka's own for every setting Kafka knows.

_JAVA_WHITESPACE = "".join(chr(c) for c in range(0x21))
_INTEGER = re.compile(r"[+-]?\d+")
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_HEX_DOUBLE = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?")
_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}


def _trim(value: str) -> str:
    return value.strip(_JAVA_WHITESPACE)


def _whole(kind: str, low: int | None = None, high: int | None = None,
           *, also: int | None = None) -> Callable[[str], str]:
    """An INT or LONG setting within [low, high] (either open), or exactly ``also``."""
    lowest, highest = _RANGES[kind]

    def check(value: str) -> str:
        text = _trim(value)
        if not _INTEGER.fullmatch(text) or not lowest <= int(text) <= highest:
            raise TopicConfigError(f"not a number of type {kind.upper()}: {value!r}")
        number = int(text)
        if number != also and ((low is not None and number < low)
                               or (high is not None and number > high)):
            bounds = (f"at least {low}" if high is None else f"at most {high}" if low is None
                      else f"within {low}..{high}")
            raise TopicConfigError(f"must be {bounds}{'' if also is None else f' or {also}'}, "
                                   f"got {number}")
        return str(number)
    return check


def _long(low: int | None = None) -> Callable[[str], str]:
    return _whole("long", low)


def _int(low: int | None = None, high: int | None = None, *,
         also: int | None = None) -> Callable[[str], str]:
    return _whole("int", low, high, also=also)


def _ratio(value: str) -> str:
    """A DOUBLE within [0, 1] (Java's Double.parseDouble; NaN passes Kafka's range check too)."""
    text = _trim(value)
    if _DOUBLE.fullmatch(text):
        number = float(text.rstrip("fFdD"))
    elif _HEX_DOUBLE.fullmatch(text):
        number = float.fromhex(text.rstrip("fFdD"))
    else:
        raise TopicConfigError(f"not a number of type DOUBLE: {value!r}")
    if number < 0 or number > 1:
        raise TopicConfigError(f"must be within 0..1, got {text}")
    return text


def _choice(*options: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        text = _trim(value)
        if text not in options:
            raise TopicConfigError(f"must be one of {', '.join(options)}, got {value!r}")
        return text
    return check


def _boolean(value: str) -> str:
    lowered = _trim(value).lower()
    if lowered not in ("true", "false"):
        raise TopicConfigError(f"expected true or false, got {value!r}")
    return lowered


def _list_items(value: str) -> list[str]:
    text = _trim(value)
    return re.split(r"\s*,\s*", text) if text else []


def _throttled_replicas(value: str) -> str:
    """Kafka's list of partition:broker pairs, or '*' for all."""
    items = _list_items(value)
    if items != ["*"] and not all(re.fullmatch(r"([0-9]+:[0-9]+)?", i.strip()) for i in items):
        raise TopicConfigError(
            f"must be a list of partition:broker pairs such as 0:101,1:102, or '*', got {value!r}")
    return ",".join(items)


CLEANUP_POLICIES = ("compact", "delete")


def _cleanup_policy(value: str) -> str:
    """Kafka's list of compact and delete. With delete, retention.ms and retention.bytes trim
    old records; with compact, the log cleaner (korvet/server/cleaner.py) keeps the latest
    record of each key of a ``records`` topic, as Kafka's does; without either (an empty list)
    every record is kept until DeleteRecords or the topic's deletion."""
    policies = _list_items(value)
    for policy in policies:
        if policy not in CLEANUP_POLICIES:
            raise TopicConfigError(
                f"Invalid value {policy} for configuration cleanup.policy: String must be "
                f"one of: {', '.join(CLEANUP_POLICIES)}")
    return ",".join(policies)


def records_deletable(config: TopicConfig) -> bool:
    """Whether DeleteRecords may move the topic's log start: not for a compacted topic
    (compact without delete: POLICY_VIOLATION), as in Kafka 4.3; an empty policy may."""
    policies = config.get("cleanup.policy").split(",")
    return "delete" in policies or "compact" not in policies


def compacted(config: TopicConfig) -> bool:
    """Whether the log cleaner keeps only the latest record of each key: cleanup.policy has
    compact (alone or with delete)."""
    return "compact" in config.get("cleanup.policy").split(",")


def retention_applies(config: TopicConfig) -> bool:
    """Whether retention.ms and retention.bytes (and korvet.retention.records) trim the
    topic: its cleanup.policy has delete, as in Kafka."""
    return "delete" in config.get("cleanup.policy").split(",")  # stored as _cleanup_policy gives


def _sequence_bits(value: str) -> str:
    checked = int(_int()(value))
    if not MIN_SEQUENCE_BITS <= checked <= MAX_SEQUENCE_BITS:
        raise TopicConfigError(
            f"must be within {MIN_SEQUENCE_BITS}..{MAX_SEQUENCE_BITS}, got {checked}"
        )
    return str(checked)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    default: str
    check: Callable[[str], str]
    doc: str
    kind: str = "string"  # Kafka's ConfigDef type: boolean, string, int, long, double or list
    effective: bool = True  # False: accepted and reported, but Korvet does not act on it
    sensitive: bool = False
    read_only_after_create: bool = False


CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("cleanup.policy", "delete", _cleanup_policy,
              "delete: retention trims old records; compact: the log cleaner keeps the latest "
              "record of each key (both storage formats); "
              "empty: kept until DeleteRecords", kind="list"),
    ConfigDef("retention.ms", "604800000", _long(-1),
              "entries older than this are trimmed at write time (XTRIM MINID); -1 keeps all",
              kind="long"),
    ConfigDef("retention.bytes", "-1", _long(),
              "approximate size bound per partition, turned into an entry count (XTRIM MAXLEN) "
              "from the average stored record size of each appended batch; negative: no bound",
              kind="long"),
    ConfigDef("max.message.bytes", "1048588", _int(0),
              "largest record batch accepted (MESSAGE_TOO_LARGE above it)", kind="int"),
    ConfigDef("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's timestamps; LogAppendTime uses the broker's clock"),
    ConfigDef("message.timestamp.after.max.ms", "3600000", _long(0),
              "reject (INVALID_TIMESTAMP) CreateTime timestamps this far ahead of the broker",
              kind="long"),
    ConfigDef("message.timestamp.before.max.ms", "9223372036854775807", _long(0),
              "reject (INVALID_TIMESTAMP) CreateTime timestamps this far behind the broker",
              kind="long"),
    ConfigDef("compression.type", "producer",
              _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
              "Korvet never recompresses: a `records` topic stores records uncompressed, a "
              "`batches` topic each batch as the producer sent it", effective=False),
    ConfigDef("korvet.sequence.bits", str(DEFAULT_SEQUENCE_BITS), _sequence_bits,
              "offset = ms * 2^bits + seq: at most 2^bits offsets per millisecond per partition",
              kind="int", read_only_after_create=True),
    ConfigDef(OFFSET_SCHEME, TIME, _choice(*OFFSET_SCHEMES),
              "what an offset is: 'dense', Kafka's (0, 1, 2, ... per partition: the entry id of "
              "offset o is o-1), or 'time', the entry id packed (ms * 2^korvet.sequence.bits + seq, "
              "seed 003). Chosen when the topic is created (default from topics.offset-scheme); a "
              "topic that has none stored predates the choice and is 'time'",
              read_only_after_create=True),
    ConfigDef(STORAGE_FORMAT, RECORDS, _choice(*STORAGE_FORMATS),
              "how records sit in a partition's stream: 'records', one entry per record (readable "
              "by any Redis client), or 'batches', one entry per produced record batch, stored as "
              "the producer sent it (default from topics.storage-format)",
              read_only_after_create=True),
    ConfigDef("korvet.retention.records", "-1", _long(-1),
              "keep at most this many records per partition (exact XTRIM MAXLEN; with "
              "korvet.storage.format=batches whole batches, counted from the appended batch's "
              "size); -1: no bound", kind="long"),
    ConfigDef("korvet.trim.approximate", "false", _boolean,
              "trim with '~' (whole listpack nodes, cheaper) instead of exactly", kind="boolean"),
    ConfigDef("log.append.timestamp.header", "false", _boolean,
              f"add a header '{APPEND_TIMESTAMP_HEADER}' with the broker's arrival time (ms since "
              "the epoch, decimal text) to every record, as the original product does; the "
              "record's own timestamp is kept", kind="boolean"),
    # Kafka 4.3.1's other topic settings, read as Kafka reads them (type, range), accepted for
    # the tools that set them; those marked effective=False have no effect here (the log
    # cleaner's act on compacted topics: korvet/core/cleaner.py).
    ConfigDef("compression.gzip.level", "-1", _int(1, 9, also=-1),
              "the level a broker recompressing to gzip would use (Korvet does not recompress)",
              kind="int", effective=False),
    ConfigDef("compression.lz4.level", "9", _int(1, 17),
              "the level a broker recompressing to lz4 would use (Korvet does not recompress)",
              kind="int", effective=False),
    ConfigDef("compression.zstd.level", "3", _int(-131072, 22),
              "the level a broker recompressing to zstd would use (Korvet does not recompress)",
              kind="int", effective=False),
    ConfigDef("segment.ms", "604800000", _long(1),
              "a compacted topic's active segment (never cleaned) rolls once it is older than "
              "min(segment.ms, max.compaction.lag.ms); no segment files", kind="long"),
    ConfigDef("segment.bytes", "1073741824", _int(1048576), "no segments", kind="int",
              effective=False),
    ConfigDef("min.insync.replicas", "1", _int(1), "Redis' persistence and replicas decide",
              kind="int", effective=False),
    ConfigDef("unclean.leader.election.enable", "false", _boolean, "no leader elections",
              kind="boolean", effective=False),
    ConfigDef("min.cleanable.dirty.ratio", "0.5", _ratio,
              "a compacted partition is cleaned once the records written since its last "
              "cleaning are more than this part of it", kind="double"),
    ConfigDef("delete.retention.ms", "86400000", _long(0),
              "a tombstone of a compacted topic stays this long after the cleaning pass that "
              "made it its key's latest record", kind="long"),
    ConfigDef("file.delete.delay.ms", "60000", _long(0), "no segment files", kind="long",
              effective=False),
    ConfigDef("flush.messages", "9223372036854775807", _long(1), "Redis' appendfsync decides",
              kind="long", effective=False),
    ConfigDef("flush.ms", "9223372036854775807", _long(0), "Redis' appendfsync decides",
              kind="long", effective=False),
    ConfigDef("index.interval.bytes", "4096", _int(0),
              "a dense topic (korvet.offset.scheme=dense) adds a checkpoint to its time index "
              "every this many bytes appended (ListOffsets by time reads at most this much plus "
              "a batch after its binary search); no effect on a time topic", kind="int"),
    ConfigDef("segment.index.bytes", "10485760", _int(4), "no offset index", kind="int",
              effective=False),
    ConfigDef("segment.jitter.ms", "0", _long(0), "no segments", kind="long", effective=False),
    ConfigDef("preallocate", "false", _boolean, "no segment files", kind="boolean",
              effective=False),
    ConfigDef("local.retention.ms", "-2", _long(-2), "no tiered storage", kind="long",
              effective=False),
    ConfigDef("local.retention.bytes", "-2", _long(-2), "no tiered storage", kind="long",
              effective=False),
    ConfigDef("remote.storage.enable", "false", _boolean, "no tiered storage", kind="boolean",
              effective=False),
    ConfigDef("remote.log.copy.disable", "false", _boolean, "no tiered storage",
              kind="boolean", effective=False),
    ConfigDef("remote.log.delete.on.disable", "false", _boolean, "no tiered storage",
              kind="boolean", effective=False),
    ConfigDef("follower.replication.throttled.replicas", "", _throttled_replicas,
              "no replication", kind="list", effective=False),
    ConfigDef("leader.replication.throttled.replicas", "", _throttled_replicas,
              "no replication", kind="list", effective=False),
    ConfigDef("max.compaction.lag.ms", "9223372036854775807", _long(1),
              "a compacted partition holding a record this old that was never cleaned is "
              "cleaned whatever its dirty ratio", kind="long"),
    ConfigDef("min.compaction.lag.ms", "0", _long(0),
              "records of a compacted topic younger than this (by timestamp) are never "
              "cleaned", kind="long"),
)

CONFIGS: Mapping[str, ConfigDef] = {c.name: c for c in CONFIG_DEFS}


def validate_config(name: str, value: str | None) -> str:
    definition = CONFIGS.get(name)
    if definition is None:
        raise TopicConfigError(f"unknown topic config {name!r}")
    if value is None:
        raise TopicConfigError(f"{name}: a value is required")
    try:
        return definition.check(value)
    except TopicConfigError as exc:
        raise TopicConfigError(f"{name}: {exc}") from None


def validate_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    validated = {name: validate_config(name, value) for name, value in configs.items()}
    check_combination(TopicConfig(explicit=validated))
    return validated


def check_combination(config: TopicConfig) -> None:
    """Settings that are valid alone but not together."""
    if config.stores_batches and config.append_timestamp_header:
        raise TopicConfigError(
            "log.append.timestamp.header=true needs korvet.storage.format=records: a topic "
            "with korvet.storage.format=batches stores each batch as the producer sent it "
            "and adds no header to its records")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The configuration of one topic: explicit settings over defaults."""

    explicit: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=dict)  # broker-level overrides
    # What get/get_int answered, by name: Produce asks about ten of them per request. Both
    # mappings are read, never changed, once the config is made (a changed topic is read anew).
    _strings: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _ints: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def get(self, name: str) -> str:
        found = self._strings.get(name)
        if found is None:
            found = self._strings[name] = self._lookup(name)
        return found

    def _lookup(self, name: str) -> str:
        if name in self.explicit:
            return self.explicit[name]
        if name in self.defaults and not CONFIGS[name].read_only_after_create:
            return self.defaults[name]
        # A setting fixed at creation is stored with every topic (Services.create_topic); a
        # topic without it predates the setting and has the built-in default, whatever the
        # broker's default for new topics says now.
        return CONFIGS[name].default

    def get_int(self, name: str) -> int:
        found = self._ints.get(name)
        if found is None:
            found = self._ints[name] = int(self.get(name))
        return found

    def source(self, name: str) -> str:
        """'topic', 'broker' or 'default' (DescribeConfigs' config source). A setting fixed at
        creation is stored with every topic; it is the topic's own ('topic') only where it
        differs from what a new topic gets (``new_topic_default``), so that tools do not see
        every topic overriding Korvet's settings nor try to delete them."""
        if CONFIGS[name].read_only_after_create:
            return "topic" if self.get(name) != self.new_topic_default(name) else "default"
        if name in self.explicit:
            return "topic"
        if name in self.defaults:
            return "broker"
        return "default"

    def new_topic_default(self, name: str) -> str:
        """What a topic created now would get: the broker's setting, else the built-in."""
        return self.defaults.get(name, CONFIGS[name].default)

    @property
    def sequence_bits(self) -> int:
        return self.get_int("korvet.sequence.bits")

    @property
    def storage_format(self) -> str:
        return self.get(STORAGE_FORMAT)

    @property
    def dense(self) -> bool:
        """Whether offsets count records (korvet.offset.scheme=dense)."""
        return self.get(OFFSET_SCHEME) == DENSE

    @property
    def codec(self) -> Codec:
        """The topic's offsets <-> entry ids (korvet/core/offsets.py)."""
        return DENSE_CODEC if self.dense else OffsetCodec(self.sequence_bits)

    @property
    def codec_bits(self) -> int:
        """What the scripts are told of the codec: 0 for a dense topic, else the sequence bits."""
        return 0 if self.dense else self.sequence_bits

    @property
    def stores_batches(self) -> bool:
        return self.get(STORAGE_FORMAT) == BATCHES

    @property
    def log_append_time(self) -> bool:
        return self.get("message.timestamp.type") == "LogAppendTime"

    @property
    def append_timestamp_header(self) -> bool:
        return self.get("log.append.timestamp.header") == "true"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str  # UUID text
    partitions: int
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class TrimPolicy:
    """How an append trims its partition (computed from the topic's config)."""

    min_id_ms: int  # entries with ms below this are trimmed; -1: no time bound
    max_len: int  # keep at most this many entries; -1: no count bound
    approximate: bool


def trim_policy(config: TopicConfig, now_ms: int, batch_bytes: int, batch_records: int, *,
                entries: int | None = None) -> TrimPolicy:
    """Retention at write time: retention.ms -> MINID, size/count -> MAXLEN.

    ``batch_bytes`` is what the appended batch stores, ``batch_records`` its records and
    ``entries`` the stream entries it becomes (default: one per record). MAXLEN counts
    entries: with one entry per batch (the ``batches`` format) the record and byte bounds are
    turned into entries by this batch's records per entry and bytes per entry."""
    if not retention_applies(config):
        return TrimPolicy(-1, -1, config.get("korvet.trim.approximate") == "true")
    retention_ms = config.get_int("retention.ms")
    min_id = now_ms - retention_ms if retention_ms >= 0 else -1
    stored = batch_records if entries is None else entries
    bounds: list[int] = []
    records = config.get_int("korvet.retention.records")
    if records >= 0:
        if stored and stored != batch_records:
            per_entry = max(1, batch_records // stored)
            bounds.append(-(-records // per_entry))  # enough whole entries to hold them
        else:
            bounds.append(records)
    retention_bytes = config.get_int("retention.bytes")
    if retention_bytes >= 0 and stored > 0:
        average = max(1, batch_bytes // stored)
        bounds.append(max(1, retention_bytes // average))
    max_len = min(bounds) if bounds else -1
    return TrimPolicy(max(-1, min_id), max_len, config.get("korvet.trim.approximate") == "true")
