"""The produce path packs records straight into RESP (``entries.pack_records``). It must
send Redis exactly the command that packing the readable field layout
(``entries.encode_records``) with hiredis sends, for every kind of record, or stored
records would differ from what was produced."""

from __future__ import annotations

import hiredis
from hypothesis import given
from hypothesis import strategies as st

from korvet.storage import entries

_header_names = st.text(max_size=12)
_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_records = st.lists(
    st.tuples(st.integers(-1, 2**63 - 1), _bytes_or_none, _bytes_or_none,
              st.lists(st.tuples(_header_names, _bytes_or_none), max_size=4)),
    max_size=20)


@given(_records, st.one_of(st.none(), st.integers(0, 2**45)))
def test_pack_records_sends_what_hiredis_packs_of_the_field_layout(
        records: list[entries.Record], timestamp: int | None) -> None:
    fields: list[bytes | int] = []
    size = entries.encode_records(records, fields, timestamp)
    packed = entries.pack_records(records, timestamp)
    head = ("EVALSHA", "0" * 40, 1, "k")
    expected = hiredis.pack_command((*head, *fields))  # type: ignore[arg-type]
    assert packed.args == len(fields)
    assert packed.size == size
    sent = hiredis.pack_command(head)  # type: ignore[arg-type]
    assert b"*%d\r\n" % (len(head) + packed.args) + sent[sent.index(b"\r\n") + 2:] \
        + packed.body == expected


def test_a_null_value_and_a_null_header_stay_distinguishable_from_empty_ones() -> None:
    null_value = entries.pack_records([(5, None, None, [("h", None)])])
    empty_value = entries.pack_records([(5, None, b"", [("h", b"")])])
    assert null_value.body != empty_value.body
    assert b"header-null.h" in null_value.body and b"header.h" in empty_value.body
    assert null_value.args == 5 and empty_value.args == 7
