"""`korvet conformance`: run the conformance suite against any Kafka-compatible broker."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from korvet.conformance.differences import PROFILES


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance",
        help="run the Kafka conformance suite against a broker",
        description=(
            "Run the conformance suite against the broker at --bootstrap: raw-protocol checks of every "
            "API a Kafka client uses, the classic consumer-group protocol, real clients (librdkafka, "
            "kafka-python, aiokafka, kcat, Kafka's Java tools), Jepsen-style histories and generated "
            "requests. Exits 1 when a check fails (checks excused by the profile do not fail), 2 when "
            "the broker cannot be reached."
        ),
    )
    parser.add_argument("--bootstrap", metavar="HOST:PORT", help="the broker to test")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="kafka",
                        help="kafka: every check must pass; korvet: Korvet's documented differences "
                             "are excused (default: kafka)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    parser.add_argument("--only", action="append", metavar="GLOB",
                        help="run only checks whose name matches (repeatable; commas separate globs too)")
    parser.add_argument("--list", action="store_true", help="list the checks (after --only) and exit")
    parser.add_argument("--jobs", type=int, default=8,
                        help="checks run at the same time (most wait on the broker; default 8)")
    parser.add_argument("--cleanup", action="store_true",
                        help="delete the topics this run created (kc-<run id>-*) when it is done")
    parser.add_argument("--security", type=Path, metavar="FILE",
                        help="YAML naming the broker's SASL_SSL listener, its CA file and an admin user: "
                             "runs the security.* checks (skipped without it; docs/users/security.md)")
    parser.add_argument("--failures-only", action="store_true",
                        help="the terminal table shows only checks that did not pass")
    parser.set_defaults(func=run)


def _security_target(path: Path | None) -> Any:
    if path is None:
        return None
    from korvet.conformance.checks.security import SecurityTarget

    try:
        return SecurityTarget.load(path)
    except ValueError as exc:
        print(f"korvet conformance: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _patterns(values: list[str] | None) -> list[str]:
    return [p.strip() for value in values or [] for p in value.split(",") if p.strip()]


def run(args: argparse.Namespace) -> int:
    from korvet.conformance import report as reports
    from korvet.conformance import runner
    from korvet.conformance.registry import load_checks, select
    from korvet.conformance.wire import WireError

    console = Console()
    checks = select(load_checks().values(), _patterns(args.only))
    if args.list:
        from korvet.conformance.catalogue import catalogue_table

        console.print(catalogue_table(checks))
        console.print(f"{len(checks)} checks")
        return 0
    if not args.bootstrap:
        print("korvet conformance: --bootstrap HOST:PORT is required (or --list)", file=sys.stderr)
        return 2
    if not checks:
        print(f"korvet conformance: no check matches {_patterns(args.only)}", file=sys.stderr)
        return 2

    running: set[str] = set()
    lock = threading.Lock()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("starting", total=len(checks))

        def on_event(kind: str, check: Any, result: Any) -> None:
            with lock:
                if kind == "start":
                    running.add(check.name)
                else:
                    running.discard(check.name)
                    progress.advance(task)
                    if result.status == runner.FAIL:
                        progress.console.print(f"[red]fail[/] {check.name}: {result.message}",
                                               markup=True, highlight=False)
                shown = ", ".join(sorted(running)[:3]) + (" …" if len(running) > 3 else "")
                progress.update(task, description=shown or "finishing")

        try:
            result = runner.run(args.bootstrap, checks, profile=args.profile, jobs=args.jobs,
                                on_event=on_event, security=_security_target(args.security))
        except (OSError, WireError) as exc:
            print(f"korvet conformance: cannot reach {args.bootstrap}: {exc}", file=sys.stderr)
            return 2
    reports.print_report(result, console, all_rows=not args.failures_only)
    if args.cleanup:
        try:
            deleted = runner.cleanup(args.bootstrap, result.run_id)
            console.print(f"deleted {deleted} topics of run {result.run_id}")
        except (OSError, WireError) as exc:
            console.print(f"[yellow]cleanup failed: {exc}[/]")
    if args.json:
        reports.write_json(result, args.json)
        console.print(f"JSON report: {args.json}")
    if args.html:
        reports.write_html(result, args.html)
        console.print(f"HTML report: {args.html}")
    return 0 if result.ok else 1
