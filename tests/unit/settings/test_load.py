"""Settings: defaults < YAML < KORVET_* environment < flags; `korvet serve --help` documents all."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from korvet import settings
from tests.conftest import KORVET


def test_precedence_defaults_yaml_env_flags(tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text(
        "broker:\n  port: 19000\n  host: 0.0.0.0\ntopics:\n  default-partitions: 3\n")
    loaded = settings.load(yaml_path=yaml_file, env={"KORVET_BROKER_PORT": "19001"},
                         overrides={"broker.host": "127.0.0.2"})
    assert loaded.raw.get_int("broker.port") == 19001  # env beats YAML
    assert loaded.raw.get_str("broker.host") == "127.0.0.2"  # flag beats YAML
    assert loaded.raw.get_int("topics.default-partitions") == 3  # YAML beats default
    assert loaded.raw.get_str("redis.keyspace") == "korvet"  # default


@pytest.mark.parametrize(("env", "message"), [
    ({"KORVET_BROKER_PORT": "not-a-number"}, "broker.port: expected an integer"),
    ({"KORVET_TOPICS_SEQUENCE_BITS": "23"}, "topics.sequence-bits must be within 1..22"),
    ({"KORVET_TOPICS_AUTO_CREATE": "maybe"}, "expected true or false"),
    ({"KORVET_REDIS_APPENDFSYNC": "sometimes"}, "redis.appendfsync must be one of"),
    ({"KORVET_TOPICS_STORAGE_FORMAT": "pages"},
     "topics.storage-format must be one of records, batches, got 'pages'"),
])
def test_bad_values_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.ConfigError, match=message):
        settings.load(env=env)


def test_unknown_yaml_key_is_a_warning_naming_the_closest_and_strict_refuses_it(
        tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text("broker:\n  prot: 1\n")
    loaded = settings.load(yaml_path=yaml_file, env={})
    assert any("unknown setting 'broker.prot'; did you mean broker.port?" in w
               for w in loaded.warnings), loaded.warnings
    with pytest.raises(settings.ConfigError, match=r"broker\.prot"):
        settings.load(yaml_path=yaml_file, env={}, overrides={"config.strict": True})


def test_unknown_variable_is_a_warning_naming_the_closest_and_strict_refuses_it() -> None:
    loaded = settings.load(env={"KORVET_BROKER_PROT": "1", "KORVET_JAR_DIR": "/x"})
    assert loaded.warnings == ("environment variable KORVET_BROKER_PROT: unknown setting; "
                               "did you mean KORVET_BROKER_PORT?",)  # tool variables are known
    with pytest.raises(settings.ConfigError, match="KORVET_BROKER_PROT"):
        settings.load(env={"KORVET_BROKER_PROT": "1", "KORVET_CONFIG_STRICT": "true"})


def test_the_original_products_names_set_the_same_settings() -> None:
    loaded = settings.load(env={"KORVET_REDIS_URI": "redis://db:6379/0", "KORVET_NAMESPACE": "ns",
                              "KORVET_REDIS_USERNAME": "app", "KORVET_REDIS_PASSWORD": "s3cret"})
    assert loaded.raw.get_str("redis.url") == "redis://db:6379/0"
    assert loaded.raw.source("redis.url") == "environment variable KORVET_REDIS_URI"
    assert loaded.raw.get_str("redis.keyspace") == "ns"
    assert (loaded.raw.get_str("redis.username"), loaded.raw.get_str("redis.password")) == ("app", "s3cret")
    assert dict(settings.describe(loaded.raw))["redis.password"] == "****"
    assert settings.load(env={"KORVET_REDIS_URL": "redis://a:1"}).raw.get_str("redis.url") == "redis://a:1"
    with pytest.raises(settings.ConfigError, match="set twice, differently"):
        settings.load(env={"KORVET_REDIS_URL": "redis://a:1", "KORVET_REDIS_URI": "redis://b:2"})
    flagged = settings.load(env={"KORVET_REDIS_URI": "redis://db:6379/0"},
                          overrides={"redis.url": "redis://other:1/0"})
    assert flagged.raw.source("redis.url") == "command-line flag --redis-url"
    assert settings.load(env={}).raw.source("redis.url") == "default"


def test_redis_cluster_needs_a_node_to_start_from(tmp_path: Path) -> None:
    with pytest.raises(settings.ConfigError, match=r"no redis\.url names a node of the cluster"):
        settings.load(env={"KORVET_REDIS_CLUSTER": "true"})
    loaded = settings.load(env={"KORVET_REDIS_CLUSTER": "true",
                              "KORVET_REDIS_URI": "redis://10.0.0.1:7000"})
    assert loaded.raw.get_bool("redis.cluster")
    yaml_file = tmp_path / "application.yml"  # the original's layout: korvet.redis.cluster
    yaml_file.write_text("korvet:\n  redis:\n    uri: redis://h:7000\n    cluster: true\n")
    assert settings.load(yaml_path=yaml_file, env={}).raw.get_bool("redis.cluster")


def test_the_original_yaml_layout_with_declared_topics(tmp_path: Path) -> None:
    yaml_file = tmp_path / "application.yml"
    yaml_file.write_text(
        "server:\n  port: 18080\n"
        "spring:\n  application:\n    name: korvet\n"
        "korvet:\n"
        "  broker:\n    port: 19092\n    advertisedHost: kafka.example\n"
        "    max-request-bytes: 10MB\n"
        "  redis:\n    uri: redis://db:6379/0\n    pool-size: 64\n    metadata-pool-size: 8\n"
        "  topics:\n"
        "    - name: '*'\n      partitions: 4\n      auto-create: true\n"
        "      retention-time: 1d\n"
        "    - name: logs-*\n      retention-bytes: 1MB\n      auto-create: false\n"
        "    - name: logs-audit\n      partitions: 1\n      log-append-timestamp-header: true\n"
        "      configs:\n        max.message.bytes: '2097152'\n")
    loaded = settings.load(yaml_path=yaml_file, env={"KORVET_TOPICS_1_PARTITIONS": "8"})
    assert loaded.raw.get_int("broker.port") == 19092
    assert loaded.raw.get_int("http.port") == 18080  # Spring's server.port: the Actuator's
    assert any("spring.application.name: not under korvet:, ignored" in w
               for w in loaded.warnings)
    assert settings.load(yaml_path=yaml_file, env={}, overrides={"config.strict": True})
    assert loaded.raw.get_str("broker.advertised-host") == "kafka.example"  # relaxed binding
    assert loaded.raw.get_int("broker.max-request-bytes") == 10 * 1024 * 1024
    assert loaded.raw.source("redis.url") == f"{yaml_file} key korvet.redis.uri"
    assert loaded.raw.get_int("redis.pool-size") == 64  # the original's pool size applies
    assert any("redis.metadata-pool-size" in w and "no effect" in w for w in loaded.warnings)
    audit = loaded.topics.declared("logs-audit")
    assert audit.partitions == 1 and audit.auto_create is False
    assert audit.configs == {"retention.ms": "86400000", "retention.bytes": "1048576",
                             "log.append.timestamp.header": "true",
                             "max.message.bytes": "2097152"}
    other_log = loaded.topics.declared("logs-web")
    assert other_log.partitions == 8  # the environment overrides topics[1] field by field
    assert loaded.topics.declared("orders").partitions == 4
    assert loaded.topics.declared("orders").auto_create is True


@pytest.mark.parametrize(("env", "message"), [
    ({"KORVET_TOPICS_0_PARTITIONS": "3"}, r"topics\[0\] has no name"),
    ({"KORVET_TOPICS_0_NAME": "x", "KORVET_TOPICS_0_RETENTION_BYTES": "lots"}, "expected a size"),
    ({"KORVET_TOPICS_0_NAME": "bad name"}, "contains a character"),
    ({"KORVET_TOPICS_0_NAME": "x", "KORVET_TOPICS_0_COMPRESSION": "brotli"}, "must be one of"),
])
def test_bad_topic_declarations_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.ConfigError, match=message):
        settings.load(env=env)


def test_declarations_fold_most_specific_first() -> None:
    from korvet.core.topic_declarations import TopicDeclaration, resolve

    declarations = [
        TopicDeclaration(0, "*", partitions=1, auto_create=True, configs={"retention.ms": "1"}),
        TopicDeclaration(1, "a*", partitions=2, configs={"retention.ms": "2"}),
        TopicDeclaration(2, "ab*", configs={"retention.bytes": "3"}),
        TopicDeclaration(3, "abc", auto_create=False),
    ]
    assert resolve(declarations, "abc").partitions == 2
    assert resolve(declarations, "abc").auto_create is False
    assert resolve(declarations, "abd").configs == {"retention.ms": "2", "retention.bytes": "3"}
    assert resolve(declarations, "zzz").partitions == 1
    assert resolve(declarations[1:], "zzz").partitions is None


def test_serve_help_documents_every_setting_with_its_default_and_variable() -> None:
    text = subprocess.run([*KORVET, "serve", "--help"], capture_output=True, text=True,
                          check=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
    flat = " ".join(text.split())
    for setting in settings.SETTINGS:
        if setting.hidden:  # test-only settings stay out of --help
            assert setting.flag not in flat, setting.name
            continue
        assert setting.flag in flat, setting.name
        assert setting.env in flat, setting.name
    assert "[default: 9092; env KORVET_BROKER_PORT]" in flat
    assert ("[default: 'korvet'; env KORVET_REDIS_KEYSPACE, KORVET_NAMESPACE, "
            "KORVET_BROKER_KEYSPACE]") in flat
    assert "[default: unset; env KORVET_REDIS_URL, KORVET_REDIS_URI]" in flat


def test_serve_rejects_a_bad_setting_with_exit_code_2() -> None:
    result = subprocess.run([*KORVET, "serve", "--topics-sequence-bits", "30"],
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 2
    assert "topics.sequence-bits must be within 1..22" in result.stderr


def test_kafkas_names_for_limits_work_in_yaml_environment_and_flags(tmp_path: Path) -> None:
    yaml_file = tmp_path / "korvet.yaml"
    yaml_file.write_text("socket.request.max.bytes: 2048\nmax:\n  connections: 50\n")
    loaded = settings.load(yaml_path=yaml_file, env={
        "KORVET_MAX_CONNECTIONS_PER_IP": "7", "KORVET_CONNECTIONS_MAX_IDLE_MS": "1234",
        "KORVET_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS": "3"})
    assert loaded.raw.get_int("broker.max-request-bytes") == 2048
    assert loaded.raw.get_int("broker.max-connections") == 50
    assert loaded.raw.get_int("broker.max-connections-per-ip") == 7
    assert loaded.raw.get_int("broker.connections-max-idle-ms") == 1234
    assert loaded.raw.get_int("fetch.max-sessions") == 3
    # Both names set to different values is an error naming both (one setting, two names).
    with pytest.raises(settings.ConfigError, match="KORVET_SOCKET_REQUEST_MAX_BYTES"):
        settings.load(env={"KORVET_SOCKET_REQUEST_MAX_BYTES": "4096",
                         "KORVET_BROKER_MAX_REQUEST_BYTES": "8192"})
    same = settings.load(env={"KORVET_SOCKET_REQUEST_MAX_BYTES": "4096",
                            "KORVET_BROKER_MAX_REQUEST_BYTES": "4096"})
    assert same.raw.get_int("broker.max-request-bytes") == 4096


@pytest.mark.parametrize(("env", "message"), [
    ({"KORVET_BROKER_MAX_CONNECTIONS": "0"}, "broker.max-connections must be at least 1"),
    ({"KORVET_BROKER_RESUME_PENDING_BYTES": str(2**40)},
     "resume-pending-bytes must be within 0..broker.max-pending-bytes"),
    ({"KORVET_FETCH_MAX_SESSIONS": "-1"}, "fetch.max-sessions must not be negative"),
    ({"KORVET_SOCKET_REQUEST_MAX_BYTES": "10"}, "socket.request.max.bytes"),
    ({"KORVET_REDIS_STREAM_NODE_MAX_BYTES": "-1"}, "redis.stream-node-max-bytes must be within"),
    ({"KORVET_REDIS_STREAM_NODE_MAX_BYTES": str(2**31)},
     "redis.stream-node-max-bytes must be within"),
    ({"KORVET_GROUP_SHARE_SESSION_TIMEOUT_MS": "0"},
     "groups.share-session-timeout-ms must be at least 1"),
    ({"KORVET_GROUPS_SHARE_MAX_SIZE": "0"}, "groups.share-max-size must be at least 1"),
])
def test_bad_limits_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.ConfigError, match=message):
        settings.load(env=env)
