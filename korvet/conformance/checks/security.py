"""Security: TLS listeners, SASL (SaslHandshake 17, SaslAuthenticate 36; PLAIN, SCRAM-SHA-256/512),
re-authentication (KIP-368), SCRAM users (50/51), ACLs (29-31) and what the authorizer refuses.

These checks need a secured broker: ``korvet conformance --security FILE`` names its SASL_SSL
listener, the CA that signed the broker's certificate and a super user (YAML)::

    sasl_ssl: 127.0.0.1:9093          # a SASL_SSL listener with PLAIN and SCRAM-SHA-256/512
    ca_file: /path/to/ca.pem
    admin: {user: admin, password: admin-secret}   # a super user: SCRAM-SHA-256, -512 and PLAIN
    plaintext: 127.0.0.1:9092         # optional: a PLAINTEXT listener of the same broker

The broker must run an authorizer with ``allow.everyone.if.no.acl.found=false`` (Kafka's
StandardAuthorizer; Korvet's ``authorizer.enabled``). The re-authentication checks need
``connections.max.reauth.ms`` between 3 and 20 seconds (8000 in the suite's own runs; the
other checks keep their connections shorter than that), and are skipped at 0.

The checks create their own users (AlterUserScramCredentials as the admin), topics, groups
and ACLs, named after the run and the check, and delete the users and ACLs when they end.
Rights given by a CreateAcls may reach a broker a moment later (Kafka's metadata log), so
checks wait for a grant to apply. Without ``--security`` every check here is skipped with that reason.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from korvet.conformance.context import CheckContext, expect, expect_eq, expect_error, skip, wait_until
from korvet.conformance.messages import build_request, error_name
from korvet.conformance.ops import EARLIEST, LATEST, Ops, fetch_result
from korvet.conformance.records import Rec, build_batch
from korvet.conformance.registry import CheckFailed, check
from korvet.conformance.wire import ConnectionClosed, WireClient, WireError, parse_bootstrap
from korvet.core.security import sasl, scram

SASL_API = "SASL (17, 36)"
TLS_API = "TLS listeners"
REAUTH_API = "Re-authentication (KIP-368)"
USERS_API = "SCRAM users (50, 51)"
ACL_API = "ACLs (29, 30, 31)"
AUTHZ_API = "Authorization"
REQUIRES = "a secured broker: --security FILE (SASL_SSL listener, CA file, super user)"
KIP_43 = "KIP-43 (SASL handshake); SaslServerAuthenticator"
KIP_84 = "KIP-84 (SCRAM); RFC 5802/7677; ScramSaslServer"
KIP_554 = "KIP-554 (SCRAM credentials API); ScramControlManager"
KIP_140 = "KIP-140 (ACL admin API); AclApis; StandardAuthorizer"
KAFKA_APIS = "KafkaApis (authorization per API)"

API_VERSIONS, METADATA, PRODUCE, FETCH, FIND_COORDINATOR, JOIN_GROUP = 18, 3, 0, 1, 10, 11
OFFSET_COMMIT, CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 8, 19, 22, 32
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_USERS, ALTER_USERS = 29, 30, 31, 50, 51
DESCRIBE_TOPIC_PARTITIONS = 75
NONE, UNKNOWN_TOPIC = 0, 3
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 29, 30, 31
UNSUPPORTED_MECHANISM, ILLEGAL_SASL_STATE, SASL_FAILED = 33, 34, 58
INVALID_REQUEST, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 42, 91, 92, 93
# ACL wire codes (ResourceType, PatternType, AclOperation, AclPermissionType)
TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
OP_ANY, OP_ALL, READ, WRITE, CREATE, DESCRIBE = 1, 2, 3, 4, 5, 8
DENY, ALLOW = 2, 3
GRANT_WAIT = 15.0  # seconds a new ACL or user may take to reach the broker


@dataclass(frozen=True, slots=True)
class SecurityTarget:
    sasl_ssl: str
    ca_file: str
    admin_user: str
    admin_password: str
    plaintext: str = ""

    @classmethod
    def load(cls, path: Path | str) -> SecurityTarget:
        try:
            doc = yaml.safe_load(Path(path).read_text()) or {}
            admin = doc.get("admin") or {}
            return cls(str(doc["sasl_ssl"]), str(doc["ca_file"]), str(admin["user"]),
                       str(admin["password"]), str(doc.get("plaintext") or ""))
        except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: a security target needs sasl_ssl, ca_file and admin.user/"
                             f"password ({exc})") from None


class TlsWireClient(WireClient):
    """A WireClient over TLS (the broker's certificate checked against the CA file)."""

    def __init__(self, host: str, port: int, *, ca_file: str, timeout: float = 30.0,
                 client_id: str | None = "korvet-conformance") -> None:
        super().__init__(host, port, client_id=client_id, timeout=timeout)
        context = ssl.create_default_context(cafile=ca_file)
        context.check_hostname = False  # test certificates name localhost and 127.0.0.1
        assert self._sock is not None
        try:
            self._sock = context.wrap_socket(self._sock, server_hostname=host)
        except (OSError, ssl.SSLError):
            self.close()
            raise


# --- the exchange -------------------------------------------------------------------------------

class Secure:
    """A check's access to the secured listener: TLS connections, SASL logins, admin calls."""

    def __init__(self, ctx: CheckContext) -> None:
        target = ctx.security
        if not isinstance(target, SecurityTarget):
            skip(f"needs {REQUIRES}")
        self.ctx = ctx
        self.target: SecurityTarget = target
        self.host, self.port = parse_bootstrap(target.sasl_ssl)
        self._admin: WireClient | None = None
        self.users: list[str] = []

    def connect(self) -> WireClient:
        conn = TlsWireClient(self.host, self.port, ca_file=self.target.ca_file,
                             timeout=self.ctx.request_timeout)
        self.ctx.on_close(conn.close)
        return conn

    def v(self, api_key: int, lo: int | None = None, hi: int | None = None) -> int:
        return self.ctx.apis.pick(api_key, lo, hi)

    def handshake(self, conn: WireClient, mechanism: str) -> Any:
        return conn.call(build_request(SASL_HANDSHAKE, self.v(SASL_HANDSHAKE, 1), mechanism=mechanism))

    def token(self, conn: WireClient, data: bytes) -> Any:
        return conn.call(build_request(SASL_AUTHENTICATE, self.v(SASL_AUTHENTICATE), auth_bytes=data))

    def login(self, conn: WireClient, user: str, password: str,
              mechanism: str = "SCRAM-SHA-512", *, nonce: str | None = None) -> Any:
        """Authenticate; returns the last SaslAuthenticate response (its error code tells)."""
        expect_error(self.handshake(conn, mechanism).error_code, NONE, f"SaslHandshake {mechanism}")
        if mechanism == "PLAIN":
            return self.token(conn, sasl.plain_token(user, password))
        first = scram.client_first_message(user, nonce or os.urandom(12).hex())
        answer = self.token(conn, first.encode())
        if int(answer.error_code) != NONE:
            return answer
        final, signature = scram.client_final_message(scram.MECHANISMS[mechanism], password, first,
                                                      answer.auth_bytes.decode())
        last = self.token(conn, final.encode())
        if int(last.error_code) == NONE:
            expect_eq(bytes(last.auth_bytes), scram.server_final_message(signature).encode(),
                      "the server's final message (its proof that it knows the credential)")
        return last

    def session(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> WireClient:
        """A connection authenticated as ``user`` (waiting for a new user to reach the broker)."""
        deadline = time.monotonic() + GRANT_WAIT
        while True:
            conn = self.connect()
            answer = self.login(conn, user, password, mechanism)
            if int(answer.error_code) == NONE:
                return conn
            conn.close()
            if time.monotonic() > deadline:
                raise CheckFailed(f"{user} cannot log in with {mechanism}: "
                                  f"{error_name(int(answer.error_code))} ({answer.error_message})")
            time.sleep(0.3)

    @property
    def admin(self) -> WireClient:
        if self._admin is None:
            self._admin = self.session(self.target.admin_user, self.target.admin_password)
        return self._admin

    def ops(self, conn: WireClient | None = None) -> Ops:
        ops = Ops(self.ctx)
        ops._conn = conn or self.admin  # Ops over the secured connection
        return ops

    # -- users and ACLs (as the admin) --------------------------------------------------

    def alter_users(self, upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]]) -> Any:
        return self.admin.call(build_request(ALTER_USERS, self.v(ALTER_USERS), upsertions=upsertions,
                                             deletions=deletions))

    def new_user(self, password: str = "secret-1", mechanism: str = "SCRAM-SHA-512") -> str:
        name = self.ctx.name("u")
        result = self.alter_users([upsertion(name, password, mechanism)], [])
        expect_error(result.results[0].error_code, NONE, f"AlterUserScramCredentials of {name}")
        self.users.append(name)
        if not self.users[1:]:
            self.ctx.on_close(self._delete_users)
        return name

    def _delete_users(self) -> None:
        for name in self.users:
            for mechanism in (1, 2):
                try:
                    self.alter_users([], [{"name": name, "mechanism": mechanism}])
                except (WireError, OSError):
                    return

    def create_acls(self, *acls: dict[str, Any]) -> Any:
        creations = [{"resource_pattern_type": LITERAL, "host": "*", "permission_type": ALLOW, **a}
                     for a in acls]
        response = self.admin.call(build_request(CREATE_ACLS, self.v(CREATE_ACLS), creations=creations))
        for result in response.results:
            expect_error(result.error_code, NONE, f"CreateAcls ({result.error_message})")
        self.ctx.on_close(lambda: self.delete_acls(*acls))
        return response

    def delete_acls(self, *acls: dict[str, Any]) -> Any:
        filters = [acl_filter(**a) for a in acls]
        return self.admin.call(build_request(DELETE_ACLS, self.v(DELETE_ACLS), filters=filters))


def upsertion(name: str, password: str, mechanism: str = "SCRAM-SHA-512",
              iterations: int = 4096) -> dict[str, Any]:
    chosen = scram.MECHANISMS[mechanism]
    salt = os.urandom(16)
    return {"name": name, "mechanism": chosen.type_code, "iterations": iterations, "salt": salt,
            "salted_password": chosen.salted_password(password, salt, iterations)}


def acl_filter(resource_type: int = ANY, resource_name: str | None = None,
               resource_pattern_type: int = ANY, principal: str | None = None, host: str | None = None,
               operation: int = OP_ANY, permission_type: int = ANY, **_: Any) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": resource_name,
            "pattern_type_filter": resource_pattern_type, "principal_filter": principal,
            "host_filter": host, "operation": operation, "permission_type": permission_type}


def refused(conn: WireClient, request: Any, what: str, *, may_answer: bool = False) -> None:
    """The broker closes the connection instead of serving ``request``. With ``may_answer`` it
    may first send an error answer (Kafka answers a request between SaslHandshake and
    SaslAuthenticate with that API's error response, then closes)."""
    try:
        answer = conn.call(request, timeout=10)
    except ConnectionClosed:
        return
    except WireError as exc:
        raise CheckFailed(f"{what}: expected the connection to close, got {exc}") from exc
    if not may_answer:
        code = int(getattr(answer, "error_code", 0))
        raise CheckFailed(f"{what}: the broker answered ({error_name(code)}) instead of closing")
    expect(conn.wait_closed(10), f"{what}: the connection stayed open after the answer")


def failed_login(answer: Any, what: str) -> None:
    expect_error(answer.error_code, SASL_FAILED, what)


@contextmanager
def elapsed() -> Iterator[Callable[[], float]]:
    started = time.monotonic()
    yield lambda: time.monotonic() - started


def _metadata(secure: Secure, conn: WireClient, topics: list[str] | None) -> Any:
    return secure.ops(conn).metadata(topics)


# --- TLS -------------------------------------------------------------------------------------

@check("security.tls.plaintext_client_refused", api=TLS_API, requires=REQUIRES,
       asserts="A client that speaks plain Kafka to a TLS listener gets no Kafka answer: the "
               "connection is closed.", source="SslTransportLayer (the TLS handshake comes first)")
def plaintext_client_refused(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = WireClient(secure.host, secure.port, timeout=10)
    ctx.on_close(conn.close)
    refused(conn, build_request(API_VERSIONS, 0), "ApiVersions in clear text to a SASL_SSL listener")


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
    _metadata(secure, secure.admin, None)  # and the broker still serves


# --- SASL: before authentication ----------------------------------------------------------

@check("security.sasl.only_handshake_before_authentication", api=SASL_API, requires=REQUIRES,
       asserts="Before authentication ApiVersions is answered (listing SaslHandshake and "
               "SaslAuthenticate) and any other request closes the connection unanswered.",
       source=KIP_43)
def only_handshake_before_auth(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.connect()
    versions = conn.call(build_request(API_VERSIONS, 3, client_software_name="korvet-conformance",
                                       client_software_version="1"))
    expect_error(versions.error_code, NONE, "ApiVersions before authentication")
    keys = {int(k.api_key) for k in versions.api_keys}
    expect({SASL_HANDSHAKE, SASL_AUTHENTICATE} <= keys, "ApiVersions lists SaslHandshake and "
           "SaslAuthenticate", listed=sorted(keys))
    refused(conn, build_request(METADATA, secure.v(METADATA, 1, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False), "Metadata before SASL")


@check("security.sasl.produce_before_authentication_stores_nothing", api=SASL_API, requires=REQUIRES,
       asserts="A Produce sent before authentication closes the connection and nothing is stored.",
       source=KIP_43)
def produce_before_auth(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic = secure.ops().create_topic().name
    conn = secure.connect()
    version = secure.v(PRODUCE, 3, 12)
    request = build_request(PRODUCE, version, transactional_id=None, acks=-1, timeout=5000,
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
    expect_error(answer.error_code, UNSUPPORTED_MECHANISM, "SaslHandshake NOT-A-MECHANISM")
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
    expect_error(secure.handshake(conn, "SCRAM-SHA-512").error_code, NONE, "SaslHandshake")
    refused(conn, build_request(METADATA, secure.v(METADATA, 1, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False),
            "Metadata between SaslHandshake and SaslAuthenticate", may_answer=True)


# --- SASL: logging in ----------------------------------------------------------------------

def _login_check(mechanism: str) -> Callable[[CheckContext], None]:
    def run(ctx: CheckContext) -> None:
        secure = Secure(ctx)
        conn = secure.connect()
        answer = secure.login(conn, secure.target.admin_user, secure.target.admin_password, mechanism)
        expect_error(answer.error_code, NONE, f"{mechanism} login of the admin")
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
        expect_error(secure.handshake(conn, "SCRAM-SHA-256").error_code, NONE, "SaslHandshake")
        failed_login(secure.token(conn, first), f"a client-first message with {what}")
    conn = secure.connect()
    expect_error(secure.handshake(conn, "SCRAM-SHA-256").error_code, NONE, "SaslHandshake")
    answer = secure.token(conn, scram.client_first_message(secure.target.admin_user, "n0nce").encode())
    expect_error(answer.error_code, NONE, "a valid client-first message")
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
    expect_error(secure.handshake(conn, "SCRAM-SHA-512").error_code, NONE, "SaslHandshake")
    server_first = secure.token(conn, first.encode()).auth_bytes.decode()
    final, _ = scram.client_final_message(scram.SHA512, password, first, server_first)
    expect_error(secure.token(conn, final.encode()).error_code, NONE, "the original exchange")
    again = secure.connect()
    expect_error(secure.handshake(again, "SCRAM-SHA-512").error_code, NONE, "SaslHandshake")
    second = secure.token(again, first.encode())
    expect_error(second.error_code, NONE, "the replayed client-first message")
    expect(bytes(second.auth_bytes).decode() != server_first, "the server nonce was reused")
    failed_login(secure.token(again, final.encode()), "the replayed client-final message")


@check("security.sasl.authenticate_after_login_is_illegal", api=SASL_API, requires=REQUIRES,
       asserts="On an authenticated connection SaslAuthenticate is answered ILLEGAL_SASL_STATE (34) "
               "and the connection keeps serving.", source="KafkaApis.handleSaslAuthenticateRequest")
def authenticate_after_login(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    conn = secure.session(secure.target.admin_user, secure.target.admin_password)
    expect_error(secure.token(conn, b"n,,n=admin,r=x").error_code, ILLEGAL_SASL_STATE,
                 "SaslAuthenticate after authentication")
    expect(len(_metadata(secure, conn, None).brokers) >= 1, "Metadata afterwards lists no broker")


@check("security.sasl.failures_do_not_stall_others", api=SASL_API, requires=REQUIRES,
       asserts="While other connections fail to authenticate (and wait out their delay), an "
               "authenticated connection keeps being answered within a second.", source=KIP_43)
def failures_do_not_stall(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    good = secure.session(secure.target.admin_user, secure.target.admin_password)
    failing = []
    for _ in range(6):
        conn = secure.connect()
        expect_error(secure.handshake(conn, "PLAIN").error_code, NONE, "SaslHandshake")
        conn.send(build_request(SASL_AUTHENTICATE, secure.v(SASL_AUTHENTICATE),
                                auth_bytes=sasl.plain_token(secure.target.admin_user, "wrong")))
        failing.append(conn)
    slowest = 0.0
    for _ in range(5):
        with elapsed() as took:
            _metadata(secure, good, None)
        slowest = max(slowest, took())
    ctx.note("slowest_metadata_ms", round(slowest * 1000))
    expect(slowest < 1.0, f"an authenticated Metadata took {slowest:.2f} s while others failed")
    for conn in failing:
        failed_login(conn.receive(timeout=10), "the concurrent wrong PLAIN password")


# --- re-authentication (KIP-368) -------------------------------------------------------------

def _session_lifetime(secure: Secure, conn: WireClient) -> int:
    answer = secure.login(conn, secure.target.admin_user, secure.target.admin_password)
    expect_error(answer.error_code, NONE, "login")
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
    _metadata(secure, conn, None)
    ctx.sleep(lifetime / 1000 + 0.5)
    refused(conn, build_request(METADATA, secure.v(METADATA, 1, 12), topics=None,
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
    expect_error(answer.error_code, NONE, "re-authentication")
    ctx.sleep(max(0.0, lifetime / 1000 - (min(lifetime / 2000, 2.0) + 1.0)) + 0.5)
    _metadata(secure, conn, None)


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
    described = secure.admin.call(build_request(DESCRIBE_USERS, 0, users=[{"name": name}]))
    (result,) = described.results
    expect_error(result.error_code, NONE, "DescribeUserScramCredentials of the new user")
    expect_eq([(int(c.mechanism), int(c.iterations)) for c in result.credential_infos], [(2, 4096)],
              "its (mechanism, iterations)")
    secure.session(name, "pw-one").close()
    deleted = secure.alter_users([], [{"name": name, "mechanism": 2}])
    expect_error(deleted.results[0].error_code, NONE, "deleting the credential")

    def gone() -> bool:
        answer = secure.admin.call(build_request(DESCRIBE_USERS, 0, users=[{"name": name}]))
        return int(answer.results[0].error_code) == RESOURCE_NOT_FOUND
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
    expect_eq(errors, {few: UNACCEPTABLE_CREDENTIAL, odd: UNSUPPORTED_MECHANISM,
                       missing: RESOURCE_NOT_FOUND, twice: DUPLICATE_RESOURCE},
              "error per user")


@check("security.users.need_cluster_rights", api=USERS_API, requires=REQUIRES,
       asserts="A principal without DESCRIBE/ALTER on the cluster gets CLUSTER_AUTHORIZATION_FAILED "
               "(31) from DescribeUserScramCredentials and AlterUserScramCredentials.", source=KAFKA_APIS)
def users_need_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw")
    conn = secure.session(name, "pw")
    # users=[] asks for every user (Kafka 4.3 leaves users=null from such a principal unanswered)
    described = conn.call(build_request(DESCRIBE_USERS, 0, users=[]))
    expect_error(described.error_code, CLUSTER_DENIED, "DescribeUserScramCredentials")
    altered = conn.call(build_request(ALTER_USERS, 0, upsertions=[upsertion(name, "new")],
                                      deletions=[]))
    expect_error(altered.results[0].error_code, CLUSTER_DENIED, "AlterUserScramCredentials")


# --- ACLs and what they allow -------------------------------------------------------------------

@check("security.acls.create_describe_delete", api=ACL_API, requires=REQUIRES, timeout=60,
       asserts="CreateAcls stores LITERAL and PREFIXED, ALLOW and DENY bindings; DescribeAcls finds "
               "them by filter (MATCH finds the prefixed one for a topic it covers); DeleteAcls "
               "returns the bindings it removed and they are gone.", source=KIP_140)
def acls_lifecycle(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic, principal = ctx.name("t"), f"User:{ctx.name('p')}"
    prefix = topic[:-2]
    secure.create_acls(
        {"resource_type": TOPIC, "resource_name": topic, "principal": principal, "operation": READ},
        {"resource_type": TOPIC, "resource_name": prefix, "resource_pattern_type": PREFIXED,
         "principal": principal, "operation": WRITE, "permission_type": DENY})
    version = secure.v(DESCRIBE_ACLS)

    def described(**wanted: Any) -> set[tuple[str, int, int, int]]:
        answer = secure.admin.call(build_request(DESCRIBE_ACLS, version, **acl_filter(**wanted)))
        expect_error(answer.error_code, NONE, "DescribeAcls")
        return {(r.resource_name, int(r.pattern_type), int(a.operation), int(a.permission_type))
                for r in answer.resources for a in r.acls}

    both = {(topic, LITERAL, READ, ALLOW), (prefix, PREFIXED, WRITE, DENY)}
    wait_until(lambda: described(principal=principal) == both, GRANT_WAIT, "DescribeAcls of both ACLs")
    expect_eq(described(resource_type=TOPIC, resource_name=topic, resource_pattern_type=MATCH,
                        principal=principal), both, "MATCH filter for the topic's name")
    expect_eq(described(resource_type=TOPIC, resource_name=prefix, resource_pattern_type=PREFIXED,
                        principal=principal), {(prefix, PREFIXED, WRITE, DENY)}, "PREFIXED filter")
    deleted = secure.admin.call(build_request(DELETE_ACLS, secure.v(DELETE_ACLS), filters=[
        acl_filter(principal=principal, operation=READ)]))
    (result,) = deleted.filter_results
    expect_error(result.error_code, NONE, "DeleteAcls")
    expect_eq([(m.resource_name, int(m.operation)) for m in result.matching_acls], [(topic, READ)],
              "the bindings DeleteAcls removed")
    wait_until(lambda: described(principal=principal) == {(prefix, PREFIXED, WRITE, DENY)}, GRANT_WAIT,
               "the deleted ACL gone from DescribeAcls")


@check("security.acls.invalid_bindings", api=ACL_API, requires=REQUIRES,
       asserts="CreateAcls refuses an empty resource name and a CLUSTER resource not named "
               "kafka-cluster with INVALID_REQUEST (42).", source=KIP_140)
def invalid_acls(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    principal = f"User:{ctx.name('p')}"
    creations = [{"resource_type": TOPIC, "resource_name": "", "resource_pattern_type": LITERAL,
                  "principal": principal, "host": "*", "operation": READ, "permission_type": ALLOW},
                 {"resource_type": CLUSTER, "resource_name": "not-the-cluster",
                  "resource_pattern_type": LITERAL, "principal": principal, "host": "*",
                  "operation": 7, "permission_type": ALLOW}]
    answer = secure.admin.call(build_request(CREATE_ACLS, secure.v(CREATE_ACLS), creations=creations))
    expect_eq([int(r.error_code) for r in answer.results], [INVALID_REQUEST, INVALID_REQUEST],
              "errors of the two invalid bindings")


@check("security.acls.need_cluster_rights", api=ACL_API, requires=REQUIRES,
       asserts="A principal without ALTER/DESCRIBE on the cluster gets CLUSTER_AUTHORIZATION_FAILED "
               "from CreateAcls (per binding) and DescribeAcls.", source=KIP_140)
def acls_need_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw")
    conn = secure.session(name, "pw")
    created = conn.call(build_request(CREATE_ACLS, secure.v(CREATE_ACLS), creations=[
        {"resource_type": TOPIC, "resource_name": "x", "resource_pattern_type": LITERAL,
         "principal": f"User:{name}", "host": "*", "operation": OP_ALL, "permission_type": ALLOW}]))
    expect_error(created.results[0].error_code, CLUSTER_DENIED, "CreateAcls by an ordinary user")
    described = conn.call(build_request(DESCRIBE_ACLS, secure.v(DESCRIBE_ACLS), **acl_filter()))
    expect_error(described.error_code, CLUSTER_DENIED, "DescribeAcls by an ordinary user")


@check("security.authz.read_only_principal_cannot_write", api=AUTHZ_API, requires=REQUIRES, timeout=60,
       asserts="A principal allowed only READ on a topic fetches it, but its Produce is answered "
               "TOPIC_AUTHORIZATION_FAILED (29) and nothing is stored.", source=KAFKA_APIS)
def read_only_cannot_write(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    admin = secure.ops()
    topic = admin.create_topic().name
    offset = admin.produce_ok(topic, 0, [Rec(b"by-admin")])
    end = admin.offset_of(topic, 0, LATEST)
    name = secure.new_user("pw")
    secure.create_acls({"resource_type": TOPIC, "resource_name": topic, "principal": f"User:{name}",
                        "operation": READ})
    reader = secure.ops(secure.session(name, "pw"))
    wait_until(lambda: reader.fetch(topic, 0, offset).error == NONE, GRANT_WAIT, "the READ grant")
    expect_eq(reader.fetch(topic, 0, offset).values, [b"by-admin"], "what the reader fetches")
    result = reader.produce(topic, 0, [Rec(b"by-reader")])
    expect_error(result.error, TOPIC_DENIED, "Produce by a read-only principal")
    expect_eq(admin.offset_of(topic, 0, LATEST), end, "the end of the log after the refused Produce")


@check("security.authz.metadata_hides_undescribable_topics", api=AUTHZ_API, requires=REQUIRES,
       asserts="Metadata of all topics leaves out those the principal may not DESCRIBE; asking for "
               "one by name (or for a topic that does not exist) answers TOPIC_AUTHORIZATION_FAILED "
               "and creates nothing.", source=f"{KAFKA_APIS}: handleTopicMetadataRequest")
def metadata_hides(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic = secure.ops().create_topic().name
    missing = ctx.name("t")
    name = secure.new_user("pw")
    conn = secure.session(name, "pw")
    everything = _metadata(secure, conn, None)
    expect(topic not in {t.name for t in everything.topics}, "the undescribable topic is listed")
    ops = secure.ops(conn)
    for wanted in (topic, missing):
        answer = ops.metadata([wanted], auto_create=True)
        expect_error(answer.topics[0].error_code, TOPIC_DENIED, f"Metadata of {wanted}")
    admin_view = secure.ops().metadata([missing])
    expect_error(admin_view.topics[0].error_code, UNKNOWN_TOPIC, "the topic the user asked for")


@check("security.authz.describe_topic_partitions_hides_undescribable_topics", api=AUTHZ_API,
       requires=REQUIRES,
       asserts="DescribeTopicPartitions of all topics leaves out those the principal may not DESCRIBE "
               "and lists one it may; naming one it may not (or a topic that does not exist) answers "
               "TOPIC_AUTHORIZATION_FAILED with no partitions.",
       source="KIP-966 (DescribeTopicPartitions); Kafka DescribeTopicPartitionsRequestHandler")
def describe_topic_partitions_hides(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    hidden = secure.ops().create_topic().name
    shown = secure.ops().create_topic().name
    missing = ctx.name("t")
    name = secure.new_user("pw")
    secure.create_acls({"resource_type": TOPIC, "resource_name": shown, "principal": f"User:{name}",
                        "operation": DESCRIBE})
    conn = secure.session(name, "pw")
    ops = secure.ops(conn)
    deadline = time.monotonic() + GRANT_WAIT
    while True:  # the new ACL may take a moment to reach the broker
        listed: set[str] = set()
        cursor = None
        for _ in range(100):  # every page of the listing
            answer = ops.call(DESCRIBE_TOPIC_PARTITIONS, topics=[], response_partition_limit=2000,
                              cursor=cursor)
            listed |= {str(t.name) for t in answer.topics}
            if answer.next_cursor is None:
                break
            cursor = {"topic_name": answer.next_cursor.topic_name,
                      "partition_index": answer.next_cursor.partition_index}
        if shown in listed or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    expect(shown in listed, "the topic the principal may DESCRIBE is not listed")
    expect(hidden not in listed, "the undescribable topic is listed")
    named = ops.call(DESCRIBE_TOPIC_PARTITIONS, topics=[{"name": hidden}, {"name": missing}],
                     response_partition_limit=2000, cursor=None)
    answers = {str(t.name): t for t in named.topics}
    for wanted in (hidden, missing):
        expect(wanted in answers, f"{wanted} is not answered")
        expect_error(answers[wanted].error_code, TOPIC_DENIED, f"DescribeTopicPartitions of {wanted}")
        expect_eq(len(answers[wanted].partitions), 0, f"partitions given for {wanted}")


@check("security.authz.group_rights", api=AUTHZ_API, requires=REQUIRES, timeout=60,
       asserts="Without READ on a group, JoinGroup and OffsetCommit answer GROUP_AUTHORIZATION_FAILED "
               "(30) and FindCoordinator of it too, even with READ on the topic.", source=KAFKA_APIS)
def group_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic = secure.ops().create_topic().name
    group = ctx.name("g")
    name = secure.new_user("pw")
    secure.create_acls({"resource_type": TOPIC, "resource_name": topic, "principal": f"User:{name}",
                        "operation": READ})
    conn = secure.session(name, "pw")
    found = conn.call(build_request(FIND_COORDINATOR, secure.v(FIND_COORDINATOR, 4), key_type=0,
                                    coordinator_keys=[group]))
    expect_error(found.coordinators[0].error_code, GROUP_DENIED, "FindCoordinator of the group")
    joined = conn.call(build_request(JOIN_GROUP, secure.v(JOIN_GROUP, 4), group_id=group,
                                     session_timeout=10_000, rebalance_timeout=10_000, member_id="",
                                     group_instance_id=None, protocol_type="consumer",
                                     protocols=[{"name": "range", "metadata": b""}], reason=None))
    expect_error(joined.error_code, GROUP_DENIED, "JoinGroup")
    committed = conn.call(build_request(OFFSET_COMMIT, secure.v(OFFSET_COMMIT, 2, 8), group_id=group,
                                        generation_id_or_member_epoch=-1, generation_id=-1, member_id="",
                                        group_instance_id=None, retention_time=-1, topics=[
                                            {"name": topic, "partitions": [
                                                {"partition_index": 0, "committed_offset": 0,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": None}]}]))
    expect_error(committed.topics[0].partitions[0].error_code, GROUP_DENIED, "OffsetCommit")


@check("security.authz.prefixed_allow_and_literal_deny", api=AUTHZ_API, requires=REQUIRES, timeout=60,
       asserts="A PREFIXED ALLOW of WRITE lets a principal produce to every topic the prefix covers, "
               "and a LITERAL DENY on one of them wins over it.", source=f"{KIP_140} (KIP-290 prefixes)")
def prefixed_and_deny(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    admin = secure.ops()
    open_topic, closed_topic = admin.create_topic().name, admin.create_topic().name
    prefix = open_topic.rstrip("0123456789")  # both are <run>-<check>-t<n>
    expect(closed_topic.startswith(prefix), "the two topics share a prefix")
    name = secure.new_user("pw")
    principal = f"User:{name}"
    secure.create_acls(
        {"resource_type": TOPIC, "resource_name": prefix, "resource_pattern_type": PREFIXED,
         "principal": principal, "operation": WRITE},
        {"resource_type": TOPIC, "resource_name": closed_topic, "principal": principal,
         "operation": WRITE, "permission_type": DENY})
    writer = secure.ops(secure.session(name, "pw"))
    wait_until(lambda: writer.produce(open_topic, 0, [Rec(b"x")]).error == NONE, GRANT_WAIT,
               "a produce the PREFIXED grant allows")
    expect_error(writer.produce(closed_topic, 0, [Rec(b"y")]).error, TOPIC_DENIED,
                 "Produce to the denied topic")


@check("security.authz.fetch_session_reauthorized", api=AUTHZ_API, requires=REQUIRES, timeout=60,
       asserts="Every Fetch authorizes every partition it reads, those its fetch session carries "
               "included: after the principal's READ is deleted, an incremental Fetch naming no "
               "partition answers the session's partition TOPIC_AUTHORIZATION_FAILED (29) with no "
               "records, not the records produced since.",
       source=f"{KAFKA_APIS}: handleFetchRequest (authorizes fetchContext.foreachPartition)")
def fetch_session_reauthorized(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    admin = secure.ops()
    topic = admin.create_topic()  # with its id: Fetch v13+ names topics by id
    end = admin.offset_of(topic, 0, LATEST)
    name = secure.new_user("pw")
    grant = {"resource_type": TOPIC, "resource_name": topic.name, "principal": f"User:{name}",
             "operation": READ}
    secure.create_acls(grant)
    reader = secure.ops(secure.session(name, "pw"))
    version = reader.v(FETCH, lo=7)
    wait_until(lambda: reader.fetch(topic, 0, end).error == NONE, GRANT_WAIT, "the READ grant")
    _, opened = reader.fetch_many([(topic, 0, end)], session_id=0, session_epoch=0, version=version)
    expect_error(opened[0].error, NONE, "the Fetch that opens the session")
    session = opened[0].session_id
    ctx.note("session_id", session)
    if session == 0:
        skip("the broker opened no fetch session (KIP-227 allows that)")
    secure.delete_acls(grant)
    wait_until(lambda: reader.fetch(topic, 0, end).error == TOPIC_DENIED, GRANT_WAIT,
               "the deletion of the READ grant (a sessionless Fetch)")
    admin.produce_ok(topic, 0, [Rec(b"after-revocation")])
    response = reader.conn.call(reader.fetch_request([], session_id=session, session_epoch=1,
                                                     version=version))
    expect_error(response.error_code, NONE, "the incremental Fetch's top-level error")
    answered = [fetch_result(response, p) for t in response.responses for p in t.partitions]
    expect_eq(len(answered), 1, "partitions in the incremental answer")
    expect_error(answered[0].error, TOPIC_DENIED, "the session's partition after its READ was deleted")
    values = [r.value for r in answered[0].records]
    expect_eq(values, [], "records returned after the READ was deleted")


@check("security.authz.cluster_and_topic_creation", api=AUTHZ_API, requires=REQUIRES,
       asserts="Without CREATE, CreateTopics answers TOPIC_AUTHORIZATION_FAILED; DescribeConfigs of "
               "the broker answers CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on the cluster.",
       source=KAFKA_APIS)
def cluster_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw")
    ops = secure.ops(secure.session(name, "pw"))
    wanted = ctx.name("t")
    created = ops.create_topics_raw([{"name": wanted}])
    expect_error(created.topics[0].error_code, TOPIC_DENIED, "CreateTopics without CREATE")
    described = ops.call(DESCRIBE_CONFIGS, None, resources=[
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        include_synonyms=False, include_documentation=False)
    expect_error(described.results[0].error_code, CLUSTER_DENIED, "DescribeConfigs of the broker")


@check("security.authz.idempotent_producer_needs_write", api=AUTHZ_API, requires=REQUIRES, timeout=60,
       asserts="InitProducerId without a transactional id is granted to a principal with WRITE on "
               "some topic (KIP-679) and answered CLUSTER_AUTHORIZATION_FAILED to one without.",
       source=f"{KAFKA_APIS}: handleInitProducerIdRequest")
def idempotent_producer(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    topic = secure.ops().create_topic().name
    reader, writer = secure.new_user("pw"), secure.new_user("pw")
    secure.create_acls({"resource_type": TOPIC, "resource_name": topic, "principal": f"User:{writer}",
                        "operation": WRITE})

    def init(user: str) -> int:
        conn = secure.session(user, "pw")
        answer = conn.call(build_request(INIT_PRODUCER_ID, secure.v(INIT_PRODUCER_ID),
                                         transactional_id=None, transaction_timeout=60_000,
                                         producer_id=-1, producer_epoch=-1))
        return int(answer.error_code)

    expect_error(init(reader), CLUSTER_DENIED, "InitProducerId without any WRITE")
    wait_until(lambda: init(writer) == NONE, GRANT_WAIT, "InitProducerId with WRITE on a topic")
