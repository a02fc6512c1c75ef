"""Profiles, and the documented design differences the ``korvet`` profile excuses.

A profile decides which failing checks count as failures:

- ``kafka``: every check must pass; this is what Apache Kafka does.
- ``korvet``: a check that fails because of one of Korvet's documented design
  differences below is reported as *excused* (with the reason) instead of failed.
  Only checks that name a difference are excused, and only their failures: a bug
  that happens to hit an excusable check still shows its observed behaviour in
  the report.

Each difference is a deliberate consequence of storing partitions in Redis
Streams, not a shortcut; ``docs/conformance.md`` repeats them with the checks
they excuse.
"""

from __future__ import annotations

from typing import Final

PROFILES: Final[dict[str, str]] = {
    "kafka": "every check must pass (Apache Kafka's behaviour)",
    "korvet": "Korvet's documented design differences are excused, each with its reason",
}

SPARSE_OFFSETS: Final = (
    "Korvet's offsets are Redis stream ids packed as ms * 2^bits + seq (default bits 10): they "
    "increase strictly and are consecutive within a produced batch, but they do not start at 0 and "
    "are not dense across batches, so 'the first offset is 0' and 'the next batch starts right after "
    "the previous one' do not hold. Clients only rely on offsets increasing."
)
LAG_COUNTS_OFFSETS: Final = (
    "Consumer lag is LATEST - committed; with Korvet's sparse offsets that counts offsets, not "
    "records, so tools show a lag far larger than the number of unread records."
)
NO_TRANSACTIONS: Final = (
    "Korvet has no transactions (no transaction coordinator, no control records): transactional "
    "InitProducerId and transactional produce are refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "
    "so behaviours built on transactions (markers, read_committed filtering, pending offsets) "
    "cannot be observed."
)
NO_COMPACTION: Final = (
    "Korvet refuses cleanup.policy=compact with INVALID_CONFIG: a Redis stream cannot drop older "
    "entries by key."
)
UNCOMPRESSED_STORAGE: Final = (
    "Korvet decompresses produced batches and stores records uncompressed (one stream entry per "
    "record); fetched batches are therefore uncompressed. The records are identical."
)

KORVET: Final[dict[str, str]] = {
    "sparse_offsets": SPARSE_OFFSETS,
    "lag_counts_offsets": LAG_COUNTS_OFFSETS,
    "no_transactions": NO_TRANSACTIONS,
    "no_compaction": NO_COMPACTION,
    "uncompressed_storage": UNCOMPRESSED_STORAGE,
}


def korvet(reason: str) -> dict[str, str]:
    """``excuses=`` for a check that the korvet profile excuses for ``reason``."""
    return {"korvet": reason}
