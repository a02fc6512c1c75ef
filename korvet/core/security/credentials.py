"""Kafka's rules for DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

``plan_alteration`` checks a whole AlterUserScramCredentials request the way Kafka's
controller does and says what to write: a user altered twice in one request (two
deletions, a deletion and an upsertion, two upsertions) is DUPLICATE_RESOURCE, an empty
name UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations
outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
RESOURCE_NOT_FOUND. Results come one per user, in the order users first appear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from korvet.core.errors import ErrorCode
from korvet.core.security import scram


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int  # Kafka's type code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    results: tuple[UserResult, ...]
    deletions: tuple[tuple[str, str], ...]  # (user, mechanism name)
    upsertions: tuple[tuple[str, str, scram.ScramCredential], ...]


def _check(user: str, mechanism: int) -> UserResult | None:
    if not user:
        return UserResult(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in scram.BY_TYPE:
        return UserResult(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


_DUPLICATE = "A user credential cannot be altered twice in the same request"


def _deletion_problem(item: Deletion, present: set[tuple[str, str]]) -> UserResult | None:
    problem = _check(item.user, item.mechanism)
    if problem is None and (item.user, scram.BY_TYPE[item.mechanism].name) not in present:
        problem = UserResult(item.user, ErrorCode.RESOURCE_NOT_FOUND,
                             "Attempt to delete a user credential that does not exist")
    return problem


def _upsertion_problem(up: Upsertion) -> UserResult | None:
    problem = _check(up.user, up.mechanism)
    if problem is not None:
        return problem
    try:
        scram.check_iterations(up.iterations)
    except scram.ScramError as exc:
        return UserResult(up.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc).split(":", 1)[0])
    if not up.salt or len(up.salted_password) != scram.BY_TYPE[up.mechanism].digest_size:
        return UserResult(up.user, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                          "The salt and salted password are not of the mechanism's sizes")
    return None


def plan_alteration(deletions: Sequence[Deletion], upsertions: Sequence[Upsertion],
                    existing: Iterable[tuple[str, str]]) -> Plan:
    """``existing``: the (user, mechanism name) pairs that have a credential now."""
    present = set(existing)
    order: list[str] = []
    errors: dict[str, UserResult] = {}
    deleting: dict[str, Deletion] = {}
    upserting: dict[str, Upsertion] = {}
    for item in deletions:
        order.append(item.user)
        if item.user in errors:
            continue
        problem = (UserResult(item.user, ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE)
                   if deleting.pop(item.user, None) is not None else _deletion_problem(item, present))
        if problem is not None:
            errors[item.user] = problem
        else:
            deleting[item.user] = item
    for up in upsertions:
        order.append(up.user)
        if up.user in errors:
            continue
        twice = deleting.pop(up.user, None) is not None or upserting.pop(up.user, None) is not None
        problem = (UserResult(up.user, ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE) if twice
                   else _upsertion_problem(up))
        if problem is not None:
            errors[up.user] = problem
        else:
            upserting[up.user] = up
    return Plan(
        tuple(errors.get(user) or UserResult(user) for user in dict.fromkeys(order)),
        tuple((d.user, scram.BY_TYPE[d.mechanism].name) for d in deleting.values()),
        tuple((u.user, scram.BY_TYPE[u.mechanism].name, scram.credential_from_salted_password(
            scram.BY_TYPE[u.mechanism], u.salt, u.salted_password, u.iterations))
              for u in upserting.values()),
    )


@dataclass(frozen=True, slots=True)
class Described:
    user: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism type, iterations)


def describe_users(requested: Sequence[str] | None,
                   users: Mapping[str, Mapping[str, int]]) -> list[Described]:
    """DescribeUserScramCredentials: every user when ``requested`` is None or empty; a name
    asked twice is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND."""
    if not requested:
        names = sorted(users)
        duplicates: set[str] = set()
    else:
        names = list(dict.fromkeys(requested))
        duplicates = {n for n in names if list(requested).count(n) > 1}
    out = []
    for name in names:
        if name in duplicates:
            out.append(Described(name, ErrorCode.DUPLICATE_RESOURCE,
                                 f"Cannot describe SCRAM credentials for the same user twice in a "
                                 f"single request: {name}"))
            continue
        found = users.get(name)
        if not found:
            out.append(Described(name, ErrorCode.RESOURCE_NOT_FOUND,
                                 f"Attempt to describe a user credential that does not exist: {name}"))
            continue
        out.append(Described(name, credentials=tuple(
            (scram.MECHANISMS[m].type_code, iterations) for m, iterations in sorted(found.items())
            if m in scram.MECHANISMS)))
    return out
