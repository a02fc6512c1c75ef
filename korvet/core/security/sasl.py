"""A connection's authentication as a pure state machine: ``step(session, event, settings,
now_ms) -> (session, outcome)``.

It decides, for every request a connection sends, what Kafka's broker does with it
(SaslServerAuthenticator, KafkaApis and the socket server's checks, Kafka 3.x/4.x):

- On a SASL listener nothing but ApiVersions (once), SaslHandshake and SaslAuthenticate
  is served before authentication; any other request closes the connection at once.
- SaslHandshake names a mechanism; an unknown one is answered UNSUPPORTED_SASL_MECHANISM
  and the connection is closed. After the handshake only SaslAuthenticate is accepted;
  anything else is answered ILLEGAL_SASL_STATE (when the answer can be built) and closed.
- A failed authentication is answered SASL_AUTHENTICATION_FAILED after
  ``failure_delay_ms`` (connections.failed.authentication.delay.ms) and then closed.
- With ``max_reauth_ms`` > 0 (connections.max.reauth.ms, KIP-368) a session expires: the
  client must re-authenticate with a new SaslHandshake on the same connection before
  then (at most once a second), with the same mechanism and as the same principal;
  any other request after expiry closes the connection.
- After a SaslHandshake v0 (Kafka 0.10 clients) the tokens come as bare size-prefixed
  frames instead of SaslAuthenticate requests (``Session.expects_raw_token``); a failure
  then closes the connection without an answer, as there is no frame to carry one.
- On an authenticated connection, SaslHandshake (when no re-authentication may start)
  and SaslAuthenticate are answered ILLEGAL_SASL_STATE and the connection stays open.
  A listener without SASL (PLAINTEXT, SSL) starts in ``OPEN``, which answers them alike.

Mechanisms: PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (korvet.core.security.scram).
The machine never sees a password store: a step that needs a user's credentials answers
``LOAD`` with the user name, and the adapter steps ``CredentialLoaded`` with what it found
(and a fresh server nonce). For a user that does not exist the adapter passes a decoy
credential with ``known=False``, so the exchange looks the same and fails at its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from korvet.core.errors import ErrorCode
from korvet.core.security import scram

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A client may start re-authentication at most once a second (Kafka's channel rule).
MIN_REAUTH_INTERVAL_MS = 1000
# PLAIN verifies a password against the strongest SCRAM credential the user has.
PLAIN_CREDENTIALS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


class Phase(Enum):
    OPEN = "open"  # a listener without SASL: the transport authenticated the client
    INITIAL = "initial"  # Kafka's HANDSHAKE_OR_VERSIONS_REQUEST
    HANDSHAKE = "handshake"  # ApiVersions answered: HANDSHAKE_REQUEST
    AUTHENTICATE = "authenticate"  # a mechanism was chosen: SaslAuthenticate tokens
    BAD_MECHANISM = "bad-mechanism"  # re-authentication asked for another mechanism
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Settings:
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    max_reauth_ms: int = 0
    failure_delay_ms: int = 100


@dataclass(frozen=True, slots=True)
class Exchange:
    """A mechanism's progress within one (re-)authentication."""

    mechanism: str
    pending: bytes | None = None  # a token waiting for its user's credential
    username: str | None = None
    client_first: scram.ClientFirst | None = None
    server_first: str | None = None
    credential: scram.ScramCredential | None = None
    known: bool = True


@dataclass(frozen=True, slots=True)
class Session:
    phase: Phase
    principal: str | None = None  # "User:<name>" once authenticated
    mechanism: str | None = None  # of the current (or last) authentication
    exchange: Exchange | None = None
    expires_ms: int | None = None  # the session's end (KIP-368); None: never
    reauth_of: str | None = None  # during re-authentication: the principal it must keep
    last_reauth_ms: int | None = None
    raw_tokens: bool = False  # SaslHandshake v0: the tokens come as bare size-prefixed frames

    @property
    def expects_raw_token(self) -> bool:
        return self.raw_tokens and self.phase is Phase.AUTHENTICATE

    @property
    def authenticated(self) -> bool:
        return self.phase in (Phase.OPEN, Phase.AUTHENTICATED)


def sasl_session() -> Session:
    return Session(Phase.INITIAL)


def open_session(principal: str) -> Session:
    return Session(Phase.OPEN, principal=principal)


# --- events -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ApiRequest:
    """Any request but ApiVersions, SaslHandshake and SaslAuthenticate."""

    api_key: int


@dataclass(frozen=True, slots=True)
class ApiVersions:
    supported: bool = True  # False: a version the broker does not know (answered with an error)


@dataclass(frozen=True, slots=True)
class Handshake:
    mechanism: str
    version: int = 1


@dataclass(frozen=True, slots=True)
class Authenticate:
    auth_bytes: bytes
    version: int = 2


@dataclass(frozen=True, slots=True)
class CredentialLoaded:
    """The answer to ``LOAD``: the user's credential for ``mechanism`` (a decoy with
    ``known=False`` when there is none) and a fresh random server nonce."""

    mechanism: str
    credential: scram.ScramCredential
    known: bool
    server_nonce: str = ""


Event = ApiRequest | ApiVersions | Handshake | Authenticate | CredentialLoaded


# --- outcomes -----------------------------------------------------------------------------

class Action(Enum):
    SERVE = "serve"  # hand the request to its handler
    REPLY = "reply"  # answer with ``reply``; the connection stays open
    LOAD = "load"  # load ``load``'s credential, then step CredentialLoaded
    FAIL = "fail"  # after ``delay_ms`` answer with ``reply`` (if any), then close
    CLOSE = "close"  # close now, no answer


@dataclass(frozen=True, slots=True)
class Reply:
    """A SaslHandshake or SaslAuthenticate answer."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    auth_bytes: bytes = b""
    mechanisms: tuple[str, ...] = ()
    session_lifetime_ms: int = 0


@dataclass(frozen=True, slots=True)
class CredentialRequest:
    username: str
    mechanisms: tuple[str, ...]  # the first one the user has a credential for


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    reply: Reply | None = None
    load: CredentialRequest | None = None
    reason: str = ""
    delay_ms: int = 0
    authenticated: str | None = field(default=None)  # set when this step completed authentication


SERVE = Outcome(Action.SERVE)


def _close(reason: str) -> Outcome:
    return Outcome(Action.CLOSE, reason=reason)


def _fail(settings: Settings, reason: str, reply: Reply | None = None) -> Outcome:
    return Outcome(Action.FAIL, reply=reply, reason=reason, delay_ms=settings.failure_delay_ms)


def _auth_failed(settings: Settings, message: str) -> Outcome:
    return _fail(settings, message, Reply(ErrorCode.SASL_AUTHENTICATION_FAILED, message))


def _invalid_credentials(session: Session, settings: Settings, mechanism: str) -> Outcome:
    """Kafka's answer to every SCRAM failure that could reveal whether the user exists."""
    during = "re-authentication" if session.reauth_of else "authentication"
    return _auth_failed(settings, f"Authentication failed during {during} due to invalid "
                                  f"credentials with SASL mechanism {mechanism}")


# --- the step function --------------------------------------------------------------------

def step(session: Session, event: Event, settings: Settings,
         now_ms: int) -> tuple[Session, Outcome]:
    phase = session.phase
    if phase is Phase.FAILED:
        return session, _close("the authentication failed")
    if phase in (Phase.OPEN, Phase.AUTHENTICATED):
        return _authenticated(session, event, settings, now_ms)
    if phase in (Phase.INITIAL, Phase.HANDSHAKE):
        return _handshaking(session, event, settings)
    return _authenticating(session, event, settings, now_ms)


def may_serve_fast(session: Session) -> bool:
    """True when every ApiRequest would be SERVEd whatever the time: ``step`` need not run
    (the listener's hot path; tests check it agrees with ``step``)."""
    return session.phase in (Phase.OPEN, Phase.AUTHENTICATED) and session.expires_ms is None


def _expired(session: Session, now_ms: int) -> bool:
    return session.expires_ms is not None and now_ms >= session.expires_ms


def _authenticated(session: Session, event: Event, settings: Settings,
                   now_ms: int) -> tuple[Session, Outcome]:
    if isinstance(event, Handshake):
        may_reauth = (session.phase is Phase.AUTHENTICATED and session.expires_ms is not None
                      and event.version >= 1
                      and (session.last_reauth_ms is None
                           or now_ms - session.last_reauth_ms >= MIN_REAUTH_INTERVAL_MS))
        if may_reauth:
            return _begin_reauthentication(session, event, settings, now_ms)
    if _expired(session, now_ms):
        return replace(session, phase=Phase.FAILED), _close("the session expired "
                                                           "(connections.max.reauth.ms)")
    if isinstance(event, Handshake):
        return session, Outcome(Action.REPLY, Reply(ErrorCode.ILLEGAL_SASL_STATE))
    if isinstance(event, Authenticate):
        return session, Outcome(Action.REPLY, Reply(
            ErrorCode.ILLEGAL_SASL_STATE,
            "SaslAuthenticate request received after successful authentication"))
    if isinstance(event, CredentialLoaded):
        return replace(session, phase=Phase.FAILED), _close("a credential nobody asked for")
    return session, SERVE


def _begin_reauthentication(session: Session, event: Handshake, settings: Settings,
                            now_ms: int) -> tuple[Session, Outcome]:
    assert session.principal is not None
    if event.mechanism not in settings.mechanisms:
        reply = Reply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=settings.mechanisms)
        return (replace(session, phase=Phase.FAILED),
                _fail(settings, f"unsupported SASL mechanism {event.mechanism}", reply))
    same = event.mechanism == session.mechanism
    return (replace(session, phase=Phase.AUTHENTICATE if same else Phase.BAD_MECHANISM,
                    exchange=Exchange(event.mechanism), reauth_of=session.principal,
                    last_reauth_ms=now_ms),
            Outcome(Action.REPLY, Reply(mechanisms=settings.mechanisms)))


def _handshaking(session: Session, event: Event, settings: Settings) -> tuple[Session, Outcome]:
    failed = replace(session, phase=Phase.FAILED)
    if isinstance(event, ApiVersions):
        if session.phase is not Phase.INITIAL:
            return failed, _close("a second ApiVersions request during the SASL handshake")
        if not event.supported:
            return session, SERVE  # answered UNSUPPORTED_VERSION; the client may ask again
        return replace(session, phase=Phase.HANDSHAKE), SERVE
    if isinstance(event, Handshake):
        if event.mechanism not in settings.mechanisms:
            reply = Reply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=settings.mechanisms)
            return failed, _fail(settings, f"unsupported SASL mechanism {event.mechanism!r}", reply)
        return (replace(session, phase=Phase.AUTHENTICATE, exchange=Exchange(event.mechanism),
                        raw_tokens=event.version == 0),
                Outcome(Action.REPLY, Reply(mechanisms=settings.mechanisms)))
    what = f"api key {event.api_key}" if isinstance(event, ApiRequest) else type(event).__name__
    return failed, _close(f"Unexpected Kafka request ({what}) during SASL handshake")


def _authenticating(session: Session, event: Event, settings: Settings,
                    now_ms: int) -> tuple[Session, Outcome]:
    failed = replace(session, phase=Phase.FAILED, exchange=None)
    exchange = session.exchange
    if isinstance(event, Handshake):
        return failed, _fail(settings, "a second SaslHandshake during SASL authentication",
                             Reply(ErrorCode.ILLEGAL_SASL_STATE))
    if isinstance(event, ApiRequest | ApiVersions):
        return failed, _fail(settings, "Unexpected Kafka request during SASL authentication")
    if session.phase is Phase.BAD_MECHANISM or exchange is None:
        return failed, _fail(settings, f"SASL mechanism requested by client is not supported for "
                                       f"re-authentication of mechanism '{session.mechanism}'")
    if isinstance(event, Authenticate):
        if exchange.pending is not None:
            return failed, _fail(settings, "a SaslAuthenticate while a credential is loading")
        return _token(session, exchange, event.auth_bytes, settings, now_ms)
    if exchange.pending is None or exchange.username is None:
        return failed, _close("a credential nobody asked for")
    if exchange.mechanism == PLAIN:
        return _plain_verdict(session, exchange, event, settings, now_ms)
    return _scram_first_answer(session, exchange, event, settings)


def _token(session: Session, exchange: Exchange, token: bytes, settings: Settings,
           now_ms: int) -> tuple[Session, Outcome]:
    failed = replace(session, phase=Phase.FAILED, exchange=None)
    if exchange.mechanism == PLAIN:
        try:
            username, _ = parse_plain(token)
        except PlainError as exc:
            return failed, _auth_failed(settings, str(exc))
        return (replace(session, exchange=replace(exchange, pending=token, username=username)),
                Outcome(Action.LOAD, load=CredentialRequest(username, PLAIN_CREDENTIALS)))
    if exchange.client_first is None:
        try:
            first = scram.parse_client_first(token)
        except scram.ScramError:
            return failed, _invalid_credentials(session, settings, exchange.mechanism)
        if first.authzid and first.authzid != first.username:
            return failed, _auth_failed(settings, "Authentication failed: Client requested an "
                                                  "authorization id that is different from username")
        return (replace(session, exchange=replace(exchange, pending=token, username=first.username,
                                                  client_first=first)),
                Outcome(Action.LOAD, load=CredentialRequest(first.username, (exchange.mechanism,))))
    return _scram_final(session, exchange, token, settings, now_ms)


def _plain_verdict(session: Session, exchange: Exchange, event: CredentialLoaded,
                   settings: Settings, now_ms: int) -> tuple[Session, Outcome]:
    failed = replace(session, phase=Phase.FAILED, exchange=None)
    assert exchange.pending is not None and exchange.username is not None
    _, password = parse_plain(exchange.pending)
    mechanism = scram.MECHANISMS.get(event.mechanism)
    matches = mechanism is not None and scram.password_matches(mechanism, event.credential, password)
    if not (matches and event.known):
        return failed, _auth_failed(settings, "Authentication failed: Invalid username or password")
    return _complete(session, exchange.username, PLAIN, b"", settings, now_ms)


def _scram_first_answer(session: Session, exchange: Exchange, event: CredentialLoaded,
                        settings: Settings) -> tuple[Session, Outcome]:
    failed = replace(session, phase=Phase.FAILED, exchange=None)
    first = exchange.client_first
    assert first is not None
    if event.mechanism != exchange.mechanism or event.credential.iterations < scram.MIN_ITERATIONS:
        return failed, _invalid_credentials(session, settings, exchange.mechanism)
    try:
        server_first = scram.server_first_message(first, event.server_nonce, event.credential)
    except scram.ScramError:
        return failed, _close("the server nonce is not printable")
    return (replace(session, exchange=replace(exchange, pending=None, server_first=server_first,
                                              credential=event.credential, known=event.known)),
            Outcome(Action.REPLY, Reply(auth_bytes=server_first.encode())))


def _scram_final(session: Session, exchange: Exchange, token: bytes, settings: Settings,
                 now_ms: int) -> tuple[Session, Outcome]:
    mechanism = scram.MECHANISMS[exchange.mechanism]
    first, server_first, credential = exchange.client_first, exchange.server_first, exchange.credential
    assert first is not None and server_first is not None and credential is not None
    try:
        final = scram.parse_client_final(token)
    except scram.ScramError:
        final = None
    signature = (scram.verify_client_final(mechanism, credential, first, server_first, final)
                 if final is not None else None)
    if signature is None or not exchange.known:
        return (replace(session, phase=Phase.FAILED, exchange=None),
                _invalid_credentials(session, settings, exchange.mechanism))
    return _complete(session, first.username, exchange.mechanism,
                     scram.server_final_message(signature).encode(), settings, now_ms)


def _complete(session: Session, username: str, mechanism: str, auth_bytes: bytes,
              settings: Settings, now_ms: int) -> tuple[Session, Outcome]:
    principal = principal_of(username)
    if session.reauth_of is not None and session.reauth_of != principal:
        old, new = session.reauth_of.replace(":", ".", 1), principal.replace(":", ".", 1)
        return (replace(session, phase=Phase.FAILED, exchange=None),
                _auth_failed(settings, f"Cannot change principals during re-authentication from "
                                       f"{old}: {new}"))
    lifetime = settings.max_reauth_ms if settings.max_reauth_ms > 0 else 0
    done = Session(Phase.AUTHENTICATED, principal=principal, mechanism=mechanism,
                   expires_ms=now_ms + lifetime if lifetime else None,
                   last_reauth_ms=session.last_reauth_ms)
    return done, Outcome(Action.REPLY, Reply(auth_bytes=auth_bytes, session_lifetime_ms=lifetime),
                         authenticated=principal)


def principal_of(username: str) -> str:
    return f"User:{username}"


# --- SASL/PLAIN (RFC 4616) ------------------------------------------------------------------

class PlainError(ValueError):
    """A PLAIN token Kafka refuses; the message is what Kafka answers."""


def parse_plain(token: bytes) -> tuple[str, str]:
    """(user name, password) from ``[authzid] NUL authcid NUL passwd``."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\x00")
    if len(parts) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    authzid, username, password = parts
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise PlainError("Authentication failed: Client requested an authorization id that is "
                         "different from username")
    return username, password


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode()
