"""The plans of the admin requests that change topics, without a broker: CreateTopics
(korvet/core/create_topics.py), CreatePartitions (korvet/core/create_partitions.py),
AlterConfigs and IncrementalAlterConfigs (korvet/core/alter_configs.py).

Each test draws a request and the facts the handler reads (which topics exist, their partition
counts and settings) and holds the plan's answer for every item to an oracle written from the
rules, in the order a request meets them: Kafka's (KafkaApis, ControllerApis,
ReplicationControlManager, ConfigurationControlManager) and Korvet's own where it has its own
(one copy per partition, settings fixed at creation, static broker settings). Where Korvet's
order is not Kafka's, the oracle says so (KORVET). Values are read by korvet/core/topics.py's
rules, which tests/integration/test_topic_config_defs.py holds equal to Kafka's ConfigDef.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from korvet.core import alter_configs, create_partitions, create_topics
from korvet.core.admin import BROKER_RESOURCE, TOPIC_RESOURCE, Refusal
from korvet.core.alter_configs import APPEND, DELETE, SET, SUBTRACT, ConfigChange, ConfigResource
from korvet.core.errors import ErrorCode
from korvet.core.topics import (
    CONFIGS,
    MAX_PARTITIONS,
    TopicConfig,
    TopicConfigError,
    TopicInfo,
    TopicNameError,
    validate_config,
    validate_topic_name,
)
from tests.support.examples import examples

NODE = 3  # the broker asked: the one broker an assignment may name
names = st.sampled_from(["a", "b", "c", "d"])


# -- CreatePartitions ------------------------------------------------------------------------

replica_lists = st.sampled_from([(NODE,), (NODE + 1,), (NODE, NODE + 1), ()])
increases = st.tuples(names, st.integers(-1, 7) | st.sampled_from([MAX_PARTITIONS, MAX_PARTITIONS + 1]),
                      st.none() | st.lists(replica_lists, max_size=4).map(tuple))


def _kafka_grow(name: str, count: int, assignments: tuple[tuple[int, ...], ...] | None,
                named: list[str], partitions: Mapping[str, int]) -> ErrorCode | None:
    """What Kafka answers a topic of CreatePartitions (None: it grows)."""
    if named.count(name) > 1:  # ControllerApis: "Duplicate topic name", every entry of it
        return ErrorCode.INVALID_REQUEST
    if name not in partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    current = partitions[name]
    if count <= current:  # KIP-195: the number of partitions can only be increased
        return ErrorCode.INVALID_PARTITIONS
    if count > MAX_PARTITIONS:  # KORVET: every partition is a Redis stream
        return ErrorCode.INVALID_PARTITIONS
    if assignments is not None and (len(assignments) != count - current
                                    or any(replicas != (NODE,) for replicas in assignments)):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT  # one per new partition, usable brokers only
    return None


@settings(max_examples=examples(5))  # cheap and wide
@given(partitions=st.dictionaries(names, st.integers(1, 4)),
       requested=st.lists(increases, max_size=5), validate_only=st.booleans())
def test_create_partitions_answers_each_topic_in_kafkas_order(
        partitions: dict[str, int], requested: list[tuple[str, int, tuple[tuple[int, ...], ...] | None]],
        validate_only: bool) -> None:
    """Duplicates, then an unknown topic, then a count that is no increase (or over Korvet's
    bound), then the assignments; a topic passing them grows to its count, written unless the
    request only validates. The plan reads only the topics it looks up."""
    call = create_partitions.CreatePartitionsCall(
        tuple(create_partitions.PartitionsIncrease(*r) for r in requested), validate_only)
    existing = {name: TopicInfo(name, f"id-{name}", count, TopicConfig())
                for name, count in partitions.items()}
    verdicts = create_partitions.plan(
        call, {name: existing[name] for name in call.looked_up if name in existing}, NODE)
    named = [name for name, _, _ in requested]
    assert len(verdicts) == len(requested)
    for (name, count, assignments), verdict in zip(requested, verdicts, strict=True):
        expected = _kafka_grow(name, count, assignments, named, partitions)
        if expected is None:
            assert verdict == create_partitions.Growth(name, f"id-{name}", count,
                                                       write=not validate_only)
        else:
            assert isinstance(verdict, Refusal) and verdict.code is expected, (name, verdict)
            assert verdict.message


def test_a_topic_changed_between_read_and_write_is_refused_as_kafka_would_a_stale_count() -> None:
    assert create_partitions.CHANGED_CONCURRENTLY.code is ErrorCode.INVALID_PARTITIONS


# -- CreateTopics ----------------------------------------------------------------------------

topic_names = st.sampled_from(["a", "b", "b.c", "b_c", "", "..", "no spaces", "x" * 250])
config_entries = st.sampled_from([
    ("retention.ms", "1000"), ("retention.ms", " 2000 "), ("retention.ms", "soon"),
    ("retention.ms", None), ("no.such.config", "1"), ("korvet.storage.format", "batches"),
    ("log.append.timestamp.header", "true"), ("cleanup.policy", "compact")])
assignment_lists = st.lists(st.tuples(st.integers(0, 3), replica_lists), max_size=3)
new_topics = st.tuples(topic_names, st.sampled_from([-1, -2, 0, 1, 3, MAX_PARTITIONS + 1]),
                       st.sampled_from([-1, -2, 0, 1, 2]), st.just([]) | assignment_lists,
                       st.lists(config_entries, max_size=3))

TopicDraw = tuple[str, int, int, list[tuple[int, tuple[int, ...]]], list[tuple[str, str | None]]]


def _kafka_create(topic: TopicDraw, named: list[str], existing: set[str],
                  default_partitions: int) -> ErrorCode | tuple[int, dict[str, str]]:
    """What a topic of CreateTopics gets: an error, or its partition count and settings."""
    name, count, replication, assignments, configs = topic
    if named.count(name) > 1:  # ControllerApis: "Duplicate topic name", every entry of it
        return ErrorCode.INVALID_REQUEST
    try:
        validate_topic_name(name)
    except TopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if name in existing:  # whatever else the request asks
        return ErrorCode.TOPIC_ALREADY_EXISTS
    # KORVET: Kafka checks the configs (null values, then each value) before the partitions
    # (ReplicationControlManager.createTopics: computeConfigChanges, then createTopic).
    partitions = _kafka_partitions(count, replication, assignments, default_partitions)
    if isinstance(partitions, ErrorCode):
        return partitions
    if any(value is None for _, value in configs):
        return ErrorCode.INVALID_CONFIG
    settings = _read_as_kafka_does({n: v for n, v in configs if v is not None})
    if settings is None or _do_not_go_together(settings, {}):
        return ErrorCode.INVALID_CONFIG
    return partitions, settings


def _kafka_partitions(count: int, replication: int, assignments: list[tuple[int, tuple[int, ...]]],
                      default_partitions: int) -> int | ErrorCode:
    if assignments:  # a manual assignment leaves both counts to it
        if count != -1 or replication != -1:
            return ErrorCode.INVALID_REQUEST
        if sorted(p for p, _ in assignments) != list(range(len(assignments))):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT  # consecutive from 0
        if any(brokers != (NODE,) for _, brokers in assignments):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT  # usable brokers only
        return len(assignments)
    # KORVET: Kafka refuses a factor of 0 or below -1, then a count of 0 or below -1, then a
    # factor it cannot place (above 1 here): a count of 0 with a factor of 2 is
    # INVALID_PARTITIONS there (ReplicationControlManager.createTopic).
    if replication not in (-1, 1):
        return ErrorCode.INVALID_REPLICATION_FACTOR
    if count == -1:
        return default_partitions
    if count < 1 or count > MAX_PARTITIONS:  # KORVET: MAX_PARTITIONS, a Redis stream each
        return ErrorCode.INVALID_PARTITIONS
    return count


@settings(max_examples=examples(5))  # cheap and wide
@given(topics=st.lists(new_topics, max_size=4), existing=st.sets(topic_names, max_size=3),
       validate_only=st.booleans(), default_partitions=st.integers(1, 5))
def test_create_topics_answers_each_topic_in_order(
        topics: list[TopicDraw], existing: set[str], validate_only: bool,
        default_partitions: int) -> None:
    """Duplicates, names, existing topics, partitions and replication, then configs; a topic
    passing them is created with its count (or the default) and its settings as Kafka reads
    them. The plan asks only about valid names named once."""
    call = create_topics.CreateTopicsCall(tuple(
        create_topics.NewTopic(name, count, replication,
                               tuple(create_topics.ReplicaAssignment(p, b) for p, b in assigned),
                               tuple(configs))
        for name, count, replication, assigned, configs in topics), validate_only)
    looked_up = set(call.looked_up)
    verdicts = create_topics.plan(call, existing & looked_up,
                                  dict.fromkeys(looked_up, default_partitions), NODE)
    named = [t[0] for t in topics]
    assert len(verdicts) == len(topics)
    for topic, verdict in zip(topics, verdicts, strict=True):
        expected = _kafka_create(topic, named, existing, default_partitions)
        if isinstance(expected, ErrorCode):
            assert isinstance(verdict, Refusal) and verdict.code is expected, (topic, verdict)
            assert verdict.message
        else:
            assert verdict == create_topics.Creation(topic[0], *expected), topic


# -- AlterConfigs and IncrementalAlterConfigs --------------------------------------------------

FIXED = ("korvet.sequence.bits", "korvet.storage.format")  # fixed when the topic is created
HEADER, FORMAT = "log.append.timestamp.header", "korvet.storage.format"

stored_settings = st.fixed_dictionaries({}, optional={
    "retention.ms": st.just("1000"), "cleanup.policy": st.sampled_from(["delete", "compact"]),
    "korvet.sequence.bits": st.sampled_from(["10", "12"]),
    FORMAT: st.sampled_from(["records", "batches"]),
    "message.downconversion.enable": st.just("true")})  # Kafka removed it; Korvet forgot it
broker_defaults = st.sampled_from([{}, {HEADER: "true"}, {"retention.ms": "5"}])
change_values: dict[str, list[str | None]] = {
    "retention.ms": ["1000", " 2000 ", "soon", None],
    "cleanup.policy": ["compact", "delete", "compact,delete", "bogus", "", None],
    "korvet.sequence.bits": ["10", "12", " 10", "x"],
    FORMAT: ["records", "batches"],
    HEADER: ["true", "FALSE", "maybe"],
    "no.such.config": ["1"],
}
changes = st.sampled_from(sorted(change_values)).flatmap(
    lambda name: st.builds(ConfigChange, st.just(name), st.sampled_from(change_values[name]),
                           st.sampled_from([SET, SET, DELETE, APPEND, SUBTRACT, 7])))


def _read_as_kafka_does(settings: Mapping[str, str]) -> dict[str, str] | None:
    """Every value as Kafka's ConfigDef reads it; None when one is not a config or not valid."""
    try:
        return {name: validate_config(name, value) for name, value in settings.items()}
    except TopicConfigError:
        return None


def _do_not_go_together(settings: Mapping[str, str], defaults: Mapping[str, str]) -> bool:
    """A topic storing whole batches adds no header to their records (a setting fixed at
    creation has no broker default)."""
    header = settings.get(HEADER, defaults.get(HEADER, "false"))
    return header == "true" and settings.get(FORMAT, "records") == "batches"


def _effective(stored: Mapping[str, str], defaults: Mapping[str, str], name: str) -> str:
    if name in stored:
        return stored[name]
    return CONFIGS[name].default if name in FIXED else defaults.get(name, CONFIGS[name].default)


def _operated(stored: Mapping[str, str], defaults: Mapping[str, str],
              resource_changes: tuple[ConfigChange, ...]) -> dict[str, str] | ErrorCode:
    """IncrementalAlterConfigs (KIP-339): each operation, in order, on the topic's settings."""
    settings = {name: value for name, value in stored.items() if name in CONFIGS}
    for change in resource_changes:
        if change.name not in CONFIGS:
            return ErrorCode.INVALID_CONFIG
        if change.operation == SET:
            if change.value is None:  # KORVET: Kafka answers INVALID_REQUEST, before any other check
                return ErrorCode.INVALID_CONFIG
            settings[change.name] = change.value
        elif change.operation == DELETE:
            settings.pop(change.name, None)
        elif change.operation in (APPEND, SUBTRACT):
            if CONFIGS[change.name].kind != "list":
                return ErrorCode.INVALID_CONFIG
            items = [i for i in settings.get(change.name, _effective(stored, defaults, change.name))
                     .split(",") if i]
            # KORVET: Kafka answers a null value INVALID_REQUEST; here it appends or removes nothing
            given_items = (change.value or "").split(",")
            if change.operation == APPEND:
                items += [i for i in dict.fromkeys(given_items) if i and i not in items]
            else:
                items = [i for i in items if i not in given_items]
            settings[change.name] = ",".join(items)
        else:
            return ErrorCode.INVALID_REQUEST  # no such operation
    return settings


def _replaced(stored: Mapping[str, str], resource_changes: tuple[ConfigChange, ...]
              ) -> dict[str, str] | ErrorCode:
    """AlterConfigs: the changes are the whole new set (the settings fixed at creation stay)."""
    if any(c.value is None for c in resource_changes):  # KORVET: Kafka answers INVALID_REQUEST
        return ErrorCode.INVALID_CONFIG
    settings: dict[str, str] = {c.name: c.value for c in resource_changes if c.value is not None}
    for name in FIXED:
        if name in stored and name not in settings:
            settings[name] = stored[name]
    return settings


def _kafka_alter(resource: ConfigResource, stored: Mapping[str, str] | None,
                 defaults: Mapping[str, str], incremental: bool) -> ErrorCode | dict[str, str]:
    if resource.resource_type == BROKER_RESOURCE:  # KORVET: the broker's settings are static
        return ErrorCode.INVALID_REQUEST
    if resource.resource_type != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST
    if stored is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    wanted = (_operated(stored, defaults, resource.changes) if incremental
              else _replaced(stored, resource.changes))
    if isinstance(wanted, ErrorCode):
        return wanted
    settings = _read_as_kafka_does(wanted)
    if settings is None:
        return ErrorCode.INVALID_CONFIG
    for name in FIXED:  # KORVET: they fix what every stored offset or entry means
        if name in settings and settings[name] != _effective(stored, defaults, name):
            return ErrorCode.INVALID_CONFIG
        if name in stored and name not in settings:
            return ErrorCode.INVALID_CONFIG
    if _do_not_go_together(settings, defaults):
        return ErrorCode.INVALID_CONFIG
    return settings


resources = st.builds(ConfigResource, st.sampled_from([TOPIC_RESOURCE] * 8 + [BROKER_RESOURCE, 8, 0]),
                      st.sampled_from(["t"] * 4 + ["missing"]), st.lists(changes, max_size=3).map(tuple))


def _rare(*changes: tuple[str, str | None, int], stored: dict[str, str] | None = None,
          defaults: dict[str, str] | None = None, incremental: bool = True) -> dict[str, Any]:
    """An example of one topic resource with these (name, value, operation) changes."""
    return {"resource": ConfigResource(TOPIC_RESOURCE, "t", tuple(ConfigChange(*c) for c in changes)),
            "stored": stored or {}, "defaults": defaults or {}, "incremental": incremental,
            "validate_only": False}


@settings(max_examples=examples(5))  # cheap and wide
@given(resource=resources, stored=stored_settings, defaults=broker_defaults,
       incremental=st.booleans(), validate_only=st.booleans())
# the rules a random draw meets least often
@example(**_rare(("korvet.sequence.bits", None, DELETE), stored={"korvet.sequence.bits": "12"}))
@example(**_rare(("korvet.sequence.bits", " 12", SET), stored={"korvet.sequence.bits": "12"}))
@example(**_rare(("korvet.sequence.bits", "12", SET), incremental=False))
@example(**_rare((FORMAT, "batches", SET), defaults={HEADER: "true"}))
@example(**_rare(("cleanup.policy", "compact,delete", APPEND), stored={"cleanup.policy": "compact"}))
@example(**_rare(("cleanup.policy", "compact", SUBTRACT), ("retention.ms", "1", 7),
                 stored={"cleanup.policy": "compact"}))
@example(**_rare(("retention.ms", None, SET), ("retention.ms", "1", 7)))
def test_a_config_resource_gets_the_first_refusal_in_order(
        resource: ConfigResource, stored: dict[str, str], defaults: dict[str, str],
        incremental: bool, validate_only: bool) -> None:
    """The resource's type, the topic's existence, each change in request order, the values
    as Kafka reads them, the settings fixed at creation, then settings that do not go
    together; a resource passing them gets the new set, each value as Kafka reads it, without
    the stored settings that are not in it (written unless the request only validates)."""
    topic = TopicConfig(stored, defaults) if resource.name == "t" else None
    verdict = alter_configs.decide(resource, topic, incremental=incremental,
                                   validate_only=validate_only)
    expected = _kafka_alter(resource, stored if topic else None, defaults, incremental)
    if isinstance(expected, ErrorCode):
        assert isinstance(verdict, Refusal) and verdict.code is expected, verdict
        assert verdict.message
        return
    assert verdict == alter_configs.NewConfigs(
        "t", expected, tuple(name for name in stored if name not in expected),
        write=not validate_only)


@given(stored=stored_settings, defaults=broker_defaults)
def test_altering_nothing_keeps_every_setting_korvet_knows(stored: dict[str, str],
                                                           defaults: dict[str, str]) -> None:
    """An IncrementalAlterConfigs with no change keeps the topic as it is, but for a setting
    Korvet no longer knows (removed); AlterConfigs with no config clears every setting but
    those fixed at creation."""
    topic = TopicConfig(stored, defaults)
    known = {name: value for name, value in stored.items() if name in CONFIGS}
    resource = ConfigResource(TOPIC_RESOURCE, "t", ())
    kept = alter_configs.decide(resource, topic, incremental=True, validate_only=False)
    cleared = alter_configs.decide(resource, topic, incremental=False, validate_only=False)
    if _do_not_go_together(known, defaults):
        assert isinstance(kept, Refusal) and kept.code is ErrorCode.INVALID_CONFIG
        return
    assert isinstance(kept, alter_configs.NewConfigs) and kept.configs == known
    assert kept.removed == tuple(name for name in stored if name not in CONFIGS)
    assert isinstance(cleared, alter_configs.NewConfigs)
    assert cleared.configs == {name: value for name, value in known.items() if name in FIXED}


def test_examples_of_kafkas_answers() -> None:
    """A few requests spelled out, as the conformance suite sends them to Apache Kafka."""
    topic = TopicConfig({"retention.ms": "1000"}, {})
    decide = alter_configs.decide
    soon = ConfigResource(TOPIC_RESOURCE, "t", (ConfigChange("retention.ms", "soon"),))
    refused = decide(soon, topic, incremental=True, validate_only=False)
    assert isinstance(refused, Refusal) and refused.code is ErrorCode.INVALID_CONFIG
    reset = ConfigResource(TOPIC_RESOURCE, "t", (ConfigChange("retention.ms", None, DELETE),))
    assert decide(reset, topic, incremental=True, validate_only=False) == alter_configs.NewConfigs(
        "t", {}, ("retention.ms",), write=True)
    fewer = create_partitions.CreatePartitionsCall(
        (create_partitions.PartitionsIncrease("t", 2, None),), validate_only=False)
    (answer,) = create_partitions.plan(fewer, {"t": TopicInfo("t", "id", 3, topic)}, NODE)
    assert isinstance(answer, Refusal) and answer.code is ErrorCode.INVALID_PARTITIONS

