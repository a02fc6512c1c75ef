"""The security settings: Kafka's names, the original product's names and KORVET_* variables,
listener specifications, and what is refused before the broker starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from korvet import settings
from korvet.core.errors import ErrorCode
from korvet.core.security import credentials, scram
from korvet.core.security.listeners import (
    ListenerError,
    Protocol,
    certificate_principal,
    parse_listeners,
)
from korvet.server.app import masked, with_credentials
from korvet.settings import SecuritySettings


def settings_of(env: dict[str, str] | None = None, yaml_text: str = "",
                tmp_path: Path | None = None) -> SecuritySettings:
    path = None
    if yaml_text:
        assert tmp_path is not None
        path = tmp_path / "korvet.yaml"
        path.write_text(yaml_text)
    return settings.load(yaml_path=path, env=env or {}).security


def test_an_unconfigured_broker_has_one_open_plaintext_listener() -> None:
    s = settings_of()
    assert [(spec.name, spec.protocol, spec.host, spec.port) for spec in s.listeners] == [
        ("PLAINTEXT", Protocol.PLAINTEXT, "127.0.0.1", 9092)]
    assert not s.authorizer and not s.uses_sasl and not s.uses_tls and not s.tenants


def test_the_original_products_variables(tmp_path: Path) -> None:
    cert, key, ca = (tmp_path / n for n in ("c.pem", "k.pem", "ca.pem"))
    for f in (cert, key, ca):
        f.write_text("x")
    s = settings_of({"KORVET_BROKER_TLS": "true", "KORVET_BROKER_SASL_ENABLED": "true",
                     "KORVET_BROKER_SASL_MECHANISMS": "PLAIN", "KORVET_BROKER_CERT_FILE": str(cert),
                     "KORVET_BROKER_KEY_FILE": str(key), "KORVET_BROKER_CLIENT_AUTH_REQUIRED": "true",
                     "KORVET_BROKER_TRUST_CERT_FILE": str(ca)})
    (listener,) = s.listeners
    assert listener.protocol is Protocol.SASL_SSL
    assert s.sasl.mechanisms == ("PLAIN",)
    assert s.tls.client_auth == "required" and s.tls.trust_file == str(ca)


def test_kafkas_names_in_yaml(tmp_path: Path) -> None:
    s = settings_of(yaml_text="""
listeners: INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9094
listener.security.protocol.map: INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT
advertised.listeners: EXTERNAL://kafka.example.com:19094
super.users: User:admin;User:CN=ops,O=acme
allow.everyone.if.no.acl.found: true
connections.max.reauth.ms: 60000
authorizer: {enabled: true}
security:
  tenants: {"User:CN=app,O=acme": acme, "User:bob": globex}
""", tmp_path=tmp_path)
    internal, external = s.listeners
    assert (internal.name, internal.protocol) == ("INTERNAL", Protocol.PLAINTEXT)
    assert (external.protocol, external.advertised_host, external.advertised_port) == (
        Protocol.SASL_PLAINTEXT, "kafka.example.com", 19094)
    assert s.policy.super_users == {"User:admin", "User:CN=ops,O=acme"}
    assert s.policy.allow_everyone_if_no_acl_found and s.authorizer
    assert s.sasl.max_reauth_ms == 60000
    assert s.tenants == {"User:CN=app,O=acme": "acme", "User:bob": "globex"}


def test_listeners_as_a_yaml_list(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("x")
    s = settings_of(yaml_text=f"""
listeners:
  - {{name: INTERNAL, port: 9092, protocol: PLAINTEXT}}
  - {{name: EXTERNAL, host: 0.0.0.0, port: 9093, protocol: SASL_SSL}}
  - {{name: MTLS, port: 9094, protocol: SSL, client-auth: required}}
broker: {{cert-file: {tmp_path / "c"}, key-file: {tmp_path / "c"}, trust-cert-file: {tmp_path / "c"}}}
""", tmp_path=tmp_path)
    assert [(spec.name, spec.protocol.value, spec.port, spec.client_auth) for spec in s.listeners] == [
        ("INTERNAL", "PLAINTEXT", 9092, ""), ("EXTERNAL", "SASL_SSL", 9093, ""),
        ("MTLS", "SSL", 9094, "required")]


def test_the_original_products_file_with_security_keys_loads_without_warnings(tmp_path: Path) -> None:
    """The `korvet:`-wrapped, camelCase file of the original product (issue 15's loader) with
    the security settings in it: list and mapping values stay whole, nothing is 'unknown'."""
    (tmp_path / "c").write_text("x")
    path = tmp_path / "application.yaml"
    path.write_text(f"""
korvet:
  broker:
    tls: true
    certFile: {tmp_path / "c"}
    keyFile: {tmp_path / "c"}
    sasl: {{enabled: true, mechanisms: [SCRAM-SHA-512, PLAIN]}}
  redis: {{uri: "rediss://db:6380/0", username: app, password: s3cret, tlsCaFile: {tmp_path / "c"}}}
  security:
    tenants: {{"User:CN=app,O=acme": acme}}
  super.users: User:admin
""")
    loaded = settings.load(yaml_path=path, env={})
    assert loaded.warnings == ()
    s = loaded.security
    assert [spec.protocol for spec in s.listeners] == [Protocol.SASL_SSL]
    assert s.sasl.mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert s.tenants == {"User:CN=app,O=acme": "acme"}
    assert s.policy.super_users == {"User:admin"}
    assert (s.redis.username, s.redis.password, s.redis.ca_file) == ("app", "s3cret", str(tmp_path / "c"))
    assert loaded.raw.source("broker.sasl.mechanisms") == f"{path} key korvet.broker.sasl.mechanisms"


def test_a_misspelt_security_key_is_a_warning_naming_the_setting_or_refused_when_strict(
        tmp_path: Path) -> None:
    path = tmp_path / "korvet.yaml"
    path.write_text("super.user: User:admin\n")
    loaded = settings.load(yaml_path=path, env={})
    assert any("unknown setting 'super.user'" in w and "super.users" in w for w in loaded.warnings)
    with pytest.raises(settings.ConfigError, match=r"super\.user"):
        settings.load(yaml_path=path, env={"KORVET_CONFIG_STRICT": "true"})


def test_list_settings_from_flags() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    args = parser.parse_args(["--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                              "--broker-sasl-mechanisms", "PLAIN"])
    s = settings.from_args(args).security
    assert [spec.protocol for spec in s.listeners] == [Protocol.PLAINTEXT, Protocol.SASL_PLAINTEXT]
    assert s.sasl.mechanisms == ("PLAIN",)


def test_kafkas_names_of_the_security_settings_are_variables_flags_and_yaml_keys(
        tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    args = parser.parse_args(["--sasl-enabled-mechanisms", "PLAIN", "--connections-max-reauth-ms",
                              "1m", "--allow-everyone-if-no-acl-found"])
    overrides = {s.name: getattr(args, s.attr, None) for s in settings.SETTINGS}
    from_flags = settings.load(
        overrides=overrides, env={"KORVET_SUPER_USERS": "User:admin;User:ops"}).security
    assert from_flags.sasl.mechanisms == ("PLAIN",)
    assert from_flags.sasl.max_reauth_ms == 60_000
    assert from_flags.policy.super_users == {"User:admin", "User:ops"}
    assert from_flags.policy.allow_everyone_if_no_acl_found
    path = tmp_path / "korvet.yaml"
    path.write_text("listeners: SASL_PLAINTEXT://127.0.0.1:0\nssl.client.auth: none\n")
    loaded = settings.load(yaml_path=path, env={})
    assert loaded.warnings == ()
    assert [spec.protocol for spec in loaded.security.listeners] == [
        Protocol.SASL_PLAINTEXT]
    with pytest.raises(settings.ConfigError, match="super"):  # both names, different values
        settings.load(env={"KORVET_SUPER_USERS": "User:a", "KORVET_AUTHORIZER_SUPER_USERS": "User:b"})


@pytest.mark.parametrize(("env", "fragment"), [
    ({"KORVET_BROKER_LISTENERS": "EXTERNAL://h:1"}, "no security protocol"),
    ({"KORVET_BROKER_LISTENERS": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "unique"),
    ({"KORVET_BROKER_LISTENERS": "PLAINTEXT://h"}, "NAME://host:port"),
    ({"KORVET_BROKER_LISTENERS": "SSL://h:1"}, "needs broker.cert-file"),
    ({"KORVET_BROKER_SASL_MECHANISMS": "GSSAPI"}, "GSSAPI"),
    ({"KORVET_AUTHORIZER_SUPER_USERS": "admin"}, "TYPE:NAME"),
    ({"KORVET_SECURITY_TENANTS": "User:a=bad:ks"}, "keyspace"),
    ({"KORVET_SECURITY_TENANTS": "User:a=korvet", "KORVET_REDIS_KEYSPACE": "korvet:x"}, "share keys"),
    ({"KORVET_BROKER_ADVERTISED_LISTENERS": "OTHER://h:1"}, "name no listener"),
    ({"KORVET_BROKER_CLIENT_AUTH": "sometimes"}, "client-auth"),
])
def test_bad_settings_are_refused_with_their_name(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(settings.ConfigError, match=fragment):
        settings.load(env=env)


def test_secrets_are_not_shown() -> None:
    shown = dict(settings.describe(settings.load(env={"KORVET_REDIS_PASSWORD": "hunter2",
                                                      "KORVET_BROKER_KEY_PASSWORD": "hunter3"}).raw))
    assert shown["redis.password"] == "****"
    assert shown["broker.key-password"] == "****"
    url = with_credentials("rediss://h:1/0", "user", "hunter2")
    assert masked(url) == "rediss://user:****@h:1/0"
    assert "hunter2" not in repr(settings_of({"KORVET_REDIS_PASSWORD": "hunter2"}))
    typed = settings.load(env={"KORVET_REDIS_URI": "redis://db:1/0", "KORVET_REDIS_PASSWORD": "hunter2",
                               "KORVET_BROKER_KEY_PASSWORD": "hunter3"})
    assert "hunter2" not in repr(typed) and "hunter3" not in repr(typed)


def test_a_listener_string_and_its_errors() -> None:
    (one,) = parse_listeners("SASL_SSL://[::1]:9093")
    assert (one.host, one.port, one.protocol) == ("::1", 9093, Protocol.SASL_SSL)
    with pytest.raises(ListenerError):
        parse_listeners("SASL_SSL://h:99999")


def test_a_certificate_subject_becomes_kafkas_principal() -> None:
    subject = ((("countryName", "FR"),), (("organizationName", "Acme, Inc."),),
               (("commonName", "app"),))
    assert certificate_principal(subject) == "User:CN=app,O=Acme\\, Inc.,C=FR"


def test_alter_user_scram_credentials_follows_kafkas_rules() -> None:
    salted = scram.SHA512.salted_password("pw", b"salt", 4096)
    up = credentials.Upsertion("alice", 2, 4096, b"salt", salted)
    plan = credentials.plan_alteration(
        [credentials.Deletion("bob", 1), credentials.Deletion("carol", 1),
         credentials.Deletion("dave", 9)],
        [up, credentials.Upsertion("erin", 2, 100, b"s", salted),
         credentials.Upsertion("", 2, 4096, b"s", salted),
         credentials.Upsertion("bob", 2, 4096, b"salt", salted)],
        existing=[("bob", "SCRAM-SHA-256")])
    errors = {r.user: r.error for r in plan.results}
    assert errors == {"bob": ErrorCode.DUPLICATE_RESOURCE, "carol": ErrorCode.RESOURCE_NOT_FOUND,
                      "dave": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "alice": ErrorCode.NONE,
                      "erin": ErrorCode.UNACCEPTABLE_CREDENTIAL, "": ErrorCode.UNACCEPTABLE_CREDENTIAL}
    assert plan.deletions == ()
    ((user, mechanism, credential),) = plan.upsertions
    assert (user, mechanism) == ("alice", "SCRAM-SHA-512")
    assert scram.password_matches(scram.SHA512, credential, "pw")


def test_describe_user_scram_credentials_follows_kafkas_rules() -> None:
    users = {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}
    (everyone,) = credentials.describe_users(None, users)
    assert everyone.credentials == ((1, 4096), (2, 8192))
    found = {d.user: d.error for d in credentials.describe_users(["alice", "zed", "zed"], users)}
    assert found == {"alice": ErrorCode.NONE, "zed": ErrorCode.DUPLICATE_RESOURCE}


def test_the_yaml_of_the_security_guide_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every YAML block of docs/users/security.md loads as korvet serve would load it."""
    import re

    guide = (Path(__file__).resolve().parents[3] / "docs" / "users" / "security.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", guide, flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secrets").mkdir()
    for name in ("broker.pem", "broker.key", "ca.pem"):
        (tmp_path / "secrets" / name).write_text("x")
    for number, block in enumerate(blocks):
        path = tmp_path / f"block{number}.yaml"
        path.write_text(block)
        settings.load(yaml_path=path, env={})
