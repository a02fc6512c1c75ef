"""`korvet faults run --workload transactions`, short: transactional producers (some
transactions aborted, a fenced or failed producer replaced by a new one with the same
transactional.id) and read_committed readers on one broker under kill -9 of the broker and
a restart of Redis: no aborted read, no torn transaction, no committed transaction lost,
no read beyond the last stable offset. The same on Apache Kafka, the baseline (which needs
some 20 to 34 s after a kill -9 before its producers commit again: fewer transactions;
meanwhile it aborts the open ones on their timeout and fences their producers, so this run
also meets transactions of unknown fate). After a kill -9 Kafka sometimes completes a
transaction without writing its markers to some partitions (its log says so): what that
does to that transaction is Kafka's and allowed (counted in the summary), any other anomaly
fails the test (docs/users/fault-runs.md#the-kafka-baseline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_fault_runs import fault_run

pytest.importorskip("confluent_kafka")


def assert_transactions_clean(code: int, figures: dict[str, Any], output: str,
                              kinds: set[str], committed: int = 30) -> None:
    """No anomaly, every fault kind met, transactions committed and aborted, and the readers
    read at least every committed record once."""
    assert code == 0, output
    assert figures["anomalies"] == {} and figures["errors"] == [], output
    assert set(figures["faults"]) == kinds, output
    fates = figures["transactions"]
    assert fates.get("committed", 0) > committed, output
    assert fates.get("aborted", 0) > committed // 10, output
    assert sum(c["ack_wait_max_s"] for c in figures["costs"].values()) > 0, output
    assert figures["stored"] > 2 * committed, output
    assert figures["consumed"] >= figures["stored"], output


def test_transactions_on_one_broker_under_kill_and_redis_restart(tmp_path: Path) -> None:
    assert_transactions_clean(
        *fault_run(tmp_path, "--workload", "transactions", "--topology", "single",
                   "--seconds", "30", "--seed", "4", "--faults", "broker-kill,redis-restart"),
        kinds={"broker-kill", "redis-restart"})


@pytest.mark.kafka
def test_transactions_on_kafka_under_kill_and_pause(tmp_path: Path) -> None:
    assert_transactions_clean(
        # 45 s: after a kill -9 Kafka took up to 34 s before a producer committed again (the
        # suite's run of 2026-11-29: 7 commits in a 30-s run, all before the kill); 45-s runs
        # of 2026-11-30 on a machine at load 5 to 7 committed 83 and 123, aborted 33 and 30.
        # The history and librdkafka's eos log stay in tmp_path: an anomaly here is evidence
        # about Kafka or the checker (docs/users/fault-runs.md#the-kafka-baseline)
        *fault_run(tmp_path, "--workload", "transactions", "--topology", "kafka",
                   "--seconds", "45", "--seed", "4", "--history", str(tmp_path / "history.jsonl"),
                   "--client-log"),
        kinds={"broker-kill", "broker-pause"}, committed=10)
