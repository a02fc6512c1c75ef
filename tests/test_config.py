"""Settings: defaults < YAML < KORVET_* environment < flags; `korvet serve --help` documents all."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from korvet import config
from tests.conftest import KORVET


def test_precedence_defaults_yaml_env_flags(tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text(
        "broker:\n  port: 19000\n  host: 0.0.0.0\ntopics:\n  default-partitions: 3\n")
    loaded = config.load(yaml_path=yaml_file, env={"KORVET_BROKER_PORT": "19001"},
                         overrides={"broker.host": "127.0.0.2"})
    assert loaded.get_int("broker.port") == 19001  # env beats YAML
    assert loaded.get_str("broker.host") == "127.0.0.2"  # flag beats YAML
    assert loaded.get_int("topics.default-partitions") == 3  # YAML beats default
    assert loaded.get_str("redis.keyspace") == "korvet"  # default


@pytest.mark.parametrize(("env", "message"), [
    ({"KORVET_BROKER_PORT": "not-a-number"}, "broker.port: expected an integer"),
    ({"KORVET_TOPICS_SEQUENCE_BITS": "23"}, "topics.sequence-bits must be within 1..22"),
    ({"KORVET_TOPICS_AUTO_CREATE": "maybe"}, "expected true or false"),
    ({"KORVET_REDIS_APPENDFSYNC": "sometimes"}, "redis.appendfsync must be one of"),
])
def test_bad_values_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(config.ConfigError, match=message):
        config.load(env=env)


def test_unknown_yaml_setting_is_refused(tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text("broker:\n  prot: 1\n")
    with pytest.raises(config.ConfigError, match=r"unknown setting 'broker\.prot'"):
        config.load(yaml_path=yaml_file, env={})


def test_serve_help_documents_every_setting_with_its_default_and_variable() -> None:
    text = subprocess.run([*KORVET, "serve", "--help"], capture_output=True, text=True,
                          check=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
    flat = " ".join(text.split())
    for setting in config.SETTINGS:
        assert setting.flag in flat, setting.name
        assert setting.env in flat, setting.name
    assert "[default: 9092; env KORVET_BROKER_PORT]" in flat
    assert "[default: 'korvet'; env KORVET_REDIS_KEYSPACE]" in flat


def test_serve_rejects_a_bad_setting_with_exit_code_2() -> None:
    result = subprocess.run([*KORVET, "serve", "--topics-sequence-bits", "30"],
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 2
    assert "topics.sequence-bits must be within 1..22" in result.stderr


def test_kafkas_names_for_limits_work_in_yaml_environment_and_flags(tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text("socket.request.max.bytes: 2048\nmax:\n  connections: 50\n")
    loaded = config.load(yaml_path=yaml_file, env={
        "KORVET_MAX_CONNECTIONS_PER_IP": "7", "KORVET_CONNECTIONS_MAX_IDLE_MS": "1234",
        "KORVET_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS": "3"})
    assert loaded.get_int("broker.max-request-bytes") == 2048
    assert loaded.get_int("broker.max-connections") == 50
    assert loaded.get_int("broker.max-connections-per-ip") == 7
    assert loaded.get_int("broker.connections-max-idle-ms") == 1234
    assert loaded.get_int("fetch.max-sessions") == 3
    # Korvet's own name wins over Kafka's when both are set.
    both = config.load(env={"KORVET_SOCKET_REQUEST_MAX_BYTES": "4096",
                            "KORVET_BROKER_MAX_REQUEST_BYTES": "8192"})
    assert both.get_int("broker.max-request-bytes") == 8192
    flags = {s.name: s.flags for s in config.SETTINGS}
    assert "--socket-request-max-bytes" in flags["broker.max-request-bytes"]
    assert "--max-connections-per-ip" in flags["broker.max-connections-per-ip"]


@pytest.mark.parametrize(("env", "message"), [
    ({"KORVET_BROKER_MAX_CONNECTIONS": "0"}, "broker.max-connections must be at least 1"),
    ({"KORVET_BROKER_RESUME_PENDING_BYTES": str(2**40)},
     "resume-pending-bytes must be within 0..broker.max-pending-bytes"),
    ({"KORVET_FETCH_MAX_SESSIONS": "-1"}, "fetch.max-sessions must not be negative"),
    ({"KORVET_SOCKET_REQUEST_MAX_BYTES": "10"}, "socket.request.max.bytes"),
])
def test_bad_limits_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(config.ConfigError, match=message):
        config.load(env=env)
