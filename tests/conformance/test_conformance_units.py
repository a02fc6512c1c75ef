"""The pure parts of the conformance suite: the history checker, schema derivation, registry, reports."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from korvet.conformance import catalogue, report, runner
from korvet.conformance.brokers import BrokerError
from korvet.conformance.context import ApiTable, CheckContext
from korvet.conformance.fuzz import request_strategy
from korvet.conformance.history import ANOMALIES, History, analyse
from korvet.conformance.messages import MessageError, build, build_request, to_plain
from korvet.conformance.profile import KAFKA, ProfileError, load, parse
from korvet.conformance.registry import Check, CheckFailed, CheckSkipped, load_checks
from korvet.conformance.schemas import kio_request_versions, narrow, request_schema
from korvet.conformance.wire import decode_response, encode_request
from korvet.protocol.framing import encode_response, parse_request
from tests.support.examples import examples

ROOT = Path(__file__).resolve().parents[2]
T0, T1 = ("t", 0), ("t", 1)


# -- the history checker -------------------------------------------------------


def clean_history() -> History:
    """Two producers, sparse offsets (as Korvet's), one consumer reading everything in order."""
    h = History()
    h.send("p1", T0, "a", 1024)
    h.send("p2", T0, "b", 5120)
    h.send("p1", T0, "c", 9216)
    h.send("p1", T1, "d", 7)
    h.assign("c1")
    h.poll("c1", [(T0, 1024, "a"), (T0, 5120, "b")])
    h.poll("c1", [(T0, 9216, "c"), (T1, 7, "d")])
    return h


def found(h: History, *, drained: bool = False) -> dict[str, list[dict[str, Any]]]:
    return analyse(h, drained=drained).found()


def test_a_clean_history_with_sparse_offsets_has_no_anomaly() -> None:
    assert found(clean_history(), drained=True) == {}


def test_inconsistent_offsets_one_offset_two_values() -> None:
    h = clean_history()
    h.poll("c2", [(T0, 5120, "z")])
    result = found(h)
    assert [c["offset"] for c in result["inconsistent_offsets"]] == [5120]


def test_duplicate_one_value_at_two_offsets() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 9300, "a")])
    assert found(h)["duplicate"][0]["value"] == "a"


def test_lost_write_below_the_highest_read_offset() -> None:
    h = History()
    h.send("p", T0, "a", 10)
    h.send("p", T0, "b", 20)
    h.send("p", T0, "c", 30)
    h.poll("c", [(T0, 10, "a"), (T0, 30, "c")])
    result = found(h)
    assert [c["value"] for c in result["lost_write"]] == ["b"]
    # a read that skips b is also a poll skip: b's offset is known from its acknowledgement
    assert result["poll_skip"][0]["skipped"] == 20


def test_unseen_only_counts_once_drained() -> None:
    h = History()
    h.send("p", T0, "a", 10)
    h.send("p", T0, "b", 20)
    h.poll("c", [(T0, 10, "a")])
    assert "unseen" not in found(h)
    assert "lost_write" not in found(h)  # 20 is above the highest offset read
    assert [c["value"] for c in found(h, drained=True)["unseen"]] == ["b"]


def test_unacknowledged_sends_are_never_lost_or_unseen() -> None:
    h = History()
    h.send("p", T0, "a", None)
    h.send("p", T0, "b", 5)
    h.poll("c", [(T0, 5, "b")])
    assert found(h, drained=True) == {}


def test_nonmonotonic_send_per_producer_and_partition() -> None:
    h = History()
    h.send("p", T0, "a", 50)
    h.send("q", T0, "b", 40)  # another producer: fine
    h.send("p", T1, "c", 10)  # another partition: fine
    h.send("p", T0, "d", 30)
    result = found(h)
    assert len(result["nonmonotonic_send"]) == 1
    assert result["nonmonotonic_send"][0]["later"] == "d@30"


def test_nonmonotonic_poll_within_and_between_polls() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 1024, "a")])  # back to the start without an assignment event
    assert found(h)["nonmonotonic_poll"][0]["offset"] == 1024


def test_an_assignment_allows_going_back() -> None:
    h = clean_history()
    h.assign("c1", [T0])
    h.poll("c1", [(T0, 1024, "a"), (T0, 5120, "b")])
    assert found(h) == {}


def test_poll_skip_over_an_offset_another_consumer_read() -> None:
    h = History()
    h.poll("c1", [(T0, 1, "a"), (T0, 2, "b"), (T0, 3, "c")])
    h.poll("c2", [(T0, 1, "a")])
    h.poll("c2", [(T0, 3, "c")])
    result = found(h)
    assert result["poll_skip"] == [{"process": "c2", "partition": "t-0", "from_offset": 1, "to_offset": 3,
                                    "skipped": 2}]
    assert set(result) == {"poll_skip"}


def test_allowed_anomalies_are_not_reported() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 1024, "a")])
    analysis = analyse(h)
    assert analysis.found(allowed=["nonmonotonic_poll"]) == {}
    assert "nonmonotonic_poll" in analysis.summary()


def test_every_anomaly_has_a_synthetic_history_above() -> None:
    source = Path(__file__).read_text()
    for name in ANOMALIES:
        assert f'"{name}"' in source, f"no test exercises {name}"


# -- schema derivation -----------------------------------------------------------


SAMPLED_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 22, 32, 42, 47, 60)


@pytest.mark.parametrize("api_key", SAMPLED_APIS)
def test_request_schemas_are_valid_json_schema(api_key: int) -> None:
    for version in kio_request_versions(api_key):
        schema = request_schema(api_key, version)
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["additionalProperties"] is False


def test_schema_types_follow_kafka_field_types() -> None:
    schema = request_schema(11, 9)
    props = schema["properties"]
    assert props["group_id"]["type"] == "string"
    assert props["group_instance_id"]["anyOf"][0] == {"type": "null"}
    assert props["session_timeout"]["minimum"] == -(2**31)
    assert props["protocols"]["items"]["properties"]["metadata"]["items"]["maximum"] == 255
    assert "reason" not in schema["required"]  # it has a default
    produce = request_schema(0, 13)
    partition = produce["properties"]["topic_data"]["items"]["properties"]["partition_data"]["items"]
    assert partition["properties"]["index"] == {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1,
                                                "description": "int32"}
    topic_id = produce["properties"]["topic_data"]["items"]["properties"]["topic_id"]
    assert "pattern" in topic_id


def test_narrow_replaces_nested_fields_and_ignores_missing_paths() -> None:
    schema = request_schema(3, 12)
    narrowed = narrow(schema, "topics.*.name", {"const": "x"})
    topic = narrowed["properties"]["topics"]["anyOf"][1]["items"]
    assert topic["properties"]["name"] == {"const": "x"}
    assert schema["properties"]["topics"]["anyOf"][1]["items"]["properties"]["name"] != {"const": "x"}
    assert narrow(schema, "no.such.field", {"const": 1}) == schema
    removed = narrow(schema, "allow_auto_topic_creation", None)
    assert "allow_auto_topic_creation" not in removed["properties"]


def _roundtrip(api_key: int, version: int, document: dict[str, Any]) -> None:
    cls = load_request_schema(api_key, version)
    request = build(cls, document)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, request)
    decoded, size = entity_reader(cls)(memoryview(buffer.getvalue()), 0)
    assert size == len(buffer.getvalue())
    assert to_plain(decoded) == to_plain(request)


@pytest.mark.parametrize(("api_key", "version"), [(0, 3), (0, 13), (1, 4), (1, 18), (3, 13), (8, 9), (11, 5),
                                                  (14, 5), (19, 7), (32, 4), (42, 2), (44, 1)])
def test_generated_documents_validate_and_encode(api_key: int, version: int) -> None:
    schema = request_schema(api_key, version, max_string=20, max_bytes=20, max_items=2)
    validator = jsonschema.Draft7Validator(schema)

    @settings(max_examples=examples(0.25), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request_strategy(schema))
    def prop(document: dict[str, Any]) -> None:
        errors = list(validator.iter_errors(document))
        assert not errors, errors[0].message
        _roundtrip(api_key, version, document)

    prop()


def test_build_fills_defaults_converts_types_and_drops_unknown_fields() -> None:
    request = build_request(11, 5, group_id="g", session_timeout=10_000, member_id="",
                            protocol_type="consumer", protocols=[{"name": "range", "metadata": [1, 2]}],
                            reason="only in v8+")
    assert request.session_timeout.total_seconds() == 10.0
    assert request.rebalance_timeout.total_seconds() == -0.001
    assert request.protocols[0].metadata == b"\x01\x02"
    with pytest.raises(MessageError, match="group_id"):
        build_request(11, 5, session_timeout=1, member_id="", protocol_type="c", protocols=[])


def test_request_frames_decode_with_the_brokers_parser() -> None:
    request = build_request(3, 12, topics=[{"name": "t", "topic_id": "00000000-0000-0000-0000-000000000000"}],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    frame = encode_request(request, 42, "unit")
    parsed = parse_request(frame[4:])
    header = (parsed.api_key, parsed.api_version, parsed.correlation_id, parsed.client_id)
    assert header == (3, 12, 42, "unit")
    assert to_plain(parsed.body) == to_plain(request)


def test_response_frames_decode() -> None:
    from kio.index import load_response_schema

    response = build(load_response_schema(18, 3), {"error_code": 0, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3}], "throttle_time": 0})
    frame = encode_response(7, response)
    correlation, decoded = decode_response(18, 3, frame[4:])
    assert correlation == 7
    assert decoded.api_keys[0].max_version == 3


# -- registry, profiles and reports -----------------------------------------------


def test_registry_has_enough_named_documented_checks() -> None:
    checks = load_checks()
    assert len(checks) >= 120
    for check in checks.values():
        assert check.asserts.endswith((".", ")")), check.name
        assert len(check.source) > 5, check.name
    korvet = load("korvet")
    exact = [c for c in checks.values() if c.kafka_exact]
    assert exact and all(korvet.excuse_for(c.name) for c in exact if "offset" in c.asserts.lower()), \
        "every Kafka-exact offset check states why Korvet differs"


@pytest.mark.parametrize("name", ["korvet", "kfake"])
def test_shipped_profiles_name_only_existing_checks_with_reasons_and_references(name: str) -> None:
    profile = load(name)
    assert profile.name == name and profile.excuses
    assert profile.unmatched(load_checks()) == [], "a profile pattern names no check"
    for excuse in profile.excuses:
        assert len(excuse.reason) > 40 and len(excuse.reference) > 5, excuse.key
    if name == "kfake":  # every kfake excuse says which side is wrong
        assert all(e.reason.startswith(("kfake is wrong", "Both")) for e in profile.excuses), \
            [e.key for e in profile.excuses if not e.reason.startswith(("kfake is wrong", "Both"))]


def test_a_profile_file_excuses_by_name_and_glob(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("profile: mine\nabout: my broker\nexcuses:\n  no_txn:\n"
                    "    checks: [fetch.read_committed.*, find_coordinator.transaction_key]\n"
                    "    reason: no transactions here\n    reference: my docs\n")
    profile = load(str(path))
    assert profile.excuse_for("fetch.read_committed.lists_aborted_transactions") is not None
    assert profile.excuse_for("find_coordinator.transaction_key") is not None
    assert profile.excuse_for("find_coordinator.group_key") is None
    assert load("kafka") is KAFKA


@pytest.mark.parametrize(("text", "message"), [
    ("profile: x\nabout: y\nexcuses:\n  k:\n    checks: []\n    reason: r\n    reference: s\n",
     "non-empty list"),
    ("profile: x\nabout: y\nexcuses:\n  k:\n    checks: [a.b]\n    reference: s\n", "'reason'"),
    ("profile: x\nabout: y\nexcuse: {}\n", "unknown keys"),
    ("profile: x\nabout: y\nexcuses:\n  k:\n    checks: [a.b]\n    reason: r\n    reference: s\n    why: t\n",
     "unknown keys"),
    ("- a\n", "expected a mapping"),
])
def test_a_malformed_profile_is_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse(text, "test.yaml")


def _context(check: Check) -> CheckContext:
    return CheckContext(check, "127.0.0.1:1", "unit", ApiTable({}))


def _fake(name: str, fn: Any, **kw: Any) -> Check:
    return Check(name=name, api="Unit", asserts="Something.", source="Unit test.", fn=fn, **kw)


UNIT_PROFILE = parse("profile: unit\nabout: unit\nexcuses:\n  sparse:\n"
                     "    checks: [unit.excusable, unit.passes]\n    reason: offsets are sparse\n"
                     "    reference: storage.md\n", "unit")


def test_profiles_excuse_only_failures_of_checks_that_name_a_difference() -> None:
    def fails(ctx: CheckContext) -> None:
        raise CheckFailed("observed something else", observed=1)

    def skips(ctx: CheckContext) -> None:
        raise CheckSkipped("no tool")

    excusable = _fake("unit.excusable", fails)
    assert runner.run_check(excusable, _context(excusable), KAFKA).status == runner.FAIL
    excused = runner.run_check(excusable, _context(excusable), UNIT_PROFILE)
    observed = (excused.status, excused.excuse, excused.excuse_key)
    assert observed == (runner.EXCUSED, "offsets are sparse", "sparse")
    assert excused.details == {"observed": 1} and not excused.excuse_unneeded
    passing = _fake("unit.passes", lambda ctx: None)
    passed = runner.run_check(passing, _context(passing), UNIT_PROFILE)
    assert passed.status == runner.PASS and passed.excuse_unneeded, "an excused check that passes is flagged"
    plain = _fake("unit.plain", fails)
    assert runner.run_check(plain, _context(plain), UNIT_PROFILE).status == runner.FAIL
    skipped = _fake("unit.skips", skips)
    assert runner.run_check(skipped, _context(skipped), KAFKA).status == runner.SKIP
    crashing = _fake("unit.crashes", lambda ctx: 1 / 0)
    result = runner.run_check(crashing, _context(crashing), KAFKA)
    assert result.status == runner.FAIL and "ZeroDivisionError" in result.message


class DyingBroker:
    """A broker whose process 'dies' whenever the check named ``killer`` runs, and restarts."""

    restartable = True

    def __init__(self, killer: str, restartable: bool = True) -> None:
        self.killer = killer
        self.restartable = restartable
        self.up = True
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return "127.0.0.1:1"

    def alive(self) -> bool:
        return self.up

    def death(self) -> str:
        return "exited with code 2\npanic: nil pointer dereference"

    def restart(self) -> None:
        if not self.restartable:
            raise BrokerError("cannot")
        self.restarts += 1
        self.up = True

    def stop(self) -> None:
        self.up = False


def _run_with(broker: DyingBroker, names: list[str], jobs: int) -> runner._Run:
    def body(name: str) -> Any:
        def fn(ctx: CheckContext) -> None:
            if name == broker.killer:
                broker.up = False
                raise CheckFailed("the connection was closed")
            if not broker.up:
                raise CheckFailed("connection refused")
            time.sleep(0.05)
        return fn

    state = runner._Run(broker, "unit", ApiTable({}), KAFKA, None, None)
    state.batch([_fake(n, body(n)) for n in names], jobs)
    return state


def test_a_check_that_kills_the_broker_is_named_and_the_run_goes_on() -> None:
    names = [f"unit.c{i:02d}" for i in range(12)]
    broker = DyingBroker("unit.c05")
    state = _run_with(broker, names, jobs=4)
    assert sorted(state.results) == names, "every check has a result"
    killed = state.results["unit.c05"]
    assert killed.status == runner.FAIL and killed.message.startswith("the broker died during this check")
    assert "nil pointer" in killed.details["broker_death"]
    others = [state.results[n].status for n in names if n != "unit.c05"]
    assert others == [runner.PASS] * 11, "checks that ran beside the killer are run again, and pass"
    (incident,) = state.incidents
    assert incident["killers"] == ["unit.c05"] and "unit.c05" in incident["suspects"]
    assert broker.restarts == 2  # once to find the killer, once after it killed the broker again


class SlowlyDyingBroker(DyingBroker):
    """The killer's request makes the process die a moment later (a panic in another goroutine on
    a busy machine): the probe right after the check still finds it alive."""

    def __init__(self, killer: str, after_probes: int) -> None:
        super().__init__(killer)
        self.dying_in: int | None = None
        self.after_probes = after_probes

    def alive(self) -> bool:
        if self.dying_in is not None:
            self.dying_in -= 1
            if self.dying_in < 0:
                self.up, self.dying_in = False, None
        return self.up


def test_a_check_whose_broker_dies_after_the_next_probe_is_still_named_the_killer() -> None:
    names = [f"unit.c{i:02d}" for i in range(6)]
    broker = SlowlyDyingBroker("unit.c02", after_probes=1)

    def body(name: str) -> Any:
        def fn(ctx: CheckContext) -> None:
            if name == broker.killer:
                broker.dying_in = broker.after_probes  # answered; the process goes down soon
                return
            if not broker.up:
                raise CheckFailed("connection refused")
            time.sleep(0.05)
        return fn

    state = runner._Run(broker, "unit", ApiTable({}), KAFKA, None, None)
    state.batch([_fake(n, body(n)) for n in names], 1)
    (incident, *_) = state.incidents
    assert incident["killers"] == ["unit.c02"], incident
    assert state.results["unit.c02"].message.startswith("the broker died during this check")
    assert sorted(state.results) == names


def test_a_check_run_again_after_the_broker_died_uses_names_of_its_own() -> None:
    """A client of the first attempt may still be retrying when the broker comes back and recreate
    that attempt's topic there: the rerun must not ask for the same name (TOPIC_ALREADY_EXISTS)."""
    broker = DyingBroker("unit.killer")
    created: dict[str, list[str]] = {}
    taken: set[str] = set()

    def creates_a_topic(name: str) -> Any:
        def fn(ctx: CheckContext) -> None:
            topic = ctx.name()
            created.setdefault(name, []).append(topic)
            if name == broker.killer:
                broker.up = False
            if topic in taken:
                raise CheckFailed(f"CreateTopics {topic}: TOPIC_ALREADY_EXISTS (36)")
            taken.add(topic)  # the "broker" keeps it across restarts, as a retrying client would
            time.sleep(0.05)
        return fn

    names = ["unit.a", "unit.killer", "unit.b"]
    state = runner._Run(broker, "unit", ApiTable({}), KAFKA, None, None)
    state.batch([_fake(n, creates_a_topic(n)) for n in names], 3)
    assert [state.results[n].status for n in ("unit.a", "unit.b")] == [runner.PASS] * 2, state.results
    assert all(len(set(topics)) == len(topics) for topics in created.values()), created
    assert any(len(topics) > 1 for topics in created.values()), "no check was run again"
    assert created["unit.a"][0] == "kc-unit-unit-a-t1"
    assert all("-a2-" in topics[1] for topics in created.values() if len(topics) > 1), created


def test_a_broker_the_suite_did_not_start_stops_the_run_with_the_suspects() -> None:
    names = [f"unit.c{i:02d}" for i in range(8)]
    state = _run_with(DyingBroker("unit.c02", restartable=False), names, jobs=1)
    assert state.stopped is not None and "unit.c02" in state.stopped
    assert state.results["unit.c02"].status == runner.FAIL
    assert "may have killed it" in state.results["unit.c02"].message
    assert [state.results[n].status for n in names[3:]] == [runner.SKIP] * 5
    assert all("not run" in state.results[n].message for n in names[3:])


def _sample_report() -> runner.RunReport:
    exchange = {"connection": "127.0.0.1:1 #1", "correlation_id": 3, "api": "FetchRequest (key 1) v17",
                "request": {"max_wait": 0}, "response": {"error_code": 1, "note": "<b>"}}
    results = [
        runner.CheckResult("produce.a", "Produce (0)", runner.PASS, 0.1, "", "A.", "S.", False, False),
        runner.CheckResult("fetch.b", "Fetch (1)", runner.FAIL, 0.2, "got <NONE>", "B.", "S.", False, False,
                           details={"x": [1, 2]}, exchanges=[exchange]),
        runner.CheckResult("fetch.c", "Fetch (1)", runner.EXCUSED, 0.3, "dense", "C.", "S.", True, False,
                           excuse="offsets are sparse", excuse_key="sparse_offsets"),
    ]
    return runner.RunReport("127.0.0.1:1", "korvet", "abc123", "2026-01-01T00:00:00+00:00", 1.5,
                            {"18": [0, 4]}, results)


def test_html_report_is_self_contained_and_escaped() -> None:
    page = report.render_html(_sample_report())
    assert "<style>" in page and "got &lt;NONE&gt;" in page
    assert not re.search(r"""(src|href)=["']?https?:""", page)
    assert "fetch.b" in page and "excused" in page


def test_html_report_groups_by_api_and_shows_a_failures_request_and_response() -> None:
    page = report.render_html(_sample_report())
    fetch, produce = page.index("<h2 id='api-fetch-1'>"), page.index("<h2 id='api-produce-0'>")
    assert fetch < produce, "APIs with failures come first"
    section = page[fetch:produce]
    assert "fetch.b" in section and "fetch.c" in section and "produce.a" not in section
    assert "FetchRequest (key 1) v17" in section and "&quot;max_wait&quot;: 0" in section
    assert "&lt;b&gt;" in section, "response content is escaped"


def test_junit_report_has_one_case_per_check_failures_and_skips() -> None:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(report.junit_xml(_sample_report()))
    cases = {str(c.get("name")): c for c in root.iter("testcase")}
    assert sorted(cases) == ["fetch.b", "fetch.c", "produce.a"]
    failure = cases["fetch.b"].find("failure")
    assert failure is not None and failure.get("message") == "got <NONE>"
    assert "FetchRequest (key 1) v17" in (failure.text or "")
    skipped = cases["fetch.c"].find("skipped")
    assert skipped is not None and "sparse_offsets" in (skipped.get("message") or "")
    assert cases["produce.a"].find("failure") is None and root.get("failures") == "1"


def test_json_report_and_exit_verdict(tmp_path: Path) -> None:
    sample = _sample_report()
    assert not sample.ok
    report.write_json(sample, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["counts"] == {"pass": 1, "fail": 1, "excused": 1, "skip": 0}
    assert data["results"][1]["details"] == {"x": [1, 2]}
    table = catalogue.results_markdown(data)
    assert "| `fetch.c` | excused |" in table and "sparse_offsets" in table


def test_cli_exits_nonzero_when_a_check_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from korvet.cli import main

    monkeypatch.setattr(runner, "run", lambda *a, **k: _sample_report())
    assert main(["conformance", "--bootstrap", "127.0.0.1:1", "--json", str(tmp_path / "r.json"),
                 "--html", str(tmp_path / "r.html")]) == 1
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["conformance", "--list", "--only", "produce.acks_*"]) == 0


def test_docs_catalogue_is_up_to_date() -> None:
    doc = (ROOT / "docs" / "conformance.md").read_text()
    body = doc.split(catalogue.CATALOGUE_BEGIN, 1)[1].split(catalogue.CATALOGUE_END, 1)[0].strip()
    assert body == catalogue.catalogue_markdown(load_checks().values()), (
        "docs/conformance.md's catalogue is stale: run "
        "`.venv/bin/python -m korvet.conformance.catalogue --update docs/conformance.md`")
    table = doc.split(catalogue.DIFFERENCES_BEGIN, 1)[1].split(catalogue.DIFFERENCES_END, 1)[0].strip()
    assert table == catalogue.differences_markdown(load_checks().values()), "the differences table is stale"


@given(st.lists(st.tuples(st.sampled_from(["p1", "p2"]), st.integers(0, 1), st.integers(1, 5)), max_size=30))
@settings(max_examples=examples(0.6), deadline=None, database=None)
def test_histories_of_a_correct_log_have_no_anomalies(plan: list[tuple[str, int, int]]) -> None:
    """Model: appends to a sparse log (gaps of 1..5) read back in order by one consumer."""
    h = History()
    ends = {0: 0, 1: 0}
    log: dict[int, list[tuple[int, str]]] = {0: [], 1: []}
    for index, (producer, partition, gap) in enumerate(plan):
        offset = ends[partition] + gap
        ends[partition] = offset
        value = f"{producer}-{index}"
        log[partition].append((offset, value))
        h.send(producer, ("t", partition), value, offset)
    for partition, entries in log.items():
        h.poll("c", [(("t", partition), offset, value) for offset, value in entries])
    assert analyse(h, drained=True).found() == {}


# -- the differential mode's comparison -------------------------------------------------------


def test_differential_compare_normalises_what_brokers_choose_and_reports_the_rest() -> None:
    from korvet.conformance.differential import compare

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
    from korvet.conformance.differential import only_mentioned, translate

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
    from korvet.conformance.differential import (
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
    from kio.index import load_request_schema

    from korvet.conformance.differential import FIXTURE_TOPIC_ID, session_scenarios, translate
    from korvet.conformance.messages import build

    scenarios = session_scenarios(list(range(4, 19)), "kc-diff-x")
    versions = {step.version for steps in scenarios for step in steps}
    assert versions == {12, 18}, "the newest version with topic names and the newest with topic ids"
    assert any(len({s.version for s in steps}) == 2 for steps in scenarios), "ids and names mixed"
    for steps in scenarios:
        for step in steps:
            ids = {FIXTURE_TOPIC_ID: "6f1e0000-0000-4000-8000-000000000001"}
            request = build(load_request_schema(1, step.version), translate(step.document, {}, ids))
            assert request.topics == () or request.topics[0].partitions[0].partition == 0


def test_differential_excuses_match_field_paths_segment_by_segment() -> None:
    profile = parse("profile: p\nabout: a\ndifferential:\n  dup:\n    fields: [Metadata.topics.*, '*.<t>']\n"
                    "    reason: r\n    reference: s\n", "p")
    assert profile.field_excuse("Metadata.topics.*") is not None
    assert profile.field_excuse("Metadata.topics.*.error_code") is None
    assert profile.field_excuse("Fetch.<t>") is not None


def test_a_differential_excuse_with_values_covers_only_those_pairs() -> None:
    """``values`` narrows an excuse to the (this broker's, Kafka's) value pairs it names: Korvet NONE
    where Kafka answers UNKNOWN_SERVER_ERROR is excused, any other error-code difference there is not."""
    profile = parse("profile: p\nabout: a\ndifferential:\n  crash:\n"
                    "    fields: [Fetch.responses.*.partitions.*.error_code]\n"
                    "    values: [[0, -1]]\n    reason: r\n    reference: s\n", "p")
    path = "Fetch.responses.*.partitions.*.error_code"
    assert profile.field_excuse(path, 0, -1) is not None
    assert profile.field_excuse(path, 0, 1) is None
    assert profile.field_excuse(path, -1, 0) is None
    with pytest.raises(ProfileError, match="values"):
        parse("profile: p\nabout: a\ndifferential:\n  crash:\n    fields: [F.e]\n"
              "    values: [0, -1]\n    reason: r\n    reference: s\n", "p")


def test_a_replay_step_survives_its_file() -> None:
    from korvet.conformance.differential import Step

    step = Step(1, 12, {"max_wait": 5, "topics": []}, ("append", 3), True)
    assert Step.from_json(json.loads(json.dumps(step.to_json()))) == step


def test_a_close_that_never_returns_is_left_behind_and_the_check_still_reports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose close blocks for good (librdkafka's consumer close once hung a whole
    kfake run against a restarted kfake) costs its check CLOSE_SECONDS, not the run: the
    check's result comes back, says which close was left running, and the closers
    registered before it still ran."""
    import threading

    from korvet.conformance import context

    monkeypatch.setattr(context, "CLOSE_SECONDS", 0.3)
    never = threading.Event()
    closed: list[str] = []

    def blocks() -> None:  # a close that blocks until the test ends
        never.wait()

    def opens_clients(ctx: CheckContext) -> None:
        ctx.on_close(lambda: closed.append("first"))
        ctx.on_close(blocks)

    check = _fake("unit.hanging_close", opens_clients)
    started = time.monotonic()
    result = runner.run_check(check, _context(check), KAFKA)
    took = time.monotonic() - started
    never.set()
    assert result.status == runner.PASS
    assert 0.3 <= took < 5, f"run_check took {took:.1f} s"
    assert [name.rsplit(".", 1)[-1] for name in result.details["unclosed"]] == ["blocks"]
    assert closed == ["first"]
