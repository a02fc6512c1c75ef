"""The security APIs: SaslHandshake (17), SaslAuthenticate (36), DescribeAcls (29),
CreateAcls (30), DeleteAcls (31), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

The SASL requests step the connection's authentication machine (korvet.core.security.sasl
through korvet.server.security) and answer what it says; a failure is answered after the
failed-authentication delay and the connection is then closed. The ACL APIs answer
SECURITY_DISABLED when no authorizer is configured (as Kafka does) and otherwise read and
write the ACLs in Redis, then reload this broker's snapshot so the client's next request
sees its change. Credentials are stored as SCRAM salted keys only; the SaltedPassword an
AlterUserScramCredentials carries is turned into StoredKey and ServerKey and dropped.
Who may call them is decided at the check point (korvet.core.security.rules).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from itertools import groupby
from typing import Any

from redis.exceptions import RedisError

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security import acl, credentials, sasl
from korvet.core.security.acl import CLUSTER_NAME
from korvet.protocol.decoders.security import decode_sasl_authenticate, decode_sasl_handshake
from korvet.protocol.denials import Shape, Whole, per_item, whole_error
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from korvet.protocol.registry import CloseConnection
from korvet.server.api import Api, OnPart
from korvet.server.connection import Connection
from korvet.server.security import Security
from korvet.server.services import Services

log = logging.getLogger("korvet.security")

_NO_AUTHORIZER = "No Authorizer is configured on the broker"


class SecurityHandlers:
    """The security APIs, for one tenant (``services.part(SecurityHandlers)``); users and ACLs
    are the broker's, shared by its tenants (``services.security``)."""

    def __init__(self, services: Services) -> None:
        if services.security is None or services.on_authenticated is None:
            raise RuntimeError("the broker gives every tenant its security before any request")
        self.security: Security = services.security
        self.on_authenticated: Callable[[Connection], Awaitable[None]] = services.on_authenticated

    # -- SASL ---------------------------------------------------------------------------

    async def _step(self, ctx: Connection, event: sasl.Event) -> sasl.Outcome:
        again = ctx.state.auth.reauth_of is not None
        result = await self.security.step(ctx.state.auth, event)
        ctx.state.auth = result.session
        outcome = result.outcome
        if outcome.authenticated is not None:
            log.debug("%s %s as %s", ctx.connection_id,
                      "re-authenticated" if again else "authenticated", outcome.authenticated)
            if not again:
                await self.on_authenticated(ctx)
        if outcome.action is sasl.Action.CLOSE:
            raise CloseConnection(outcome.reason)
        if outcome.action is sasl.Action.FAIL:
            log.info("authentication failed on %s from %s: %s", ctx.connection_id, ctx.client_host,
                     outcome.reason)
            await asyncio.sleep(outcome.delay_ms / 1000)
            if outcome.reply is None:
                raise CloseConnection(outcome.reason)
            ctx.state.closing = outcome.reason
        return outcome

    async def raw_token(self, ctx: Connection, token: bytes) -> bytes:
        """A bare SASL token (after SaslHandshake v0): the bare answer, or the connection closes."""
        result = await self.security.step(ctx.state.auth, sasl.Authenticate(token, version=-1))
        ctx.state.auth = result.session
        outcome = result.outcome
        if outcome.action is sasl.Action.FAIL:
            await asyncio.sleep(outcome.delay_ms / 1000)
        if outcome.action is not sasl.Action.REPLY:
            raise CloseConnection(outcome.reason or "the SASL exchange failed")
        if outcome.authenticated is not None:
            await self.on_authenticated(ctx)
        return (outcome.reply or sasl.Reply()).auth_bytes

    async def sasl_handshake(self, ctx: Connection, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
        outcome = await self._step(ctx, decode_sasl_handshake(request))
        reply = outcome.reply or sasl.Reply()
        return make(response_type(type(request)), error_code=int(reply.error),
                    mechanisms=reply.mechanisms)

    async def sasl_authenticate(self, ctx: Connection,
                                request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
        outcome = await self._step(ctx, decode_sasl_authenticate(request))
        reply = outcome.reply or sasl.Reply()
        return make(response_type(type(request)), error_code=int(reply.error),
                    error_message=reply.message, auth_bytes=reply.auth_bytes,
                    session_lifetime=reply.session_lifetime_ms)

    # -- ACLs ----------------------------------------------------------------------------

    async def describe_acls(self, ctx: Connection, request: DescribeAclsRequest) -> DescribeAclsResponse:
        response_cls = response_type(type(request))
        if not self.security.authorizer:
            return make(response_cls, throttle_time=0, error_code=int(ErrorCode.SECURITY_DISABLED),
                        error_message=_NO_AUTHORIZER, resources=())
        try:
            acl_filter = _filter(request)
        except ValueError as exc:
            return make(response_cls, throttle_time=0, error_code=int(ErrorCode.INVALID_REQUEST),
                        error_message=str(exc), resources=())
        found = (await self.security.cache.reload()).matching(acl_filter)
        resource_cls = nested(response_cls, "DescribeAclsResource")
        description_cls = nested(response_cls, "AclDescription")

        def resource_of(b: acl.AclBinding) -> tuple[int, str, int]:
            return int(b.resource_type), b.resource_name, int(b.pattern_type)

        resources = []
        for (kind, name, pattern), group in groupby(sorted(found, key=resource_of), key=resource_of):
            resources.append(make(resource_cls, resource_type=kind, resource_name=name,
                                  pattern_type=pattern, acls=tuple(
                                      make(description_cls, principal=b.principal, host=b.host,
                                           operation=int(b.operation),
                                           permission_type=int(b.permission)) for b in group)))
        return make(response_cls, throttle_time=0, error_code=int(ErrorCode.NONE),
                    error_message=None, resources=tuple(resources))

    async def create_acls(self, ctx: Connection, request: CreateAclsRequest) -> CreateAclsResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "AclCreationResult")
        if not self.security.authorizer:
            return make(response_cls, throttle_time=0, results=tuple(
                make(result_cls, error_code=int(ErrorCode.SECURITY_DISABLED),
                     error_message="No Authorizer is configured.") for _ in request.creations))
        results: list[tuple[ErrorCode, str | None]] = []
        valid: list[acl.AclBinding] = []
        for creation in request.creations:
            try:
                binding = _binding(creation)
                reason = acl.invalid_binding_reason(binding)
            except ValueError as exc:
                reason = str(exc)
            if reason is not None:
                results.append((ErrorCode.INVALID_REQUEST, reason))
            else:
                valid.append(binding)
                results.append((ErrorCode.NONE, None))
        if valid:
            try:
                await self.security.acl_store.add(valid)
                await self.security.cache.reload()
            except (RedisError, OSError) as exc:
                log.warning("CreateAcls failed: %s", exc)
                results = [(ErrorCode.UNKNOWN_SERVER_ERROR, "the ACLs could not be stored")
                           if code is ErrorCode.NONE else (code, text) for code, text in results]
        return make(response_cls, throttle_time=0, results=tuple(
            make(result_cls, error_code=int(code), error_message=text) for code, text in results))

    async def delete_acls(self, ctx: Connection, request: DeleteAclsRequest) -> DeleteAclsResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "DeleteAclsFilterResult")
        matching_cls = nested(response_cls, "DeleteAclsMatchingAcl")
        if not self.security.authorizer:
            return make(response_cls, throttle_time=0, filter_results=tuple(
                make(result_cls, error_code=int(ErrorCode.SECURITY_DISABLED),
                     error_message="No Authorizer is configured.", matching_acls=())
                for _ in request.filters))
        current = await self.security.cache.reload()
        results = []
        for wanted in request.filters:
            try:
                acl_filter = _filter(wanted)
            except ValueError as exc:
                results.append(make(result_cls, error_code=int(ErrorCode.INVALID_REQUEST),
                                    error_message=str(exc), matching_acls=()))
                continue
            removed = await self.security.acl_store.remove(current.matching(acl_filter))
            results.append(make(result_cls, error_code=int(ErrorCode.NONE), error_message=None,
                                matching_acls=tuple(
                                    make(matching_cls, error_code=int(ErrorCode.NONE),
                                         error_message=None, resource_type=int(b.resource_type),
                                         resource_name=b.resource_name,
                                         pattern_type=int(b.pattern_type), principal=b.principal,
                                         host=b.host, operation=int(b.operation),
                                         permission_type=int(b.permission)) for b in removed)))
        await self.security.cache.reload()
        return make(response_cls, throttle_time=0, filter_results=tuple(results))

    # -- SCRAM credentials ----------------------------------------------------------------

    async def describe_users(self, ctx: Connection, request: DescribeUserScramCredentialsRequest
                             ) -> DescribeUserScramCredentialsResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "DescribeUserScramCredentialsResult")
        info_cls = nested(response_cls, "CredentialInfo")
        users = await self.security.credentials.users()
        requested = None if request.users is None else [u.name for u in request.users]
        described = credentials.describe_users(requested, users)
        return make(response_cls, throttle_time=0, error_code=int(ErrorCode.NONE), error_message=None,
                    results=tuple(make(result_cls, user=d.user, error_code=int(d.error),
                                       error_message=d.message, credential_infos=tuple(
                                           make(info_cls, mechanism=m, iterations=i)
                                           for m, i in d.credentials)) for d in described))

    async def alter_users(self, ctx: Connection, request: AlterUserScramCredentialsRequest
                          ) -> AlterUserScramCredentialsResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "AlterUserScramCredentialsResult")
        existing = [(user, mechanism) for user, found in (await self.security.credentials.users()).items()
                    for mechanism in found]
        plan = credentials.plan_alteration(
            [credentials.Deletion(d.name, int(d.mechanism)) for d in request.deletions],
            [credentials.Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                                   bytes(u.salted_password)) for u in request.upsertions],
            existing)
        for user, mechanism in plan.deletions:
            await self.security.credentials.delete(user, mechanism)
        for user, mechanism, credential in plan.upsertions:
            await self.security.credentials.put(user, mechanism, credential)
        return make(response_cls, throttle_time=0, results=tuple(
            make(result_cls, user=r.user, error_code=int(r.error), error_message=r.message)
            for r in plan.results))


def _enum(kind: type[Any], value: int, what: str) -> Any:
    try:
        return kind(int(value))
    except ValueError:
        raise ValueError(f"unknown {what} {value}") from None


def _binding(creation: Any) -> acl.AclBinding:
    return acl.AclBinding(
        _enum(acl.ResourceType, creation.resource_type, "resource type"), creation.resource_name,
        _enum(acl.PatternType, creation.resource_pattern_type, "pattern type"), creation.principal,
        creation.host, _enum(acl.Operation, creation.operation, "operation"),
        _enum(acl.Permission, creation.permission_type, "permission type"))


def _filter(item: Any) -> acl.AclFilter:
    found = acl.AclFilter(
        _enum(acl.ResourceType, item.resource_type_filter, "resource type"), item.resource_name_filter,
        _enum(acl.PatternType, item.pattern_type_filter, "pattern type"), item.principal_filter,
        item.host_filter, _enum(acl.Operation, item.operation, "operation"),
        _enum(acl.Permission, item.permission_type, "permission type"))
    reason = found.invalid_reason()
    if reason:
        raise ValueError(reason)
    return found


def _alter_users_denied(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return make(response_cls, throttle_time=0, results=tuple(
        make(nested(response_cls, "AlterUserScramCredentialsResult"), user=user, error_code=code,
             error_message=None) for user in users))


def _cluster(respond: Any) -> Shape:
    return Shape((Whole(lambda r: CLUSTER_NAME, respond),))


APIS = (
    Api(ApiKey.SASL_HANDSHAKE, range(0, 2),  # after v0 the tokens come as bare frames (listener)
        OnPart(SecurityHandlers, SecurityHandlers.sasl_handshake),
        "PLAIN, SCRAM-SHA-256/512; v0 handshake: bare tokens after it ([security.md](security.md))"),
    Api(ApiKey.SASL_AUTHENTICATE, range(0, 3),
        OnPart(SecurityHandlers, SecurityHandlers.sasl_authenticate),
        "steps the connection's authentication machine; re-authentication (KIP-368)"),
    Api(ApiKey.DESCRIBE_ACLS, range(1, 4), OnPart(SecurityHandlers, SecurityHandlers.describe_acls),
        "SECURITY_DISABLED without an authorizer",
        _cluster(whole_error(error_message=None, resources=()))),
    Api(ApiKey.CREATE_ACLS, range(1, 4), OnPart(SecurityHandlers, SecurityHandlers.create_acls),
        "SECURITY_DISABLED without an authorizer; ACLs in Redis",
        _cluster(per_item("AclCreationResult", "creations", "results"))),
    Api(ApiKey.DELETE_ACLS, range(1, 4), OnPart(SecurityHandlers, SecurityHandlers.delete_acls),
        "SECURITY_DISABLED without an authorizer",
        _cluster(per_item("DeleteAclsFilterResult", "filters", "filter_results",
                          matching_acls=()))),
    Api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, range(0, 1),
        OnPart(SecurityHandlers, SecurityHandlers.describe_users),
        "SCRAM users in Redis, salted keys only",
        _cluster(whole_error(error_message=None, results=()))),
    Api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, range(0, 1),
        OnPart(SecurityHandlers, SecurityHandlers.alter_users),
        "the salted password is turned into StoredKey and ServerKey and dropped",
        _cluster(_alter_users_denied)),
)
