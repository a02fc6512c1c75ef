"""The harness (korvet/conformance/harness/): the registry, profiles, the runner and a broker that
dies, the reports, the command line and the generated catalogue."""

from __future__ import annotations

import importlib
import json
import re
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from korvet.conformance.harness import catalogue, pytest_plugin, registry, report, runner
from korvet.conformance.harness.brokers import BrokerError
from korvet.conformance.harness.context import CheckContext, expect_eq
from korvet.conformance.harness.outcomes import CheckFailed, CheckSkipped
from korvet.conformance.harness.profile import KAFKA, ProfileError, load, parse
from korvet.conformance.harness.registry import Check, load_checks
from korvet.conformance.kafka.session import ApiTable, KafkaCallFailed
from korvet.core.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[3]


def test_registry_has_enough_named_documented_checks() -> None:
    checks = load_checks()
    assert len(checks) >= 120
    for check in checks.values():
        assert check.asserts.endswith((".", ")")), check.name
        assert len(check.source) > 5, check.name
    korvet = load("korvet")
    exact = [c for c in checks.values() if c.kafka_exact]
    # New topics have Kafka's offsets (dense, the default since issue 31): Korvet's profile
    # excuses a check that does Kafka's offset arithmetic only for a feature it lacks
    # (transactions: a marker's offset), never for its offsets.
    excused = {c.name: excuse.key for c in exact if (excuse := korvet.excuse_for(c.name))}
    assert exact and set(excused.values()) <= {"no_transactions"}, excused


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
    return CheckContext(check.name, "127.0.0.1:1", "unit", ApiTable({}))


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


def test_a_start_command_that_cannot_run_is_named_and_a_relative_one_means_the_callers_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from korvet.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["conformance", "--start", "./no-such-broker --port {port}", "--only", "produce.acks_*"]) == 2
    err = capsys.readouterr().err
    assert f"cannot run {tmp_path}/no-such-broker: No such file or directory" in err, err
    # a script beside the caller, named relatively, runs (the broker's work directory is elsewhere):
    # it exits at once, so the run stops with its output rather than a missing-file error
    script = tmp_path / "broker.sh"
    script.write_text("#!/bin/sh\necho started on port \"$2\"\nexit 3\n")
    script.chmod(0o755)
    assert main(["conformance", "--start", "./broker.sh --port {port}", "--only", "produce.acks_*"]) == 2
    err = capsys.readouterr().err
    assert "exited with code 3 while starting" in err and "started on port" in err, err


def test_docs_catalogue_is_up_to_date() -> None:
    doc = (ROOT / "docs" / "conformance.md").read_text()
    body = doc.split(catalogue.CATALOGUE_BEGIN, 1)[1].split(catalogue.CATALOGUE_END, 1)[0].strip()
    assert body == catalogue.catalogue_markdown(load_checks().values()), (
        "docs/conformance.md's catalogue is stale: run "
        "`.venv/bin/python -m korvet.conformance.harness.catalogue --update docs/conformance.md`")
    table = doc.split(catalogue.DIFFERENCES_BEGIN, 1)[1].split(catalogue.DIFFERENCES_END, 1)[0].strip()
    assert table == catalogue.differences_markdown(load_checks().values()), "the differences table is stale"


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


def test_a_close_that_never_returns_is_left_behind_and_the_check_still_reports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose close blocks for good (librdkafka's consumer close once hung a whole
    kfake run against a restarted kfake) costs its check CLOSE_SECONDS, not the run: the
    check's result comes back, says which close was left running, and the closers
    registered before it still ran."""
    import threading

    from korvet.conformance.harness import context

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


def test_a_failed_kafka_call_fails_its_check_with_its_message_and_details() -> None:
    """An operation of the client floor that cannot go on (KafkaCallFailed) fails the check that
    called it as a CheckFailed would: its message, its details, and the step it failed in."""
    def calls(ctx: CheckContext) -> None:
        with ctx.step("creating the topic"):
            raise KafkaCallFailed("CreateTopics t: POLICY_VIOLATION (44)", seen=[44])

    check = _fake("unit.kafka_call", calls)
    result = runner.run_check(check, _context(check), KAFKA)
    assert (result.status, result.message) == (runner.FAIL, "creating the topic: CreateTopics t: "
                                                             "POLICY_VIOLATION (44)")
    assert result.details == {"seen": [44]}


def test_check_modules_are_found_on_disk_without_a_list(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_checks`` imports every module of the checks package, those of its subpackages too:
    a new family is a new file and nothing else."""
    package = tmp_path / "unit_found_checks"
    (package / "nested").mkdir(parents=True)
    for init in (package / "__init__.py", package / "nested" / "__init__.py"):
        init.write_text("")
    body = ("from korvet.conformance.harness.registry import check\n\n"
            "@check({name!r}, api='Unit', asserts='Found.', source='Unit test.')\n"
            "def found(ctx):\n    pass\n")
    (package / "family.py").write_text(body.format(name="unit_found.top"))
    (package / "nested" / "deeper.py").write_text(body.format(name="unit_found.nested"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "CHECKS_PACKAGE", "unit_found_checks")
    monkeypatch.setattr(registry, "REGISTRY", {})
    assert sorted(registry.load_checks()) == ["unit_found.nested", "unit_found.top"]


def test_the_suites_own_checks_are_all_found() -> None:
    """Every module of korvet/conformance/checks/ that registers checks is imported by
    ``load_checks`` (a module it missed would leave its family out of every run)."""
    checks = load_checks()
    families = {c.fn.__module__.rsplit(".", 1)[-1] for c in checks.values()}
    on_disk = {path.stem for path in (ROOT / "korvet" / "conformance" / "checks").rglob("*.py")}
    assert families == on_disk - {"__init__", "secure"}


def test_the_pytest_entry_point_is_the_plugin() -> None:
    """``pip install korvet[conformance]`` registers the plugin that ``pytest --pyargs
    korvet.conformance`` needs under the pytest11 entry point: it must name it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugin = importlib.import_module(project["entry-points"]["pytest11"]["korvet_conformance"])
    assert plugin is pytest_plugin
    assert (ROOT / "korvet" / "conformance" / "test_checks.py").is_file()


def test_a_failed_comparison_shows_named_codes_as_the_numbers_the_broker_sent() -> None:
    """Checks name the codes they expect (ErrorCode, ApiKey); the broker answers numbers. A
    failure shows both sides as numbers, as it did when checks wrote the numbers themselves."""
    with pytest.raises(CheckFailed) as failed:
        expect_eq([0, 0], [ErrorCode.INVALID_REQUEST] * 2, "errors of the two bindings")
    assert failed.value.message == "errors of the two bindings: expected [42, 42], got [0, 0]"
    with pytest.raises(CheckFailed) as failed:
        expect_eq({"u": 0}, {"u": ErrorCode.UNACCEPTABLE_CREDENTIAL}, "error per user")
    assert failed.value.message == "error per user: expected {'u': 93}, got {'u': 0}"
    with pytest.raises(CheckFailed) as failed:
        expect_eq({("t", 0)}, {("t", ErrorCode.INVALID_FETCH_SIZE)}, "pairs")
    assert failed.value.message == "pairs: expected {('t', 4)}, got {('t', 0)}"
