"""``korvet spec test-live``: the coordinator machine and the storage models as the oracle of
live brokers, Korvet and Apache Kafka 4.3.1 (one of each for the module).

Korvet runs with its test clock (``--groups-test-clock``: runs move the coordinator's
clock, so session, rebalance and pending-sync timeouts fire) and an initial rebalance
delay of 0, as Kafka does here (``group.initial.rebalance.delay.ms=0``). Example counts
come from the Hypothesis profile (tests/support/examples.py): small in CI, large with
``KORVET_HYPOTHESIS_PROFILE=deep``. A broker whose machine has one rule broken
(tests/support/mutant_broker.py) must be caught within the CI count, and the shrunk
script must replay the difference.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from korvet.jvm.kafka_server import KafkaServer, KafkaToolsError
from korvet.verification.live import machine, share, storage, transactions
from korvet.verification.live.actions import Script
from korvet.verification.live.env import Divergence, Environment, Stats, connect
from korvet.verification.live.oracle import Flavour
from tests.conftest import KORVET, KorvetProcess
from tests.support.examples import examples

pytestmark = pytest.mark.kafka

KORVET_FLAGS = ["--groups-test-clock", "--groups-initial-rebalance-delay-ms", "0"]
MEMBERS = 3
STEPS = 25


def _report(name: str, stats: Stats) -> None:
    print(f"\n{name}: {stats.as_dict()}")


@pytest.fixture(scope="module")
def korvet_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path_factory.mktemp("korvet-live"), extra_args=KORVET_FLAGS)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def kafka_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    server = KafkaServer(tmp_path_factory.mktemp("kafka-live"), group_initial_rebalance_delay_ms=0)
    try:
        server.start()
    except KafkaToolsError as exc:
        pytest.fail(f"Apache Kafka did not start: {exc}")
    yield server
    server.stop()


def _korvet_env(broker: KorvetProcess) -> Environment:
    return connect(broker.bootstrap, clock_url=f"http://127.0.0.1:{broker.http_port}")


@pytest.mark.spec("GroupCoordinator", "Next", "issued", "FreshId", "MemberIdsFresh", "CompleteJoin",
                  "RemoveMembers", "grp")
@pytest.mark.spec("GroupCoordinator", "awaitingJoin", "awaitingSync", note="`held_back_confirmed`")
def test_group_protocol_on_korvet_follows_the_machine(korvet_live: KorvetProcess) -> None:
    env = _korvet_env(korvet_live)
    assert env.flavour is Flavour.KORVET and env.clock is not None
    count = examples(0.2)
    machine.run_groups(env, members=MEMBERS, examples=count, steps=STEPS, seed=18)
    _report("groups on Korvet", env.stats)
    assert env.stats.sequences >= count
    assert env.stats.replies_compared > count * 5
    assert env.stats.held_back_confirmed > 0, "no request was ever held back"
    assert env.stats.clock_moves > 0, "the test clock never moved"


@pytest.mark.spec("GroupCoordinator", "Next", "issued", "FreshId", "MemberIdsFresh", "CompleteJoin",
                  "RemoveMembers", "grp")
@pytest.mark.spec("GroupCoordinator", "awaitingJoin", "awaitingSync", note="`held_back_confirmed`")
@pytest.mark.spec("GroupCoordinator", "KORVET", note="counts in `kafka_rules`")
def test_group_protocol_on_kafka_follows_the_machine(kafka_live: KafkaServer) -> None:
    env = connect(kafka_live.bootstrap)
    assert env.flavour is Flavour.KAFKA and env.clock is None
    count = examples(0.2)
    machine.run_groups(env, members=MEMBERS, examples=count, steps=STEPS, seed=18)
    _report("groups on Kafka", env.stats)
    assert env.stats.sequences >= count
    assert env.stats.replies_compared > count * 5
    assert env.stats.held_back_confirmed > 0


@pytest.mark.spec("ProducerState", "Decide", "CacheSize", "SurvivesRetention")
@pytest.mark.spec("PartitionLog", "AppendAt", "FetchWithinBounds", "NoRecordSkipped")
@pytest.mark.spec("OffsetCodec", "BatchConsecutive", "StrictlyIncreasing")
def test_storage_path_on_korvet_follows_the_models(korvet_live: KorvetProcess) -> None:
    env = _korvet_env(korvet_live)
    count = examples(0.1)
    storage.run_storage(env, examples=count, steps=STEPS, seed=18)
    _report("storage on Korvet", env.stats)
    assert env.stats.sequences >= count
    assert env.stats.replies_compared > count * 5


@pytest.mark.spec("ProducerState", "Decide", "CacheSize", "SurvivesRetention")
@pytest.mark.spec("PartitionLog", "AppendAt", "FetchWithinBounds", "NoRecordSkipped")
@pytest.mark.spec("OffsetCodec", "BatchConsecutive", "StrictlyIncreasing")
def test_storage_path_on_kafka_follows_the_models(kafka_live: KafkaServer) -> None:
    env = connect(kafka_live.bootstrap)
    count = examples(0.1)
    storage.run_storage(env, examples=count, steps=STEPS, seed=18)
    _report("storage on Kafka", env.stats)
    assert env.stats.sequences >= count
    assert env.stats.replies_compared > count * 5


@pytest.mark.spec("Transactions", "ClientInit", "ClientWrite", "EndVerdict", "MarkerArrives",
                  "NoAbortedRead", "LsoBounds", "OffsetsOnlyOnCommit")
def test_transactions_on_korvet_follow_the_model(korvet_live: KorvetProcess) -> None:
    env = _korvet_env(korvet_live)
    count = examples(0.1)
    transactions.run_transactions(env, examples=count, steps=STEPS, seed=18)
    _report("transactions on Korvet", env.stats)
    _assert_transactions_exercised(env.stats, count)


@pytest.mark.spec("Transactions", "ClientInit", "ClientWrite", "EndVerdict", "MarkerArrives",
                  "NoAbortedRead", "LsoBounds", "OffsetsOnlyOnCommit")
def test_transactions_on_kafka_follow_the_model(kafka_live: KafkaServer) -> None:
    env = connect(kafka_live.bootstrap)
    count = examples(0.1)
    transactions.run_transactions(env, examples=count, steps=STEPS, seed=18)
    _report("transactions on Kafka", env.stats)
    _assert_transactions_exercised(env.stats, count)


def _assert_transactions_exercised(stats: Stats, count: int) -> None:
    """The runs reached the rules that matter: fencing, a retried EndTxn, an abort with
    nothing open, and both refusals of a fenced producer."""
    assert stats.sequences >= count
    assert stats.replies_compared > count * 10
    for rule in ("open transaction fenced by InitProducerId", "EndTxn retried after its decision"):
        assert stats.kafka_rules.get(rule, 0) > 0, (rule, stats.kafka_rules)
    for error in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_TXN_STATE"):
        assert stats.errors_seen.get(error, 0) > 0, (error, stats.errors_seen)


@pytest.mark.spec("Transactions", "EndVerdict", note="a mutant broker: the transactions live oracle")
def test_a_broken_transaction_rule_is_caught(tmp_path: Path) -> None:
    """The transactions oracle can fail: a broker that answers a retried EndTxn NONE even
    when it asks for the other result (Kafka: INVALID_TXN_STATE) is caught, and the shrunk
    script ends with that EndTxn."""
    mutant = KorvetProcess(tmp_path / "mutant", extra_args=KORVET_FLAGS, command=[
        sys.executable, "-m", "tests.support.mutant_broker", "end-txn-retry-ignores-result"])
    mutant.start()
    try:
        with pytest.raises(machine.LiveFailure) as caught:
            transactions.run_transactions(_korvet_env(mutant), examples=examples(0.2),
                                          steps=STEPS, seed=18, shrink_seconds=30)
        print(f"\nmutant caught:\n{caught.value}\n{caught.value.script.dumps()}")
        assert "EndTxn" in str(caught.value) and "INVALID_TXN_STATE" in str(caught.value)
        assert len(caught.value.script.actions) <= 8, "the shrunk script is still long"
    finally:
        mutant.stop()


@pytest.mark.spec("SharePartition", "Acquire", "Accept", "Release", "Reject", "AckRefused",
                  "CountWithinLimit", "SpsoTerminal", "AckOnlyByOwner")
def test_share_groups_on_korvet_follow_the_model(korvet_live: KorvetProcess) -> None:
    env = _korvet_env(korvet_live)
    count = examples(0.1)
    share.run_share(env, examples=count, steps=STEPS, seed=18)
    _report("share groups on Korvet", env.stats)
    _assert_share_exercised(env.stats, count)


@pytest.mark.spec("SharePartition", "Acquire", "Accept", "Release", "Reject", "AckRefused",
                  "CountWithinLimit", "SpsoTerminal", "AckOnlyByOwner")
def test_share_groups_on_kafka_follow_the_model(kafka_live: KafkaServer) -> None:
    env = connect(kafka_live.bootstrap)
    count = examples(0.1)
    share.run_share(env, examples=count, steps=STEPS, seed=18)
    _report("share groups on Kafka", env.stats)
    _assert_share_exercised(env.stats, count)


def _assert_share_exercised(stats: Stats, count: int) -> None:
    """The runs reached the delivery limit and had acknowledgements refused."""
    assert stats.sequences >= count
    assert stats.replies_compared > count * 10
    assert stats.kafka_rules.get("released at the delivery limit: archived", 0) > 0, stats
    assert stats.errors_seen.get("INVALID_RECORD_STATE", 0) > 0, stats.errors_seen


@pytest.mark.spec("SharePartition", "Release", note="a mutant broker: the share live oracle")
def test_a_broken_share_rule_is_caught(tmp_path: Path) -> None:
    """The share-group oracle can fail: a broker whose RELEASE at the delivery limit makes
    the record available again (Kafka: archived) is caught, shrunk to a short script."""
    mutant = KorvetProcess(tmp_path / "mutant", extra_args=KORVET_FLAGS, command=[
        sys.executable, "-m", "tests.support.mutant_broker", "release-past-the-limit"])
    mutant.start()
    try:
        with pytest.raises(machine.LiveFailure) as caught:
            share.run_share(_korvet_env(mutant), examples=examples(0.2), steps=STEPS, seed=18,
                            shrink_seconds=30)
        print(f"\nmutant caught:\n{caught.value}\n{caught.value.script.dumps()}")
        assert "ShareFetch" in str(caught.value) or "DescribeShareGroupOffsets" in str(caught.value)
        assert len(caught.value.script.actions) <= 10, "the shrunk script is still long"
    finally:
        mutant.stop()


@pytest.mark.spec("DenseLog", "DeleteRecords", note="a mutant broker: the storage live oracle")
def test_a_broken_storage_rule_is_caught(tmp_path: Path) -> None:
    """The storage path's live oracle can fail: a broker whose DeleteRecords takes an offset
    past the high watermark (Kafka: OFFSET_OUT_OF_RANGE) is caught by the storage run, which
    shrinks the sequence to the DeleteRecords that shows it."""
    mutant = KorvetProcess(tmp_path / "mutant", extra_args=KORVET_FLAGS, command=[
        sys.executable, "-m", "tests.support.mutant_broker", "delete-records-past-the-end"])
    mutant.start()
    try:
        with pytest.raises(machine.LiveFailure) as caught:
            storage.run_storage(_korvet_env(mutant), examples=examples(0.2), steps=STEPS,
                                seed=18, shrink_seconds=30)
        print(f"\nmutant caught:\n{caught.value}\n{caught.value.script.dumps()}")
        assert "DeleteRecords" in str(caught.value)
        assert "OFFSET_OUT_OF_RANGE" in str(caught.value)
        assert len(caught.value.script.actions) <= 6, "the shrunk script is still long"
    finally:
        mutant.stop()


@pytest.mark.spec("GroupCoordinator", "Heartbeat", note="a mutant broker")
def test_a_broken_rule_is_caught_and_its_script_replays(
        tmp_path: Path, korvet_live: KorvetProcess) -> None:
    mutant = KorvetProcess(tmp_path / "mutant", extra_args=KORVET_FLAGS, command=[
        sys.executable, "-m", "tests.support.mutant_broker", "heartbeat-ignores-rebalance"])
    mutant.start()
    try:
        env = _korvet_env(mutant)
        with pytest.raises(machine.LiveFailure) as caught:
            machine.run_groups(env, members=MEMBERS, examples=examples(0.2), steps=STEPS,
                               seed=18, shrink_seconds=30)
        script = caught.value.script
        print(f"\nmutant caught:\n{caught.value}\n{script.dumps()}")
        assert len(script.actions) <= 8, "the shrunk script is still long"
        assert "REBALANCE_IN_PROGRESS" in str(caught.value) or "'error': 27" in str(caught.value)
        assert any(a.__class__.__name__ == "Heartbeat" for a in script.actions)
        saved = tmp_path / "failure.json"
        saved.write_text(script.dumps())
        with pytest.raises(Divergence):
            machine.replay_groups(_korvet_env(mutant), Script.load(saved))
    finally:
        mutant.stop()
    # The same script against the intact broker: no difference.
    machine.replay_groups(_korvet_env(korvet_live), Script.load(saved))


def test_the_command_runs_and_replays(tmp_path: Path, korvet_live: KorvetProcess) -> None:
    clock = f"http://127.0.0.1:{korvet_live.http_port}"
    result = subprocess.run(
        [*KORVET, "spec", "test-live", "--bootstrap", korvet_live.bootstrap, "--test-clock", clock,
         "--examples", "2", "--steps", "10", "--seed", "7"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no difference" in result.stdout
    assert "groups: 2 sequences" in result.stdout and "storage: 2 sequences" in result.stdout
    assert "transactions: 2 sequences" in result.stdout and "share: 2 sequences" in result.stdout
    script = tmp_path / "script.json"
    script.write_text('{"korvet-live-script": 1, "part": "groups", "static": [false, true],\n'
                      ' "actions": [{"do": "join", "sim": 0, "version": 9},\n'
                      '  {"do": "join", "sim": 0, "version": 9},\n'
                      '  {"do": "join", "sim": 1, "version": 5},\n'
                      '  {"do": "heartbeat", "sim": 0, "version": 4}]}\n')
    replayed = subprocess.run(
        [*KORVET, "spec", "test-live", "--bootstrap", korvet_live.bootstrap, "--replay",
         str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "replayed 4 actions" in replayed.stdout
