"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84).

Only salted keys are ever stored (``ScramCredential``: salt, StoredKey, ServerKey,
iterations), never a password. The messages are parsed strictly: a message that does
not follow the RFC's grammar raises ``ScramError``, and every comparison of a secret uses
``hmac.compare_digest`` (constant time). Both sides of the exchange are here: the server
side is what the broker runs, the client side is what the tests and the conformance
suite use to talk to any broker.

Kafka's rules kept: the GS2 header must be ``n,`` (no channel binding) with an optional
``a=`` authorization id that must equal the user name; the final message's nonce must end
with the server-first nonce (Kafka's check, which librdkafka 2.0's doubled client nonce
needs); iterations are within 4096..16384 for new credentials; user names
are SCRAM ``saslname``s (``=2C`` for ``,`` and ``=3D`` for ``=``). Unknown extensions in
the first message are ignored, as Kafka does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(ValueError):
    """A SCRAM message or credential that does not follow the grammar or the rules."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    type_code: int  # Kafka's ScramMechanism type (DescribeUserScramCredentials, AlterUser...)
    hash_name: str  # hashlib's name

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i) of RFC 5802 §2.2, which is PBKDF2 with HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SHA256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SHA512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SHA256, SHA512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type_code: m for m in (SHA256, SHA512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps for one user and one mechanism (RFC 5802 §3)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        """Kafka's text form: ``salt=..,stored_key=..,server_key=..,iterations=..``."""
        b64 = _b64encode
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ScramError(f"credential field {part!r} has no '='")
            fields[key] = value
        try:
            return cls(_b64decode(fields["salt"]), _b64decode(fields["stored_key"]),
                       _b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ScramError(f"credential is not salt/stored_key/server_key/iterations: {exc}") from None


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """StoredKey and ServerKey from SaltedPassword (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt, mechanism.h(client_key), mechanism.hmac(salted, b"Server Key"),
                           iterations)


def credential_from_password(mechanism: ScramMechanism, password: str, salt: bytes,
                             iterations: int) -> ScramCredential:
    check_iterations(iterations)
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise ScramError(f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise ScramError(f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})")


def password_matches(mechanism: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` yields the stored key (SASL/PLAIN against SCRAM credentials)."""
    salted = mechanism.salted_password(password, credential.salt, credential.iterations)
    stored = mechanism.h(mechanism.hmac(salted, b"Client Key"))
    return hmac.compare_digest(stored, credential.stored_key)


# --- names and base64 -------------------------------------------------------------------

def escape_username(name: str) -> str:
    """A user name as a SCRAM saslname (RFC 5802 §5.1)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(saslname):
        char = saslname[i]
        if char == "=":
            code = saslname[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("invalid '=' escape in the user name")
            i += 3
            continue
        if char == "," or ord(char) == 0:
            raise ScramError("invalid character in the user name")
        out.append(char)
        i += 1
    if not out:
        raise ScramError("empty user name")
    return "".join(out)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramError("invalid base64") from None


def _printable_nonce(nonce: str) -> str:
    if not nonce or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
        raise ScramError("the nonce must be printable ASCII without ','")
    return nonce


def _attributes(text: str) -> list[tuple[str, str]]:
    """``a=..,b=..`` as (name, value) pairs; names are single letters (RFC 5802 §5.1)."""
    pairs = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isascii() or not part[0].isalpha():
            raise ScramError(f"malformed attribute {part[:20]!r}")
        pairs.append((part[0], part[2:]))
    return pairs


# --- the messages -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,"
    authzid: str
    username: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage


def parse_client_first(data: bytes) -> ClientFirst:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("the client first message is not UTF-8") from None
    flag, sep, rest = text.partition(",")
    if not sep or flag != "n":
        raise ScramError("the GS2 header must start with 'n,' (Kafka has no channel binding)")
    authz_part, sep, bare = rest.partition(",")
    if not sep:
        raise ScramError("the GS2 header has no authorization id field")
    authzid = ""
    if authz_part:
        if not authz_part.startswith("a="):
            raise ScramError("malformed authorization id")
        authzid = unescape_username(authz_part[2:])
    attributes = _attributes(bare)
    if attributes and attributes[0][0] == "m":
        raise ScramError("mandatory extensions are not supported")
    if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
        raise ScramError("the client first message must be n=<user>,r=<nonce>")
    username = unescape_username(attributes[0][1])
    nonce = _printable_nonce(attributes[1][1])
    return ClientFirst(f"n,{authz_part},", authzid, username, nonce, bare)


def server_first_message(client: ClientFirst, server_nonce: str, credential: ScramCredential) -> str:
    _printable_nonce(server_nonce)
    return f"r={client.nonce}{server_nonce},s={_b64encode(credential.salt)},i={credential.iterations}"


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(data: bytes) -> ClientFinal:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("the client final message is not UTF-8") from None
    head, sep, proof_text = text.rpartition(",p=")
    if not sep:
        raise ScramError("the client final message has no proof")
    attributes = _attributes(head)
    if len(attributes) < 2 or attributes[0][0] != "c" or attributes[1][0] != "r":
        raise ScramError("the client final message must be c=<binding>,r=<nonce>,...,p=<proof>")
    return ClientFinal(_b64decode(attributes[0][1]), _printable_nonce(attributes[1][1]),
                       _b64decode(proof_text), head)


def auth_message(client: ClientFirst, server_first: str, final: ClientFinal) -> bytes:
    return f"{client.bare},{server_first},{final.without_proof}".encode()


def verify_client_final(mechanism: ScramMechanism, credential: ScramCredential, client: ClientFirst,
                        server_first: str, final: ClientFinal) -> bytes | None:
    """The server signature when the final message proves the password, else None.

    Checks, in this order and without an early exit on the secret part: the channel
    binding repeats the GS2 header, the nonce is the server-first nonce, the proof has the
    hash's size, and H(ClientProof XOR ClientSignature) equals StoredKey (constant time).
    """
    expected_nonce = server_first.split(",", 1)[0][2:].encode()
    binding_ok = hmac.compare_digest(final.channel_binding, client.gs2_header.encode())
    # Kafka accepts a nonce that *ends with* the server-first nonce (librdkafka before 2.1
    # sends the client nonce twice); the proof covers whatever the client sent.
    nonce_ok = hmac.compare_digest(final.nonce.encode()[-len(expected_nonce):], expected_nonce)
    message = auth_message(client, server_first, final)
    signature = mechanism.hmac(credential.stored_key, message)
    proof = final.proof if len(final.proof) == len(signature) else bytes(len(signature))
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    proof_ok = hmac.compare_digest(mechanism.h(client_key), credential.stored_key)
    if not (binding_ok and nonce_ok and proof_ok and len(final.proof) == len(signature)):
        return None
    return mechanism.hmac(credential.server_key, message)


def server_final_message(server_signature: bytes) -> str:
    return f"v={_b64encode(server_signature)}"


# --- the client side (tests, conformance suite) -------------------------------------------

def client_first_message(username: str, nonce: str, authzid: str = "") -> str:
    header = f"n,a={escape_username(authzid)}," if authzid else "n,,"
    return f"{header}n={escape_username(username)},r={_printable_nonce(nonce)}"


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int


def parse_server_first(data: bytes) -> ServerFirst:
    attributes = dict(_attributes(data.decode("utf-8", errors="replace")))
    try:
        return ServerFirst(_printable_nonce(attributes["r"]), _b64decode(attributes["s"]),
                           int(attributes["i"]))
    except (KeyError, ValueError) as exc:
        raise ScramError(f"malformed server first message: {exc}") from None


def client_final_message(mechanism: ScramMechanism, password: str, client_first: str,
                         server_first: str, *, gs2_header: str = "n,,",
                         nonce: str | None = None) -> tuple[str, bytes]:
    """(client-final-message, expected server signature) for a password; ``nonce`` replaces
    the server-first nonce (to test what servers accept)."""
    parsed = parse_server_first(server_first.encode())
    salted = mechanism.salted_password(password, parsed.salt, parsed.iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    stored_key = mechanism.h(client_key)
    without_proof = f"c={_b64encode(gs2_header.encode())},r={nonce or parsed.nonce}"
    bare = client_first[client_first.index(",", client_first.index(",") + 1) + 1:]
    message = f"{bare},{server_first},{without_proof}".encode()
    signature = mechanism.hmac(stored_key, message)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_signature = mechanism.hmac(mechanism.hmac(salted, b"Server Key"), message)
    return f"{without_proof},p={_b64encode(proof)}", server_signature
