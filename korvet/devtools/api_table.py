"""Generate the API table of docs/implementers/broker.md from what the handler modules declare.

    .venv/bin/python -m korvet.devtools.api_table      # rewrite the table in the page
    (tests/test_docs.py fails when the committed table differs from what this generates)

One row per API the broker serves: its name and key (korvet/core/api_keys.py), the versions
it serves (what the handler implements that kio has schemas for, protocol/registry.py), what
the authorization check point asks of a principal (korvet/core/security/rules.py) and the
handler module's own note (korvet/server/api.py). The table sits between two markers; the
rest of the page is written by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from korvet.core.security.rules import ApiRule, Need, Scope, rule_for
from korvet.protocol.registry import ApiRegistry
from korvet.server.api import Api, declared_apis

PAGE = Path(__file__).resolve().parents[2] / "docs" / "implementers" / "broker.md"
BEGIN = ("<!-- api-table: generated from the handler modules' APIS by "
         "`.venv/bin/python -m korvet.devtools.api_table`; do not edit by hand -->")
END = "<!-- end of api-table -->"

_SCOPES = {
    Scope.TOPICS: "each topic", Scope.GROUP: "the group", Scope.GROUPS: "each group",
    Scope.CLUSTER: "the cluster", Scope.CLUSTER_ITEMS: "the cluster",
    Scope.CONFIG_RESOURCES: "each topic (the broker: the cluster; a group: the group)",
    Scope.TRANSACTIONAL_ID: "the transactional id",
}


def _need(need: Need) -> str:
    text = f"{need.operation.name} on {_SCOPES[need.scope]}"
    if need.or_cluster is not None:
        text += f" or {need.or_cluster.name} on the cluster"
    return text


def authorization(rule: ApiRule | None) -> str:
    """What the check point asks of a principal for one API, in words."""
    if rule is None:
        return "super users only (no rule)"
    if rule.before_auth:
        return "none (served before authentication)"
    parts = [_need(need) for need in rule.needs]
    if rule.custom:
        parts.append(f"decided by the handler: {rule.custom}")
    return "; ".join(parts) or "none"


def _served(apis: Iterable[Api]) -> dict[int, tuple[int, int]]:
    """The versions served: what each handler implements that kio has schemas for."""
    registry: ApiRegistry[Any] = ApiRegistry()

    async def unused(ctx: Any, request: Any) -> None:
        return None

    for api in apis:
        registry.register(api.key, api.versions, unused)
    return {int(api.key): (api.min_version, api.max_version) for api in registry}


def _versions(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}–{hi}"


def table(apis: Iterable[Api] | None = None) -> str:
    declared = tuple(declared_apis() if apis is None else apis)
    served = _served(declared)
    rows = ["| API | key | versions | authorization | notes |", "|---|---|---|---|---|"]
    for api in declared:
        rows.append(f"| {api.name} | {int(api.key)} | {_versions(*served[int(api.key)])} | "
                    f"{authorization(rule_for(api.key))} | {api.notes} |")
    return "\n".join(rows) + "\n"


def render(page: str, apis: Iterable[Api] | None = None) -> str:
    """The page with its generated block replaced by the current table."""
    try:
        head, rest = page.split(BEGIN + "\n", 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{PAGE} lacks the api-table markers") from None
    return f"{head}{BEGIN}\n{table(apis)}{END}{tail}"


def main() -> int:
    PAGE.write_text(render(PAGE.read_text()))
    print(f"wrote the API table of {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
