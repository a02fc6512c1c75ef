"""DescribeConfigs (v1-4), AlterConfigs (v0-2) and IncrementalAlterConfigs (v0-1) as
version-free values.

DescribeConfigs asks for documentation from v3 (none before); the alter requests read the
same fields in every version served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from korvet.core.alter_configs import AlterConfigsCall, ConfigChange, ConfigResource
from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)


@dataclass(frozen=True, slots=True)
class DescribedResource:
    resource_type: int  # korvet/core/admin.py's *_RESOURCE, or a type Kafka does not know
    name: str
    keys: frozenset[str] | None  # None: every config


@dataclass(frozen=True, slots=True)
class DescribeConfigsCall:
    """A DescribeConfigs request, whatever its version."""

    resources: tuple[DescribedResource, ...]
    include_synonyms: bool
    include_documentation: bool  # v3+


def decode_describe_configs(request: DescribeConfigsRequest) -> DescribeConfigsCall:
    shaped: Any = request  # include_documentation is asked for here, once
    return DescribeConfigsCall(
        tuple(DescribedResource(int(r.resource_type), r.resource_name,
                                None if r.configuration_keys is None
                                else frozenset(r.configuration_keys))
              for r in request.resources),
        bool(request.include_synonyms),
        has_field(type(request), "include_documentation") and bool(shaped.include_documentation))


def decode_alter_configs(request: AlterConfigsRequest) -> AlterConfigsCall:
    return AlterConfigsCall(
        tuple(ConfigResource(int(r.resource_type), r.resource_name,
                             tuple(ConfigChange(c.name, c.value) for c in r.configs))
              for r in request.resources),
        bool(request.validate_only), incremental=False)


def decode_incremental_alter_configs(request: IncrementalAlterConfigsRequest) -> AlterConfigsCall:
    return AlterConfigsCall(
        tuple(ConfigResource(int(r.resource_type), r.resource_name,
                             tuple(ConfigChange(c.name, c.value, int(c.config_operation))
                                   for c in r.configs))
              for r in request.resources),
        bool(request.validate_only), incremental=True)
