"""Generated documentation stays in step with the code that it documents."""

from __future__ import annotations

from korvet.devtools import api_table, docgen


def test_configuration_page_lists_every_setting_as_the_code_has_it() -> None:
    assert docgen.PAGE.read_text() == docgen.render(), (
        "docs/users/configuration.md is stale: run `.venv/bin/python -m korvet.devtools.docgen`")


def test_broker_page_lists_every_api_as_the_handler_modules_declare_it() -> None:
    page = api_table.PAGE.read_text()
    assert page == api_table.render(page), (
        "the API table of docs/implementers/broker.md is stale: run "
        "`.venv/bin/python -m korvet.devtools.api_table`")
