"""Kafka's log read for transactions it completed without some of their markers: each skip
tied to the transaction the coordinator had just loaded, on the run's clock. The lines are
Kafka 4.3.1's, from a kill -9 run (2026-11-30), cut short where they run on."""

from __future__ import annotations

from korvet.faults.history import MarkersSkipped
from korvet.faults.kafka_log import markers_skipped

SENDING = (
    "[2026-11-30 00:43:56,658] INFO [Transaction State Manager 1]: Sending txn markers for "
    "TransactionalIdCoordinatorEpochAndTransitMetadata(faults-4-txn2,0,COMMIT,"
    "TransactionMetadata(transactionalId=faults-4-txn2, producerId=2, prevProducerId=2, "
    "nextProducerId=-1, producerEpoch=0, lastProducerEpoch=-1, txnTimeoutMs=20000, "
    "state=PREPARE_COMMIT, pendingState=Optional[COMPLETE_COMMIT], topicPartitions=[faults-4-3, "
    "faults-4-0], txnStartTimestamp=1795999428528, txnLastUpdateTimestamp=1795999428560, "
    "clientTransactionVersion=TV_0),TxnTransitMetadata[producerId=2, txnState=COMPLETE_COMMIT, "
    "topicPartitions=[], txnStartTimestamp=1795999428528]) after loading partition 0 "
    "(kafka.coordinator.transaction.TransactionStateManager)"
)


def skipped(partitions: str, txn_id: str = "faults-4-txn2") -> str:
    return ("[2026-11-30 00:44:04,393] INFO [Transaction Marker Channel Manager 1]: Couldn't "
            f"find leader endpoint for partitions Set({partitions}) while trying to send "
            f"transaction markers for {txn_id}, these partitions are likely deleted already "
            "and hence can be skipped (kafka.coordinator.transaction.TransactionMarkerChannelManager)")


IDS = {"faults-4-txn2": "txn2", "faults-4-txn0": "txn0"}


def test_a_skip_names_the_transaction_loaded_before_it() -> None:
    lines = ["[2026-11-30 00:43:56,600] INFO unrelated", SENDING,
             skipped("faults-4-3, faults-4-0, __consumer_offsets-0")]
    found, notes = markers_skipped(lines, "faults-4", IDS, clock_offset=1_795_900_000.0)
    assert len(found) == 1
    assert found[0] == MarkersSkipped("txn2", (0, 3), "COMMIT", found[0].started)
    assert abs(found[0].started - 99_428.528) < 1e-6  # the start's wall clock, on the run's
    assert notes == []


def test_a_skip_of_an_unknown_transaction_is_noted_and_others_ignored() -> None:
    """faults-4-txn0 was never loaded; faults-4-txn2 was, but by the broker before its
    restart, which does not name what the restarted one skips."""
    restart = "[2026-11-30 00:43:55,379] INFO [BrokerServer id=1] Starting broker (kafka.server.BrokerServer)"
    lines = [SENDING, skipped("faults-4-1", txn_id="faults-4-txn0"),
             skipped("faults-4-1", txn_id="another-txn"), restart, skipped("faults-4-0")]
    found, notes = markers_skipped(lines, "faults-4", IDS, clock_offset=0.0)
    assert found == []
    assert len(notes) == 2 and "faults-4-txn0" in notes[0] and "[1]" in notes[0]
    assert "faults-4-txn2" in notes[1] and "[0]" in notes[1]
