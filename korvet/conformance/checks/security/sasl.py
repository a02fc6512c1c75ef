"""Security: the SASL exchange (SaslHandshake 17, SaslAuthenticate 36; PLAIN, SCRAM-SHA-256/512),
re-authentication (KIP-368) and SCRAM users (50/51). See the package's docstring for the secured
broker these checks need.
"""

from __future__ import annotations

from collections.abc import Callable

from korvet.conformance.checks.security.secure import (
    GRANT_WAIT,
    KAFKA_APIS,
    REQUIRES,
    Secure,
    elapsed,
    failed_login,
    refused,
    upsertion,
)
from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, skip, wait_until
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import EARLIEST, LATEST
from korvet.conformance.kafka.records import Rec, build_batch
from korvet.conformance.kafka.wire import WireClient
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security import sasl, scram

SASL_API = "SASL (17, 36)"
REAUTH_API = "Re-authentication (KIP-368)"
USERS_API = "SCRAM users (50, 51)"
KIP_43 = "KIP-43 (SASL handshake); SaslServerAuthenticator"
KIP_84 = "KIP-84 (SCRAM); RFC 5802/7677; ScramSaslServer"
KIP_554 = "KIP-554 (SCRAM credentials API); ScramControlManager"


@check("security.sasl.only_handshake_before_authentication", api=SASL_API, requires=REQUIRES,
       asserts="Before authentication ApiVersions is answered (listing SaslHandshake and "
               "SaslAuthenticate) and any other request closes the connection unanswered.",
       source=KIP_43)
def only_handshake_before_auth(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    versions = conn.call(build_request(ApiKey.API_VERSIONS, 3, client_software_name="korvet-conformance",
                                       client_software_version="1"))
    expect_error(versions.error_code, ErrorCode.NONE, "ApiVersions before authentication")
    keys = {int(k.api_key) for k in versions.api_keys}
    expect({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys, "ApiVersions lists SaslHandshake and "
           "SaslAuthenticate", listed=sorted(keys))
    refused(conn, build_request(ApiKey.METADATA, secure.v(ApiKey.METADATA, 1, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False), "Metadata before SASL")


@check("security.sasl.produce_before_authentication_stores_nothing", api=SASL_API, requires=REQUIRES,
       asserts="A Produce sent before authentication closes the connection and nothing is stored.",
       source=KIP_43)
def produce_before_auth(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic = secure.ops().create_topic().name
    conn = secure.connect()
    version = secure.v(ApiKey.PRODUCE, 3, 12)
    request = build_request(ApiKey.PRODUCE, version, transactional_id=None, acks=-1, timeout=5000,
                            topic_data=[{"name": topic, "partition_data": [
                                {"index": 0, "records": build_batch([Rec(b"before-auth")])}]}])
    refused(conn, request, "Produce before SASL")
    admin = secure.ops()
    expect_eq(admin.offset_of(topic, 0, LATEST), admin.offset_of(topic, 0, EARLIEST),
              "the end of the log after the unauthenticated Produce (its start: nothing stored)")


@check("security.sasl.unknown_mechanism", api=SASL_API, requires=REQUIRES,
       asserts="A SaslHandshake naming a mechanism the listener does not enable is answered "
               "UNSUPPORTED_SASL_MECHANISM (33) with the enabled ones, then the connection closes.",
       source=KIP_43)
def unknown_mechanism(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    answer = secure.handshake(conn, "NOT-A-MECHANISM")
    expect_error(answer.error_code, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "SaslHandshake NOT-A-MECHANISM")
    expect({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} <= set(answer.mechanisms),
           "the answer lists PLAIN and both SCRAM mechanisms", mechanisms=list(answer.mechanisms))
    expect(conn.wait_closed(10), "the connection stays open after UNSUPPORTED_SASL_MECHANISM")


@check("security.sasl.request_after_handshake_refused", api=SASL_API, requires=REQUIRES,
       asserts="After SaslHandshake only SaslAuthenticate is accepted: a Metadata request is not "
               "served and the connection closes (Kafka first sends an empty error answer).",
       source=KIP_43)
def request_after_handshake(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    expect_error(secure.handshake(conn, "SCRAM-SHA-512").error_code, ErrorCode.NONE, "SaslHandshake")
    refused(conn, build_request(ApiKey.METADATA, secure.v(ApiKey.METADATA, 1, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False),
            "Metadata between SaslHandshake and SaslAuthenticate", may_answer=True)


# --- SASL: logging in ----------------------------------------------------------------------

def _login_check(mechanism: str) -> Callable[[CheckContext], None]:
    def run(ctx: CheckContext) -> None:
        secure = Secure(ctx)
        conn = secure.connect()
        answer = secure.login(conn, secure.target.admin_user, secure.target.admin_password, mechanism)
        expect_error(answer.error_code, ErrorCode.NONE, f"{mechanism} login of the admin")
        topic = secure.ops(conn).create_topic().name
        offset = secure.ops(conn).produce_ok(topic, 0, [Rec(b"after-login")])
        expect_eq(secure.ops(conn).fetch(topic, 0, offset).values, [b"after-login"],
                  "records read back")
    return run


for _mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
    check(f"security.sasl.login_{_mechanism.lower().replace('-', '_')}", api=SASL_API, requires=REQUIRES,
          asserts=f"A super user logs in with {_mechanism} (SCRAM: the server's final message proves "
                  "it knows the credential) and may then produce and fetch.",
          source=KIP_84 if _mechanism != "PLAIN" else "KIP-43; PlainSaslServer")(_login_check(_mechanism))


@check("security.sasl.wrong_password_delayed_and_closed", api=SASL_API, requires=REQUIRES,
       asserts="A wrong password is answered SASL_AUTHENTICATION_FAILED (58) after a delay "
               "(connections.failed.authentication.delay.ms, 100 ms by default), then the "
               "connection closes.", source=f"{KIP_84}; KIP-306 (failed authentication delay)")
def wrong_password(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        conn = secure.connect()
        with elapsed() as took:
            answer = secure.login(conn, secure.target.admin_user, "not-the-password", mechanism)
        failed_login(answer, f"{mechanism} login with a wrong password")
        expect(conn.last_elapsed >= 0.05, f"{mechanism}: the failure was answered in "
               f"{conn.last_elapsed * 1000:.0f} ms, without the failed-authentication delay",
               total_ms=round(took() * 1000))
        expect(conn.wait_closed(10), f"{mechanism}: the connection stayed open after the failure")


@check("security.sasl.unknown_user", api=SASL_API, requires=REQUIRES,
       asserts="A user that does not exist is refused SASL_AUTHENTICATION_FAILED (at the first or "
               "final SCRAM message) and the connection closes.", source=KIP_84)
def unknown_user(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    failed_login(secure.login(conn, ctx.name("nobody"), "x"), "SCRAM login of an unknown user")
    expect(conn.wait_closed(10), "the connection stayed open after the failure")


@check("security.sasl.garbage_scram_messages", api=SASL_API, requires=REQUIRES,
       asserts="SCRAM messages that do not follow RFC 5802 (random bytes, a first message without "
               "a nonce, a final message without a proof) are refused SASL_AUTHENTICATION_FAILED.",
       source=KIP_84)
def garbage_scram(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    for what, first in (("random bytes", b"\x00\xff\x13garbage\x7f"), ("no nonce", b"n,,n=admin"),
                        ("a channel binding flag", b"p=tls-unique,,n=admin,r=abc")):
        conn = secure.connect()
        expect_error(secure.handshake(conn, "SCRAM-SHA-256").error_code, ErrorCode.NONE, "SaslHandshake")
        failed_login(secure.token(conn, first), f"a client-first message with {what}")
    conn = secure.connect()
    expect_error(secure.handshake(conn, "SCRAM-SHA-256").error_code, ErrorCode.NONE, "SaslHandshake")
    answer = secure.token(conn, scram.client_first_message(secure.target.admin_user, "n0nce").encode())
    expect_error(answer.error_code, ErrorCode.NONE, "a valid client-first message")
    failed_login(secure.token(conn, b"c=biws,r=n0nce"), "a client-final message without a proof")


@check("security.sasl.replayed_client_final_refused", api=SASL_API, requires=REQUIRES,
       asserts="Replaying a successful exchange (same client nonce, same final message) on a new "
               "connection fails: the server nonce is fresh, so the old proof is worthless.",
       source=f"{KIP_84}; RFC 5802 §9")
def replayed_final(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    user, password = secure.target.admin_user, secure.target.admin_password
    first = scram.client_first_message(user, "replayed-nonce-1")
    conn = secure.connect()
    expect_error(secure.handshake(conn, "SCRAM-SHA-512").error_code, ErrorCode.NONE, "SaslHandshake")
    server_first = secure.token(conn, first.encode()).auth_bytes.decode()
    final, _ = scram.client_final_message(scram.SHA512, password, first, server_first)
    expect_error(secure.token(conn, final.encode()).error_code, ErrorCode.NONE, "the original exchange")
    again = secure.connect()
    expect_error(secure.handshake(again, "SCRAM-SHA-512").error_code, ErrorCode.NONE, "SaslHandshake")
    second = secure.token(again, first.encode())
    expect_error(second.error_code, ErrorCode.NONE, "the replayed client-first message")
    expect(bytes(second.auth_bytes).decode() != server_first, "the server nonce was reused")
    failed_login(secure.token(again, final.encode()), "the replayed client-final message")


@check("security.sasl.authenticate_after_login_is_illegal", api=SASL_API, requires=REQUIRES,
       asserts="On an authenticated connection SaslAuthenticate is answered ILLEGAL_SASL_STATE (34) "
               "and the connection keeps serving.", source="KafkaApis.handleSaslAuthenticateRequest")
def authenticate_after_login(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.session(secure.target.admin_user, secure.target.admin_password)
    expect_error(secure.token(conn, b"n,,n=admin,r=x").error_code, ErrorCode.ILLEGAL_SASL_STATE,
                 "SaslAuthenticate after authentication")
    expect(len(secure.metadata(conn).brokers) >= 1, "Metadata afterwards lists no broker")


@check("security.sasl.failures_do_not_stall_others", api=SASL_API, requires=REQUIRES,
       asserts="While other connections fail to authenticate (and wait out their delay), an "
               "authenticated connection keeps being answered within a second.", source=KIP_43)
def failures_do_not_stall(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    good = secure.session(secure.target.admin_user, secure.target.admin_password)
    failing = []
    for _ in range(6):
        conn = secure.connect()
        expect_error(secure.handshake(conn, "PLAIN").error_code, ErrorCode.NONE, "SaslHandshake")
        conn.send(build_request(ApiKey.SASL_AUTHENTICATE, secure.v(ApiKey.SASL_AUTHENTICATE),
                                auth_bytes=sasl.plain_token(secure.target.admin_user, "wrong")))
        failing.append(conn)
    slowest = 0.0
    for _ in range(5):
        with elapsed() as took:
            secure.metadata(good)
        slowest = max(slowest, took())
    ctx.note("slowest_metadata_ms", round(slowest * 1000))
    expect(slowest < 1.0, f"an authenticated Metadata took {slowest:.2f} s while others failed")
    for conn in failing:
        failed_login(conn.receive(timeout=10), "the concurrent wrong PLAIN password")


# --- re-authentication (KIP-368) -------------------------------------------------------------

def _session_lifetime(secure: Secure, conn: WireClient) -> int:
    answer = secure.login(conn, secure.target.admin_user, secure.target.admin_password)
    expect_error(answer.error_code, ErrorCode.NONE, "login")
    lifetime = int(answer.session_lifetime.total_seconds() * 1000) if hasattr(
        answer, "session_lifetime") else 0
    if lifetime <= 0:
        skip("the broker does not end sessions (connections.max.reauth.ms is 0)")
    if lifetime > 20_000:
        skip(f"sessions last {lifetime} ms: too long to wait for here")
    return lifetime


@check("security.reauth.expired_session_closes", api=REAUTH_API, requires=REQUIRES, timeout=60,
       asserts="With connections.max.reauth.ms set, SaslAuthenticate gives the session's lifetime; "
               "a request after it ends closes the connection.", source="KIP-368; SocketServer")
def expired_session(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    lifetime = _session_lifetime(secure, conn)
    secure.metadata(conn)
    ctx.sleep(lifetime / 1000 + 0.5)
    refused(conn, build_request(ApiKey.METADATA, secure.v(ApiKey.METADATA, 1, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False),
            "Metadata after the session ended")


@check("security.reauth.reauthentication_extends_the_session", api=REAUTH_API, requires=REQUIRES,
       timeout=60, asserts="Re-authenticating on the same connection (SaslHandshake and SaslAuthenticate "
       "again, same user) before the session ends starts a new session: requests after the first "
       "one's end are served.", source="KIP-368")
def reauthentication(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    lifetime = _session_lifetime(secure, conn)
    ctx.sleep(min(lifetime / 2000, 2.0) + 1.0)  # re-authentication at most once a second
    answer = secure.login(conn, secure.target.admin_user, secure.target.admin_password)
    expect_error(answer.error_code, ErrorCode.NONE, "re-authentication")
    ctx.sleep(max(0.0, lifetime / 1000 - (min(lifetime / 2000, 2.0) + 1.0)) + 0.5)
    secure.metadata(conn)


@check("security.reauth.principal_cannot_change", api=REAUTH_API, requires=REQUIRES, timeout=60,
       asserts="Re-authenticating as another user fails SASL_AUTHENTICATION_FAILED and closes the "
               "connection.", source="KIP-368; SaslServerAuthenticator.ensurePrincipalUnchanged")
def principal_cannot_change(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    other = secure.new_user("other-secret")
    secure.session(other, "other-secret").close()  # the user has reached the broker
    conn = secure.connect()
    _session_lifetime(secure, conn)
    ctx.sleep(1.1)
    failed_login(secure.login(conn, other, "other-secret"), "re-authentication as another user")
    expect(conn.wait_closed(10), "the connection stayed open")


# --- SCRAM users -------------------------------------------------------------------------------

@check("security.users.upsert_describe_delete", api=USERS_API, requires=REQUIRES, timeout=60,
       asserts="AlterUserScramCredentials stores a user from a salted password: it is described with "
               "its mechanism and iterations, logs in, and after its deletion is RESOURCE_NOT_FOUND "
               "and cannot log in.", source=KIP_554)
def users_lifecycle(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw-one")
    described = secure.admin.call(build_request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                                users=[{"name": name}]))
    (result,) = described.results
    expect_error(result.error_code, ErrorCode.NONE, "DescribeUserScramCredentials of the new user")
    expect_eq([(int(c.mechanism), int(c.iterations)) for c in result.credential_infos],
              [(scram.SHA512.type_code, 4096)], "its (mechanism, iterations)")
    secure.session(name, "pw-one").close()
    deleted = secure.alter_users([], [{"name": name, "mechanism": scram.SHA512.type_code}])
    expect_error(deleted.results[0].error_code, ErrorCode.NONE, "deleting the credential")

    def gone() -> bool:
        answer = secure.admin.call(build_request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                                 users=[{"name": name}]))
        return int(answer.results[0].error_code) == ErrorCode.RESOURCE_NOT_FOUND
    wait_until(gone, GRANT_WAIT, "the deleted user described as RESOURCE_NOT_FOUND")
    conn = secure.connect()
    failed_login(secure.login(conn, name, "pw-one"), "login of the deleted user")


@check("security.users.alteration_errors", api=USERS_API, requires=REQUIRES,
       asserts="AlterUserScramCredentials refuses iterations below 4096 (UNACCEPTABLE_CREDENTIAL), an "
               "unknown mechanism (UNSUPPORTED_SASL_MECHANISM), deleting a credential that does not "
               "exist (RESOURCE_NOT_FOUND) and a user altered twice (DUPLICATE_RESOURCE).", source=KIP_554)
def users_errors(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    few, odd, missing, twice = (ctx.name("u") for _ in range(4))
    answer = secure.alter_users(
        [upsertion(few, "pw", iterations=100), {**upsertion(odd, "pw"), "mechanism": 7},
         upsertion(twice, "pw"), upsertion(twice, "pw", "SCRAM-SHA-256")],
        [{"name": missing, "mechanism": 1}])
    errors = {r.user: int(r.error_code) for r in answer.results}
    expect_eq(errors, {few: ErrorCode.UNACCEPTABLE_CREDENTIAL, odd: ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                       missing: ErrorCode.RESOURCE_NOT_FOUND, twice: ErrorCode.DUPLICATE_RESOURCE},
              "error per user")


@check("security.users.need_cluster_rights", api=USERS_API, requires=REQUIRES,
       asserts="A principal without DESCRIBE/ALTER on the cluster gets CLUSTER_AUTHORIZATION_FAILED "
               "(31) from DescribeUserScramCredentials and AlterUserScramCredentials.", source=KAFKA_APIS)
def users_need_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw")
    conn = secure.session(name, "pw")
    # users=[] asks for every user (Kafka 4.3 leaves users=null from such a principal unanswered)
    described = conn.call(build_request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[]))
    expect_error(described.error_code, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DescribeUserScramCredentials")
    altered = conn.call(build_request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                      upsertions=[upsertion(name, "new")], deletions=[]))
    expect_error(altered.results[0].error_code, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 "AlterUserScramCredentials")
