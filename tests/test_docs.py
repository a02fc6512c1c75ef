"""Generated documentation stays in step with the code that it documents."""

from __future__ import annotations

import subprocess
import sys

import pytest

from korvet.devtools import api_table, docgen
from tests.support import spec_index


def test_configuration_page_lists_every_setting_as_the_code_has_it() -> None:
    assert docgen.PAGE.read_text() == docgen.render(), (
        "docs/users/configuration.md is stale: run `.venv/bin/python -m korvet.devtools.docgen`")


def test_broker_page_lists_every_api_as_the_handler_modules_declare_it() -> None:
    page = api_table.PAGE.read_text()
    assert page == api_table.render(page), (
        "the API table of docs/implementers/broker.md is stale: run "
        "`.venv/bin/python -m korvet.devtools.api_table`")


@pytest.fixture(scope="module")
def spec_tests() -> spec_index.Collected:
    """The spec markers of the suite, from one collecting pytest."""
    return spec_index.collect()


def test_spec_index_lists_the_tests_the_markers_name(spec_tests: spec_index.Collected) -> None:
    text = spec_index.README.read_text()
    assert text == spec_index.render(text, spec_tests), (
        f"the test column of spec/README.md is stale: run {spec_index.COMMAND}")


def test_every_spec_marker_is_listed_under_names_of_its_spec(
        spec_tests: spec_index.Collected) -> None:
    text = spec_index.README.read_text()
    problems = spec_index.marker_problems(text, spec_tests) + spec_index.row_problems(text)
    assert not problems, "\n".join(problems)


def test_spec_index_cites_only_code_and_tests_that_exist() -> None:
    problems = spec_index.code_problems(spec_index.README.read_text())
    assert not problems, "\n".join(problems)


def test_the_drift_check_finds_names_the_code_no_longer_has() -> None:
    """Not vacuous: the read-ahead's names from before korvet/server/read_ahead.py, a method
    of a class renamed since, and a test that is gone are all reported."""
    text = spec_index.README.read_text()
    for now, before in (("`PREDICTION_TTL`", "`_PREDICTION_TTL`"),
                        ("`ReadAhead.take`", "`_take_prediction`"),
                        ("`fetch._read_ahead`", "`fetch._predict`"),
                        ("`_Draft.store_offsets`", "`_Work.store_offsets`"),
                        ("`test_errors_are_typed`", "`test_errors_were_typed`")):
        assert now in text, now
        problems = spec_index.code_problems(text.replace(now, before, 1))
        assert any(before.strip("`") in problem for problem in problems), (before, problems)


def test_the_index_follows_the_markers_and_refuses_a_name_the_spec_lacks(
        spec_tests: spec_index.Collected) -> None:
    """Not vacuous: a row loses a test whose marker is gone, and a marker naming what its
    spec does not have (a typo, a renamed action) is reported."""
    text = spec_index.README.read_text()
    lost = [m for m in spec_tests.marked if m.test != "test_session_expiry_of_a_member_rebalances_the_rest"]
    rendered = spec_index.render(text, spec_index.Collected(tuple(lost), spec_tests.cases))
    assert "test_session_expiry_of_a_member_rebalances_the_rest" in text
    assert "test_session_expiry_of_a_member_rebalances_the_rest" not in rendered
    typo = spec_index.Marked("tests/spec/x.py", "test_x", "test_x", "GroupCoordinator",
                             ("SessionTimout",), "")
    problems = spec_index.marker_problems(text, spec_index.Collected((typo,), {}))
    assert any("'SessionTimout' is not a name of spec/GroupCoordinator.tla" in p for p in problems)


def test_one_command_runs_the_tests_of_a_spec_action() -> None:
    """`-k SessionTimeout` (spec/README.md) selects the action's replay case and the example
    tests marked with it: the spec marker's names are keywords (tests/conftest.py)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-k", "SessionTimeout", "tests/spec/GroupCoordinator"],
        cwd=spec_index.ROOT, capture_output=True, text=True, check=True).stdout
    assert "test_coordinator_replay.py::test_transition_replays[GroupCoordinator-replay-SessionTimeout]" \
        in listed, listed
    assert "test_coordinator_stateful.py::test_session_expiry_of_a_member_rebalances_the_rest" \
        in listed, listed
    assert "PendingMemberTimeout" not in listed, listed
