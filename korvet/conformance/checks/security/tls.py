"""Security: what a TLS listener refuses (see the package's docstring for the secured broker)."""

from __future__ import annotations

import socket
import ssl

from korvet.conformance.checks.security.secure import REQUIRES, Secure, refused
from korvet.conformance.harness.context import CheckContext, skip
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.wire import WireClient, parse_bootstrap
from korvet.core.api_keys import ApiKey

TLS_API = "TLS listeners"


@check("security.tls.plaintext_client_refused", api=TLS_API, requires=REQUIRES,
       asserts="A client that speaks plain Kafka to a TLS listener gets no Kafka answer: the "
               "connection is closed.", source="SslTransportLayer (the TLS handshake comes first)")
def plaintext_client_refused(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = WireClient(secure.host, secure.port, timeout=10)
    ctx.on_close(conn.close)
    refused(conn, build_request(ApiKey.API_VERSIONS, 0), "ApiVersions in clear text to a SASL_SSL listener")


@check("security.tls.tls_client_on_plaintext_refused", api=TLS_API, requires=REQUIRES,
       asserts="A TLS client connecting to a PLAINTEXT listener fails its handshake; the broker "
               "keeps serving.", source="SocketServer: a TLS ClientHello is not a Kafka frame")
def tls_client_on_plaintext(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    if not secure.target.plaintext:
        skip("the security target names no plaintext listener")
    host, port = parse_bootstrap(secure.target.plaintext)
    context = ssl.create_default_context(cafile=secure.target.ca_file)
    context.check_hostname = False
    with socket.create_connection((host, port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host):
                raise CheckFailed("a TLS handshake succeeded on the PLAINTEXT listener")
        except (ssl.SSLError, OSError):
            pass
    secure.metadata(secure.admin)  # and the broker still serves
