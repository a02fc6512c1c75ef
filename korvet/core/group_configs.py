"""Group configs (KIP-848, KIP-932): a group's own settings, set with IncrementalAlterConfigs on
a GROUP resource (ConfigResource type 32) and read with DescribeConfigs, as `kafka-configs
--entity-type groups` and the Admin client do.

The names, types, defaults and bounds are Kafka 4.3.1's (its GroupConfig): a share group's
`share.auto.offset.reset` (where the group starts on a partition it never read),
`share.record.lock.duration.ms`, `share.delivery.count.limit`,
`share.partition.max.record.locks`, `share.isolation.level`, `share.session.timeout.ms`,
`share.heartbeat.interval.ms` and `share.renew.acknowledge.enable`, and the consumer and
streams groups' ones, accepted and stored so that tools work (Korvet serves neither protocol
yet). A group's value overrides the broker's setting of the same meaning (Kafka's synonym
`group.<name>`, e.g. `group.share.record.lock.duration.ms`); a config the group does not set
reads as the broker's.

Configs exist whether or not the group does (Kafka lets a tool set
`share.auto.offset.reset` before the first consumer joins). ``decide`` is the pure plan of an
alteration; the handler (korvet/server/handlers/configs.py) reads and writes the stored set
(korvet/storage/group_configs.py). Tests: tests/unit/core/test_group_configs.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from korvet.core.admin import Refusal
from korvet.core.alter_configs import APPEND, DELETE, SET, SUBTRACT, ConfigResource
from korvet.core.errors import ErrorCode

GROUP_RESOURCE = 32

# Kafka's ISO-8601 durations for `by_duration:` (java.time.Duration.parse: PnDTnHnMn.nS,
# no negative part).
_DURATION = re.compile(
    r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?$", re.IGNORECASE)


def duration_ms(text: str) -> int | None:
    """The milliseconds of an ISO-8601 duration as Kafka accepts it, None when it is not one."""
    found = _DURATION.match(text)
    if found is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        return None
    days, hours, minutes, seconds = (found.group(i) for i in range(1, 5))
    total = (int(days or 0) * 86_400 + int(hours or 0) * 3_600 + int(minutes or 0) * 60) * 1000
    return total + round(float(seconds or 0) * 1000)


def _reset_error(value: str) -> str | None:
    if value in ("earliest", "latest"):
        return None
    if value.startswith("by_duration:") and duration_ms(value[len("by_duration:"):]) is not None:
        return None
    return ("must be one of [latest, earliest, by_duration:PnDTnHnMn.nS] (a non-negative "
            "ISO-8601 duration)")


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    kind: str  # "int", "string" or "boolean" (DescribeConfigs' config type)
    default: str
    doc: str
    minimum: int | None = None  # ints: the least value Kafka's GroupConfig accepts
    check: Callable[[str], str | None] | None = None  # strings: why a value is refused
    # ints: the broker configs that bound a group's value, with their Kafka defaults
    # (Kafka's GroupConfig.validateValues: "... must be greater than or equal to <lower>")
    lower: tuple[str, int] | None = None
    upper: tuple[str, int] | None = None

    @property
    def broker_synonym(self) -> str:
        """The broker setting this config overrides for one group (Kafka's synonym)."""
        return f"group.{self.name}"


def _one_of(*values: str) -> Callable[[str], str | None]:
    return lambda v: None if v in values else f"must be one of [{', '.join(values)}]"


GROUP_CONFIG_DEFS: tuple[GroupConfigDef, ...] = (
    GroupConfigDef("consumer.session.timeout.ms", "int", "45000",
                   "the session timeout of a consumer group's members (KIP-848)", minimum=1,
                   lower=("group.consumer.min.session.timeout.ms", 45_000),
                   upper=("group.consumer.max.session.timeout.ms", 60_000)),
    GroupConfigDef("consumer.heartbeat.interval.ms", "int", "5000",
                   "the heartbeat interval of a consumer group's members (KIP-848)", minimum=1,
                   lower=("group.consumer.min.heartbeat.interval.ms", 5_000),
                   upper=("group.consumer.max.heartbeat.interval.ms", 15_000)),
    GroupConfigDef("consumer.assignment.interval.ms", "int", "1000",
                   "the interval between assignment updates of a consumer group", minimum=0,
                   upper=("group.consumer.max.assignment.interval.ms", 15_000)),
    GroupConfigDef("share.session.timeout.ms", "int", "45000",
                   "how long a share-group member may go unheard before it leaves", minimum=1,
                   lower=("group.share.min.session.timeout.ms", 45_000),
                   upper=("group.share.max.session.timeout.ms", 60_000)),
    GroupConfigDef("share.heartbeat.interval.ms", "int", "5000",
                   "the heartbeat interval given to a share group's members", minimum=1,
                   lower=("group.share.min.heartbeat.interval.ms", 5_000),
                   upper=("group.share.max.heartbeat.interval.ms", 15_000)),
    GroupConfigDef("share.assignment.interval.ms", "int", "1000",
                   "the interval between assignment updates of a share group", minimum=0,
                   upper=("group.share.max.assignment.interval.ms", 15_000)),
    GroupConfigDef("share.record.lock.duration.ms", "int", "30000",
                   "how long a share consumer holds the records it was given before they are "
                   "offered again", minimum=1000,
                   lower=("group.share.min.record.lock.duration.ms", 15_000),
                   upper=("group.share.max.record.lock.duration.ms", 60_000)),
    GroupConfigDef("share.delivery.count.limit", "int", "5",
                   "deliveries of a record after which it is archived", minimum=2,
                   upper=("group.share.max.delivery.count.limit", 10)),
    GroupConfigDef("share.partition.max.record.locks", "int", "2000",
                   "records of one share partition acquired at once", minimum=100,
                   upper=("group.share.max.partition.max.record.locks", 4_000)),
    GroupConfigDef("share.auto.offset.reset", "string", "latest",
                   "where a share group starts on a partition it never read: earliest, latest "
                   "or by_duration:<ISO-8601 duration> (from now, back)", check=_reset_error),
    GroupConfigDef("share.isolation.level", "string", "read_uncommitted",
                   "read_committed: a share group is given committed transactional records only",
                   check=_one_of("read_committed", "read_uncommitted")),
    GroupConfigDef("share.renew.acknowledge.enable", "boolean", "true",
                   "whether a share consumer may renew its records' locks (RENEW)",
                   check=_one_of("true", "false")),
    GroupConfigDef("streams.session.timeout.ms", "int", "45000",
                   "the session timeout of a streams group's members (KIP-1071)", minimum=1,
                   lower=("group.streams.min.session.timeout.ms", 45_000),
                   upper=("group.streams.max.session.timeout.ms", 60_000)),
    GroupConfigDef("streams.heartbeat.interval.ms", "int", "5000",
                   "the heartbeat interval of a streams group's members", minimum=1,
                   lower=("group.streams.min.heartbeat.interval.ms", 5_000),
                   upper=("group.streams.max.heartbeat.interval.ms", 15_000)),
    GroupConfigDef("streams.assignment.interval.ms", "int", "1000",
                   "the interval between assignment updates of a streams group", minimum=0,
                   upper=("group.streams.max.assignment.interval.ms", 15_000)),
    GroupConfigDef("streams.num.standby.replicas", "int", "0",
                   "standby replicas of each task of a streams group", minimum=0,
                   upper=("group.streams.max.standby.replicas", 2)),
    GroupConfigDef("streams.initial.rebalance.delay.ms", "int", "3000",
                   "how long a new streams group waits for more members", minimum=0),
)
GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in GROUP_CONFIG_DEFS}
_INT_MAX = 2**31 - 1
# A member's heartbeats must come more often than its session runs out (Kafka's check).
_INTERVAL_BELOW_TIMEOUT = (("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"),
                           ("share.heartbeat.interval.ms", "share.session.timeout.ms"),
                           ("streams.heartbeat.interval.ms", "streams.session.timeout.ms"))


@dataclass(frozen=True, slots=True)
class NewGroupConfigs:
    """A group resource that passes every check: its stored set becomes ``configs``."""

    group: str
    configs: Mapping[str, str]
    write: bool  # False: the request only validates


def effective(explicit: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
    """Every group config's value for a group: its own, else the broker's setting of the same
    meaning (``broker`` maps Kafka's broker names, e.g. group.share.delivery.count.limit),
    else Kafka's default."""
    return {d.name: explicit.get(d.name, broker.get(d.broker_synonym, d.default))
            for d in GROUP_CONFIG_DEFS}


def source_of(name: str, explicit: Mapping[str, str], broker: Mapping[str, str]) -> str:
    """Where a group's value comes from: "group", "broker" or "default"."""
    if name in explicit:
        return "group"
    return "broker" if GROUP_CONFIGS[name].broker_synonym in broker else "default"


def decide(resource: ConfigResource, current: Mapping[str, str], broker: Mapping[str, str], *,
           incremental: bool, validate_only: bool) -> NewGroupConfigs | Refusal:
    """What a GROUP resource of an AlterConfigs or IncrementalAlterConfigs request gets, given
    the group's stored set ``current`` and the broker's settings under Kafka's names."""
    if not incremental:
        # Kafka's brokers take group configs through IncrementalAlterConfigs only.
        return Refusal(ErrorCode.INVALID_REQUEST,
                       "AlterConfigs does not take group resources: use IncrementalAlterConfigs")
    if not resource.name:
        return Refusal(ErrorCode.INVALID_REQUEST, "A group resource needs a group id.")
    wanted = dict(current)
    for change in resource.changes:
        if change.operation not in (SET, DELETE, APPEND, SUBTRACT):
            return Refusal(ErrorCode.INVALID_REQUEST, f"Unknown config operation {change.operation}.")
        definition = GROUP_CONFIGS.get(change.name)
        if definition is None:
            return Refusal(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {change.name}")
        if change.operation == DELETE:
            wanted.pop(change.name, None)
        elif change.operation != SET:
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"{change.name} is not a list: APPEND and SUBTRACT apply to list configs only")
        elif change.value is None:
            return Refusal(ErrorCode.INVALID_CONFIG, f"Null value not supported for {change.name}")
        else:
            value = change.value.strip()
            wanted[change.name] = value.lower() if definition.kind == "boolean" else value
    refused = _invalid(wanted, broker)
    if refused is not None:
        return refused
    return NewGroupConfigs(resource.name, wanted, write=not validate_only)


def _invalid(wanted: Mapping[str, str], broker: Mapping[str, str]) -> Refusal | None:
    for name, value in wanted.items():
        definition = GROUP_CONFIGS[name]
        why = _value_error(definition, value)
        if why is not None:
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"Invalid value {value} for configuration {name}: {why}")
    for name, value in wanted.items():
        refused = _out_of_bounds(GROUP_CONFIGS[name], int(value), broker) \
            if GROUP_CONFIGS[name].kind == "int" else None
        if refused is not None:
            return refused
    values = effective(wanted, broker)
    for interval, timeout in _INTERVAL_BELOW_TIMEOUT:
        if (interval in wanted or timeout in wanted) and int(values[interval]) >= int(values[timeout]):
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"{interval} ({values[interval]}) must be less than {timeout} "
                           f"({values[timeout]})")
    return None


def _out_of_bounds(definition: GroupConfigDef, value: int,
                   broker: Mapping[str, str]) -> Refusal | None:
    """A group's own value outside the broker's bounds for it (Kafka's broker configs
    group.<kind>.min/max.*, at their defaults unless the broker sets them): INVALID_CONFIG in
    Kafka's words. Only the group's own values are held to them, as Kafka holds a group's
    properties. The broker's own value of the config is always within them: Kafka's broker
    refuses to start with it outside, Korvet lets a broker run with a shorter session or
    lock than Kafka's least (tests do), and a group may then set as much."""
    own = broker.get(definition.broker_synonym)
    for bound, below in ((definition.lower, True), (definition.upper, False)):
        if bound is None:
            continue
        name, default = bound
        limit = int(broker.get(name, default))
        if own is not None:
            limit = min(limit, int(own)) if below else max(limit, int(own))
        if (value < limit) if below else (value > limit):
            side = "greater" if below else "less"
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"{definition.name} must be {side} than or equal to {name} "
                           f"({limit}; asked {value})")
    return None


def _value_error(definition: GroupConfigDef, value: str) -> str | None:
    if definition.kind == "int":
        try:
            number = int(value)
        except ValueError:
            return "not a number"
        if not -_INT_MAX - 1 <= number <= _INT_MAX:
            return "not a 32-bit integer"
        if definition.minimum is not None and number < definition.minimum:
            return f"Value must be at least {definition.minimum}"
        return None
    if definition.kind == "boolean":
        value = value.lower()
    return definition.check(value) if definition.check is not None else None
