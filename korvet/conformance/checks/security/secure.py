"""A security check's access to the secured listener: TLS connections, SASL logins, admin calls.

``Secure(ctx)`` skips the check when the run names no secured listener (``--security FILE``,
``harness/security.py``). Users and ACLs a check creates through it are deleted when the
check ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, skip
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.security import SecurityTarget
from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.wire import (
    ConnectionClosed,
    TlsWireClient,
    WireClient,
    WireError,
    parse_bootstrap,
)
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security import sasl, scram
from korvet.core.security.acl import Operation, PatternType, Permission, ResourceType

REQUIRES = "a secured broker: --security FILE (SASL_SSL listener, CA file, super user)"
KAFKA_APIS = "KafkaApis (authorization per API)"
GRANT_WAIT = 15.0  # seconds a new ACL or user may take to reach the broker


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
        return conn.call(build_request(ApiKey.SASL_HANDSHAKE, self.v(ApiKey.SASL_HANDSHAKE, 1),
                                       mechanism=mechanism))

    def token(self, conn: WireClient, data: bytes) -> Any:
        return conn.call(build_request(ApiKey.SASL_AUTHENTICATE, self.v(ApiKey.SASL_AUTHENTICATE),
                                       auth_bytes=data))

    def login(self, conn: WireClient, user: str, password: str,
              mechanism: str = "SCRAM-SHA-512", *, nonce: str | None = None) -> Any:
        """Authenticate; returns the last SaslAuthenticate response (its error code tells)."""
        expect_error(self.handshake(conn, mechanism).error_code, ErrorCode.NONE,
                     f"SaslHandshake {mechanism}")
        if mechanism == "PLAIN":
            return self.token(conn, sasl.plain_token(user, password))
        first = scram.client_first_message(user, nonce or os.urandom(12).hex())
        answer = self.token(conn, first.encode())
        if int(answer.error_code) != ErrorCode.NONE:
            return answer
        final, signature = scram.client_final_message(scram.MECHANISMS[mechanism], password, first,
                                                      answer.auth_bytes.decode())
        last = self.token(conn, final.encode())
        if int(last.error_code) == ErrorCode.NONE:
            expect_eq(bytes(last.auth_bytes), scram.server_final_message(signature).encode(),
                      "the server's final message (its proof that it knows the credential)")
        return last

    def session(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> WireClient:
        """A connection authenticated as ``user`` (waiting for a new user to reach the broker)."""
        deadline = time.monotonic() + GRANT_WAIT
        while True:
            conn = self.connect()
            answer = self.login(conn, user, password, mechanism)
            if int(answer.error_code) == ErrorCode.NONE:
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
        """Operations on ``conn``, a secured connection (the admin's by default)."""
        return Ops(self.ctx, conn=conn or self.admin)

    def metadata(self, conn: WireClient, topics: list[str] | None = None) -> Any:
        """Metadata of ``topics`` (all when None) on ``conn``."""
        return self.ops(conn).metadata(topics)

    # -- users and ACLs (as the admin) --------------------------------------------------

    def alter_users(self, upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]]) -> Any:
        version = self.v(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
        return self.admin.call(build_request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version,
                                             upsertions=upsertions, deletions=deletions))

    def new_user(self, password: str = "secret-1", mechanism: str = "SCRAM-SHA-512") -> str:
        name = self.ctx.name("u")
        result = self.alter_users([upsertion(name, password, mechanism)], [])
        expect_error(result.results[0].error_code, ErrorCode.NONE, f"AlterUserScramCredentials of {name}")
        self.users.append(name)
        if not self.users[1:]:
            self.ctx.on_close(self._delete_users)
        return name

    def _delete_users(self) -> None:
        for name in self.users:
            for mechanism in (scram.SHA256.type_code, scram.SHA512.type_code):
                try:
                    self.alter_users([], [{"name": name, "mechanism": mechanism}])
                except (WireError, OSError):
                    return

    def create_acls(self, *acls: dict[str, Any]) -> Any:
        creations = [{"resource_pattern_type": PatternType.LITERAL, "host": "*",
                      "permission_type": Permission.ALLOW, **a} for a in acls]
        response = self.admin.call(build_request(ApiKey.CREATE_ACLS, self.v(ApiKey.CREATE_ACLS),
                                                 creations=creations))
        for result in response.results:
            expect_error(result.error_code, ErrorCode.NONE, f"CreateAcls ({result.error_message})")
        self.ctx.on_close(lambda: self.delete_acls(*acls))
        return response

    def delete_acls(self, *acls: dict[str, Any]) -> Any:
        filters = [acl_filter(**a) for a in acls]
        return self.admin.call(build_request(ApiKey.DELETE_ACLS, self.v(ApiKey.DELETE_ACLS), filters=filters))


def upsertion(name: str, password: str, mechanism: str = "SCRAM-SHA-512",
              iterations: int = 4096) -> dict[str, Any]:
    chosen = scram.MECHANISMS[mechanism]
    salt = os.urandom(16)
    return {"name": name, "mechanism": chosen.type_code, "iterations": iterations, "salt": salt,
            "salted_password": chosen.salted_password(password, salt, iterations)}


def acl_filter(resource_type: int = ResourceType.ANY, resource_name: str | None = None,
               resource_pattern_type: int = PatternType.ANY, principal: str | None = None,
               host: str | None = None, operation: int = Operation.ANY,
               permission_type: int = Permission.ANY, **_: Any) -> dict[str, Any]:
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
    expect_error(answer.error_code, ErrorCode.SASL_AUTHENTICATION_FAILED, what)


@contextmanager
def elapsed() -> Iterator[Callable[[], float]]:
    started = time.monotonic()
    yield lambda: time.monotonic() - started

