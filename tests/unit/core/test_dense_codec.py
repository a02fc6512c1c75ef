"""The dense offset scheme's codec (korvet/core/offsets.py ``DenseCodec``): offset o is the
Redis entry id o-1 (Redis refuses 0-0), every offset from 0 has one, and the storage scripts'
pairs (o, 0) read back as o."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core.offsets import DENSE, MAX_OFFSET, EntryId, OffsetCodec, OffsetError, codec_for

offsets = st.integers(0, MAX_OFFSET)


@given(offsets)
def test_every_offset_is_the_id_with_its_number_and_sequence_one(offset: int) -> None:
    entry = DENSE.decode(offset)
    assert entry == EntryId(offset, 1)
    assert str(entry) == f"{offset}-1"
    assert DENSE.has_offset(entry)
    assert DENSE.encode_id(entry) == offset
    assert DENSE.from_script(offset, 0) == offset
    assert DENSE.last_offset_of(entry) == offset


def test_offset_zero_is_not_the_id_redis_refuses() -> None:
    assert str(DENSE.decode(0)) == "0-1"
    assert DENSE.last_offset_of(None) == -1  # a stream never written: the first record is 0
    assert DENSE.last_offset_of(EntryId(0, 0)) == -1


@given(st.integers(0, 2**40), st.integers(0, 2**20).filter(lambda s: s != 1))
def test_ids_the_broker_did_not_write_have_no_offset(ms: int, seq: int) -> None:
    entry = EntryId(ms, seq)
    assert not DENSE.has_offset(entry)
    with pytest.raises(OffsetError):
        DENSE.encode_id(entry)
    # an append after such an id (an XADD * into the stream) must still write above it
    after = DENSE.last_offset_of(entry) + 1
    assert DENSE.decode(after) > entry


@given(st.integers().filter(lambda o: not 0 <= o <= MAX_OFFSET))
def test_offsets_outside_the_range_are_refused(offset: int) -> None:
    with pytest.raises(OffsetError):
        DENSE.decode(offset)


def test_the_scripts_are_told_bits_zero_for_dense_and_the_sequence_bits_for_time() -> None:
    assert codec_for(0) is DENSE
    assert codec_for(10) == OffsetCodec(10)
    assert DENSE.bits == 0
