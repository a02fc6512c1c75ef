"""FindCoordinator (key 10)."""

from __future__ import annotations

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "FindCoordinator (10)"
SOURCE = "FindCoordinatorRequest.json; Kafka KafkaApis.handleFindCoordinatorRequest"


@check("find_coordinator.group_is_listed_broker", api=API, group_protocol=True,
       asserts="FindCoordinator for a group id answers NONE with a node that Metadata lists (same id, "
               "host and port).",
       source=SOURCE)
def group_listed(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    error, entry = ops.find_coordinator(ctx.name("g"))
    expect_error(error, ErrorCode.NONE, "FindCoordinator")
    brokers = {(int(b.node_id), b.host, int(b.port)) for b in ops.metadata([]).brokers}
    found = (int(entry.node_id), str(entry.host), int(entry.port))
    expect(found in brokers, f"coordinator {found} is not a Metadata broker {sorted(brokers)}")


@check("find_coordinator.every_version", api=API, group_protocol=True,
       asserts="Every FindCoordinator version the broker advertises answers NONE for a group (v0-3 one "
               "key, v4+ a batch of coordinator keys), naming the same node.",
       source=f"{SOURCE}; KIP-699 (batched FindCoordinator v4)")
def every_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    nodes = set()
    for version in ctx.apis.versions(ApiKey.FIND_COORDINATOR):
        error, entry = ops.find_coordinator(group, version=version)
        expect_error(error, ErrorCode.NONE, f"FindCoordinator v{version}")
        nodes.add((int(entry.node_id), str(entry.host), int(entry.port)))
    expect_eq(len(nodes), 1, "distinct coordinators named across versions")


@check("find_coordinator.batched_keys", api=API, group_protocol=True,
       asserts="FindCoordinator v4+ with three group ids answers one coordinator per key, each NONE "
               "and echoing its key.",
       source="KIP-699")
def batched(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    keys = [ctx.name("g") for _ in range(3)]
    ops.find_coordinator(keys[0])  # waits out COORDINATOR_NOT_AVAILABLE on a fresh broker
    response = ops.call(ApiKey.FIND_COORDINATOR, ops.v(ApiKey.FIND_COORDINATOR, lo=4), key_type=0,
                        coordinator_keys=keys)
    expect_eq(sorted(c.key for c in response.coordinators), sorted(keys), "keys answered")
    for c in response.coordinators:
        expect_error(c.error_code, ErrorCode.NONE, f"coordinator of {c.key}")


@check("find_coordinator.transaction_key", api=API,
       asserts="FindCoordinator with key_type=1 (transactional id) answers NONE with a transaction "
               "coordinator (after the transaction state topic is ready).",
       source="KIP-98; FindCoordinatorRequest CoordinatorType TRANSACTION")
def transaction_key(ctx: CheckContext) -> None:
    error, _ = Ops(ctx).find_coordinator(ctx.name("txn"), key_type=1)
    expect_error(error, ErrorCode.NONE, "FindCoordinator for a transactional id")


@check("find_coordinator.invalid_key_type", api=API,
       asserts="FindCoordinator with an unknown key type (7) answers INVALID_REQUEST (42).",
       source="Kafka KafkaApis.handleFindCoordinatorRequest (unknown CoordinatorType)")
def invalid_key_type(ctx: CheckContext) -> None:
    error, _ = Ops(ctx).find_coordinator(ctx.name("g"), key_type=7)
    expect_error(error, ErrorCode.INVALID_REQUEST, "FindCoordinator with key type 7")
