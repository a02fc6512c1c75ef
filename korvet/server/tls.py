"""TLS for the broker's listeners (Python's ssl module, TLS 1.2 and newer) and for its Redis.

A TLS listener presents ``broker.cert-file``/``broker.key-file``. With client
authentication ``requested`` or ``required`` it verifies client certificates against
``broker.trust-cert-file``; on an SSL listener the verified certificate's subject is the
connection's principal (``User:CN=app,O=acme``, RFC 2253 as Kafka prints it), and a
client without one is ``User:ANONYMOUS`` (``requested`` only: ``required`` refuses it in
the handshake).
"""

from __future__ import annotations

import ssl
from typing import Any

from korvet.core.security.acl import ANONYMOUS
from korvet.core.security.listeners import certificate_principal
from korvet.settings.security import RedisAuth, TlsFiles


class TlsError(RuntimeError):
    """The certificate, key or CA files cannot be used; the message says which."""


def server_context(files: TlsFiles, client_auth: str | None = None) -> ssl.SSLContext:
    """A listener's context; ``client_auth`` overrides the broker's (per listener)."""
    mode = client_auth or files.client_auth
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert_file, files.key_file, password=files.key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load broker.cert-file {files.cert_file} with broker.key-file "
                       f"{files.key_file}: {exc}") from exc
    if mode != "none":
        try:
            context.load_verify_locations(cafile=files.trust_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load broker.trust-cert-file {files.trust_file}: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL
    return context


def peer_principal(peercert: Any) -> str:
    """The principal of a verified client certificate (as ``getpeercert()`` returns it)."""
    if not isinstance(peercert, dict) or not peercert.get("subject"):
        return ANONYMOUS
    return certificate_principal(peercert["subject"])


def redis_options(auth: RedisAuth, url: str) -> dict[str, Any]:
    """Keyword arguments for redis-py's ``from_url``: for ``rediss://`` URLs the CA and
    client certificate files. (The ACL user and password go into the URL itself:
    ``korvet.server.app.with_credentials``.)"""
    options: dict[str, Any] = {}
    if url.startswith("rediss://"):
        if auth.ca_file:
            options["ssl_ca_certs"] = auth.ca_file
        if auth.cert_file:
            options["ssl_certfile"] = auth.cert_file
        if auth.key_file:
            options["ssl_keyfile"] = auth.key_file
        options.setdefault("ssl_cert_reqs", "required")
    return options
