"""What Apache Kafka's own log says about the transactions of a fault run.

Kafka 4.3.1's transaction coordinator, when it completes a transaction, sends its markers
to every partition the transaction wrote to; a partition for which its metadata has no
leader it takes for deleted and skips, and it completes the transaction all the same
(``TransactionMarkerChannelManager``: "Couldn't find leader endpoint for partitions ...
these partitions are likely deleted already and hence can be skipped"). Just after a
kill -9 and restart of the one broker, the coordinator loads its transactions in
PrepareCommit or PrepareAbort and sends their markers before the broker's metadata shows
it the leader of the topic's partitions: the markers are skipped. The transaction's
records on such a partition then stay open until the producer's next transaction there
ends, and take that one's fate: a committed transaction loses them (``torn``,
``lost-committed``), an aborted one becomes readable (``aborted-read``).

``markers_skipped`` finds each skip and the transaction it concerns (the coordinator logs
"Sending txn markers for" the loaded transaction, with its start time, just before) and
turns them into ``MarkersSkipped`` events, which the checker uses to tell these
anomalies, which are Kafka's, from any other (docs/users/fault-runs.md#the-kafka-baseline).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from korvet.faults.history import MarkersSkipped

_SENDING = re.compile(r"Sending txn markers for TransactionalIdCoordinatorEpochAndTransitMetadata"
                      r"\((?P<id>[^,]+),\d+,(?P<result>COMMIT|ABORT),TransactionMetadata\(.*?"
                      r"txnStartTimestamp=(?P<started>\d+)")
_STARTING = "] Starting broker (kafka.server.BrokerServer)"
_SKIPPED = re.compile(r"Couldn't find leader endpoint for partitions Set\((?P<partitions>[^)]*)\) "
                      r"while trying to send transaction markers for (?P<id>\S+?),")


def markers_skipped(lines: Iterable[str], topic: str, ids: dict[str, str],
                    clock_offset: float | None = None) -> tuple[list[MarkersSkipped], list[str]]:
    """The skipped markers of the transactional ids in ``ids`` (id -> the producer's name in
    the history) on ``topic``, and notes on skips that could not be tied to a transaction.
    ``clock_offset`` is wall-clock time minus the run's clock (``time.monotonic``)."""
    offset = time.time() - time.monotonic() if clock_offset is None else clock_offset
    loaded: dict[str, tuple[str, int]] = {}  # id -> (result, start in ms) of its last loaded
    found: list[MarkersSkipped] = []
    notes: list[str] = []
    for line in lines:
        if _STARTING in line:  # what the broker loaded before a restart names nothing after
            loaded.clear()
            continue
        sending = _SENDING.search(line)
        if sending is not None:
            loaded[sending["id"]] = (sending["result"], int(sending["started"]))
            continue
        skipped = _SKIPPED.search(line)
        if skipped is None or skipped["id"] not in ids:
            continue
        partitions = tuple(sorted(
            int(name.rpartition("-")[2]) for name in skipped["partitions"].split(", ")
            if name.rpartition("-")[0] == topic))
        if skipped["id"] not in loaded:
            notes.append(f"Kafka skipped the markers of a transaction of {skipped['id']} on "
                         f"partitions {list(partitions)} that its log does not name")
            continue
        result, started = loaded[skipped["id"]]
        found.append(MarkersSkipped(ids[skipped["id"]], partitions, result,
                                    started / 1000 - offset))
    return found, notes
