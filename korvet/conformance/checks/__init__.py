"""The checks, one module per API family; importing a module registers its checks."""

from __future__ import annotations

import importlib

MODULES = (
    "api_versions",
    "framing",
    "metadata",
    "admin",
    "produce",
    "fetch",
    "list_offsets",
    "coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offsets",
    "group_admin",
    "consumer",
    "clients",
    "operations",
    "history",
    "generated",
    "security",
)


def load_all() -> None:
    for name in MODULES:
        importlib.import_module(f"korvet.conformance.checks.{name}")
