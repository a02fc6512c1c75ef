"""The connection authentication machine (korvet/core/security/sasl.py) against Kafka's rules.

``TestSaslMachine`` is a Hypothesis state machine: a client sends any request in any order
(ApiVersions, other APIs, handshakes for known and unknown mechanisms, SCRAM and PLAIN
tokens with right and wrong passwords, garbage, a replayed final message), time passes,
and sessions are re-authenticated. After every step it checks what a user of the broker
relies on: nothing is served before authentication or after the session expired, a
principal comes only from a password proven for that user, a failed connection stays
failed, re-authentication never changes the principal, and the listener's fast path
agrees with ``step``. Example tests pin each of Kafka's answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from korvet.core.errors import ErrorCode
from korvet.core.security import sasl, scram
from tests.support.examples import examples

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
SALT = b"0123456789abcdef"
CREDENTIALS = {(user, m): scram.credential_from_password(scram.MECHANISMS[m], pw, SALT, 4096)
               for user, pw in PASSWORDS.items() for m in scram.MECHANISMS}
DECOY = scram.ScramCredential(b"decoy-salt", b"\x01" * 64, b"\x02" * 64, 4096)
SETTINGS = sasl.Settings(mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), max_reauth_ms=0,
                         failure_delay_ms=100)
REAUTH = sasl.Settings(mechanisms=SETTINGS.mechanisms, max_reauth_ms=5000, failure_delay_ms=100)
OTHER_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 19, 29, 50)


def load(request: sasl.CredentialRequest, nonce: str = "ServerNonce") -> sasl.CredentialLoaded:
    for mechanism in request.mechanisms:
        found = CREDENTIALS.get((request.username, mechanism))
        if found is not None:
            return sasl.CredentialLoaded(mechanism, found, True, nonce)
    return sasl.CredentialLoaded(request.mechanisms[0], DECOY, False, nonce)


def run(session: sasl.Session, event: sasl.Event, now: int,
        settings: sasl.Settings = SETTINGS, nonce: str = "ServerNonce") -> tuple[sasl.Session, sasl.Outcome]:
    """``step`` as the adapter runs it: a LOAD is answered from the model store."""
    session, outcome = sasl.step(session, event, settings, now)
    if outcome.action is sasl.Action.LOAD:
        assert outcome.load is not None
        session, outcome = sasl.step(session, load(outcome.load, nonce), settings, now)
    return session, outcome


def authenticate_scram(mechanism: str, user: str, password: str, now: int = 0,
                       settings: sasl.Settings = SETTINGS) -> tuple[sasl.Session, sasl.Outcome]:
    session, _ = run(sasl.sasl_session(), sasl.ApiVersions(), now, settings)
    session, out = run(session, sasl.Handshake(mechanism), now, settings)
    assert out.action is sasl.Action.REPLY and out.reply is not None
    assert out.reply.error is ErrorCode.NONE
    return scram_exchange(session, mechanism, user, password, now, settings)


def scram_exchange(session: sasl.Session, mechanism: str, user: str, password: str, now: int,
                   settings: sasl.Settings = SETTINGS) -> tuple[sasl.Session, sasl.Outcome]:
    first = scram.client_first_message(user, "ClientNonce")
    session, out = run(session, sasl.Authenticate(first.encode()), now, settings)
    if out.action is not sasl.Action.REPLY:
        return session, out
    assert out.reply is not None
    final, _ = scram.client_final_message(scram.MECHANISMS[mechanism], password, first,
                                          out.reply.auth_bytes.decode())
    return run(session, sasl.Authenticate(final.encode()), now, settings)


# --- Kafka's answers, one by one ------------------------------------------------------------

def test_before_authentication_only_api_versions_and_the_handshake_are_served() -> None:
    session = sasl.sasl_session()
    session, out = run(session, sasl.ApiVersions(), 0)
    assert out.action is sasl.Action.SERVE
    closed, out = run(session, sasl.ApiRequest(3), 0)
    assert out.action is sasl.Action.CLOSE and closed.phase is sasl.Phase.FAILED
    _, out = run(session, sasl.ApiVersions(), 0)
    assert out.action is sasl.Action.CLOSE  # a second ApiVersions: Kafka's IllegalStateException


def test_an_unknown_mechanism_is_answered_then_the_connection_closes_after_the_delay() -> None:
    _, out = run(sasl.sasl_session(), sasl.Handshake("GSSAPI"), 0)
    assert out.action is sasl.Action.FAIL and out.delay_ms == 100
    assert out.reply is not None and out.reply.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert out.reply.mechanisms == SETTINGS.mechanisms


def test_scram_authenticates_with_the_right_password_only() -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        session, out = authenticate_scram(mechanism, "alice", "alice-pw")
        assert out.action is sasl.Action.REPLY and out.authenticated == "User:alice"
        assert out.reply is not None and out.reply.auth_bytes.startswith(b"v=")
        assert session.phase is sasl.Phase.AUTHENTICATED
        _, out = run(session, sasl.ApiRequest(0), 0)
        assert out.action is sasl.Action.SERVE
        session, out = authenticate_scram(mechanism, "alice", "wrong")
        assert out.action is sasl.Action.FAIL and session.phase is sasl.Phase.FAILED
        assert out.reply is not None and out.reply.error is ErrorCode.SASL_AUTHENTICATION_FAILED
        assert out.reply.message == ("Authentication failed during authentication due to invalid "
                                     f"credentials with SASL mechanism {mechanism}")


def test_an_unknown_user_fails_like_a_wrong_password() -> None:
    _, wrong = authenticate_scram("SCRAM-SHA-512", "alice", "nope")
    _, unknown = authenticate_scram("SCRAM-SHA-512", "mallory", "nope")
    assert unknown.action is sasl.Action.FAIL and unknown.reply == wrong.reply


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    session, _ = run(sasl.sasl_session(), sasl.Handshake("PLAIN"), 0)
    ok, out = run(session, sasl.Authenticate(sasl.plain_token("bob", "bob-pw")), 0)
    assert out.authenticated == "User:bob" and ok.phase is sasl.Phase.AUTHENTICATED
    for token, message in (
        (sasl.plain_token("bob", "bad"), "Authentication failed: Invalid username or password"),
        (sasl.plain_token("nobody", "x"), "Authentication failed: Invalid username or password"),
        (b"bob\x00bob-pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (sasl.plain_token("bob", "bob-pw", authzid="alice"),
         "Authentication failed: Client requested an authorization id that is different from username"),
    ):
        _, out = run(session, sasl.Authenticate(token), 0)
        assert out.action is sasl.Action.FAIL
        assert out.reply is not None and out.reply.message == message


def test_after_the_handshake_only_sasl_authenticate_is_accepted() -> None:
    session, _ = run(sasl.sasl_session(), sasl.Handshake("SCRAM-SHA-256"), 0)
    _, out = run(session, sasl.ApiRequest(3), 0)
    assert out.action is sasl.Action.FAIL and out.reply is None
    _, out = run(session, sasl.Handshake("SCRAM-SHA-256"), 0)
    assert out.reply is not None and out.reply.error is ErrorCode.ILLEGAL_SASL_STATE


def test_sasl_requests_on_an_authenticated_connection_are_illegal_but_harmless() -> None:
    session = sasl.open_session("User:CN=app")
    for request in (sasl.Handshake("PLAIN"), sasl.Authenticate(b"x")):
        after, out = run(session, request, 0)
        assert out.action is sasl.Action.REPLY and after == session
        assert out.reply is not None and out.reply.error is ErrorCode.ILLEGAL_SASL_STATE


def test_sessions_expire_and_reauthentication_keeps_them_alive() -> None:
    session, out = authenticate_scram("SCRAM-SHA-256", "alice", "alice-pw", now=0, settings=REAUTH)
    assert out.reply is not None and out.reply.session_lifetime_ms == 5000
    assert not sasl.may_serve_fast(session)
    _, out = run(session, sasl.ApiRequest(1), 4999, REAUTH)
    assert out.action is sasl.Action.SERVE
    _, out = run(session, sasl.ApiRequest(1), 5000, REAUTH)
    assert out.action is sasl.Action.CLOSE
    session, out = run(session, sasl.Handshake("SCRAM-SHA-256"), 4000, REAUTH)
    assert out.reply is not None and out.reply.error is ErrorCode.NONE
    session, out = scram_exchange(session, "SCRAM-SHA-256", "alice", "alice-pw", 4000, REAUTH)
    assert out.authenticated == "User:alice" and session.expires_ms == 9000
    _, out = run(session, sasl.ApiRequest(1), 8000, REAUTH)
    assert out.action is sasl.Action.SERVE
    # a second re-authentication within a second is refused (and the session goes on)
    _, out = run(session, sasl.Handshake("SCRAM-SHA-256"), 4500, REAUTH)
    assert out.reply is not None and out.reply.error is ErrorCode.ILLEGAL_SASL_STATE


def test_reauthentication_cannot_change_the_principal_or_the_mechanism() -> None:
    session, _ = authenticate_scram("SCRAM-SHA-512", "alice", "alice-pw", settings=REAUTH)
    other, _ = run(session, sasl.Handshake("SCRAM-SHA-512"), 2000, REAUTH)
    failed, out = scram_exchange(other, "SCRAM-SHA-512", "bob", "bob-pw", 2000, REAUTH)
    assert out.action is sasl.Action.FAIL and failed.phase is sasl.Phase.FAILED
    assert out.reply is not None and out.reply.message == (
        "Cannot change principals during re-authentication from User.alice: User.bob")
    switched, out = run(session, sasl.Handshake("SCRAM-SHA-256"), 2000, REAUTH)
    assert out.reply is not None and out.reply.error is ErrorCode.NONE
    _, out = run(switched, sasl.Authenticate(b"n,,n=alice,r=x"), 2000, REAUTH)
    assert out.action is sasl.Action.FAIL and out.reply is None


def test_a_v0_handshake_switches_to_bare_tokens() -> None:
    session, _ = run(sasl.sasl_session(), sasl.Handshake("PLAIN", version=0), 0)
    assert session.expects_raw_token
    done, out = run(session, sasl.Authenticate(sasl.plain_token("bob", "bob-pw"), version=-1), 0)
    assert out.authenticated == "User:bob" and not done.expects_raw_token


# --- the state machine --------------------------------------------------------------------

@dataclass
class Client:
    mechanism: str | None = None
    first: str | None = None
    server_first: str | None = None
    user: str | None = None
    last_final: tuple[str, str] | None = None  # (mechanism, client-final) of a finished exchange


class SaslMachine(RuleBasedStateMachine):
    @initialize(reauth=st.booleans(), logged_in=st.booleans())
    def start(self, reauth: bool, logged_in: bool) -> None:
        self.settings = REAUTH if reauth else SETTINGS
        self.session = sasl.sasl_session()
        self.now = 0
        self.client = Client()
        self.failed = False
        self.principal: str | None = None
        self.nonce = 0
        if logged_in:  # half the runs start from an authenticated connection
            self.log_in("SCRAM-SHA-512", "alice")

    def step(self, request: sasl.Event, *, proven: str | None = None) -> sasl.Outcome:
        before = self.session
        self.nonce += 1
        self.session, outcome = run(before, request, self.now, self.settings, nonce=f"SN{self.nonce}")
        if self.failed:
            assert outcome.action is sasl.Action.CLOSE, "a failed connection stays failed"
        if outcome.action is sasl.Action.SERVE and isinstance(request, sasl.ApiRequest):
            event("served")
            assert before.authenticated, "served before authentication"
            assert before.expires_ms is None or self.now < before.expires_ms, "served after expiry"
        if outcome.authenticated is not None:
            event("re-authenticated" if before.reauth_of else "authenticated")
            assert proven is not None and outcome.authenticated == f"User:{proven}", \
                "a principal without its password"
            if before.reauth_of is not None:
                assert outcome.authenticated == before.reauth_of
            self.principal = outcome.authenticated
        if outcome.action in (sasl.Action.FAIL, sasl.Action.CLOSE):
            self.failed = self.failed or self.session.phase is sasl.Phase.FAILED
        return outcome

    @rule(mechanism=st.sampled_from(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
          user=st.sampled_from(("alice", "bob")))
    def log_in(self, mechanism: str, user: str) -> None:
        """What a well-behaved client does: handshake, then the mechanism's exchange (a
        re-authentication when the connection is already authenticated)."""
        self.handshake(mechanism, 1)
        if self.session.phase is not sasl.Phase.AUTHENTICATE:
            return
        if mechanism == "PLAIN":
            self.plain(user, True)
        else:
            self.scram_first(user)
            self.scram_final(True)

    @precondition(lambda self: self.failed)
    @rule()
    def reconnect(self) -> None:
        """A closed connection's client opens a new one."""
        self.session, self.client, self.failed, self.principal = sasl.sasl_session(), Client(), False, None

    @rule(api=st.sampled_from(OTHER_APIS))
    def other_request(self, api: int) -> None:
        self.step(sasl.ApiRequest(api))

    @rule(supported=st.booleans())
    def api_versions(self, supported: bool) -> None:
        self.step(sasl.ApiVersions(supported))

    @rule(mechanism=st.sampled_from(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI",
                                     "scram-sha-256")), version=st.sampled_from((0, 1, 1, 1)))
    def handshake(self, mechanism: str, version: int) -> None:
        out = self.step(sasl.Handshake(mechanism, version))
        if out.reply is not None and out.reply.error is ErrorCode.NONE:
            self.client = Client(mechanism=mechanism)

    @rule(user=st.sampled_from(("alice", "bob", "mallory", "a=2Cb")))
    def scram_first(self, user: str) -> None:
        first = scram.client_first_message(user, f"CN{self.nonce}")
        out = self.step(sasl.Authenticate(first.encode()))
        if out.action is sasl.Action.REPLY and out.reply is not None and out.reply.auth_bytes:
            self.client.first, self.client.user = first, user
            self.client.server_first = out.reply.auth_bytes.decode()

    @rule(right=st.booleans())
    def scram_final(self, right: bool) -> None:
        c = self.client
        if c.first is None or c.server_first is None or c.user is None or c.mechanism is None:
            return
        if c.mechanism not in scram.MECHANISMS:
            return
        password = PASSWORDS.get(c.user, "x") if right else "wrong"
        final, _ = scram.client_final_message(scram.MECHANISMS[c.mechanism], password, c.first,
                                              c.server_first)
        proven = c.user if right and c.user in PASSWORDS else None
        out = self.step(sasl.Authenticate(final.encode()), proven=proven)
        if out.authenticated is not None:
            self.client.last_final = (c.mechanism, final)
        self.client.first = None

    @rule()
    def replay_final(self) -> None:
        """The final message of an earlier exchange, sent again: never authenticates."""
        if self.client.last_final is not None:
            self.step(sasl.Authenticate(self.client.last_final[1].encode()))

    @rule(user=st.sampled_from(("alice", "bob", "mallory")), right=st.booleans())
    def plain(self, user: str, right: bool) -> None:
        password = PASSWORDS.get(user, "x") if right else "wrong"
        proven = user if right and user in PASSWORDS and self.client.mechanism == "PLAIN" else None
        self.step(sasl.Authenticate(sasl.plain_token(user, password)), proven=proven)

    @rule(data=st.binary(max_size=40))
    def garbage(self, data: bytes) -> None:
        self.step(sasl.Authenticate(data))

    @rule(ms=st.sampled_from((1, 500, 1000, 4000, 6000)))
    def wait(self, ms: int) -> None:
        self.now += ms

    @invariant()
    def principal_only_when_authenticated(self) -> None:
        s = self.session
        if s.phase is sasl.Phase.AUTHENTICATED:
            assert s.principal is not None and s.principal == self.principal
        if s.phase in (sasl.Phase.INITIAL, sasl.Phase.HANDSHAKE):
            assert s.principal is None

    @invariant()
    def the_fast_path_agrees_with_step(self) -> None:
        if sasl.may_serve_fast(self.session):
            for later in (self.now, self.now + 10**9):
                _, out = sasl.step(self.session, sasl.ApiRequest(0), self.settings, later)
                assert out.action is sasl.Action.SERVE


TestSaslMachine = SaslMachine.TestCase
TestSaslMachine.settings = settings(max_examples=examples(1), stateful_step_count=30, deadline=None)
