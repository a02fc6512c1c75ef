"""Kafka's rules for DeleteRecords, DescribeTopicPartitions, DescribeLogDirs and DescribeConfigs'
resources (korvet/core/admin.py)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from korvet.core import admin
from korvet.core.errors import ErrorCode
from tests.support.examples import examples

offsets = st.integers(min_value=-(2**63), max_value=2**63 - 1)
names = st.text(alphabet="abc._-", min_size=1, max_size=4)
topic_tables = st.dictionaries(names, st.integers(min_value=1, max_value=7), max_size=6)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6),
       offsets | st.integers(min_value=-3, max_value=10**6 + 5))
def test_delete_records_accepts_offsets_up_to_the_high_watermark(start: int, length: int,
                                                                 requested: int) -> None:
    high_watermark = start + length
    outcome = admin.delete_records(requested, start, high_watermark)
    target = high_watermark if requested == -1 else requested
    if 0 <= target <= high_watermark:
        assert outcome == admin.Deletion(ErrorCode.NONE, max(start, target))
        # the log start never moves back and never passes the high watermark
        assert start <= outcome.low_watermark <= high_watermark
    else:
        assert outcome == admin.Deletion(ErrorCode.OFFSET_OUT_OF_RANGE, -1)


def test_delete_records_examples() -> None:
    assert admin.delete_records(-1, 3, 10) == admin.Deletion(ErrorCode.NONE, 10)
    assert admin.delete_records(5, 3, 10).low_watermark == 5
    assert admin.delete_records(2, 3, 10).low_watermark == 3  # below the log start: no-op
    assert admin.delete_records(10, 3, 10).ok  # at the high watermark: everything
    assert admin.delete_records(11, 3, 10).error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert admin.delete_records(-2, 3, 10).error is ErrorCode.OFFSET_OUT_OF_RANGE


@given(st.lists(st.tuples(st.integers(0, 5), offsets), max_size=12))
def test_a_partition_named_twice_counts_once_with_its_last_offset(
        entries: list[tuple[int, int]]) -> None:
    unique = admin.unique_partitions(entries)
    assert [p for p, _ in unique] == list(dict.fromkeys(p for p, _ in entries))
    for partition, offset in unique:
        assert offset == [o for p, o in entries if p == partition][-1]


def _pages(requested: list[str], topics: dict[str, int],
           limit: int) -> list[admin.PartitionsPage]:
    pages = [admin.describe_topic_partitions(requested, topics, None, limit)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 200, "the cursor does not make progress"
        pages.append(admin.describe_topic_partitions(requested, topics, pages[-1].next_cursor,
                                                     limit))
    return pages


@settings(max_examples=examples(2))
@given(topic_tables, st.integers(min_value=1, max_value=9))
def test_paging_through_all_topics_describes_every_partition_once_in_order(
        topics: dict[str, int], limit: int) -> None:
    pages = _pages([], topics, limit)
    seen = [(t.name, p) for page in pages for t in page.topics for p in t.partitions]
    assert seen == [(n, p) for n in sorted(topics) for p in range(topics[n])]
    for page in pages:
        assert page.error is ErrorCode.NONE
        assert sum(len(t.partitions) for t in page.topics) <= limit
        assert all(t.error is ErrorCode.NONE for t in page.topics), "describe-all reports no errors"
    if sum(topics.values()) <= limit:
        assert len(pages) == 1


@settings(max_examples=examples(2))
@given(topic_tables, st.lists(names | st.sampled_from(["", "bad name", "x" * 250]), min_size=1,
                             max_size=6),
       st.integers(min_value=1, max_value=9))
def test_named_topics_page_too_and_missing_ones_are_errors(topics: dict[str, int],
                                                           requested: list[str],
                                                           limit: int) -> None:
    pages = _pages(requested, topics, limit)
    described = [(t.name, p) for page in pages for t in page.topics for p in t.partitions]
    wanted = sorted(set(requested))
    assert described == [(n, p) for n in wanted if n in topics for p in range(topics[n])]
    errors = {t.name: t.error for page in pages for t in page.topics
              if t.error is not ErrorCode.NONE}
    for name in wanted:
        if name in topics:
            assert name not in errors
        elif name in ("", ".", "..", "bad name", "x" * 250):
            assert errors[name] is ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            assert errors[name] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_cursor_rules() -> None:
    topics = {"a": 3, "b": 2}
    page = admin.describe_topic_partitions(["a", "b"], topics, ("a", 2), 2)
    assert [(t.name, t.partitions) for t in page.topics] == [("a", range(2, 3)), ("b", range(0, 1))]
    assert page.next_cursor == ("b", 1)
    refused = admin.describe_topic_partitions(["b"], topics, ("a", 0), 10)
    assert refused.error is ErrorCode.INVALID_REQUEST
    assert admin.describe_topic_partitions([], topics, ("a", -1), 10).error is ErrorCode.INVALID_REQUEST
    # A limit of zero (or less) still describes one partition (Kafka: max(min(limit, 2000), 1)).
    one = admin.describe_topic_partitions([], topics, None, 0)
    assert [(t.name, t.partitions) for t in one.topics] == [("a", range(0, 1))]
    assert one.next_cursor == ("a", 1)
    # Describing every topic from a cursor naming a topic that does not exist starts at the
    # next existing one (Kafka selects the existing topics >= the cursor's).
    page = admin.describe_topic_partitions([], topics, ("aa", 1), 10)
    assert [(t.name, t.partitions) for t in page.topics] == [("b", range(0, 2))]
    assert page.next_cursor is None
    # A cursor partition past the end describes none of that topic and goes on.
    past = admin.describe_topic_partitions(["a", "b"], topics, ("a", 7), 10)
    assert [(t.name, t.partitions) for t in past.topics] == [("a", range(0)), ("b", range(0, 2))]
    # The limit is capped at Kafka's 2000 partitions a response.
    big = admin.describe_topic_partitions([], {"t": 5000}, None, 10**6)
    assert big.topics[0].partitions == range(0, 2000) and big.next_cursor == ("t", 2000)


@given(topic_tables, st.none() | st.lists(st.tuples(names, st.lists(st.integers(-2, 9),
                                                                     max_size=4)), max_size=5))
def test_log_dirs_describe_existing_partitions_only(
        topics: dict[str, int], requested: list[tuple[str, list[int]]] | None) -> None:
    chosen = admin.log_dir_partitions(requested, topics)
    if requested is None:
        assert chosen == {n: list(range(topics[n])) for n in sorted(topics)}
        return
    expected: dict[str, set[int]] = {}
    for name, partitions in requested:
        if name in topics:
            expected.setdefault(name, set()).update(p for p in partitions if 0 <= p < topics[name])
    assert chosen == {n: sorted(ps) for n, ps in sorted(expected.items()) if ps}


@given(st.lists(st.integers(min_value=-128, max_value=127), max_size=5))
def test_an_unknown_config_resource_type_fails_the_whole_describe(types: list[int]) -> None:
    """Found by the differential mode: Kafka answers INVALID_REQUEST for every resource of a
    DescribeConfigs that names a type it does not know (0, or anything but 2, 4, 8, 16, 32)."""
    unknown = [t for t in types if t not in (2, 4, 8, 16, 32)]
    expected = ErrorCode.INVALID_REQUEST if unknown else ErrorCode.NONE
    assert admin.describe_configs_request_error(types) is expected
    assert admin.describe_configs_request_error([*types, 0]) is ErrorCode.INVALID_REQUEST


@settings(max_examples=examples(2))
@given(st.text(max_size=8) | st.sampled_from(["", ".", "..", "x" * 249, "x" * 250, "a b", "__c"]),
       st.booleans())
@example("t\n", False)  # found in a full run: a regex "$" also matches before a final newline
def test_a_config_topic_name_is_validated_before_it_is_looked_up(name: str, exists: bool) -> None:
    """Found by the differential mode: an empty or illegal topic name is INVALID_TOPIC_EXCEPTION
    (17) on Kafka, not UNKNOWN_TOPIC_OR_PARTITION (3)."""
    legal = (0 < len(name) <= 249 and name not in (".", "..")
             and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))
    error = admin.config_topic_error(name, exists)
    if not legal:
        assert error is ErrorCode.INVALID_TOPIC_EXCEPTION
    else:
        assert error is (ErrorCode.NONE if exists else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@given(st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 3), offsets), max_size=4)), max_size=6))
def test_delete_records_lists_each_named_topic_once_and_none_without_partitions(
        request: list[tuple[str, list[tuple[int, int]]]]) -> None:
    """Found by the differential mode: Kafka answers a DeleteRecords topic named with no partition
    by leaving it out of the response (its response is built per partition, grouped by topic)."""
    targets = admin.delete_records_targets(request)
    names_with_partitions = [name for name, parts in request if parts]
    listed = [name for name, _ in targets]
    assert sorted(listed) == sorted(set(names_with_partitions))  # each once (Kafka: in any order)
    for name, partitions in targets:
        merged = [pair for n, parts in request if n == name for pair in parts]
        assert partitions == admin.unique_partitions(merged)
        assert partitions, "a topic in the response has a partition"


@settings(max_examples=examples(2))
@given(topic_tables, st.integers(min_value=-(2**31), max_value=0))
def test_a_limit_of_zero_or_less_pages_one_partition_at_a_time(topics: dict[str, int],
                                                               limit: int) -> None:
    """Kafka's handler caps the limit below at 1, so paging always makes progress."""
    pages = _pages([], topics, limit)
    seen = [(t.name, p) for page in pages for t in page.topics for p in t.partitions]
    assert seen == [(n, p) for n in sorted(topics, key=admin.java_order) for p in range(topics[n])]
    assert all(sum(len(t.partitions) for t in page.topics) <= 1 for page in pages)


def test_names_are_ordered_as_java_compares_them() -> None:
    """Java's String.compareTo compares UTF-16 code units: a character above U+FFFF (a surrogate
    pair, D800..DBFF first) sorts before one in U+E000..U+FFFF, where Python's order puts it after."""
    assert sorted(["\uffff", "\U00010000", "a", "ab", ""], key=admin.java_order) == [
        "", "a", "ab", "\U00010000", "\uffff"]
    page = admin.describe_topic_partitions(["\uffff", "\U00010000"], {"\uffff": 1, "\U00010000": 1},
                                           None, 1)
    assert [t.name for t in page.topics] == ["\U00010000"] and page.next_cursor == ("\uffff", 0)
