"""SCRAM as korvet/core/security/scram.py computes it: the RFC 7677 test vector, the exchange
between the client and server halves for any user, password and nonce, and refusals."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core.security import scram
from tests.support.examples import examples

# RFC 7677 §3: user "user", password "pencil".
RFC_CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

usernames = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)
passwords = st.text(min_size=1, max_size=20)
nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
                 min_size=8, max_size=32)
mechanisms = st.sampled_from(sorted(scram.MECHANISMS.values(), key=lambda m: m.name))


def rfc_credential() -> scram.ScramCredential:
    return scram.credential_from_password(scram.SHA256, "pencil",
                                          base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)


def test_the_rfc_7677_exchange_byte_for_byte() -> None:
    final, signature = scram.client_final_message(scram.SHA256, "pencil", RFC_CLIENT_FIRST,
                                                  RFC_SERVER_FIRST)
    assert final == RFC_CLIENT_FINAL
    assert scram.server_final_message(signature) == RFC_SERVER_FINAL
    first = scram.parse_client_first(RFC_CLIENT_FIRST.encode())
    server_signature = scram.verify_client_final(scram.SHA256, rfc_credential(), first,
                                                 RFC_SERVER_FIRST,
                                                 scram.parse_client_final(RFC_CLIENT_FINAL.encode()))
    assert server_signature is not None
    assert scram.server_final_message(server_signature) == RFC_SERVER_FINAL


def exchange(mechanism: scram.ScramMechanism, user: str, stored_password: str, given_password: str,
             client_nonce: str, server_nonce: str, iterations: int = 4096) -> bool:
    credential = scram.credential_from_password(mechanism, stored_password, b"salt-" + user.encode(),
                                                iterations)
    client_first = scram.client_first_message(user, client_nonce)
    first = scram.parse_client_first(client_first.encode())
    assert first.username == user
    server_first = scram.server_first_message(first, server_nonce, credential)
    final, expected = scram.client_final_message(mechanism, given_password, client_first, server_first)
    signature = scram.verify_client_final(mechanism, credential, first, server_first,
                                          scram.parse_client_final(final.encode()))
    if signature is not None:
        assert signature == expected  # the client can check the server too
    return signature is not None


@settings(max_examples=examples(0.3))  # PBKDF2 of 4096 rounds per example
@given(mechanisms, usernames, passwords, passwords, nonces, nonces)
def test_a_password_proves_itself_and_only_itself(mechanism: scram.ScramMechanism, user: str,
                                                  stored: str, given_password: str,
                                                  client_nonce: str, server_nonce: str) -> None:
    assert exchange(mechanism, user, stored, stored, client_nonce, server_nonce)
    assert exchange(mechanism, user, stored, given_password, client_nonce, server_nonce) == (
        given_password == stored)


def test_a_final_message_from_another_exchange_is_refused() -> None:
    """A replayed client nonce: the proof of one exchange never opens another (fresh server nonce)."""
    credential = rfc_credential()
    first = scram.parse_client_first(RFC_CLIENT_FIRST.encode())
    fresh = scram.server_first_message(first, "AnotherServerNonce123", credential)
    replayed = scram.parse_client_final(RFC_CLIENT_FINAL.encode())
    assert scram.verify_client_final(scram.SHA256, credential, first, fresh, replayed) is None


def test_a_nonce_that_only_ends_with_the_server_nonce_is_accepted_as_kafka_does() -> None:
    """librdkafka 2.0 sends the client nonce twice; Kafka checks endsWith, and so does Korvet."""
    credential = rfc_credential()
    client_first = "n,,n=user,r=abcdefgh"
    first = scram.parse_client_first(client_first.encode())
    server_first = scram.server_first_message(first, "SERVER", credential)
    for nonce, accepted in (("abcdefghabcdefghSERVER", True), ("abcdefghSERVEX", False),
                            ("abcdefghSERVER", True), ("SERVER", False)):
        final, _ = scram.client_final_message(scram.SHA256, "pencil", client_first, server_first,
                                              nonce=nonce)
        verdict = scram.verify_client_final(scram.SHA256, credential, first, server_first,
                                            scram.parse_client_final(final.encode()))
        assert (verdict is not None) == accepted, nonce


def test_the_channel_binding_must_repeat_the_gs2_header() -> None:
    credential = rfc_credential()
    first = scram.parse_client_first(RFC_CLIENT_FIRST.encode())
    final, _ = scram.client_final_message(scram.SHA256, "pencil", RFC_CLIENT_FIRST, RFC_SERVER_FIRST,
                                          gs2_header="y,,")
    assert scram.verify_client_final(scram.SHA256, credential, first, RFC_SERVER_FIRST,
                                     scram.parse_client_final(final.encode())) is None


@given(usernames)
def test_user_names_escape_and_unescape(name: str) -> None:
    escaped = scram.escape_username(name)
    assert "," not in escaped
    assert scram.unescape_username(escaped) == name


@given(st.binary(max_size=200))
def test_garbage_is_refused_with_scram_error_only(data: bytes) -> None:
    for parse in (scram.parse_client_first, scram.parse_client_final):
        with contextlib.suppress(scram.ScramError):
            parse(data)


@pytest.mark.parametrize("message", [
    b"y,,n=user,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,x,n=user,r=abc", b"n,,r=abc,n=user",
    b"n,,n=us=4Aer,r=abc", b"n,,n=,r=abc", b"n,,n=user,r=", b"n,,n=user,r=a,b", b"n,,m=ext,n=user,r=abc",
    b"n,,n=user", "n,,n=user,r=ab\u00e9".encode(),
])
def test_malformed_client_first_messages(message: bytes) -> None:
    with pytest.raises(scram.ScramError):
        scram.parse_client_first(message)


@given(st.binary(min_size=1, max_size=32), st.binary(min_size=32, max_size=32),
       st.binary(min_size=32, max_size=32), st.integers(min_value=4096, max_value=16384))
def test_credentials_round_trip_through_their_text(salt: bytes, stored: bytes, server: bytes,
                                                   iterations: int) -> None:
    credential = scram.ScramCredential(salt, stored, server, iterations)
    text = credential.encode()
    assert scram.ScramCredential.decode(text) == credential
    assert "pencil" not in text


@pytest.mark.parametrize("iterations", [0, 4095, 16385])
def test_iterations_outside_kafkas_bounds_are_refused(iterations: int) -> None:
    with pytest.raises(scram.ScramError):
        scram.credential_from_password(scram.SHA512, "pw", b"salt", iterations)
