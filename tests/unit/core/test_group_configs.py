"""Group configs (korvet/core/group_configs.py): Kafka 4.3.1's names, bounds and checks, and
what a group reads when it sets nothing."""

from __future__ import annotations

import pytest

from korvet.core.admin import Refusal
from korvet.core.alter_configs import APPEND, DELETE, SET, ConfigChange, ConfigResource
from korvet.core.errors import ErrorCode
from korvet.core.group_configs import (
    GROUP_RESOURCE,
    NewGroupConfigs,
    decide,
    duration_ms,
    effective,
    source_of,
)

# a broker that lowers the least lock duration (as tests do, to see locks expire quickly)
BROKER = {"group.share.record.lock.duration.ms": "20000",
          "group.share.min.record.lock.duration.ms": "1000"}


def alter(*changes: ConfigChange, current: dict[str, str] | None = None,
          incremental: bool = True) -> NewGroupConfigs | Refusal:
    return decide(ConfigResource(GROUP_RESOURCE, "g", changes), current or {}, BROKER,
                  incremental=incremental, validate_only=False)


def test_a_set_is_stored_and_overrides_the_broker_for_that_group_only() -> None:
    verdict = alter(ConfigChange("share.auto.offset.reset", "earliest"),
                    ConfigChange("share.record.lock.duration.ms", "1500"))
    assert isinstance(verdict, NewGroupConfigs)
    assert verdict.configs == {"share.auto.offset.reset": "earliest",
                               "share.record.lock.duration.ms": "1500"}
    values = effective(verdict.configs, BROKER)
    assert values["share.record.lock.duration.ms"] == "1500"
    assert values["share.delivery.count.limit"] == "5"  # Kafka's default
    assert effective({}, BROKER)["share.record.lock.duration.ms"] == "20000"  # the broker's
    assert source_of("share.record.lock.duration.ms", {}, BROKER) == "broker"
    assert source_of("share.delivery.count.limit", {}, BROKER) == "default"
    assert source_of("share.auto.offset.reset", verdict.configs, BROKER) == "group"


def test_a_delete_returns_the_config_to_the_brokers_value() -> None:
    verdict = alter(ConfigChange("share.auto.offset.reset", None, DELETE),
                    current={"share.auto.offset.reset": "earliest"})
    assert isinstance(verdict, NewGroupConfigs) and verdict.configs == {}


@pytest.mark.parametrize(("name", "value"), [
    ("share.record.lock.duration.ms", "999"),  # Kafka's least: 1000
    ("share.delivery.count.limit", "1"),  # at least 2
    ("share.partition.max.record.locks", "99"),  # at least 100
    ("share.auto.offset.reset", "newest"),
    ("share.auto.offset.reset", "by_duration:-PT1H"),
    ("share.auto.offset.reset", "by_duration:PT"),
    ("share.isolation.level", "committed"),
    ("share.session.timeout.ms", "forty"),
    ("share.renew.acknowledge.enable", "yes"),
    ("share.heartbeat.interval.ms", "50000"),  # not less than the session timeout (45 s)
])
def test_a_value_kafka_refuses_is_invalid_config(name: str, value: str) -> None:
    verdict = alter(ConfigChange(name, value))
    assert isinstance(verdict, Refusal) and verdict.code is ErrorCode.INVALID_CONFIG, verdict
    assert name in verdict.message


# Apache Kafka 4.3.1 with its default broker configs, measured 2026-11-30 (IncrementalAlterConfigs
# of one group config each): the last value accepted and the first refused at each bound.
KAFKAS_BOUNDS = [
    ("consumer.session.timeout.ms", "45000", "44999", "60000", "60001"),
    ("consumer.heartbeat.interval.ms", "5000", "4999", "15000", "15001"),
    ("consumer.assignment.interval.ms", "0", None, "15000", "15001"),
    ("share.session.timeout.ms", "45000", "44999", "60000", "60001"),
    ("share.heartbeat.interval.ms", "5000", "4999", "15000", "15001"),
    ("share.assignment.interval.ms", "0", None, "15000", "15001"),
    ("share.record.lock.duration.ms", "15000", "14999", "60000", "60001"),
    ("share.delivery.count.limit", "2", "1", "10", "11"),
    ("share.partition.max.record.locks", "100", "99", "4000", "4001"),
    ("streams.session.timeout.ms", "45000", "44999", "60000", "60001"),
    ("streams.heartbeat.interval.ms", "5000", "4999", "15000", "15001"),
    ("streams.assignment.interval.ms", "0", None, "15000", "15001"),
    ("streams.num.standby.replicas", "0", "-1", "2", "3"),
]


@pytest.mark.parametrize(("name", "least", "below", "most", "above"), KAFKAS_BOUNDS)
def test_a_groups_value_is_held_within_kafkas_broker_bounds(
        name: str, least: str, below: str | None, most: str, above: str) -> None:
    for accepted in (least, most):
        verdict = decide(ConfigResource(GROUP_RESOURCE, "g", (ConfigChange(name, accepted),)),
                         {}, {}, incremental=True, validate_only=False)
        assert isinstance(verdict, NewGroupConfigs), (accepted, verdict)
    for refused in (below, above):
        if refused is None:
            continue
        verdict = decide(ConfigResource(GROUP_RESOURCE, "g", (ConfigChange(name, refused),)),
                         {}, {}, incremental=True, validate_only=False)
        assert isinstance(verdict, Refusal) and verdict.code is ErrorCode.INVALID_CONFIG, refused
        assert name in verdict.message
    over = decide(ConfigResource(GROUP_RESOURCE, "g", (ConfigChange(name, above),)), {}, {},
                  incremental=True, validate_only=False)
    assert isinstance(over, Refusal)
    assert f"{name} must be less than or equal to group." in over.message  # Kafka's words


def test_the_brokers_bounds_are_its_settings() -> None:
    """A broker that sets group.share.min.record.lock.duration.ms lower lets a group hold its
    records for less (Kafka's own tests do so); one that sets the max lower refuses more."""
    lowered = {"group.share.min.record.lock.duration.ms": "1000",
               "group.share.max.record.lock.duration.ms": "20000"}
    for value, accepted in (("1000", True), ("999", False), ("20000", True), ("20001", False)):
        verdict = decide(ConfigResource(GROUP_RESOURCE, "g", (
            ConfigChange("share.record.lock.duration.ms", value),)), {}, lowered,
            incremental=True, validate_only=False)
        assert isinstance(verdict, NewGroupConfigs) is accepted, (value, verdict)


def test_a_group_may_always_set_what_its_broker_runs_with() -> None:
    """A broker run with a shorter share session than Kafka's least (Korvet allows it, for
    tests) lets a group set as much, no less."""
    broker = {"group.share.session.timeout.ms": "1500", "group.share.heartbeat.interval.ms": "500"}
    for value, accepted in (("1500", True), ("1499", False)):
        verdict = decide(ConfigResource(GROUP_RESOURCE, "g", (
            ConfigChange("share.session.timeout.ms", value),
            ConfigChange("share.heartbeat.interval.ms", "500"))), {}, broker,
            incremental=True, validate_only=False)
        assert isinstance(verdict, NewGroupConfigs) is accepted, (value, verdict)


def test_what_is_not_a_group_config_or_not_a_set_is_refused() -> None:
    unknown = alter(ConfigChange("retention.ms", "1000"))
    assert isinstance(unknown, Refusal) and unknown.code is ErrorCode.INVALID_CONFIG
    assert "Unknown group config name: retention.ms" in unknown.message
    listed = alter(ConfigChange("share.auto.offset.reset", "earliest", APPEND))
    assert isinstance(listed, Refusal) and listed.code is ErrorCode.INVALID_CONFIG
    legacy = alter(ConfigChange("share.auto.offset.reset", "earliest", SET), incremental=False)
    assert isinstance(legacy, Refusal) and legacy.code is ErrorCode.INVALID_REQUEST


def test_accepted_values_as_kafka_reads_them() -> None:
    for value in ("earliest", "latest", "by_duration:PT1H", "by_duration:P1DT2H30M",
                  "by_duration:PT0.5S"):
        assert isinstance(alter(ConfigChange("share.auto.offset.reset", value)), NewGroupConfigs)
    boolean = alter(ConfigChange("share.renew.acknowledge.enable", "FALSE"))
    assert isinstance(boolean, NewGroupConfigs)
    assert boolean.configs["share.renew.acknowledge.enable"] == "false"


def test_iso_durations() -> None:
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P1DT2H30M") == 95_400_000
    assert duration_ms("PT0.5S") == 500
    assert duration_ms("P2D") == 172_800_000
    for bad in ("", "P", "PT", "1H", "PT-1H", "P1DT"):
        assert duration_ms(bad) is None, bad
