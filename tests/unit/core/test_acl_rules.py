"""Kafka's authorizer decision (korvet/core/security/acl.py), its filters, and the rule table
that says which ACL each API needs (korvet/core/security/rules.py, the handler modules' shapes,
server/authz.py)."""

from __future__ import annotations

import redis.asyncio as aioredis
from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core.security import acl, rules
from korvet.core.security.acl import AclBinding, AclFilter, AclSet, Operation, PatternType, Permission, Policy
from korvet.core.security.acl import ResourceType as R
from korvet.server.api import declared_apis
from korvet.server.broker import Broker, unlisted_apis
from korvet.settings import load
from tests.support.examples import examples

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def allow(name: str, op: Operation, principal: str = ALICE, kind: R = R.TOPIC,
          pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, Permission.ALLOW)


def deny(name: str, op: Operation, principal: str = ALICE, kind: R = R.TOPIC,
         pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, Permission.DENY)


NO_POLICY = Policy()


def decide(bindings: list[AclBinding], op: Operation, name: str, principal: str = ALICE,
           kind: R = R.TOPIC, policy: Policy = NO_POLICY, host: str = HOST) -> bool:
    return acl.authorize(AclSet.of(bindings), policy, principal, host, op, kind, name)


names = st.sampled_from(["orders", "orders-eu", "ord", "payments", "*"])
operations = st.sampled_from([o for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)])
principals = st.sampled_from([ALICE, BOB, acl.WILDCARD_PRINCIPAL])
bindings = st.builds(
    AclBinding, st.just(R.TOPIC), names, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    principals, st.sampled_from(["*", HOST, "10.0.0.2"]), operations,
    st.sampled_from([Permission.ALLOW, Permission.DENY]))


def test_nothing_is_allowed_without_an_acl_unless_the_policy_says_so() -> None:
    assert not decide([], Operation.READ, "orders")
    assert decide([], Operation.READ, "orders", policy=Policy(allow_everyone_if_no_acl_found=True))
    # an ACL on the resource for someone else: the default no longer applies
    assert not decide([allow("orders", Operation.READ, BOB)], Operation.READ, "orders",
                      policy=Policy(allow_everyone_if_no_acl_found=True))


def test_super_users_may_do_anything_even_against_a_deny() -> None:
    policy = Policy(super_users=frozenset({ALICE}))
    assert decide([deny("orders", Operation.ALL)], Operation.WRITE, "orders", policy=policy)


def test_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert decide([allow("orders", op)], Operation.DESCRIBE, "orders")
    assert decide([allow("orders", Operation.ALTER_CONFIGS)], Operation.DESCRIBE_CONFIGS, "orders")
    assert not decide([allow("orders", Operation.DESCRIBE)], Operation.READ, "orders")
    # a DENY implies nothing: DENY READ leaves DESCRIBE to the ALLOW
    assert decide([allow("orders", Operation.DESCRIBE), deny("orders", Operation.READ)],
                  Operation.DESCRIBE, "orders")


def test_patterns_wildcards_and_hosts() -> None:
    prefixed = allow("ord", Operation.READ, pattern=PatternType.PREFIXED)
    assert decide([prefixed], Operation.READ, "orders-eu")
    assert not decide([prefixed], Operation.READ, "payments")
    assert not decide([allow("ord", Operation.READ)], Operation.READ, "orders")  # literal is exact
    assert decide([allow("*", Operation.READ)], Operation.READ, "anything")
    assert decide([allow("orders", Operation.READ, acl.WILDCARD_PRINCIPAL)], Operation.READ, "orders",
                  principal=BOB)
    assert decide([allow("orders", Operation.READ, host=HOST)], Operation.READ, "orders")
    assert not decide([allow("orders", Operation.READ, host="10.9.9.9")], Operation.READ, "orders")


@settings(max_examples=examples(3))
@given(st.lists(bindings, max_size=6), operations, names.filter(lambda n: n != "*"), principals)
def test_a_matching_deny_always_wins(acls: list[AclBinding], op: Operation, name: str,
                                     principal: str) -> None:
    blocking = deny(name, op, principal)
    if principal == acl.WILDCARD_PRINCIPAL:
        return  # the wildcard is a pattern, not a principal that connects
    assert not decide([*acls, blocking], op, name, principal)


@settings(max_examples=examples(3))
@given(st.lists(bindings, max_size=6), operations, names.filter(lambda n: n != "*"))
def test_adding_an_allow_never_takes_a_right_away(acls: list[AclBinding], op: Operation,
                                                  name: str) -> None:
    before = decide(acls, op, name)
    after = decide([*acls, allow(name, op)], op, name)
    assert after or not before
    if not any(b.permission is Permission.DENY for b in acls):
        assert after


def test_filters_match_as_kafkas_acl_binding_filter() -> None:
    literal, prefixed, wildcard = (allow("orders", Operation.READ),
                                   allow("ord", Operation.READ, pattern=PatternType.PREFIXED),
                                   allow("*", Operation.WRITE))
    every = AclFilter()
    assert all(every.matches(b) for b in (literal, prefixed, wildcard))
    match = AclFilter(resource_type=R.TOPIC, resource_name="orders", pattern_type=PatternType.MATCH)
    assert [b for b in (literal, prefixed, wildcard) if match.matches(b)] == [literal, prefixed, wildcard]
    exact = AclFilter(resource_type=R.TOPIC, resource_name="ord", pattern_type=PatternType.PREFIXED)
    assert [b for b in (literal, prefixed, wildcard) if exact.matches(b)] == [prefixed]
    by_op = AclFilter(operation=Operation.WRITE)
    assert [b for b in (literal, prefixed, wildcard) if by_op.matches(b)] == [wildcard]


def test_invalid_bindings_are_named() -> None:
    assert acl.invalid_binding_reason(allow("orders", Operation.READ)) is None
    assert "CLUSTER" in (acl.invalid_binding_reason(allow("x", Operation.ALTER, kind=R.CLUSTER)) or "")
    assert acl.invalid_binding_reason(allow("o", Operation.ANY)) == "Invalid operation ANY"
    assert acl.invalid_binding_reason(allow("o", Operation.READ, principal="alice")) is not None
    assert acl.invalid_binding_reason(allow("", Operation.READ)) == "Resource name should not be empty"
    assert acl.invalid_binding_reason(allow("o", Operation.READ, pattern=PatternType.MATCH)) is not None


def test_write_on_some_topic_is_what_an_idempotent_producer_needs() -> None:
    """Kafka's authorizeByResourceType: an ALLOW not shadowed by a DENY on the same name or prefix."""
    by_type = acl.authorize_by_resource_type

    def on_some(acls: list[AclBinding]) -> bool:
        return by_type(AclSet.of(acls), Policy(), ALICE, HOST, Operation.WRITE, R.TOPIC)

    assert not on_some([])
    assert on_some([allow("orders", Operation.WRITE)])
    assert not on_some([allow("orders", Operation.WRITE), deny("orders", Operation.WRITE)])
    assert not on_some([allow("orders-eu", Operation.WRITE),
                        deny("orders", Operation.WRITE, pattern=PatternType.PREFIXED)])
    assert not on_some([allow("*", Operation.READ)])
    assert not on_some([allow("orders", Operation.WRITE), deny("*", Operation.WRITE)])


def test_authorized_operations_list_what_is_allowed() -> None:
    acls = AclSet.of([allow("orders", Operation.READ)])
    ops = acl.authorized_operations(acls, Policy(), ALICE, HOST, R.TOPIC, "orders")
    assert ops == {Operation.READ, Operation.DESCRIBE}
    assert acl.operations_bitfield(ops) == (1 << 3) | (1 << 8)


def test_every_api_the_broker_serves_has_an_authorization_rule_and_a_shape() -> None:
    client = aioredis.Redis(host="127.0.0.1", port=1)  # never connected: the registry only
    broker = Broker(load(env={"KORVET_AUTHORIZER_ENABLED": "true"}), client,
                    redis_url="redis://127.0.0.1:1")
    assert unlisted_apis(broker.registry) == []
    shapes = {api.key: api.shape for api in declared_apis()}
    for key, rule in rules.RULES.items():
        if rule.needs:
            shape = shapes[key]
            assert shape is not None, rule.name
            if shape.custom is None:  # OffsetFetch checks its own layout (groups with topics)
                assert len(shape.checks) == len(rule.needs), rule.name
