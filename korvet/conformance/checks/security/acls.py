"""Security: the ACL API (DescribeAcls 29, CreateAcls 30, DeleteAcls 31) and what the authorizer
allows and refuses, API by API. See the package's docstring for the secured broker these checks need.
"""

from __future__ import annotations

import time
from typing import Any

from korvet.conformance.checks.security.secure import GRANT_WAIT, KAFKA_APIS, REQUIRES, Secure, acl_filter
from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, skip, wait_until
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import LATEST, fetch_result
from korvet.conformance.kafka.records import Rec
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, PatternType, Permission, ResourceType

ACL_API = "ACLs (29, 30, 31)"
AUTHZ_API = "Authorization"
KIP_140 = "KIP-140 (ACL admin API); AclApis; StandardAuthorizer"
# The ACL wire codes the bindings here use, by Kafka's names (korvet.core.security.acl).
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
MATCH, LITERAL, PREFIXED = PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED
ALL, READ, WRITE, DESCRIBE, ALTER = (Operation.ALL, Operation.READ, Operation.WRITE, Operation.DESCRIBE,
                                     Operation.ALTER)
DENY, ALLOW = Permission.DENY, Permission.ALLOW


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
    version = secure.v(ApiKey.DESCRIBE_ACLS)

    def described(**wanted: Any) -> set[tuple[str, int, int, int]]:
        answer = secure.admin.call(build_request(ApiKey.DESCRIBE_ACLS, version, **acl_filter(**wanted)))
        expect_error(answer.error_code, ErrorCode.NONE, "DescribeAcls")
        return {(r.resource_name, int(r.pattern_type), int(a.operation), int(a.permission_type))
                for r in answer.resources for a in r.acls}

    both = {(topic, LITERAL, READ, ALLOW), (prefix, PREFIXED, WRITE, DENY)}
    wait_until(lambda: described(principal=principal) == both, GRANT_WAIT, "DescribeAcls of both ACLs")
    expect_eq(described(resource_type=TOPIC, resource_name=topic, resource_pattern_type=MATCH,
                        principal=principal), both, "MATCH filter for the topic's name")
    expect_eq(described(resource_type=TOPIC, resource_name=prefix, resource_pattern_type=PREFIXED,
                        principal=principal), {(prefix, PREFIXED, WRITE, DENY)}, "PREFIXED filter")
    deleted = secure.admin.call(build_request(ApiKey.DELETE_ACLS, secure.v(ApiKey.DELETE_ACLS), filters=[
        acl_filter(principal=principal, operation=READ)]))
    (result,) = deleted.filter_results
    expect_error(result.error_code, ErrorCode.NONE, "DeleteAcls")
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
                  "operation": ALTER, "permission_type": ALLOW}]
    answer = secure.admin.call(build_request(ApiKey.CREATE_ACLS, secure.v(ApiKey.CREATE_ACLS),
                                             creations=creations))
    expect_eq([int(r.error_code) for r in answer.results],
              [ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST], "errors of the two invalid bindings")


@check("security.acls.need_cluster_rights", api=ACL_API, requires=REQUIRES,
       asserts="A principal without ALTER/DESCRIBE on the cluster gets CLUSTER_AUTHORIZATION_FAILED "
               "from CreateAcls (per binding) and DescribeAcls.", source=KIP_140)
def acls_need_rights(ctx: CheckContext) -> None:
    secure = Secure(ctx)
    name = secure.new_user("pw")
    conn = secure.session(name, "pw")
    created = conn.call(build_request(ApiKey.CREATE_ACLS, secure.v(ApiKey.CREATE_ACLS), creations=[
        {"resource_type": TOPIC, "resource_name": "x", "resource_pattern_type": LITERAL,
         "principal": f"User:{name}", "host": "*", "operation": ALL, "permission_type": ALLOW}]))
    expect_error(created.results[0].error_code, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 "CreateAcls by an ordinary user")
    described = conn.call(build_request(ApiKey.DESCRIBE_ACLS, secure.v(ApiKey.DESCRIBE_ACLS), **acl_filter()))
    expect_error(described.error_code, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 "DescribeAcls by an ordinary user")


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
    wait_until(lambda: reader.fetch(topic, 0, offset).error == ErrorCode.NONE, GRANT_WAIT, "the READ grant")
    expect_eq(reader.fetch(topic, 0, offset).values, [b"by-admin"], "what the reader fetches")
    result = reader.produce(topic, 0, [Rec(b"by-reader")])
    expect_error(result.error, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Produce by a read-only principal")
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
    everything = secure.metadata(conn)
    expect(topic not in {t.name for t in everything.topics}, "the undescribable topic is listed")
    ops = secure.ops(conn)
    for wanted in (topic, missing):
        answer = ops.metadata([wanted], auto_create=True)
        expect_error(answer.topics[0].error_code, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     f"Metadata of {wanted}")
    admin_view = secure.ops().metadata([missing])
    expect_error(admin_view.topics[0].error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "the topic the user asked for")


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
            answer = ops.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, topics=[], response_partition_limit=2000,
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
    named = ops.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, topics=[{"name": hidden}, {"name": missing}],
                     response_partition_limit=2000, cursor=None)
    answers = {str(t.name): t for t in named.topics}
    for wanted in (hidden, missing):
        expect(wanted in answers, f"{wanted} is not answered")
        expect_error(answers[wanted].error_code, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     f"DescribeTopicPartitions of {wanted}")
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
    found = conn.call(build_request(ApiKey.FIND_COORDINATOR, secure.v(ApiKey.FIND_COORDINATOR, 4), key_type=0,
                                    coordinator_keys=[group]))
    expect_error(found.coordinators[0].error_code, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                 "FindCoordinator of the group")
    joined = conn.call(build_request(ApiKey.JOIN_GROUP, secure.v(ApiKey.JOIN_GROUP, 4), group_id=group,
                                     session_timeout=10_000, rebalance_timeout=10_000, member_id="",
                                     group_instance_id=None, protocol_type="consumer",
                                     protocols=[{"name": "range", "metadata": b""}], reason=None))
    expect_error(joined.error_code, ErrorCode.GROUP_AUTHORIZATION_FAILED, "JoinGroup")
    committed = conn.call(build_request(ApiKey.OFFSET_COMMIT, secure.v(ApiKey.OFFSET_COMMIT, 2, 8),
                                        group_id=group, generation_id_or_member_epoch=-1,
                                        generation_id=-1, member_id="", group_instance_id=None,
                                        retention_time=-1, topics=[
                                            {"name": topic, "partitions": [
                                                {"partition_index": 0, "committed_offset": 0,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": None}]}]))
    expect_error(committed.topics[0].partitions[0].error_code, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                 "OffsetCommit")


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
    wait_until(lambda: writer.produce(open_topic, 0, [Rec(b"x")]).error == ErrorCode.NONE, GRANT_WAIT,
               "a produce the PREFIXED grant allows")
    expect_error(writer.produce(closed_topic, 0, [Rec(b"y")]).error, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
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
    version = reader.v(ApiKey.FETCH, lo=7)
    wait_until(lambda: reader.fetch(topic, 0, end).error == ErrorCode.NONE, GRANT_WAIT, "the READ grant")
    _, opened = reader.fetch_many([(topic, 0, end)], session_id=0, session_epoch=0, version=version)
    expect_error(opened[0].error, ErrorCode.NONE, "the Fetch that opens the session")
    session = opened[0].session_id
    ctx.note("session_id", session)
    if session == 0:
        skip("the broker opened no fetch session (KIP-227 allows that)")
    secure.delete_acls(grant)
    wait_until(lambda: reader.fetch(topic, 0, end).error == ErrorCode.TOPIC_AUTHORIZATION_FAILED, GRANT_WAIT,
               "the deletion of the READ grant (a sessionless Fetch)")
    admin.produce_ok(topic, 0, [Rec(b"after-revocation")])
    response = reader.conn.call(reader.fetch_request([], session_id=session, session_epoch=1,
                                                     version=version))
    expect_error(response.error_code, ErrorCode.NONE, "the incremental Fetch's top-level error")
    answered = [fetch_result(response, p) for t in response.responses for p in t.partitions]
    expect_eq(len(answered), 1, "partitions in the incremental answer")
    expect_error(answered[0].error, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                 "the session's partition after its READ was deleted")
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
    expect_error(created.topics[0].error_code, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                 "CreateTopics without CREATE")
    described = ops.call(ApiKey.DESCRIBE_CONFIGS, None, resources=[
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        include_synonyms=False, include_documentation=False)
    expect_error(described.results[0].error_code, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 "DescribeConfigs of the broker")


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
        answer = conn.call(build_request(ApiKey.INIT_PRODUCER_ID, secure.v(ApiKey.INIT_PRODUCER_ID),
                                         transactional_id=None, transaction_timeout=60_000,
                                         producer_id=-1, producer_epoch=-1))
        return int(answer.error_code)

    expect_error(init(reader), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "InitProducerId without any WRITE")
    wait_until(lambda: init(writer) == ErrorCode.NONE, GRANT_WAIT, "InitProducerId with WRITE on a topic")
