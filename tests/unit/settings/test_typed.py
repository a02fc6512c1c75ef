"""The typed settings (korvet/settings/typed.py): one attribute per setting, the same value
as loaded, frozen; and nothing in korvet/ outside korvet/settings reads a setting by name."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest

from korvet import settings
from korvet.settings.typed import SECTIONS, BrokerSettings
from korvet.settings.values import SETTINGS

KORVET = Path(__file__).resolve().parents[3] / "korvet"


def test_every_setting_is_one_typed_attribute_of_its_section() -> None:
    sections = typing.get_type_hints(BrokerSettings)
    assert set(SECTIONS.values()) == set(sections) - {"security", "raw"}
    for cls, name in SECTIONS.items():
        assert sections[name] is cls, name
    fields = {(name, field.name) for cls, name in SECTIONS.items() for field in dataclasses.fields(cls)}
    for setting in SETTINGS:
        if setting.kind is list:  # read parsed only: settings.security
            assert (setting.section, setting.field_name) not in fields, setting.name
            continue
        hints = typing.get_type_hints(sections[setting.section])
        assert hints.get(setting.field_name) is setting.kind, setting.name
    assert {s.name for s in SETTINGS if s.kind is list} == {
        "broker.listeners", "broker.sasl.mechanisms", "authorizer.super-users", "security.tenants"}
    named = {(s.section, s.field_name) for s in SETTINGS}
    assert {field for field in fields if field not in named} == {
        ("redis", "url_from"), ("topics", "declarations")}


@pytest.mark.parametrize("env", [
    {},
    {"KORVET_BROKER_PORT": "19092", "KORVET_REDIS_URI": "redis://db:6379/0", "KORVET_NAMESPACE": "ns",
     "KORVET_TOPICS_AUTO_CREATE": "false", "KORVET_GROUPS_MAX_SIZE": "5", "KORVET_DATA_DIR": "/d",
     "KORVET_CLUSTER_MULTI_BROKER": "true", "KORVET_HTTP_ENABLED": "false", "KORVET_LOG_LEVEL": "debug",
     "KORVET_BROKER_SASL_ENABLED": "true", "KORVET_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"},
])
def test_the_typed_settings_hold_the_loaded_values(env: dict[str, str]) -> None:
    loaded = settings.load(env=env)
    for setting in SETTINGS:
        if setting.kind is not list:
            section = getattr(loaded, setting.section)
            assert getattr(section, setting.field_name) == loaded.raw[setting.name], setting.name
    assert loaded.redis.url_from == loaded.raw.source("redis.url")
    assert loaded.topics.declarations == loaded.raw.topics
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.redis.wait_replicas = 2  # type: ignore[misc]


def test_describe_configs_answers_the_settings_under_kafkas_names() -> None:
    loaded = settings.load(env={"KORVET_TOPICS_AUTO_CREATE": "false", "KORVET_GROUPS_MAX_SIZE": "5",
                                "KORVET_SOCKET_REQUEST_MAX_BYTES": "2048", "KORVET_BROKER_ID": "3"})
    answered = {c.name: (c.value, c.documentation) for c in loaded.kafka_configs()}
    assert answered["auto.create.topics.enable"] == ("false", "korvet serve --topics-auto-create")
    assert answered["group.max.size"] == ("5", "korvet serve --groups-max-size")
    assert answered["socket.request.max.bytes"] == ("2048", "korvet serve --broker-max-request-bytes")
    assert answered["broker.id"] == ("3", "korvet serve --broker-id")
    assert answered["transaction.max.timeout.ms"][0] == "900000"
    assert answered["group.share.session.timeout.ms"][0] == "45000"  # Kafka's default
    assert answered["log.cleaner.backoff.ms"] == ("15000", "korvet serve --cleaner-backoff-ms")
    assert answered["log.cleaner.enable"][0] == "true"
    assert answered["group.share.record.lock.duration.ms"][0] == "30000"
    assert answered["group.share.min.record.lock.duration.ms"][0] == "15000"  # Kafka's bounds
    assert answered["group.share.max.record.lock.duration.ms"][0] == "60000"
    assert len(answered) == 29


# --- no setting is read by its name outside korvet/settings ---------------------------------

NAMES = {s.name for s in SETTINGS}  # Config is keyed by these; the other names are only read in
LOOKUPS = {"get_int", "get_str", "get_bool", "get", "source"}  # Config's reads by name


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def lookups_by_name(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every read of a setting by its dotted name, and every import of the raw
    values by name (``Config``), in one module."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOOKUPS and node.args
                and _literal(node.args[0]) in NAMES):
            found.append((node.lineno, f"{node.func.attr}({_literal(node.args[0])!r})"))
        elif isinstance(node, ast.Subscript) and _literal(node.slice) in NAMES:
            found.append((node.lineno, f"[{_literal(node.slice)!r}]"))
        elif (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("korvet.settings")
              and any(alias.name == "Config" for alias in node.names)):
            found.append((node.lineno, f"from {node.module} import Config"))
    return found


def test_nothing_outside_the_settings_package_reads_a_setting_by_its_name() -> None:
    found = []
    for path in sorted(KORVET.rglob("*.py")):
        if (KORVET / "settings") in path.parents:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{path.relative_to(KORVET.parent)}:{line}: {what}"
                  for line, what in lookups_by_name(tree)]
    assert found == [], "read the typed settings (settings.redis.wait_replicas) instead:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'wait = config.get_int("redis.wait-replicas")',
    'url = services.config.get_str("redis.url")',
    'on = broker.config.get_bool("cluster.multi-broker")',
    'where = config.source("redis.url")',
    'port = settings.raw["broker.port"]',
    'from korvet.settings import Config',
    'from korvet.settings.values import BY_NAME, Config',
])
def test_the_scan_finds_each_form_of_lookup_by_name(source: str) -> None:
    assert len(lookups_by_name(ast.parse(source))) == 1


@pytest.mark.parametrize("source", [
    'limit = topic.config.get_int("max.message.bytes")',  # Kafka's topic configs, not settings
    'wait = settings.redis.wait_replicas',
    'from korvet.settings import BrokerSettings',
])
def test_the_scan_leaves_typed_reads_and_topic_configs_alone(source: str) -> None:
    assert lookups_by_name(ast.parse(source)) == []
