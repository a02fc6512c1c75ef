"""The project's one table of Kafka error codes (korvet/core/errors.py) is Kafka's."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as KioErrorCode

from korvet.core.errors import ErrorCode


def test_every_kafka_error_code_has_its_number_under_its_kafka_name() -> None:
    assert len(KioErrorCode) > 130  # Kafka 4.x: over 130 codes
    assert {code.name: int(code) for code in ErrorCode} == {
        code.name.upper(): int(code.value) for code in KioErrorCode}
