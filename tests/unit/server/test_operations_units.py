"""The operations endpoint's parts that need no broker: the HTTP server, the metrics and the
consumer-lag rule (tests/integration/test_operations.py runs them on a real broker)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from korvet.core import coordinator as core
from korvet.core.api_keys import ApiKey
from korvet.core.coordinator.state import CommittedOffset, Group, GroupState, TopicPartition
from korvet.core.offsets import OffsetCodec
from korvet.server.http import HttpServer, Request, Response
from korvet.server.metrics import BrokerMetrics
from korvet.server.operations import Scraper
from korvet.storage.groups import id_before
from korvet.storage.observe import RedisGroup, StreamStats


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


def test_http_server_answers_routes_and_refuses_what_it_does_not_serve() -> None:
    async def hello(request: Request) -> Response:
        return Response(200, b"hello\n")

    async def failing(request: Request) -> Response:
        raise RuntimeError("boom")

    async def run() -> list[bytes]:
        server = HttpServer({"/hello": hello, "/fail": failing}, port=0)
        port = await server.start()
        try:
            return [await _exchange(port, raw) for raw in (
                b"GET /hello?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
                b"HEAD /hello HTTP/1.1\r\n\r\n",
                b"POST /hello HTTP/1.1\r\n\r\n",
                b"GET /nothing HTTP/1.1\r\n\r\n",
                b"GET /fail HTTP/1.1\r\n\r\n",
                b"\x16\x03\x01 not http\r\n\r\n",
                b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n",
            )]
        finally:
            await server.close()

    ok, head, post, missing, failed, garbage, huge = asyncio.run(run())
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and ok.endswith(b"\r\n\r\nhello\n")
    assert b"Content-Length: 6\r\n" in head and head.endswith(b"\r\n\r\n")  # HEAD: no body
    assert post.startswith(b"HTTP/1.1 405 ")
    assert missing.startswith(b"HTTP/1.1 404 ") and b"/hello" in missing
    assert failed.startswith(b"HTTP/1.1 500 ")
    assert garbage.startswith(b"HTTP/1.1 400 ")
    assert huge.startswith(b"HTTP/1.1 400 ")


def test_metrics_count_requests_per_api_and_rebalances_per_group() -> None:
    metrics = BrokerMetrics()
    metrics.name_apis([ApiKey.PRODUCE, ApiKey.OFFSET_FOR_LEADER_EPOCH])
    started = metrics.request_received(0, 100)
    metrics.response_sent(0, 54, started)
    metrics.response_sent(77, 0, metrics.request_received(77, 10))  # a key not served
    metrics.produce_error(3)
    text = generate_latest(metrics.registry).decode()
    assert 'korvet_broker_requests_total{api_key="PRODUCE"} 1.0' in text
    assert 'korvet_broker_requests_total{api_key="UNKNOWN"} 1.0' in text
    assert ('korvet_broker_frame_size_bytes_sum{api_key="PRODUCE",direction="response"} 50.0'
            in text)
    assert 'korvet_broker_network_bytes_total{direction="in"} 118.0' in text
    assert 'korvet_broker_produce_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION"} 1.0' in text
    assert 'korvet_broker_failures_total{operation="produce"} 1.0' in text
    assert "_created" not in text
    metrics.response_sent(23, 0, metrics.request_received(23, 10))
    assert ('korvet_broker_requests_total{api_key="OFFSET_FOR_LEADER_EPOCH"} 1.0'
            in generate_latest(metrics.registry).decode())

    empty = core.initial_state()
    preparing = core.CoordinatorState(groups={"g": Group("g", GroupState.PREPARING_REBALANCE)})
    stable = core.CoordinatorState(groups={"g": Group("g", GroupState.STABLE, generation=1)})
    metrics.coordinator_stepped(empty, preparing, "g")
    metrics.coordinator_stepped(preparing, preparing, "g")  # still the same rebalance
    metrics.coordinator_stepped(preparing, stable, None)
    metrics.coordinator_stepped(stable, preparing, None)
    text = generate_latest(metrics.registry).decode()
    assert 'korvet_group_rebalances_total{group="g"} 2.0' in text


def test_lag_is_offsets_and_time_always_and_records_only_as_redis_counts_them() -> None:
    bits = 10
    codec = OffsetCodec(bits)
    high = codec.encode(2_000_000, 5) + 1  # the last record: 5 in ms 2,000,000
    mid = codec.encode(1_990_000, 0)  # committed 10 s of appends behind it
    offsets = {TopicPartition("t", 0): CommittedOffset(mid), TopicPartition("t", 1):
               CommittedOffset(high), TopicPartition("t", 2): CommittedOffset(mid)}
    state = core.CoordinatorState(groups={"g": Group("g", GroupState.STABLE, offsets=offsets)})
    by_partition = {
        # Redis could not count (position inside the stream): no records value
        ("t", 0): (bits, StreamStats(high, 100, {"g": RedisGroup(id_before(bits, mid), None)})),
        # caught up
        ("t", 1): (bits, StreamStats(high, 100, {"g": RedisGroup(id_before(bits, high), 0)})),
        # Redis counts 42, but its group is not at the committed position: not trusted
        ("t", 2): (bits, StreamStats(high, 100, {"g": RedisGroup("0-0", 42)})),
    }
    lags = {lag.partition: lag for lag in Scraper._lag(state, by_partition)}
    assert lags[0].offsets == high - mid and lags[0].records is None
    assert lags[0].seconds == 10.0
    assert (lags[1].offsets, lags[1].records, lags[1].seconds) == (0, 0, 0.0)
    assert lags[2].records is None
    by_partition[("t", 0)] = (bits, StreamStats(high, 100,
                                                {"g": RedisGroup(id_before(bits, mid), 37)}))
    assert {lag.partition: lag for lag in Scraper._lag(state, by_partition)}[0].records == 37


def test_redis_credentials_go_into_the_url_and_never_into_what_is_printed() -> None:
    from korvet import settings
    from korvet.server.app import masked, redis_choice, with_credentials

    url = with_credentials("redis://db:6379/0", "app", "p@ss")
    assert url == "redis://app:p%40ss@db:6379/0"
    assert masked(url) == "redis://app:****@db:6379/0"
    assert with_credentials("redis://old:pw@db:1/0", "", "new") == "redis://old:new@db:1/0"
    assert with_credentials("redis://db:1/0") == "redis://db:1/0"
    chosen = redis_choice(settings.load(env={"KORVET_REDIS_URI": "redis://u:secret@db:6379/0"}))
    assert chosen == ("Redis at redis://u:****@db:6379/0 "
                      "(from environment variable KORVET_REDIS_URI)")
    assert redis_choice(settings.load(env={})).startswith("embedded Redis (the default")


def test_the_test_clock_moves_only_when_posted_to_and_steps_the_due_timers() -> None:
    from korvet.server import test_clock

    clock = test_clock.TestClock(start_ms=1_000)
    stepped: list[int] = []

    async def run_due_timers() -> None:
        stepped.append(clock())

    async def run() -> list[bytes]:
        get_routes, post_routes = test_clock.routes(clock, run_due_timers)
        server = HttpServer(get_routes, port=0, post_routes=post_routes)
        port = await server.start()
        try:
            return [await _exchange(port, raw) for raw in (
                b"GET /test/groups-clock HTTP/1.1\r\n\r\n",
                b"POST /test/groups-clock?advance_ms=250 HTTP/1.1\r\n\r\n",
                b"POST /test/groups-clock?advance_ms=-5 HTTP/1.1\r\n\r\n",
                b"POST /test/groups-clock?advance_ms=soon HTTP/1.1\r\n\r\n",
                b"POST /test/groups-clock HTTP/1.1\r\n\r\n",
                b"GET /test/groups-clock HTTP/1.1\r\n\r\n",
            )]
        finally:
            await server.close()

    before, moved, negative, word, missing, after = asyncio.run(run())
    assert before.endswith(b'{"now_ms": 1000}\n')
    assert moved.startswith(b"HTTP/1.1 200 ") and moved.endswith(b'{"now_ms": 1250}\n')
    assert stepped == [1250], "the coordinator's due timers ran once, at the new time"
    for refused in (negative, word, missing):
        assert refused.startswith(b"HTTP/1.1 400 ") and b"advance_ms" in refused
    assert after.endswith(b'{"now_ms": 1250}\n'), "a refused move leaves the clock alone"


_OBSERVED = st.lists(st.tuples(st.sampled_from(["PRODUCE", "FETCH", "x\"y\\z"]),
                               st.floats(min_value=0, max_value=2e8, allow_nan=False)),
                     max_size=40)


@settings(max_examples=60, deadline=None)
@given(_OBSERVED)
def test_lean_series_scrape_as_prometheus_clients_own(observed: list[tuple[str, float]]) -> None:
    """The per-request series (``LeanCounter``, ``LeanHistogram``) print what
    prometheus_client's Counter and Histogram print for the same updates: names, labels,
    cumulative ``le`` buckets (a value on a bound counts in it), sums and counts."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

    from korvet.server.metrics import SIZE_BUCKETS, LeanCounter, LeanHistogram

    disable_created_metrics()  # type: ignore[no-untyped-call]  # as BrokerMetrics does

    theirs, ours = CollectorRegistry(), CollectorRegistry()
    their_count = Counter("c", "doc", ["api"], registry=theirs)
    their_hist = Histogram("h_bytes", "doc", ["api"], buckets=SIZE_BUCKETS, registry=theirs)
    our_count = LeanCounter("c", "doc", ("api",), registry=ours)
    our_hist = LeanHistogram("h_bytes", "doc", ("api",), buckets=SIZE_BUCKETS, registry=ours)
    for api, value in observed:
        their_count.labels(api).inc(value)
        their_hist.labels(api).observe(value)
        our_count.labels(api).inc(value)
        our_hist.labels(api).observe(value)
    for value in SIZE_BUCKETS[:3]:  # exactly on a bound
        their_hist.labels("FETCH").observe(value)
        our_hist.labels("FETCH").observe(value)
    if observed:
        their_count.remove(observed[0][0])
        our_count.remove(observed[0][0])
    assert sorted(generate_latest(ours).decode().splitlines()) == sorted(
        generate_latest(theirs).decode().splitlines())


@pytest.mark.parametrize(("limit", "max_connections", "admitted", "warned"), [
    (1_048_576, 2**31 - 1, 1_048_576 - 384, False),  # the usual large limit: silent
    (512, 2**31 - 1, 256, True),  # a small limit: capped, and said at start
    (4096, 100, 100, False),  # max.connections fits
    (1024, 5000, 640, True),  # max.connections does not fit
])
def test_connections_are_capped_by_the_open_files_limit(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, limit: int,
        max_connections: int, admitted: int, warned: bool) -> None:
    import resource

    from korvet.server import limits

    monkeypatch.setattr(resource, "getrlimit", lambda _kind: (limit, limit))
    monkeypatch.setattr(resource, "setrlimit", lambda _kind, _value: None)
    with caplog.at_level("WARNING", logger="korvet.limits"):
        assert limits.raise_open_files_limit(max_connections, redis_pool=256) == admitted
    assert ("open-files limit" in caplog.text) is warned
