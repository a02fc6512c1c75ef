"""AlterConfigs (33) and IncrementalAlterConfigs (44): Kafka's checks of a config change, as
one pure plan.

The handler (korvet/server/handlers/configs.py) decodes either request into an
``AlterConfigsCall`` (korvet/protocol/decoders/configs.py) and, resource by resource in
request order, looks its topic up, asks ``decide`` what the resource gets and writes the new
configs (a topic named twice sees the first change when the second is decided). A resource
gets the first of these that applies:

1. it is the broker: INVALID_REQUEST (Korvet's settings are static: ``korvet serve`` flags,
   variables or YAML); any other type but a topic: INVALID_REQUEST;
2. the topic does not exist: UNKNOWN_TOPIC_OR_PARTITION;
3. the changes, one by one in request order. AlterConfigs replaces the topic's whole set
   (Kafka's legacy semantics; the settings fixed at creation are kept): a null value is
   INVALID_CONFIG. IncrementalAlterConfigs applies each operation to the topic's set: a
   config Korvet does not know, a SET of null, an APPEND or SUBTRACT on a config that is not
   a list are INVALID_CONFIG; an operation Kafka does not have is INVALID_REQUEST;
4. the resulting set, as Kafka's ConfigDef reads it (korvet/core/topics.py): a value of the
   wrong type or out of range, a config Korvet does not know, or settings that do not go
   together: INVALID_CONFIG;
5. a setting fixed at creation (``korvet.sequence.bits``, ``korvet.storage.format``) changed
   or deleted: INVALID_CONFIG (it fixes what every stored offset or entry means);
6. the new set with the broker's defaults for the topic does not go together: INVALID_CONFIG.

KORVET: Kafka checks the shape of a request first (ConfigAdminManager.preprocess) and answers
INVALID_REQUEST for a resource named twice, a config named twice in one resource, or a null
value other than a DELETE's; here a resource named twice is changed twice, a config named twice
is changed in order, a null value of AlterConfigs or of a SET is INVALID_CONFIG (rule 3) and an
APPEND or SUBTRACT of null changes nothing.

A resource that passes them gets its ``NewConfigs``: the set to store and the stored names to
remove (a setting Korvet no longer knows, one Kafka removed, goes with the next change);
nothing is written when the request only validates.

Tests: tests/unit/core/test_admin_plans.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from korvet.core.admin import BROKER_RESOURCE, TOPIC_RESOURCE, Refusal
from korvet.core.errors import ErrorCode
from korvet.core.topics import (
    CONFIG_DEFS,
    CONFIGS,
    STORAGE_FORMAT,
    TopicConfig,
    TopicConfigError,
    check_combination,
    validate_configs,
)

# IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

STATIC_BROKER = Refusal(ErrorCode.INVALID_REQUEST,
                        "Broker settings are static in Korvet: restart `korvet serve` with new "
                        "flags, KORVET_* variables or YAML.")


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One config of a resource: AlterConfigs' name and value (its operation is always SET),
    or IncrementalAlterConfigs' operation on a name."""

    name: str
    value: str | None
    operation: int = SET  # kept as sent: an operation Kafka does not have is refused


@dataclass(frozen=True, slots=True)
class ConfigResource:
    resource_type: int  # korvet/core/admin.py's *_RESOURCE
    name: str
    changes: tuple[ConfigChange, ...]

    @property
    def names_topic(self) -> bool:
        """Whether ``decide`` needs the configuration of the topic ``name``."""
        return self.resource_type == TOPIC_RESOURCE


@dataclass(frozen=True, slots=True)
class AlterConfigsCall:
    """An AlterConfigs or IncrementalAlterConfigs request, whatever its version."""

    resources: tuple[ConfigResource, ...]
    validate_only: bool
    incremental: bool  # IncrementalAlterConfigs: operations; AlterConfigs: the whole set


@dataclass(frozen=True, slots=True)
class NewConfigs:
    """A resource that passes every check: its topic's settings become ``configs`` (each as
    Kafka reads it), without ``removed``, if ``write``."""

    topic: str
    configs: Mapping[str, str]
    removed: tuple[str, ...]  # stored names that are not in ``configs``
    write: bool  # False: the request only validates


def decide(resource: ConfigResource, topic: TopicConfig | None, *, incremental: bool,
           validate_only: bool) -> NewConfigs | Refusal:
    """What one resource of an ``AlterConfigsCall`` gets. ``topic`` is the configuration
    (explicit settings over the broker's defaults) of the topic the resource names, None when
    it does not exist or the resource is no topic."""
    if resource.resource_type == BROKER_RESOURCE:
        return STATIC_BROKER
    if resource.resource_type != TOPIC_RESOURCE:
        return Refusal(ErrorCode.INVALID_REQUEST,
                       f"Resource type {resource.resource_type} is not supported.")
    if topic is None:
        return Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"Topic '{resource.name}' does not exist.")
    # A setting Korvet no longer knows (one Kafka removed) is dropped by the next change.
    current = {name: value for name, value in topic.explicit.items() if name in CONFIGS}
    wanted = (_operated(current, resource.changes, topic) if incremental
              else _replaced(current, resource.changes))
    if isinstance(wanted, Refusal):
        return wanted
    validated = _validated(wanted, topic)
    if isinstance(validated, Refusal):
        return validated
    return NewConfigs(resource.name, validated,
                      tuple(name for name in topic.explicit if name not in validated),
                      write=not validate_only)


def _replaced(current: Mapping[str, str], changes: tuple[ConfigChange, ...]) -> dict[str, str] | Refusal:
    """AlterConfigs: the changes are the new set, with the settings fixed at creation kept."""
    wanted: dict[str, str] = {}
    for change in changes:
        if change.value is None:
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"Null value not supported for topic configs: {change.name}")
        wanted[change.name] = change.value
    for definition in CONFIG_DEFS:
        if definition.read_only_after_create and definition.name in current:
            wanted.setdefault(definition.name, current[definition.name])
    return wanted


def _operated(current: Mapping[str, str], changes: tuple[ConfigChange, ...],
              topic: TopicConfig) -> dict[str, str] | Refusal:
    """IncrementalAlterConfigs: each operation applied, in order, to the topic's set."""
    wanted = dict(current)
    for change in changes:
        refused = _operate(wanted, change, topic)
        if refused is not None:
            return refused
    return wanted


def _operate(wanted: dict[str, str], change: ConfigChange, topic: TopicConfig) -> Refusal | None:
    name, operation, value = change.name, change.operation, change.value
    if name not in CONFIGS:
        return Refusal(ErrorCode.INVALID_CONFIG, f"unknown topic config {name!r}")
    if operation == SET:
        if value is None:
            return Refusal(ErrorCode.INVALID_CONFIG, f"Null value not supported for {name}")
        wanted[name] = value
    elif operation == DELETE:
        wanted.pop(name, None)
    elif operation in (APPEND, SUBTRACT):
        if CONFIGS[name].kind != "list":
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"{name} is not a list: APPEND and SUBTRACT apply to list configs only")
        wanted[name] = _list_operated(wanted.get(name, topic.get(name)), operation, value)
    else:
        return Refusal(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation}.")
    return None


def _list_operated(items_text: str, operation: int, value: str | None) -> str:
    """APPEND adds the items not in the list yet; SUBTRACT removes those in it."""
    items = [v for v in items_text.split(",") if v]
    for item in (value or "").split(","):
        if operation == APPEND and item and item not in items:
            items.append(item)
        if operation == SUBTRACT and item in items:
            items.remove(item)
    return ",".join(items)


_FIXED_WHY = {
    STORAGE_FORMAT: "every stored entry of its partitions has that format; to change it, "
                    "create a topic with the other format and copy the records",
    "": "it fixes the meaning of every stored offset",
}


def _validated(wanted: Mapping[str, str], topic: TopicConfig) -> dict[str, str] | Refusal:
    """Rules 4 to 6: the set as Kafka reads it, or why it cannot be the topic's."""
    try:
        validated = validate_configs(wanted)
    except TopicConfigError as exc:
        return Refusal(ErrorCode.INVALID_CONFIG, str(exc))
    refused = _fixed_at_creation_refusal(topic, validated)
    if refused is not None:
        return refused
    try:
        check_combination(TopicConfig(validated, topic.defaults))
    except TopicConfigError as exc:
        return Refusal(ErrorCode.INVALID_CONFIG, str(exc))
    return validated


def _fixed_at_creation_refusal(current: TopicConfig, wanted: Mapping[str, str]) -> Refusal | None:
    for definition in CONFIG_DEFS:
        if not definition.read_only_after_create:
            continue
        why = _FIXED_WHY.get(definition.name, _FIXED_WHY[""])
        if definition.name not in wanted:
            if definition.name in current.explicit:
                # A DELETE: the topic would read its stored entries with the built-in default.
                return Refusal(ErrorCode.INVALID_CONFIG,
                               f"{definition.name} cannot be deleted: it is fixed when the topic "
                               f"is created ({why}); it is {current.get(definition.name)!r}")
            continue
        if wanted[definition.name] != current.get(definition.name):
            return Refusal(ErrorCode.INVALID_CONFIG,
                           f"{definition.name} cannot change after the topic is created ({why}); "
                           f"it is {current.get(definition.name)!r}")
    return None
