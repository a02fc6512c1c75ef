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


def _gzip_members(raw: bytes, split: int) -> bytes:
    """The uncompressed batch ``raw`` with its records section gzipped as two members cut at
    ``split`` (the codec reads every member of a gzip stream)."""
    import gzip
    import struct

    from crc32c import crc32c

    records = raw[61:]
    payload = gzip.compress(records[:split]) + gzip.compress(records[split:])
    header = bytearray(raw[:61])
    struct.pack_into(">i", header, 8, 61 - 12 + len(payload))
    struct.pack_into(">h", header, 21, struct.unpack_from(">h", header, 21)[0] | 1)
    body = bytes(header[21:]) + payload
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header) + payload


def test_a_gzip_bomb_in_a_second_member_is_refused_too() -> None:
    """A tiny first gzip member, then one holding the bomb: the measure reads every member,
    as the codec does."""
    plain = build_batch([(0, None, bytes(4 * LIMIT), [])])
    bomb = _gzip_members(plain, 8)
    assert len(decode_batches(_gzip_members(build_batch([(0, None, b"ok", [])]), 3), LIMIT)) == 1
    with pytest.raises(RecordBatchError) as refused:
        decode_batches(bomb, LIMIT)
    assert refused.value.code == MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_bomb_is_refused_without_being_decompressed_whole(codec: str) -> None:
    """64 MiB of zeros against a 1 MiB limit (about 64 KiB of gzip, 2 KiB of zstd): refused
    with a few megabytes allocated, not the 64 MiB the records would take (zstd's ratio on
    zeros is about 32,000: a 1 MiB request could hold 32 GB)."""
    bomb = build_batch([(0, None, bytes(64 * LIMIT), [])], compression=CODECS[codec])
    tracemalloc.start()
    try:
        with pytest.raises(RecordBatchError) as refused:
            decode_batches(bomb, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == MESSAGE_TOO_LARGE
    assert peak < 8 * LIMIT, f"{peak} bytes allocated to refuse it"
