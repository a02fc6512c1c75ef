"""The project's one table of API keys (korvet/core/api_keys.py) is Kafka's: every API of
kio's generated schemas has its key under its Kafka name, and nothing else is in it."""

from __future__ import annotations

import importlib
import pkgutil

import kio.schema
import pytest

from korvet.core.api_keys import ApiKey


def _kio_apis() -> dict[int, str]:
    """Kafka's APIs as kio generates them: key -> name (from each request class)."""
    found: dict[int, str] = {}
    for module in pkgutil.iter_modules(kio.schema.__path__):
        if not module.ispkg:
            continue
        package = importlib.import_module(f"kio.schema.{module.name}")
        for version in pkgutil.iter_modules(package.__path__):
            try:
                request = importlib.import_module(f"kio.schema.{module.name}.{version.name}.request")
            except ModuleNotFoundError:
                continue  # a data schema (records, control batches), not an API
            for name, value in vars(request).items():
                if (name.endswith("Request") and hasattr(value, "__api_key__")
                        and getattr(value, "__header_schema__", None) is not None):
                    found[int(value.__api_key__)] = name.removesuffix("Request")
            break
    return found


def test_every_api_of_kafkas_schemas_has_its_key_and_name() -> None:
    kio_apis = _kio_apis()
    assert len(kio_apis) > 80  # Kafka 4.x has over 80 APIs: the walk found the schemas
    assert {int(key): key.kafka_name for key in ApiKey} == kio_apis


@pytest.mark.parametrize("key", list(ApiKey))
def test_a_kafka_name_finds_its_key(key: ApiKey) -> None:
    assert ApiKey.named(key.kafka_name) is key


def test_a_name_kafka_does_not_have_is_refused_with_the_name() -> None:
    with pytest.raises(ValueError, match="NoSuchThing"):
        ApiKey.named("NoSuchThing")
