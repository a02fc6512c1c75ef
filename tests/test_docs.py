"""Generated documentation stays in step with the code that it documents."""

from __future__ import annotations

from korvet.devtools import docgen


def test_configuration_page_lists_every_setting_as_the_code_has_it() -> None:
    assert docgen.PAGE.read_text() == docgen.render(), (
        "docs/users/configuration.md is stale: run `.venv/bin/python -m korvet.devtools.docgen`")
