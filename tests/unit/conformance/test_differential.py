"""The differential mode (korvet/conformance/modes/differential.py): what two brokers may answer
differently, symbols translated for each, sessions and replay files."""

from __future__ import annotations

import json

from kio.index import load_request_schema

from korvet.conformance.kafka.session import ApiTable


def test_differential_compare_normalises_what_brokers_choose_and_reports_the_rest() -> None:
    from korvet.conformance.modes.differential import compare

    kafka = {"throttle_time": 0, "topics": [
        {"name": "b", "error_code": 0, "topic_id": "x",
         "partitions": [{"partition_index": 0, "leader_id": 1}]},
        {"name": "a", "error_code": 3, "topic_id": None, "partitions": []}]}
    same = {"throttle_time": 7, "topics": [
        {"name": "a", "error_code": 3, "topic_id": None, "partitions": []},
        {"name": "b", "error_code": 0, "topic_id": "y",
         "partitions": [{"partition_index": 0, "leader_id": 5}]}]}
    assert compare(same, kafka, "Metadata") == [], "ids, broker ids and entry order may differ"
    other = json.loads(json.dumps(same))
    other["topics"][0]["error_code"] = 17
    other["topics"][1]["partitions"].append({"partition_index": 1, "leader_id": 5})
    found = {d.signature for d in compare(other, kafka, "Metadata")}
    assert found == {"error code at Metadata.topics.*.error_code", "shape at Metadata.topics.*.partitions.*"}


def test_differential_translates_symbols_only_in_offset_fields_and_filters_listings() -> None:
    from korvet.conformance.modes.differential import only_mentioned, translate

    symbols = {-7_000_001: 1024, -8_000_001: 1_700_000_000_000}
    request = {"topics": [{"partitions": [{"partition": -7_000_001, "fetch_offset": -7_000_001,
                                            "timestamp": -8_000_001}]}]}
    assert translate(request, symbols) == {"topics": [{"partitions": [
        {"partition": -7_000_001, "fetch_offset": 1024, "timestamp": 1_700_000_000_000}]}]}
    listing = {"topics": [{"name": "asked"}, {"name": "__consumer_offsets"}], "groups": [{"group_id": "g"}]}
    assert only_mentioned(listing, {"asked"}) == {"topics": [{"name": "asked"}], "groups": []}


def test_differential_sessions_topic_ids_and_low_watermarks_compare_as_symbols() -> None:
    """A fetch session id or a DeleteRecords low watermark is each broker's own number: requests name
    them by symbol (translated for each broker), answers are compared through the same symbols."""
    from korvet.conformance.modes.differential import (
        DELETE_SYMBOLS,
        FIXTURE_TOPIC_ID,
        SESSION_SYMBOL,
        Side,
        symbolise,
        translate,
    )

    request = {"session_id": SESSION_SYMBOL, "session_epoch": SESSION_SYMBOL,
               "topics": [{"topic_id": FIXTURE_TOPIC_ID, "partitions": [{"offset": -7_100_002}]}]}
    real_id = "6f1e0000-0000-4000-8000-000000000001"
    sent = translate(request, {SESSION_SYMBOL: 4711, -7_100_002: 2049}, {FIXTURE_TOPIC_ID: real_id})
    assert sent == {"session_id": 4711, "session_epoch": SESSION_SYMBOL,
                    "topics": [{"topic_id": real_id, "partitions": [{"offset": 2049}]}]}
    korvet_side = Side("subject", "127.0.0.1:1", ApiTable({}), {**dict.fromkeys(DELETE_SYMBOLS, 0),
                                                                -7_100_002: 2049})
    kafka_side = Side("oracle", "127.0.0.1:2", ApiTable({}), {**dict.fromkeys(DELETE_SYMBOLS, 0),
                                                              -7_100_002: 1})
    korvet = {"session_id": 4711,
              "topics": [{"partitions": [{"low_watermark": 2049}, {"low_watermark": -1}]}]}
    kafka = {"session_id": 123, "topics": [{"partitions": [{"low_watermark": 1}, {"low_watermark": -1}]}]}
    assert symbolise(korvet, korvet_side.labels()) == symbolise(kafka, kafka_side.labels()) == {
        "session_id": "<a session>", "topics": [{"partitions": [{"low_watermark": "<second>"},
                                                                {"low_watermark": -1}]}]}
    assert symbolise({"session_id": 0}, {}) != symbolise({"session_id": 9}, {}), "no session is not a session"


def test_differential_session_scenarios_build_for_every_fetch_version_with_sessions() -> None:

    from korvet.conformance.kafka.messages import build
    from korvet.conformance.modes.differential import FIXTURE_TOPIC_ID, session_scenarios, translate

    scenarios = session_scenarios(list(range(4, 19)), "kc-diff-x")
    versions = {step.version for steps in scenarios for step in steps}
    assert versions == {12, 18}, "the newest version with topic names and the newest with topic ids"
    assert any(len({s.version for s in steps}) == 2 for steps in scenarios), "ids and names mixed"
    for steps in scenarios:
        for step in steps:
            ids = {FIXTURE_TOPIC_ID: "6f1e0000-0000-4000-8000-000000000001"}
            request = build(load_request_schema(1, step.version), translate(step.document, {}, ids))
            assert request.topics == () or request.topics[0].partitions[0].partition == 0


def test_a_replay_step_survives_its_file() -> None:
    from korvet.conformance.modes.differential import Step

    step = Step(1, 12, {"max_wait": 5, "topics": []}, ("append", 3), True)
    assert Step.from_json(json.loads(json.dumps(step.to_json()))) == step
