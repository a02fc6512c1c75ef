"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2) as the events of the SASL machine
(korvet/core/security/sasl.py). Their version is part of Kafka's rules, so the events carry
it: after a SaslHandshake v0 the tokens come bare, without SaslAuthenticate; a session may be
re-authenticated only with v1.
"""

from __future__ import annotations

from korvet.core.security import sasl
from korvet.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest


def decode_sasl_handshake(request: SaslHandshakeRequest) -> sasl.Handshake:
    return sasl.Handshake(request.mechanism, int(type(request).__version__))


def decode_sasl_authenticate(request: SaslAuthenticateRequest) -> sasl.Authenticate:
    return sasl.Authenticate(bytes(request.auth_bytes), int(type(request).__version__))
