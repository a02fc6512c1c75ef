"""A produced batch whose records decompress to more than socket.request.max.bytes is
MESSAGE_TOO_LARGE (korvet/protocol/records.py): a few hundred kilobytes of gzip held a 200 MB
record that the broker decompressed, stored and kept in memory (12 GB of RSS after retries of
a 600 MB one, in a new user's trial). Every codec is bounded; gzip is measured before it is
decompressed."""

from __future__ import annotations

import tracemalloc

import pytest

from korvet.protocol.records import (
    MESSAGE_TOO_LARGE,
    RecordBatchError,
    build_batch,
    decode_batches,
    scan_batches,
)

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LIMIT = 1024 * 1024


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("read", [decode_batches, scan_batches])
def test_records_beyond_the_limit_are_record_too_large(codec: str, read: object) -> None:
    big = build_batch([(0, b"k", bytes(LIMIT + 1), [])], compression=CODECS[codec])
    assert len(big) < LIMIT // 10  # zeros compress well: the bomb is small on the wire
    with pytest.raises(RecordBatchError) as refused:
        read(big, LIMIT)  # type: ignore[operator]
    assert refused.value.code == MESSAGE_TOO_LARGE
    several = build_batch([(0, None, bytes(LIMIT // 4), [])] * 5, compression=CODECS[codec])
    with pytest.raises(RecordBatchError):
        read(several, LIMIT)  # type: ignore[operator]
    fits = build_batch([(0, b"k", bytes(LIMIT - 4096), [])], compression=CODECS[codec])
    assert len(read(fits, LIMIT)) == 1  # type: ignore[operator]


def test_a_gzip_bomb_is_refused_without_being_decompressed_whole() -> None:
    """64 MiB of zeros (about 64 KiB of gzip) against a 1 MiB limit: refused with a few
    megabytes allocated, not the 64 MiB the records would take."""
    bomb = build_batch([(0, None, bytes(64 * LIMIT), [])], compression=CODECS["gzip"])
    tracemalloc.start()
    try:
        with pytest.raises(RecordBatchError) as refused:
            decode_batches(bomb, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == MESSAGE_TOO_LARGE
    assert peak < 8 * LIMIT, f"{peak} bytes allocated to refuse it"
