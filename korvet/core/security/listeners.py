"""Listener specifications, as Kafka names them, and the principal of a TLS client certificate.

``listeners`` is a list of ``NAME://host:port`` (Kafka's syntax; the security protocol of a
name comes from ``listener.security.protocol.map``, or is the name itself when the name is
one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), or a list of mappings
``{name, host, port, protocol, advertised-host, advertised-port}``. ``advertised.listeners``
(``NAME://host:port``) says what Metadata tells the clients of each listener.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum


class ListenerError(ValueError):
    """A listener setting the broker cannot use; the message says which and why."""


class Protocol(Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (Protocol.SSL, Protocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (Protocol.SASL_PLAINTEXT, Protocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    protocol: Protocol
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = 0
    client_auth: str = ""  # none | requested | required; "" takes the broker's setting


_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def protocol_of(text: str) -> Protocol:
    try:
        return Protocol(text.strip().upper())
    except ValueError:
        known = ", ".join(p.value for p in Protocol)
        raise ListenerError(f"unknown security protocol {text!r} (known: {known})") from None


def parse_protocol_map(text: str) -> dict[str, Protocol]:
    """``INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`` -> {name: protocol}."""
    found: dict[str, Protocol] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or not _NAME.fullmatch(name.strip()):
            raise ListenerError(f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL")
        found[name.strip().upper()] = protocol_of(protocol)
    return found


def parse_endpoint(text: str) -> tuple[str, str, int]:
    matched = _ENDPOINT.fullmatch(text.strip())
    if not matched:
        raise ListenerError(f"listener {text!r} is not NAME://host:port")
    port = int(matched["port"])
    if not 0 <= port <= 65535:
        raise ListenerError(f"listener {text!r}: port out of range")
    return matched["name"].upper(), matched["host"].strip("[]"), port


def _protocol_for(name: str, protocols: Mapping[str, Protocol]) -> Protocol:
    if name in protocols:
        return protocols[name]
    try:
        return Protocol(name)
    except ValueError:
        raise ListenerError(f"listener {name} has no security protocol: name it in "
                            f"listener.security.protocol.map (e.g. {name}:SASL_SSL)") from None


def _from_mapping(item: Mapping[str, object], protocols: Mapping[str, Protocol]) -> ListenerSpec:
    name = str(item.get("name", "")).upper()
    if not _NAME.fullmatch(name):
        raise ListenerError(f"listener {dict(item)!r} needs a name of letters, digits and '_'")
    protocol = protocol_of(str(item["protocol"])) if "protocol" in item else _protocol_for(
        name, protocols)
    try:
        port = int(str(item.get("port", 9092)))
        advertised_port = int(str(item.get("advertised-port", item.get("advertised_port", 0))))
    except ValueError:
        raise ListenerError(f"listener {name}: port is not a number") from None
    host = str(item.get("host", "127.0.0.1"))
    advertised_host = str(item.get("advertised-host", item.get("advertised_host", "")))
    client_auth = str(item.get("client-auth", item.get("client_auth", ""))).lower()
    return ListenerSpec(name, protocol, host, port, advertised_host, advertised_port, client_auth)


def parse_listeners(value: str | Sequence[object], protocol_map: str = "") -> tuple[ListenerSpec, ...]:
    protocols = parse_protocol_map(protocol_map)
    items: Sequence[object] = (
        [p for p in value.split(",") if p.strip()] if isinstance(value, str) else value)
    specs: list[ListenerSpec] = []
    for item in items:
        if isinstance(item, Mapping):
            specs.append(_from_mapping(item, protocols))
        else:
            name, host, port = parse_endpoint(str(item))
            specs.append(ListenerSpec(name, _protocol_for(name, protocols), host, port))
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ListenerError(f"listener names must be unique: {', '.join(duplicates)}")
    bound = [(s.host, s.port) for s in specs if s.port]
    if len(bound) != len(set(bound)):
        raise ListenerError("two listeners bind the same host and port")
    return tuple(specs)


def apply_client_auth(specs: Sequence[ListenerSpec], text: str) -> tuple[ListenerSpec, ...]:
    """Per-listener client authentication from ``NAME:required,OTHER:none`` (Kafka's
    listener.name.<name>.ssl.client.auth)."""
    wanted: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, mode = item.partition(":")
        if not sep:
            raise ListenerError(f"listener client authentication {item!r} is not NAME:MODE")
        wanted[name.strip().upper()] = mode.strip().lower()
    unknown = sorted(set(wanted) - {s.name for s in specs})
    if unknown:
        raise ListenerError(f"client authentication set for unknown listener(s) {', '.join(unknown)}")
    return tuple(replace(s, client_auth=wanted[s.name]) if s.name in wanted else s for s in specs)


def apply_advertised(specs: Sequence[ListenerSpec], advertised: str) -> tuple[ListenerSpec, ...]:
    """Set each listener's advertised address from ``NAME://host:port`` entries."""
    wanted: dict[str, tuple[str, int]] = {}
    for item in (p for p in advertised.split(",") if p.strip()):
        name, host, port = parse_endpoint(item)
        wanted[name] = (host, port)
    known = {s.name for s in specs}
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise ListenerError(f"advertised listener(s) {', '.join(unknown)} name no listener "
                            f"(listeners: {', '.join(sorted(known))})")
    return tuple(replace(s, advertised_host=wanted[s.name][0], advertised_port=wanted[s.name][1])
                 if s.name in wanted else s for s in specs)


# --- the principal of a client certificate --------------------------------------------------

# Short names Java's X500Principal.getName() (RFC 2253) prints, by the name Python's ssl
# module gives each attribute of a certificate subject.
_SHORT_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _escape_rdn_value(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        special = char in ',+"\\<>;' or (i == 0 and char in "# ") or (
            i == len(value) - 1 and char == " ")
        out.append("\\" + char if special else char)
    return "".join(out)


def certificate_principal(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """``User:<distinguished name>`` as Kafka's default SSL principal builder makes it: the
    subject in RFC 2253 form, most specific attribute first (``CN=app,OU=eng,O=acme,C=FR``)."""
    parts = []
    for rdn in reversed(list(subject)):
        parts.append("+".join(f"{_SHORT_NAMES.get(key, key)}={_escape_rdn_value(value)}"
                              for key, value in rdn))
    return "User:" + ",".join(parts)
