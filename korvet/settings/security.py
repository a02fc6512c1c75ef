"""The security settings of ``korvet serve``, parsed and checked: listeners, TLS files, SASL,
the authorizer's policy, tenants, and the Redis connection's credentials.

``SecuritySettings.from_config`` is run once, when the settings are validated (validate.py),
so a bad value is refused before anything starts, with the setting's name; the broker reads
the parsed form, ``BrokerSettings.security``. An unconfigured broker gets one PLAINTEXT
listener on broker.host:broker.port, no SASL, no authorizer and no tenants: exactly the
broker it was before these settings existed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from korvet.core.security import sasl
from korvet.core.security.acl import Policy
from korvet.core.security.listeners import (
    ListenerError,
    ListenerSpec,
    Protocol,
    apply_advertised,
    apply_client_auth,
    parse_listeners,
)
from korvet.settings.values import Config


class SecuritySettingsError(ValueError):
    """A security setting the broker cannot use; the message names it."""


CLIENT_AUTH = ("none", "requested", "required")
_KEYSPACE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert_file: str = ""
    key_file: str = ""
    key_password: str = field(default="", repr=False)
    trust_file: str = ""
    client_auth: str = "none"  # none | requested | required


@dataclass(frozen=True, slots=True)
class RedisAuth:
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    listeners: tuple[ListenerSpec, ...]
    tls: TlsFiles = field(default_factory=TlsFiles)
    sasl: sasl.Settings = field(default_factory=sasl.Settings)
    authorizer: bool = False
    policy: Policy = field(default_factory=Policy)
    tenants: Mapping[str, str] = field(default_factory=dict)  # principal -> keyspace
    redis: RedisAuth = field(default_factory=RedisAuth)

    @property
    def uses_tls(self) -> bool:
        return any(spec.protocol.tls for spec in self.listeners)

    @property
    def uses_sasl(self) -> bool:
        return any(spec.protocol.sasl for spec in self.listeners)

    @classmethod
    def from_config(cls, config: Config) -> SecuritySettings:
        listeners = _listeners(config)
        tls = _tls(config, listeners)
        mechanisms = _items(config["broker.sasl.mechanisms"], "broker.sasl.mechanisms")
        unknown = [m for m in mechanisms if m not in sasl.SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise SecuritySettingsError(
                f"broker.sasl.mechanisms: {', '.join(unknown) or 'none given'}; Korvet supports "
                f"{', '.join(sasl.SUPPORTED_MECHANISMS)}")
        reauth = config.get_int("broker.connections-max-reauth-ms")
        delay = config.get_int("broker.failed-authentication-delay-ms")
        if reauth < 0 or delay < 0:
            raise SecuritySettingsError("broker.connections-max-reauth-ms and "
                                        "broker.failed-authentication-delay-ms must be >= 0")
        super_users = frozenset(_items(config["authorizer.super-users"], "authorizer.super-users",
                                       separators=";"))
        for principal in super_users:
            if ":" not in principal:
                raise SecuritySettingsError(f"authorizer.super-users: {principal!r} is not "
                                            "TYPE:NAME (e.g. User:admin)")
        return cls(
            listeners=listeners, tls=tls,
            sasl=sasl.Settings(tuple(mechanisms), reauth, delay),
            authorizer=config.get_bool("authorizer.enabled"),
            policy=Policy(super_users,
                          config.get_bool("authorizer.allow-everyone-if-no-acl-found")),
            tenants=_tenants(config["security.tenants"], config.get_str("redis.keyspace")),
            redis=RedisAuth(config.get_str("redis.username"), config.get_str("redis.password"),
                            config.get_str("redis.tls-ca-file"), config.get_str("redis.tls-cert-file"),
                            config.get_str("redis.tls-key-file")),
        )

    def with_ports(self, ports: Mapping[str, int]) -> SecuritySettings:
        return replace(self, listeners=tuple(replace(s, port=ports.get(s.name, s.port))
                                              for s in self.listeners))


def _items(value: object, name: str, separators: str = ",") -> list[str]:
    if isinstance(value, str):
        return [item.strip() for item in value.split(separators) if item.strip()]
    if isinstance(value, list | tuple):
        return [str(item).strip() for item in value if str(item).strip()]
    raise SecuritySettingsError(f"{name}: expected a list, got {value!r}")


def _listeners(config: Config) -> tuple[ListenerSpec, ...]:
    value = config["broker.listeners"]
    try:
        if value in ("", [], ()):
            tls, sasl_on = config.get_bool("broker.tls"), config.get_bool("broker.sasl.enabled")
            protocol = {(False, False): Protocol.PLAINTEXT, (True, False): Protocol.SSL,
                        (False, True): Protocol.SASL_PLAINTEXT, (True, True): Protocol.SASL_SSL}[
                (tls, sasl_on)]
            specs: tuple[ListenerSpec, ...] = (ListenerSpec(
                protocol.value, protocol, config.get_str("broker.host"), config.get_int("broker.port"),
                config.get_str("broker.advertised-host"), config.get_int("broker.advertised-port")),)
        else:
            if isinstance(value, Mapping):
                raise SecuritySettingsError("broker.listeners: expected a list, not a mapping")
            specs = parse_listeners(value, config.get_str("broker.listener-security-protocol-map"))
            if not specs:
                raise SecuritySettingsError("broker.listeners: no listener given")
        specs = apply_client_auth(specs, config.get_str("broker.listener-client-auth"))
        return apply_advertised(specs, config.get_str("broker.advertised-listeners"))
    except ListenerError as exc:
        raise SecuritySettingsError(f"broker.listeners: {exc}") from None


def _tls(config: Config, listeners: Sequence[ListenerSpec]) -> TlsFiles:
    client_auth = config.get_str("broker.client-auth").strip().lower() or (
        "required" if config.get_bool("broker.client-auth-required") else "none")
    if client_auth not in CLIENT_AUTH:
        raise SecuritySettingsError(f"broker.client-auth must be one of {', '.join(CLIENT_AUTH)}")
    files = TlsFiles(config.get_str("broker.cert-file"), config.get_str("broker.key-file"),
                     config.get_str("broker.key-password"), config.get_str("broker.trust-cert-file"),
                     client_auth)
    tls_listeners = [spec for spec in listeners if spec.protocol.tls]
    for spec in listeners:
        if spec.client_auth and spec.client_auth not in CLIENT_AUTH:
            raise SecuritySettingsError(f"listener {spec.name}: client authentication must be one "
                                        f"of {', '.join(CLIENT_AUTH)}")
    if tls_listeners:
        if not files.cert_file or not files.key_file:
            raise SecuritySettingsError("a TLS listener (SSL or SASL_SSL) needs broker.cert-file "
                                        "and broker.key-file")
        for name, path in (("broker.cert-file", files.cert_file), ("broker.key-file", files.key_file),
                           ("broker.trust-cert-file", files.trust_file)):
            if path and not Path(path).is_file():
                raise SecuritySettingsError(f"{name}: {path} does not exist")
        modes = {spec.client_auth or client_auth for spec in tls_listeners}
        if modes - {"none"} and not files.trust_file:
            raise SecuritySettingsError("client authentication needs broker.trust-cert-file, the CA "
                                        "that signs client certificates")
    return files


def client_auth_of(spec: ListenerSpec, files: TlsFiles) -> str:
    return spec.client_auth or files.client_auth


def _tenants(value: object, base: str) -> dict[str, str]:
    pairs: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    else:
        for item in _items(value, "security.tenants"):
            principal, sep, keyspace = item.rpartition("=")
            if not sep:
                raise SecuritySettingsError(f"security.tenants: {item!r} is not principal=keyspace")
            pairs.append((principal, keyspace))
    tenants: dict[str, str] = {}
    for raw_principal, raw_keyspace in pairs:
        principal, keyspace = raw_principal.strip(), raw_keyspace.strip()
        if ":" not in principal:
            raise SecuritySettingsError(f"security.tenants: {principal!r} is not TYPE:NAME "
                                        "(e.g. User:alice)")
        if not _KEYSPACE.fullmatch(keyspace):
            raise SecuritySettingsError(f"security.tenants: keyspace {keyspace!r} must be letters, "
                                        "digits, '.', '_' or '-' (no ':', so keyspaces never overlap)")
        if keyspace != base and keyspace == base.split(":", 1)[0]:
            raise SecuritySettingsError(f"security.tenants: keyspace {keyspace!r} would share keys "
                                        f"with redis.keyspace {base!r}")
        tenants[principal] = keyspace
    return tenants
