"""Generated requests (korvet/conformance/modes/fuzz.py): what the strategies generate validates
against its schema and encodes as the request kio decodes."""

from __future__ import annotations

import io
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from korvet.conformance.kafka.messages import build, to_plain
from korvet.conformance.kafka.schemas import request_schema
from korvet.conformance.modes.fuzz import request_strategy
from tests.support.examples import examples


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
