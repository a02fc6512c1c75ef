"""The live runs' oracle without a broker: Kafka's protocol vote, member-id binding, the
leader sets, request scripts, and the storage model's rules (korvet/verification/live)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core import coordinator as core
from korvet.verification.live import actions as act
from korvet.verification.live.oracle import (
    Flavour,
    GroupOracle,
    OracleError,
    java_hashmap_slot,
    java_string_hash,
    kafka_protocol_vote,
    kafka_vote,
)
from korvet.verification.live.shrink import shrink, signature
from korvet.verification.live.storage import (
    BAD_EPOCH,
    DUP,
    OK,
    OUT_OF_ORDER,
    Batch,
    PartitionModel,
    PState,
    decide,
)
from tests.support.examples import examples


def test_java_string_hash_matches_known_values() -> None:
    # String.hashCode values Java prints for these literals.
    assert java_string_hash("") == 0
    assert java_string_hash("range") == 108280125
    assert java_string_hash("roundrobin") - 2**32 == -128548644


@pytest.mark.spec("GroupCoordinator", "SelectProtocol")
def test_the_harness_protocol_names_sit_in_distinct_hashmap_buckets() -> None:
    """kafka_vote is exact only if no two names share a bucket (then insertion order counts)."""
    slots = [java_hashmap_slot(name) for name in act.PROTOCOL_NAMES]
    assert len(set(slots)) == len(slots)
    assert sorted(act.PROTOCOL_NAMES, key=java_hashmap_slot) == ["sticky", "range", "roundrobin"]


def _member(member_id: str, *names: str) -> core.Member:
    return core.Member(member_id, None, "c", "h", 10_000, 10_000, "consumer",
                       tuple(core.Protocol(n, b"") for n in names))


@pytest.mark.spec("GroupCoordinator", "SelectProtocol")
def test_a_tied_vote_goes_to_sticky_on_kafka_and_range_on_korvet() -> None:
    members = [_member("a", "sticky", "range"), _member("b", "range", "sticky")]
    assert kafka_vote(members) == "sticky"
    state = core.initial_state(core.Config(initial_rebalance_delay_ms=0))
    events = [core.JoinGroup(i + 1, "g", "", None, "consumer", tuple(
        core.Protocol(n, b"") for n in names), 10_000, 10_000, "c", "h", False, False, f"m{i}")
        for i, names in enumerate((("sticky", "range"), ("range", "sticky")))]

    def vote() -> str:
        s = state
        for event in events:
            s, _ = core.step(s, event, 0)
            for timeout in core.due_timeouts(s, 0):
                s, _ = core.step(s, timeout, 0)
        # the second member's join starts a rebalance that completes once the first rejoins
        s, _ = core.step(s, core.JoinGroup(9, "g", "m0", None, "consumer", events[0].protocols,
                                           10_000, 10_000, "c", "h", False, False, "x"), 0)
        name = s.groups["g"].protocol_name
        assert name is not None
        return name

    assert vote() == "range"
    with kafka_protocol_vote():
        assert vote() == "sticky"
    assert vote() == "range", "the machine's own rule is back after the context"


@pytest.mark.spec("GroupCoordinator", "issued", "FreshId", "MemberIdsFresh")
def test_binding_checks_prefix_and_freshness() -> None:
    oracle = GroupOracle(core.Config(), Flavour.KORVET, 0)
    first = oracle.placeholder("live0")
    with pytest.raises(OracleError, match="does not start with"):
        oracle.bind(first, "live1-abc")
    oracle.bind(first, "live0-abc")
    assert oracle.wire(first) == "live0-abc"
    second = oracle.placeholder("live0")
    with pytest.raises(OracleError, match="handed out before"):
        oracle.bind(second, "live0-abc")


def _oracle_with_three_members(flavour: Flavour) -> tuple[GroupOracle, list[str]]:
    oracle = GroupOracle(core.Config(initial_rebalance_delay_ms=0), flavour, 0)
    ids = ["live0-c", "live1-a", "live2-b"]
    for index, member_id in enumerate(ids):
        event = core.JoinGroup(index + 1, "g", "", None, "consumer",
                               (core.Protocol("range", b""),), 10_000, 10_000, f"live{index}",
                               "h", False, False, oracle.placeholder(f"live{index}"))
        prediction = oracle.predict(event)
        oracle.bind(event.new_member_id, member_id)
        oracle.commit(prediction)
    return oracle, ids


@pytest.mark.spec("GroupCoordinator", "CompleteJoin", "RemoveMembers")
@pytest.mark.parametrize("flavour", list(Flavour))
def test_a_removed_leaders_successor_is_known_on_korvet_and_a_set_on_kafka(
        flavour: Flavour) -> None:
    oracle, _ids = _oracle_with_three_members(flavour)
    group = oracle.state.groups["g"]
    leader = group.leader
    assert leader is not None and oracle.leader_set("g") == {leader}
    prediction = oracle.predict(core.LeaveGroup(99, "g", (core.MemberIdentity(leader, None),)))
    oracle.commit(prediction)
    left = set(oracle.state.groups["g"].members)
    if flavour is Flavour.KORVET:
        assert oracle.leader_set("g") == {min(left)}  # KORVET: the smallest member id
    else:
        assert oracle.leader_set("g") == left  # Kafka: any member (HashMap order)


@settings(max_examples=examples(1))
@given(st.lists(st.sampled_from(sorted(act.KINDS)), min_size=1, max_size=6), st.data())
def test_scripts_round_trip_through_json(kinds: list[str], data: st.DataObject) -> None:
    chosen: list[act.Action] = []
    for kind in kinds:
        cls = act.KINDS[kind]
        chosen.append(data.draw(st.builds(cls, **{
            name: st.integers(0, 9) for name in ("sim", "version", "producer")
            if name in cls.__dataclass_fields__})))
    script = act.Script((True, False), tuple(chosen))
    assert act.Script.from_json(__import__("json").loads(script.dumps())) == script


def test_an_unknown_action_in_a_script_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown action 'dance'"):
        act.from_json({"do": "dance"})
    with pytest.raises(ValueError, match="unknown fields"):
        act.from_json({"do": "join", "sim": 0, "version": 4, "colour": "red"})


@pytest.mark.spec("ProducerState", "Decide")
def test_decide_is_producer_states_table() -> None:
    assert decide(None, 0, 7, 9) == OK  # unknown producer: any sequence
    state = PState(epoch=1, last=4, cache=[(3, 4, 100), (0, 2, 90)])
    assert decide(state, 0, 5, 5) == BAD_EPOCH
    assert decide(state, 1, 0, 2) == DUP
    assert decide(state, 1, 5, 6) == OK
    assert decide(state, 1, 6, 6) == OUT_OF_ORDER
    assert decide(state, 2, 0, 0) == OK
    assert decide(state, 2, 1, 1) == OUT_OF_ORDER


@pytest.mark.spec("PartitionLog", "AppendAt", note="size retention")
def test_size_retention_moves_the_log_start_past_the_last_removed_record() -> None:
    model = PartitionModel(dense=False, retention=2, start=1000, high_watermark=1000)
    model.append(Batch(7, 0, 0, (b"a", b"b"), (1, 2)), 1000)
    model.append(Batch(7, 0, 2, (b"c",), (3,)), 2048)
    assert [r.offset for r in model.log] == [1001, 2048]
    assert model.start == 1001 and model.hw == 2049
    assert model.fetch(1000) == (1, [])  # below the log start: OFFSET_OUT_OF_RANGE
    assert [r.offset for r in model.fetch(1002)[1]] == [2048]  # the gap: the next record
    assert model.outcome(Batch(7, 0, 0, (b"a", b"b"), (1, 2))) == (DUP, 1000)
    assert model.check_base(2049) is None and model.check_base(2048) is not None


def test_shrinking_keeps_only_the_actions_and_fields_that_make_the_same_failure() -> None:
    """A 'broker' that fails when member 1 heartbeats after member 0 joined with a stale id:
    the shrunk script is those two actions, every other field back at its default."""
    noise: list[act.Action] = [act.Describe(3), act.Reconnect(2), act.FetchOffsets(5, True)]
    culprit: list[act.Action] = [act.Join(0, 7, member="stale", protocols=3),
               act.Heartbeat(1, 2, generation="next", group="main")]
    script = act.Script((False, True), (*noise, culprit[0], *noise, culprit[1], *noise))

    def replay(candidate: act.Script) -> None:
        joined = False
        for action in candidate.actions:
            if isinstance(action, act.Join) and action.member == "stale":
                joined = True
            if isinstance(action, act.Heartbeat) and joined:
                raise AssertionError(f"Heartbeat v{action.version} from member 1: the broker "
                                     "answered {'error': 0}")
        if candidate.actions and isinstance(candidate.actions[-1], act.Describe):
            raise AssertionError("DescribeGroups v3: the broker answered something else")

    first = "Heartbeat v2 from member 1: the broker answered {'error': 0}"
    result = shrink(script, first, replay, budget=30)
    assert result.complete
    assert result.script.actions == (act.Join(0, 7, member="stale"), act.Heartbeat(1, 2))
    assert result.script.static == (False, True)
    assert signature(result.message) == signature(first)


def test_a_member_list_binds_a_placeholder_whose_own_reply_was_never_read() -> None:
    oracle = GroupOracle(core.Config(), Flavour.KORVET, 0)
    known, unseen, twin_a, twin_b = (oracle.placeholder(p) for p in
                                     ("inst0", "inst1", "live2", "live2"))
    oracle.bind(known, "inst0-aaa")
    oracle.bind_listed([known, unseen, twin_a, twin_b],
                       ["inst0-aaa", "inst1-bbb", "live2-ccc", "live2-ddd"])
    assert oracle.wire(unseen) == "inst1-bbb"
    # two placeholders with one prefix whose members no reply tells apart (here: in no
    # group at all, so both look the same): bound in either order
    assert {oracle.wire(twin_a), oracle.wire(twin_b)} == {"live2-ccc", "live2-ddd"}
    # but not when the broker lists fewer ids with that prefix than there are placeholders
    third, fourth = oracle.placeholder("live3"), oracle.placeholder("live3")
    oracle.bind_listed([third, fourth], ["live3-eee"])
    assert not oracle.bound(third) and not oracle.bound(fourth)
